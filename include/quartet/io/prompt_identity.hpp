#pragma once
// Whether a prepared prompts file (io/prompts.hpp) was made for the actor (or a pairs file,
// io/pairs.hpp, for the model that reads it): the same
// tokenizer.json (SHA-256 of its bytes) and, when the rows were rendered through a chat
// template, the same template (SHA-256 of its UTF-8 text, found as model/tokenizer/chat_template.hpp
// says). The built-in character tokenizer of random:<family> actors has no file of its own: its
// identity is the tokenizer.json that `quartet tokenize random: --write-files DIR` and
// `quartet export` write for it (model/tokenizer/builtin_tokenizer_files.hpp), and it has no chat template.
#include <optional>
#include <string>

#include "quartet/io/prompts.hpp"
#include "quartet/model/tokenizer/chat_template.hpp"

namespace quartet {

struct TokenizerIdentity {
  std::string tokenizer_sha256;
  std::string tokenizer_source;  // "DIR/tokenizer.json", or the built-in tokenizer's name
  std::optional<ChatTemplate> chat_template;
  std::string chat_template_sha256;  // "" without a template
  std::string prepare_dir;           // the directory to prepare files with ("": the built-in tokenizer)
};

// A Hugging Face model directory's: DIR/tokenizer.json (which must exist) and its chat template.
TokenizerIdentity model_dir_identity(const std::string& dir);
// The built-in character tokenizer's (random:<family> actors).
TokenizerIdentity builtin_tokenizer_identity();

// "" when a prepared file with this header may be used with `actor`; else what differs, naming
// the prompts file and line, the file the prompts were made with and the actor's, and both
// digests.
std::string prompt_header_misfit(const PromptFileHeader& header, const TokenizerIdentity& actor);

// What a prepared file holds and which model reads its ids, for the messages of
// prepared_file_misfit: prompts for the actor (prompt_header_misfit), pairs for a reward model
// or a policy (io/pairs.hpp).
struct PreparedFileKind {
  const char* rows = "prompts";
  const char* reader = "actor";
  const char* script = "prepare_prompts.py";  // in inputs/prepare/
};
std::string prepared_file_misfit(const PromptFileHeader& header, const TokenizerIdentity& model,
                                 const PreparedFileKind& kind);

}  // namespace quartet

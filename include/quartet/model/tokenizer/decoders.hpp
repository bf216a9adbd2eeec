#pragma once
// The decoder of a Hugging Face tokenizer: how the tokens of a list of ids become text again
// (ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, in sequence), each step on the list
// of token strings the one before left, as tokenizers' decode_chain does.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quartet/model/tokenizer/json_file.hpp"
#include "quartet/model/tokenizer/metaspace.hpp"
#include "quartet/model/tokenizer/split_pattern.hpp"

namespace quartet {

struct DecoderStep {
  enum class Kind { ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace } kind;
  TextPattern pattern;   // Replace
  std::string content;   // Replace: what replaces each match; Strip: the character to strip
  size_t start = 0, stop = 0;  // Strip: at most this many from the front / the back
  Metaspace metaspace;
};

class Decoder {
 public:
  // No decoder at all joins the tokens with spaces, as HF does.
  bool present = false;
  std::vector<DecoderStep> steps;

  // The text of `tokens`; a Strip that tokenizers itself would fail on (more to strip from the
  // back than a token has) is a quartet::Error naming `where`.
  std::string decode(std::vector<std::string> tokens, const std::string& where) const;
};

// The decoder at `json_path` (null: none); anything else is refused there.
Decoder read_decoder(const JsonFile& f, const nlohmann::json& d, const std::string& json_path);

}  // namespace quartet

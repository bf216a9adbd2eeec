#pragma once
// The demonstrations of `quartet sft` as token ids and loss targets, read once at the start on
// every rank (io/sft_file.hpp has the files' formats).
//   plain row     the prompt tokenized with the tokenizer's special tokens (as `train` tokenizes
//                 a prompt: a BOS where the tokenizer adds one), then the response without
//                 them, then EOS when the tokenizer has one: the model learns to stop. The two
//                 are tokenized apart, so that the prompt's ids are the ones generation starts
//                 from (a BPE may merge across the seam when they are tokenized together).
//   prepared row  its input_ids and loss_mask as written (inputs/prepare/prepare_sft.py), each id
//                 inside the tokenizer's vocabulary; the file's tokenizer and chat template must
//                 be the actor's (io/prompt_identity.hpp).
// Targets are the response's tokens (a prepared row's loss_mask: every assistant turn), or with
// sft.loss_on_prompt every token after the first. A row longer than sft.max_tokens is refused,
// naming its file and line, never cut.
#include <cstdint>
#include <string>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/io/prompt_identity.hpp"
#include "quartet/io/sft_file.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"

namespace quartet {

struct SftExample {
  std::string where;              // "path:line"
  std::string prompt, response;   // text, for logs
  std::vector<int64_t> ids;       // prompt, then response
  std::vector<uint8_t> targets;   // 1 where ids[t] counts in the loss (never t = 0)
  int64_t prompt_length = 0;      // ids[0, P): the prompt of the final response
  int64_t target_count() const;
};

// A plain row as above.
SftExample tokenize_plain(const SftRow& row, const Tokenizer& tokenizer, bool loss_on_prompt);

class SftDataset {
 public:
  // `files` read in order as one dataset, named `key` in messages (sft.data, sft.heldout);
  // `limit` > 0 keeps the first `limit` rows (sft.eval_count). A DeckError names the key and
  // the file (and its line) for a file prepared for another actor, a bad row, an id outside
  // the vocabulary or a row longer than sft.max_tokens.
  SftDataset(const std::vector<std::string>& files, const std::string& key, const Config& config,
             const Tokenizer& tokenizer, const TokenizerIdentity& actor, int64_t limit = 0);
  int64_t size() const { return static_cast<int64_t>(examples_.size()); }
  const SftExample& get(int64_t index) const { return examples_.at(static_cast<size_t>(index)); }

 private:
  std::vector<SftExample> examples_;
};

// The identity of the actor's tokenizer and chat template, which prepared files must match.
TokenizerIdentity actor_identity(const Config& config);

}  // namespace quartet

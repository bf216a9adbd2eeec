#pragma once
// A reward model whose tokenizer is not the actor's reads each rollout as text, as verl and
// OpenRLHF's remote reward models do: the completion, decoded from the actor's ids, is placed in
// the prompt's rendering for the reward model and tokenized by the reward model's own tokenizer,
// the way its training pairs were (quartet rm, prepare_pairs.py):
//   chat   (the reward model has a chat template) the text its template renders around the
//          reply, from the prompts file prepared with `prepare_prompts.py --reward-model DIR`:
//          reward_prefix + reply + reward_suffix, tokenized without the tokenizer's special
//          tokens (the template writes its own), which is apply_chat_template(messages +
//          [{"role": "assistant", "content": reply}], tokenize=True);
//   plain  (no chat template) the prompt's text with the tokenizer's special tokens (a BOS), then
//          the completion's tokens without them, then EOS.
// Where both tokenizers give every id the same token the reward model reads the actor's ids as
// they are (the fast path), and nothing here runs.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/engine/experience.hpp"
#include "quartet/io/prompts.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"

namespace quartet {

// How the reward model of a run reads the rollouts, decided on every rank alike before any model
// is built.
struct RewardReading {
  std::string note;  // the choice, for the log ("" without a reward model)
  // The reward model's own tokenizer where it reads the rollouts as text; null where it reads
  // the actor's ids (the fast path), or where there is no reward model.
  std::shared_ptr<const Tokenizer> tokenizer;
  bool chat = false;  // the reward model has a chat template (the chat form)
  std::string completion_transform = "none";  // io/prompts.hpp's RewardRendering

  bool retokenize() const { return tokenizer != nullptr; }
  // What its rows are padded with: its tokenizer's pad, else EOS, else 0.
  int64_t pad_id() const;
};

// A deck whose reward model cannot read its rollouts is a DeckError naming the key: prompts
// without text (HDF5); a prompts file whose rows lack the reward model's rendering where it has
// a chat template, or were rendered with the actor's template (prepare them with
// --reward-model); a file rendered for another reward model.
RewardReading reward_reading(const Config& config, const Tokenizer& actor_tokenizer);

class RewardRetokenizer {
 public:
  RewardRetokenizer(const Config& config, const RewardReading& reading);  // reading.retokenize()
  // The reward model's rows for rollouts with these completions (decoded from the actor's ids)
  // and prompts (the prompt text each was generated from, and its JSONL row), left-padded with
  // the reading's pad_id(): all of a row is prompt, its one action column its last token.
  RolloutBatch batch(const std::vector<std::string>& completions, const std::vector<std::string>& prompts,
                     const std::vector<std::string>& records) const;
  // The reward model's input ids of one row.
  std::vector<int64_t> ids(const std::string& completion, const std::string& prompt, const std::string& record) const;

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  bool chat_;
  std::string transform_;
  int64_t pad_id_;
  int64_t max_tokens_;  // the reward model's positions
};

// s without the whitespace Python's str.strip() (and so Jinja's trim) removes at either end.
std::string strip_unicode_whitespace(const std::string& s);
// The reply as a chat template with this completion_transform renders it.
std::string transform_completion(const std::string& completion, const std::string& transform);

}  // namespace quartet

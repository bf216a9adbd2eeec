#include "quartet/tune/sft_config.hpp"

namespace quartet {

namespace {

using S = SftConfig;

void check_sft(const Deck& deck, S& s) {
  check_stage_keys(deck, "sft", s.stage, {{"exact_match", s.exact_match != S{}.exact_match}});
  if (s.prompt_field == s.response_field)
    deck.fail("sft.response_field", "is '" + s.response_field + "', the same field as sft.prompt_field");
  if (s.micro_batch_tokens > 0 && s.micro_batch_tokens < s.stage.max_tokens)
    deck.fail("sft.micro_batch_tokens", "is " + std::to_string(s.micro_batch_tokens) +
                                            ", less than sft.max_tokens = " + std::to_string(s.stage.max_tokens) +
                                            ": the longest sequence would fit no micro-batch");
}

std::vector<KeyRow<S>> rows() {
  return joined<S>({
      {list("data", &S::data, readable_files(), "training files, comma-separated, read as one dataset: plain JSONL with the prompt and response text (sft.prompt_field, sft.response_field; the built-in or the actor's tokenizer, the response followed by EOS), or files inputs/prepare/prepare_sft.py wrote for the actor (prompt/response pairs or chat messages through its chat template; docs/sft.md)")},
      nested("", &S::stage, stage_rows({
          "held-out file, in either format: its loss, token accuracy and greedy exact match are measured every sft.eval_every steps (\"\" = no evaluation)",
          "passes over the data (> 0; may be fractional), when sft.steps is 0",
          "optimizer steps of the run (>= 0; 0 = ceil(epochs x rows / (batch x ranks)); when > 0, sft.epochs is not read)",
          "sequences per optimizer step and rank (>= 1); the loss is the mean over the step's target tokens on every rank",
          "longest sequence, prompt and response, in tokens (>= 2); a longer row is refused, naming its file and line",
          "held-out rows evaluated: the first N (0 = all), shared out over the ranks"})),
      {key("prompt_field", &S::prompt_field, not_empty(), "plain JSONL: the field with the prompt text"),
       key("response_field", &S::response_field, not_empty(), "plain JSONL: the field with the response text (answer reads the prompt files of train)"),
       key("micro_batch_tokens", &S::micro_batch_tokens, at_least(0), "micro-batches of the step's sequences, sorted by length, holding at most this many padded tokens (0 = train.micro_batch sequences each; else >= sft.max_tokens)"),
       key("loss_on_prompt", &S::loss_on_prompt, "the loss counts the prompt's tokens too (false: the response's alone, as OpenRLHF and TRL do by default)"),
       key("exact_match", &S::exact_match, "held-out: also generate each prompt's greedy completion and count those equal to the response, token for token up to its stop token")},
  });
}

}  // namespace

const Section<SftConfig>& sft_section() {
  static const Section<S> section("sft", "Supervised fine-tuning (quartet sft)", rows(), check_sft);
  return section;
}

}  // namespace quartet

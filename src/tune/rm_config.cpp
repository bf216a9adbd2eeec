#include "quartet/tune/rm_config.hpp"

namespace quartet {

const Section<RmConfig>& rm_section() {
  using R = RmConfig;
  static const Section<R> section("rm", "Reward-model training (quartet rm)", joined<R>({
      {list("data", &R::data, readable_files(), "training pair files, comma-separated, read as one dataset: plain JSONL {\"prompt\", \"chosen\", \"rejected\", optional \"margin\"} (tokenized with the reward model's tokenizer, each response followed by EOS), or files inputs/prepare/prepare_pairs.py wrote for the reward model (docs/rm.md, docs/data.md \"Pair files\")")},
      nested("", &R::stage, stage_rows({
          "held-out pairs file, in either format: pairwise accuracy, loss and mean rewards every rm.eval_every steps (\"\" = no evaluation)",
          "passes over the pairs (> 0; may be fractional), when rm.steps is 0",
          "optimizer steps of the run (>= 0; 0 = ceil(epochs x pairs / (batch x ranks)); when > 0, rm.epochs is not read)",
          "pairs per optimizer step and rank (>= 1), in micro-batches of train.micro_batch pairs; the loss is the mean over the step's pairs on every rank",
          "longest side of a pair, the prompt and one response, in tokens (>= 2); a longer pair is refused, naming its file and line",
          "held-out pairs evaluated: the first N (0 = all), shared out over the ranks"})),
      {key("margin", &R::margin, "the Bradley-Terry loss subtracts each row's \"margin\" (-log sigmoid(r_chosen - r_rejected - margin); rows without one: 0); false: margins are ignored")},
  }), [](const Deck& deck, R& r) { check_stage_keys(deck, "rm", r.stage); });
  return section;
}

}  // namespace quartet

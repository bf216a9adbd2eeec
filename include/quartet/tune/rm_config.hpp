#pragma once
// The deck's [rm] section: reward-model training on preference pairs (`quartet rm DECK`,
// tune/rm.hpp; docs/rm.md). The model, its optimizer and its schedule are the reward model's
// keys ([model.reward] path, lr, weight_decay, dtype; [train] micro_batch (pairs), max_grad_norm,
// adam_*, warmup, schedule, min_lr_ratio); the run, placement, checkpoint and output keys are
// train's. Recorded in run.h5 with the rest of the resolved deck.
//   [rm]
//   data = pairs.jsonl           # {"prompt", "chosen", "rejected"} a line, or a prepared file
//   heldout = heldout.jsonl      # held-out pairwise accuracy and loss every eval_every steps
//   epochs = 2
#include <string>
#include <vector>

#include "quartet/tune/stage_config.hpp"

namespace quartet {

struct RmConfig {  // [rm]
  // Training files, in order (one dataset): plain pair files (texts, tokenized with the reward
  // model's tokenizer) or files inputs/prepare/prepare_pairs.py wrote for the reward model's
  // tokenizer and template (docs/data.md, "Pair files"). Empty: the deck is not an rm deck.
  std::vector<std::string> data;
  // heldout (pairs), epochs, steps, batch (pairs a step and rank, in micro-batches of
  // train.micro_batch pairs), max_tokens (the longest side: the prompt and one response), eval_*, log_every.
  StageKeys stage;
  bool margin = true;  // the loss subtracts the rows' "margin" (Llama 2's margin loss)
  bool enabled() const { return !data.empty(); }
};

const Section<RmConfig>& rm_section();

}  // namespace quartet

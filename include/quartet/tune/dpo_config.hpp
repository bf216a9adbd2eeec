#pragma once
// The deck's [dpo] section: Direct Preference Optimisation of the actor on preference pairs
// (`quartet dpo DECK`, tune/dpo.hpp; docs/dpo.md). The policy is [model.actor] (its path, lr,
// weight_decay; [train] micro_batch, max_grad_norm, adam_*, warmup, schedule, min_lr_ratio), the
// frozen reference [model.reference] (the actor's path when it names none: the starting policy,
// as TRL's DPOTrainer copies it); run, placement, checkpoint and output keys are train's.
// Recorded in run.h5 with the rest of the resolved deck.
//   [dpo]
//   data = pairs.jsonl           # {"prompt", "chosen", "rejected"} a line, or a prepared pairs file
//   heldout = heldout.jsonl      # held-out loss and reward accuracy every eval_every steps
//   beta = 0.1
#include <string>

#include "quartet/tune/stage_config.hpp"

namespace quartet {

struct DpoConfig {  // [dpo]
  // The training pairs: a plain pairs file (texts, tokenized with the run's tokenizer) or one
  // inputs/prepare/prepare_pairs.py wrote for the actor (docs/data.md, "Pair files"). Empty:
  // the deck is not a dpo deck.
  std::string data;
  // heldout (pairs), epochs, steps, batch (pairs a step and actor rank), max_tokens (the longest
  // side: the prompt and one response), eval_*, log_every.
  StageKeys stage;
  std::string loss = "sigmoid";  // sigmoid (DPO) | ipo
  double beta = 0.1;             // the KL coefficient β (> 0)
  double label_smoothing = 0;    // ε of conservative DPO (sigmoid only), in [0, 0.5)
  bool enabled() const { return !data.empty(); }
};

const Section<DpoConfig>& dpo_section();

}  // namespace quartet

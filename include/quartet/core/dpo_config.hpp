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

namespace boost::program_options {
class options_description;
}

namespace quartet {

class Deck;

struct DpoConfig {  // [dpo]
  // The training pairs: a plain pairs file (texts, tokenized with the run's tokenizer) or one
  // inputs/prepare/prepare_pairs.py wrote for the actor (docs/data.md, "Pair files"). Empty:
  // the deck is not a dpo deck.
  std::string data;
  std::string heldout;          // held-out pairs file, either kind ("" = no evaluation)
  double epochs = 1;            // passes over the pairs, when steps is 0
  int steps = 0;                // optimizer steps of the run (0 = from epochs)
  int batch = 8;                // pairs per optimizer step and rank of the actor group
  int max_tokens = 256;         // longest side (prompt and one response); a longer pair is refused
  std::string loss = "sigmoid";  // sigmoid (DPO) | ipo
  double beta = 0.1;            // the KL coefficient β (> 0)
  double label_smoothing = 0;   // ε of conservative DPO (sigmoid only), in [0, 0.5)
  int eval_every = 0;           // held-out evaluation every N steps (0 = only at the end)
  bool eval_at_start = false;   // ... and before the first step
  bool eval_at_end = true;      // ... and after the last
  int eval_count = 0;           // the first N held-out pairs (0 = all)
  int log_every = 1;            // a log line every N steps (run.h5 has every step)
  bool enabled() const { return !data.empty(); }
};

// The section's keys, for deck_schema().
boost::program_options::options_description dpo_schema();

// Typed and range-checked; files must be readable. A DeckError names the key and its line.
DpoConfig load_dpo_config(const Deck& deck);

}  // namespace quartet

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

namespace boost::program_options {
class options_description;
}

namespace quartet {

class Deck;

struct RmConfig {  // [rm]
  // Training files, in order (one dataset): plain pair files (texts, tokenized with the reward
  // model's tokenizer) or files inputs/prepare/prepare_pairs.py wrote for the reward model's
  // tokenizer and template (docs/data.md, "Pair files"). Empty: the deck is not an rm deck.
  std::vector<std::string> data;
  std::string heldout;       // held-out pairs file, in either format ("" = no evaluation)
  double epochs = 1;         // passes over the data, when steps is 0
  int steps = 0;             // optimizer steps of the run (0 = from epochs)
  int batch = 8;             // pairs per optimizer step and rank (micro-batches: train.micro_batch pairs)
  int max_tokens = 256;      // longest side (the prompt and one response); longer pairs are refused
  bool margin = true;        // the loss subtracts the rows' "margin" (Llama 2's margin loss)
  int eval_every = 0;        // held-out evaluation every N steps (0 = only at the end)
  bool eval_at_start = false;  // ... and before the first step
  bool eval_at_end = true;     // ... and after the last
  int eval_count = 0;          // the first N held-out pairs (0 = all)
  int log_every = 1;           // a log line every N steps (run.h5 has every step)
  bool enabled() const { return !data.empty(); }
};

// The section's keys, for deck_schema().
boost::program_options::options_description rm_schema();

// Typed and range-checked; files must be readable. A DeckError names the key and its line.
RmConfig load_rm_config(const Deck& deck);

}  // namespace quartet

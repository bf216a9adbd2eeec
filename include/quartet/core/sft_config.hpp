#pragma once
// The deck's [sft] section: supervised fine-tuning of the actor on demonstrations
// (`quartet sft DECK`, tune/sft.hpp; docs/sft.md). The model, its optimizer and its schedule are
// the actor's keys ([model.actor] path, lr, weight_decay; [train] micro_batch, max_grad_norm,
// adam_*, warmup, schedule, min_lr_ratio); the run, placement, checkpoint and output keys are
// train's. Recorded in run.h5 with the rest of the resolved deck.
//   [sft]
//   data = demos.jsonl           # {"prompt": ..., "response": ...} a line, or a prepared file
//   heldout = heldout.jsonl      # held-out loss, token accuracy and exact match every eval_every steps
//   epochs = 3
#include <string>
#include <vector>

namespace boost::program_options {
class options_description;
}

namespace quartet {

class Deck;

struct SftConfig {  // [sft]
  // Training files, in order (one dataset): plain JSONL with the prompt and response text, or
  // files inputs/prepare/prepare_sft.py wrote (token ids and loss mask made with the actor's
  // tokenizer and chat template). Empty: the deck is not an sft deck.
  std::vector<std::string> data;
  std::string heldout;                    // held-out file, in either format ("" = no evaluation)
  std::string prompt_field = "prompt";    // plain JSONL: the field with the prompt text
  std::string response_field = "response";  // plain JSONL: the field with the response text
  double epochs = 1;                      // passes over the data, when steps is 0
  int steps = 0;                          // optimizer steps of the run (0 = from epochs)
  int batch = 8;                          // sequences per optimizer step and rank
  // Micro-batches: at most train.micro_batch sequences, or, when this is > 0, as many of the
  // step's sequences (sorted by length) as fit this many padded tokens.
  int micro_batch_tokens = 0;
  int max_tokens = 256;                   // longest sequence, prompt and response (longer rows are refused)
  bool loss_on_prompt = false;            // the loss also counts the prompt's tokens
  int eval_every = 0;                     // held-out evaluation every N steps (0 = only at the end)
  bool eval_at_start = false;             // ... and before the first step
  bool eval_at_end = true;                // ... and after the last
  int eval_count = 0;                     // the first N held-out rows (0 = all)
  bool exact_match = true;                // held-out: the greedy completion of each prompt against its response
  int log_every = 1;                      // a log line every N steps (run.h5 has every step)
  bool enabled() const { return !data.empty(); }
};

// The section's keys, for deck_schema().
boost::program_options::options_description sft_schema();

// Typed and range-checked; files must be readable. A DeckError names the key and its line.
SftConfig load_sft_config(const Deck& deck);

}  // namespace quartet

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

#include "quartet/tune/stage_config.hpp"

namespace quartet {

struct SftConfig {  // [sft]
  // Training files, in order (one dataset): plain JSONL with the prompt and response text, or
  // files inputs/prepare/prepare_sft.py wrote (token ids and loss mask made with the actor's
  // tokenizer and chat template). Empty: the deck is not an sft deck.
  std::vector<std::string> data;
  // heldout, epochs, steps, batch (sequences a step and rank), max_tokens (the longest sequence,
  // prompt and response; longer rows are refused), eval_*, log_every.
  StageKeys stage;
  std::string prompt_field = "prompt";      // plain JSONL: the field with the prompt text
  std::string response_field = "response";  // plain JSONL: the field with the response text
  // Micro-batches: at most train.micro_batch sequences, or, when this is > 0, as many of the
  // step's sequences (sorted by length) as fit this many padded tokens.
  int micro_batch_tokens = 0;
  bool loss_on_prompt = false;  // the loss also counts the prompt's tokens
  bool exact_match = true;      // held-out: the greedy completion of each prompt against its response
  bool enabled() const { return !data.empty(); }
};

const Section<SftConfig>& sft_section();

}  // namespace quartet

#pragma once
// `quartet sft DECK`: supervised fine-tuning of the actor ([model.actor]) on demonstrations
// ([sft]; docs/sft.md), on the engine of tune/stage.hpp. The actor is sharded over every rank of
// the job (placement.actor = the job's ranks, no other role); each step every rank draws
// sft.batch demonstrations, buckets them by length into micro-batches (tune/sft_batches.hpp) and
// the loss is the mean negative log-likelihood of the step's target tokens (the responses', or
// with sft.loss_on_prompt every token's) over every rank. Held-out loss, token accuracy and
// greedy exact match (tune/sft_eval.hpp) every sft.eval_every steps. The checkpoint holds
// actor.h5: `quartet export` writes it as a Hugging Face directory, which `quartet train` takes
// as model.actor.path.
#include <cstdint>

#include "quartet/dist/runtime.hpp"
#include "quartet/tune/sft_config.hpp"

namespace quartet {

// The run; exit status as train's (0, 75, 76; 2 for a deck or data refused before any model).
int run_sft(Runtime& runtime);

// The steps of a run over `rows` demonstrations on `ranks` ranks: sft.steps, else
// ceil(sft.epochs x rows / (sft.batch x ranks)).
int64_t sft_steps(const SftConfig& sft, int64_t rows, int ranks);

// The deck's refusals that need no data: sft.data set; the actor alone on every rank; the
// run's length in sft's keys, not in run.iterations (away from its default); the actor's
// positions for sft.max_tokens. A DeckError names the key and its line.
void check_sft_deck(const Config& config, const Placement& placement);

}  // namespace quartet

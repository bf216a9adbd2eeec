#pragma once
// `quartet dpo DECK`: Direct Preference Optimisation of the actor ([model.actor]) on preference
// pairs ([dpo]; docs/dpo.md), on the engine of tune/stage.hpp. The actor group trains; the frozen
// reference ([model.reference], by default the actor's starting weights) is placed on ranks of
// its own (disjoint) or on the actor's (colocated), scores every training and held-out pair once
// before the first step (tune/dpo_reference.hpp) and is then released. Each step every actor rank
// draws dpo.batch pairs, runs both sides of train.micro_batch pairs at a time through the policy,
// and the loss is tune/pair_losses.hpp's dpo_loss (sigmoid, cDPO, ipo) averaged over the step's
// pairs on every rank; the step's statistics are TRL's rewards/accuracies, chosen, rejected,
// margins and the policy's log-probs of each side. Held-out: the same numbers every
// dpo.eval_every steps (tune/dpo_eval.hpp). The checkpoint holds actor.h5, which `quartet
// export` writes as a Hugging Face directory.
#include <cstdint>

#include "quartet/dist/runtime.hpp"
#include "quartet/tune/dpo_config.hpp"

namespace quartet {

// The run; exit status as train's (0, 75, 76; 2 for a deck or data refused before any model).
int run_dpo(Runtime& runtime);

// The steps of a run over `pairs` pairs on `ranks` actor ranks: dpo.steps, else
// ceil(dpo.epochs x pairs / (dpo.batch x ranks)).
int64_t dpo_steps(const DpoConfig& dpo, int64_t pairs, int ranks);

// The deck's refusals that need no data: dpo.data set (and sft.data not); the actor and the
// reference placed and no other role; the run's length in dpo's keys, not run.iterations; the
// models' positions for dpo.max_tokens. A DeckError names the key and its line.
void check_dpo_deck(const Config& config, const Placement& placement);

}  // namespace quartet

#pragma once
// What `train` refuses before any model is built, as DeckErrors naming the key: roles without
// the ranks the algorithm and the reward need, ranks for roles it does not use, no prompts, a
// minibatch larger than an actor rank's sequences. The caller runs it on every rank alike
// (World::agree), so that every rank stops together.
#include "quartet/core/config.hpp"
#include "quartet/dist/placement.hpp"

namespace quartet {

void check_train_deck(const Config& config, const Placement& placement);

// A prepared prompts file (rollout.prompts, eval.prompts) made for another tokenizer or chat
// template than the actor's is refused, naming both (io/prompt_identity.hpp). Plain and HDF5
// files pass.
void check_prompts_fit_actor(const Config& config);

}  // namespace quartet

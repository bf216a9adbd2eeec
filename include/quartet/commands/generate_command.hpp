#pragma once
// `quartet generate DECK [--logits OUT.h5]`: the actor model ([model.actor] path, dtype)
// completes the prompts of [rollout] prompts with the [rollout] sampling settings. The actor
// ranks split the prompts (data parallel, a full model on each rank); actor rank 0 prints the
// completions and writes <run.out>/generations.jsonl. --logits writes the logits of one plain
// forward pass over all prompts (left-padded) to an HDF5 file, for others to verify.
#include "quartet/core/cli.hpp"
#include "quartet/dist/runtime.hpp"

namespace quartet {

int run_generate(Runtime& rt, const CommandLine& cl);

}  // namespace quartet

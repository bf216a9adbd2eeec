#pragma once
// `quartet selfcheck DECK`: the smallest real end-to-end run. Every model group checks each
// collective (fp32, bf16, int64; awkward sizes) against a serial reference computed locally,
// then the actor group sends a variable-size batch to every other group and gets per-row
// results back. Rank 0 prints one table for the whole job.
#include "quartet/dist/runtime.hpp"

namespace quartet {

// 0 when every check passed on every rank, 1 otherwise.
int run_selfcheck(Runtime& rt);

}  // namespace quartet

#pragma once
// The frozen reference's half of DPO, computed once, before the first step (as TRL's
// precompute_ref_log_probs): the reference group scores every pair of a dataset (both sides'
// sequence log-probs, summed over the response for sigmoid, averaged for ipo: tune/pair_losses.hpp's
// sequence_logps), its ranks taking the dataset's chunks in turn (tune/dpo_batches.hpp's
// strided_chunks, so each pair's numbers are the same on any number of reference ranks), and the
// numbers reach every rank of the world (one sum: each pair is scored by exactly one rank, the
// others add zeros). The reference is deterministic, so a resumed run recomputes the same numbers.
#include <mpi.h>

#include <cstdint>

#include "quartet/engine/experience.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/tune/dpo_batches.hpp"
#include "quartet/tune/pair_losses.hpp"

namespace quartet {

struct PairScoring {
  int64_t pairs_per_pass = 8;  // pairs per forward (both sides: twice as many sequences)
  int64_t pad_id = 0;
  int64_t max_width = 0;       // the width buckets' cap (engine/experience.hpp's bucketed_actions)
  SamplingView view;
  PreferenceLossKind kind = PreferenceLossKind::sigmoid;
};

// Every rank of the world at once; `reference` is null off the reference group. The first
// `count` pairs of `pairs`.
ReferenceLogps reference_logps(RoleModel* reference, const PairDataset& pairs, int64_t count,
                               const PairScoring& scoring, MPI_Comm world);

}  // namespace quartet

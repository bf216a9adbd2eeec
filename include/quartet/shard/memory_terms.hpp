#pragma once
// The memory terms of one model on its group of ranks, by estimate where kernels decide and
// exactly where the layout does (memory_plan.hpp says what each term counts). The
// coefficients to calibrate against measured CUDA peaks live in memory_terms.cpp (namespace
// estimate), and only there.
#include <cstdint>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/dist/placement.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/models_config.hpp"
#include "quartet/shard/memory_plan.hpp"

namespace quartet::memory {

// Bytes rounded up; nothing for a negative estimate.
std::uint64_t u64(double x);
int64_t dtype_bytes(torch::ScalarType t);

// Units of one model over a group of W ranks (flat_layout.hpp's rule).
struct Layout {
  int64_t W = 1;
  std::vector<int64_t> padded, shard;
  int64_t shard_sum = 0, padded_sum = 0;
  int64_t max_block_padded = 0, max_block_shard = 0;
};
Layout make_layout(const std::vector<int64_t>& n, int W);

// Everything the planner needs about one role on one group size.
struct RoleModel {
  Role role;
  const ModelSpec* spec;
  const ModelSectionConfig* section;
  Layout layout;
  int64_t b;  // dtype bytes
};

// The deck's sequence shapes.
// Rows are sequences, not prompts: rollout_batch the rank's whole rollout, chunk_rows those
// generated together (a chunk of rollout.micro_batch prompts), score_rows those of one scoring
// pass (rollout.score_micro_batch, else a chunk's), micro_batch those of a training pass. A
// packed pass (rollout.score_tokens, train.micro_batch_tokens) counts as its tokens' worth of
// full-width rows, at least one (a longer sequence runs alone).
struct Shape {
  double micro_batch;
  int64_t rollout_batch, prompt, T;
  int64_t chunk_rows;
  double score_rows;
};
Shape shape_of(const Config& c);

// The persistent terms of a model where it keeps them while active ("home"), or parked
// (colocated, idle): parameter and gradient shards on the host; optimizer state stays put.
std::vector<MemoryTerm> persistent_terms(const RoleModel& m, bool parked);

// The transient terms of each phase in which the model is active.
std::vector<MemoryTerm> train_terms(const RoleModel& m, const Config& cfg);
std::vector<MemoryTerm> score_terms(const RoleModel& m, const Config& cfg);
std::vector<MemoryTerm> generate_terms(const RoleModel& m, const Config& cfg);

// A rank's communication buffers, under the role of `first` (the first model it holds): an
// NCCL communicator when its largest group has more than one rank, and the rollout exchange.
std::vector<MemoryTerm> comm_terms(Role first, int group, const Shape& shape);

// A trained model whose micro-batches run as CUDA graphs (train.cuda_graphs, StepGraph): one
// rank, nothing offloaded, on a GPU. Its graphs (one pool) keep the train phase's working set
// reserved through every other phase.
bool graphed(const RoleModel& m, const Config& cfg, bool gpu);

std::uint64_t sum_bytes(const std::vector<MemoryTerm>& terms);

}  // namespace quartet::memory

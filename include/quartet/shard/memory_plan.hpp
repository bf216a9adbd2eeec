#pragma once
// The memory plan: the bytes every rank needs for every model it holds, per phase, against the
// memory of its device — computed from the deck alone, before any GPU work. `quartet plan DECK`
// prints it; `train` checks it at start. A deck that cannot fit is refused with the knobs that
// would make it fit (each found by planning again with that knob changed).
//
// What is counted follows the sharded engine (shard/flat_layout.hpp, shard/sharded_model.hpp)
// exactly where it is a matter of layout, and by estimate where it is a matter of kernels:
//
// Group of W ranks per model (disjoint: the role's ranks; colocated: every rank). Units: 0 =
// root (embeddings, position embeddings, final norm, head), 1..L = blocks. Unit u has n_u
// parameters, flattened and padded to p_u = a multiple of 16 W; its shard is s_u = p_u / W;
// S = sum s_u. b = bytes of the model's dtype.
//
// Persistent, per rank:
//   parameters   S b                 device; pinned host with offload_params
//   gradients    S 4                 trained models; device (also with offload_optimizer)
//   master       S 4                 trained models whose dtype is not float32 (else the
//                                    parameters are the master); host with offload_optimizer
//   moments      2 S 4               trained models (AdamW m, v); host with offload_optimizer
//   staging      S 4                 offload_optimizer: host copy of the gradient shard
// Train phase (trained models, one micro-batch of m = train.micro_batch sequences of
// T = rollout.max_prompt_tokens + rollout.max_new_tokens tokens):
//   gathered     p_0 b + 2 max_i p_i b   (root for the pass + current and prefetched block)
//                + 2 max_i s_i b         offload_params: the blocks' host->device staging
//   grad buffers p_0 (b + f) + s_0 4 + 2 max_i (p_i (b + f) + s_i 4), f = 4 when gradients are
//                reduced in float32 and the dtype is not float32, else 0
//   activations  see below
// Activations (per-family coefficients in memory_terms.cpp, namespace estimate, are the one place
// to calibrate): A(x) = bytes a block saves for backward per token, SDPA memory-efficient
// attention (no T x T scores); the attention mask is one bool [m, T, T] per pass, and SDPA turns
// it into an additive bias [m, T, T] in the attention dtype that each block keeps.
//   without checkpointing   L (m T A + m T T a) + m T T
//   with checkpointing      L m T h b  +  m T A + m T T a  (one block recomputed)  + m T T
//   + backward workspace    kBackwardWorkspaceBlocks x one block's m T A
//   + head: causal_lm       m T V (b + kTrainLogitsFp32Copies 4): the logits in the dtype, the
//                           float32 log-softmax kept for backward and its float32 gradient
//           value, reward   m T h b (negligible beside the blocks)
// Generate phase (actor, r = rollout.batch x algorithm.samples_per_prompt sequences): the full
// model gathered once (hybrid engine) sum p_u b; KV cache 2 L r kv_heads head_dim T b; next-token logits r V 4; the prefill
// of r max_prompt_tokens tokens through one block without graph.
// Score phase (every model: reference and actor log-probs, reward scores, critic values): a
// forward without graph over r sequences of T: root + 2 blocks gathered, one block's working
// set, and for causal_lm the logits r T V (b + 4) (the dtype's and their float32 copy).
// Train graph (train.cuda_graphs): a trained model alone on its GPU runs its micro-batches as
// CUDA graphs whose pool keeps the train phase's working set (gathered parameters, gradient
// buffers, activations, logits) reserved in every other phase.
// Communication: one NCCL communicator per rank (colocated roles share it): kNcclBytes; plus the
// MPI exchange of rollouts r T (8 ids + 8 mask + 4 log-prob) bytes, sent and received.
//
// Colocated placement: the phases take turns, one model active at a time. The active model has
// everything at home (above). With placement.park (auto: only when the plan does not fit
// otherwise) an idle model's parameter and gradient shards are parked in host memory; its master weights and moments stay on the device unless offload_optimizer (moving
// 12 bytes a parameter every phase would cost more than it saves).
//
// Device memory: dist.device_memory, else (auto) the GPU's total memory (device 0), else the
// host's physical memory divided by the ranks per node. Usable = memory (1 - kSafetyFraction)
// - kCudaContextBytes.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/dist/placement.hpp"
#include "quartet/model/model_spec.hpp"

namespace quartet {

constexpr double kSafetyFraction = 0.05;                      // fragmentation, allocator slack
constexpr std::uint64_t kCudaContextBytes = 500ull << 20;     // CUDA context + kernels + cuBLAS workspace
// NCCL: NCCL_BUFFSIZE (4 MiB, the SIMPLE protocol's buffer) per channel and peer, two peers
// (ring send/receive) and up to 16 channels, plus about as much for the LL/LL128 protocols and
// the tree: 4 MiB x 16 x 2 x 2 = 256 MiB per communicator with more than one rank.
constexpr std::uint64_t kNcclBytes = 256ull << 20;

enum class Where { device, host };
const char* where_name(Where where);

// One named amount of memory.
struct MemoryTerm {
  std::string name;  // "parameters", "gradients", "master", "moments", "gathered", "grad buffers",
                     // "activations", "logits", "kv cache", "nccl", "exchange", ...
  Role role = Role::actor;
  std::uint64_t bytes = 0;
  Where where = Where::device;
};

// What one rank holds while one model is at work in one activity.
struct PhasePlan {
  std::string name;  // "generate", "score", "train"
  Role active = Role::actor;
  std::vector<MemoryTerm> terms;  // persistent terms of every model on the rank + transients
  std::uint64_t device_bytes() const;
  std::uint64_t host_bytes() const;
};

// One role on one rank: its model, its layout and its phases.
struct RolePlan {
  Role role = Role::actor;
  std::string model;           // "gptj, 6.05B parameters, bfloat16"
  std::int64_t parameters = 0; // exact count
  int group_size = 0;          // W
  bool trained = false;
  // Persistent, where the model keeps them while active (bytes; 0 = none).
  std::uint64_t params = 0, grads = 0, master = 0, moments = 0, staging = 0;
  Where params_at = Where::device, optimizer_at = Where::device;  // master + moments (+ staging)
  // The largest activation working set of its phases (train, or score for frozen models), the
  // KV cache (generate) and the communication buffers.
  std::uint64_t activations = 0, kv_cache = 0, comm = 0;
  std::vector<PhasePlan> phases;  // the phases in which this role is active
  PhasePlan peak_phase;           // the phase with the most device bytes
  std::uint64_t peak = 0;         // its device bytes
  std::uint64_t host = 0;         // the most host bytes of any phase (offloaded + parked)
  bool fits = true;
};

struct RankPlan {
  int rank = 0;
  std::vector<RolePlan> roles;
  std::uint64_t peak = 0;  // max over roles
};

struct MemoryPlan {
  explicit MemoryPlan(Config c) : config(std::move(c)) {}
  Config config;           // the deck as planned, for re-planning with a knob changed
  int world_size = 0;
  int ranks_per_node = 0;  // for the auto device memory of CPU hosts
  Placement placement;
  std::uint64_t device_memory = 0;  // bytes
  std::string device_memory_source; // "dist.device_memory", "GPU 0 (NVIDIA H200)", "host memory / 8 ranks"
  std::uint64_t usable = 0;         // device_memory after the safety margin and the CUDA context
  bool on_gpu = false;              // the ranks run on GPUs (dist.device, or what the plan found)
  std::array<bool, kNumRoles> has_model{};           // a role placed with a model to plan
  std::array<ModelSpec, kNumRoles> specs;            // valid where has_model
  std::array<std::vector<std::int64_t>, kNumRoles> unit_params;  // n_u per role
  std::vector<RankPlan> ranks;  // one per world rank
  // Colocated: idle models are parked in host memory (placement.park; auto decides by
  // planning without parking first).
  bool park_idle = false;
  bool fits() const;
};

// Resolves the models and plans every rank. ranks_per_node (0 = every rank on one host) only
// matters for the auto device memory of a CPU host. Deck errors (missing model path, bad
// config.json) are DeckErrors naming the key.
MemoryPlan make_memory_plan(const Config& config, int world_size, int ranks_per_node = 0);

// The same with the models and the device memory of an existing plan (no config.json read, no
// model built): the planner behind the knob search. `config` may differ in any knob but the
// models' paths and sizes.
MemoryPlan replan(const MemoryPlan& base, const Config& config, int world_size);

// The table: one row per role and group of ranks with identical plans, GiB with 2 decimals.
std::string format_plan(const MemoryPlan& plan);

// Throws quartet::Error when a rank does not fit: the role, the ranks, the peak against the
// memory, the largest terms and the knobs that would make it fit (best first) or the
// combination that does.
void check_plan(const MemoryPlan& plan);

// The text check_plan would throw; "" when the plan fits.
std::string plan_problems(const MemoryPlan& plan);

// "12.34 GiB"
std::string gib(std::uint64_t bytes);

}  // namespace quartet

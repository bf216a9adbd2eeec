#include "quartet/shard/memory_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

#ifdef QUARTET_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "quartet/core/check.hpp"
#include "quartet/shard/flat_layout.hpp"

namespace quartet {

// ---------------------------------------------------------------------------------------------
// Estimates: the coefficients to calibrate against measured CUDA peaks live here, and only here.
namespace estimate {

// Tensors a block saves for backward, per token, counted in widths (SDPA memory-efficient
// attention, which keeps q, k, v, its output and a float32 log-sum-exp per head; Linear keeps
// its input; LayerNorm/RMSNorm its input, and the next Linear its output):
//   hidden      [h] in the model dtype        (norm inputs and outputs, the residual sums)
//   attn_model  [heads * head_dim], dtype     (o_proj's input: a contiguous copy of SDPA's output)
//   attn_sdpa   [heads * head_dim], attention dtype (SDPA's q, k, v, output; k and v after
//               repeat_kv; NeoX keeps its fused qkv alive besides the rotated q and k)
//   mlp         [ffn], dtype                  (SwiGLU: gate, silu(gate), up, their product;
//               GELU: input, output; gelu_new written out as HF does: + tanh, 0.5 x, 1 + tanh)
struct BlockSaves {
  double hidden, attn_model, attn_sdpa, mlp;
};

BlockSaves block_saves(const ModelConfig& c) {
  const bool gelu_new = c.activation == "gelu_new";
  const double gelu_mlp = gelu_new ? 5.0 : 2.0;
  switch (c.family) {
    case Family::llama: return {4.0, 1.0, 4.0, 4.0};
    case Family::gpt2: return {4.0, 1.0, 4.0, gelu_mlp};
    case Family::gptj: return {2.0, 1.0, 4.0, gelu_mlp};            // one LayerNorm feeds both branches
    case Family::gpt_neox: return {c.parallel_residual ? 3.0 : 4.0, 1.0, 6.0, gelu_mlp};
  }
  return {4.0, 1.0, 4.0, 4.0};
}

// Gradient temporaries of backward through one block, in blocks' worth of saved activations.
constexpr double kBackwardWorkspaceBlocks = 1.0;
// A block's forward without graph (scoring, prefill): the fraction of its saved-for-backward
// bytes alive at once.
constexpr double kNoGradBlockFraction = 1.0;
// Train head (causal_lm): float32 copies of [m, T, V] besides the logits in the model dtype: the
// log-softmax kept for backward and its gradient.
constexpr double kTrainLogitsFp32Copies = 2.0;
// Score head (causal_lm): float32 copies of [r, T, V] beside the logits (the log-softmax).
constexpr double kScoreLogitsFp32Copies = 1.0;
// The root's activations kept for backward: the final norm's input and output, [h] each.
constexpr double kRootHiddenSaves = 2.0;
// Rollout tensors exchanged between groups, bytes per token: int64 ids, int64 mask, float32
// log-probs; once sent and once received.
constexpr double kExchangeBytesPerToken = 8 + 8 + 4;
constexpr double kExchangeCopies = 2.0;

// Bytes of the attention's inputs: GPT-J runs attention in float32 whatever the dtype.
int64_t attention_bytes(const ModelConfig& c, int64_t b) {
  return c.family == Family::gptj && b < 4 ? 4 : b;
}

// Bytes one block saves per token.
double block_bytes_per_token(const ModelConfig& c, int64_t b) {
  const BlockSaves s = block_saves(c);
  const double qd = static_cast<double>(c.num_heads * c.head_dim);
  const double ab = static_cast<double>(attention_bytes(c, b));
  return s.hidden * static_cast<double>(c.hidden_size * b) + s.attn_model * qd * static_cast<double>(b) +
         s.attn_sdpa * qd * ab + s.mlp * static_cast<double>(c.intermediate_size * b) +
         4.0 * static_cast<double>(c.num_heads);  // log-sum-exp
}

}  // namespace estimate

// ---------------------------------------------------------------------------------------------

const char* where_name(Where where) { return where == Where::device ? "device" : "host"; }

std::uint64_t PhasePlan::device_bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : terms)
    if (t.where == Where::device) n += t.bytes;
  return n;
}

std::uint64_t PhasePlan::host_bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : terms)
    if (t.where == Where::host) n += t.bytes;
  return n;
}

bool MemoryPlan::fits() const {
  for (const auto& r : ranks)
    for (const auto& role : r.roles)
      if (!role.fits) return false;
  return true;
}

std::string gib(std::uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / 1073741824.0);
  return buf;
}

namespace {

std::uint64_t u64(double x) { return x <= 0 ? 0 : static_cast<std::uint64_t>(std::ceil(x)); }

int64_t dtype_bytes(torch::ScalarType t) { return t == torch::kFloat32 ? 4 : 2; }

const char* short_dtype(torch::ScalarType t) {
  return t == torch::kFloat32 ? "fp32" : t == torch::kBFloat16 ? "bf16" : "fp16";
}

// Units of one model over a group of W ranks (flat_layout.hpp's rule).
struct Layout {
  int64_t W = 1;
  std::vector<int64_t> padded, shard;
  int64_t shard_sum = 0, padded_sum = 0;
  int64_t max_block_padded = 0, max_block_shard = 0;
};

Layout make_layout(const std::vector<int64_t>& n, int W) {
  Layout l;
  l.W = W;
  const int64_t align = kShardAlign * W;
  for (size_t u = 0; u < n.size(); ++u) {
    const int64_t p = (n[u] + align - 1) / align * align;
    l.padded.push_back(p);
    l.shard.push_back(p / W);
    l.shard_sum += p / W;
    l.padded_sum += p;
    if (u > 0) {
      l.max_block_padded = std::max(l.max_block_padded, p);
      l.max_block_shard = std::max(l.max_block_shard, p / W);
    }
  }
  return l;
}

// Everything the planner needs about one role on one group size.
struct RoleModel {
  Role role;
  const ModelSpec* spec;
  const ModelSectionConfig* section;
  Layout layout;
  int64_t b;  // dtype bytes
};

// The persistent terms of a model where it keeps them while active ("home"), or parked
// (colocated, idle): parameter and gradient shards on the host; optimizer state stays put.
std::vector<MemoryTerm> persistent_terms(const RoleModel& m, bool parked) {
  const Role r = m.role;
  const auto S = static_cast<double>(m.layout.shard_sum);
  const ModelSectionConfig& sec = *m.section;
  std::vector<MemoryTerm> t;
  const Where opt = sec.offload_optimizer ? Where::host : Where::device;
  t.push_back({"parameters", r, u64(S * static_cast<double>(m.b)),
               parked || sec.offload_params ? Where::host : Where::device});
  if (m.spec->trained) {
    t.push_back({"gradients", r, u64(S * 4), parked ? Where::host : Where::device});
    if (m.spec->dtype != torch::kFloat32) t.push_back({"master", r, u64(S * 4), opt});
    t.push_back({"moments", r, u64(2 * S * 4), opt});
    if (sec.offload_optimizer) t.push_back({"gradient staging", r, u64(S * 4), Where::host});
  }
  return t;
}

struct Shape {
  int64_t micro_batch, rollout_batch, prompt, T;  // rollout_batch: sequences, not prompts
};

Shape shape_of(const Config& c) {
  // Each prompt is generated (and then scored) algorithm.samples_per_prompt times.
  const int64_t sequences = static_cast<int64_t>(c.rollout.batch) * c.algorithm.samples_per_prompt;
  return {c.train.micro_batch, sequences, c.rollout.max_prompt_tokens,
          static_cast<int64_t>(c.rollout.max_prompt_tokens) + c.rollout.max_new_tokens};
}

std::vector<MemoryTerm> train_terms(const RoleModel& m, const Config& cfg) {
  const ModelConfig& c = m.spec->config;
  const Layout& l = m.layout;
  const Role r = m.role;
  const auto b = static_cast<double>(m.b);
  const Shape s = shape_of(cfg);
  const double mb = static_cast<double>(s.micro_batch), T = static_cast<double>(s.T);
  const double L = static_cast<double>(c.num_layers), h = static_cast<double>(c.hidden_size);
  const double V = static_cast<double>(c.vocab_size);
  std::vector<MemoryTerm> t;
  // One rank without offload: the shards are the full parameters (nothing to gather) and the
  // gradients go straight into the gradient shard (no reduce-scatter output).
  const bool resident = l.W == 1 && !m.section->offload_params;
  // Kept from forward to backward (reshard_after_forward = false): every block at once.
  double blocks = 2.0 * static_cast<double>(l.max_block_padded);
  if (!m.section->reshard_after_forward) {
    blocks = 0;
    for (size_t u = 1; u < l.padded.size(); ++u) blocks += static_cast<double>(l.padded[u]);
  }
  double gathered = resident ? 0.0 : (static_cast<double>(l.padded[0]) + blocks) * b;
  if (m.section->offload_params) gathered += 2.0 * static_cast<double>(l.max_block_shard) * b;
  t.push_back({"gathered parameters", r, u64(gathered), Where::device});
  const double f = cfg.train.reduce_dtype == "float32" && m.spec->dtype != torch::kFloat32 ? 4.0 : 0.0;
  const double rs_out = resident ? 0.0 : 4.0;
  const double grad_buffers =
      static_cast<double>(l.padded[0]) * (b + f) + static_cast<double>(l.shard[0]) * rs_out +
      2.0 * (static_cast<double>(l.max_block_padded) * (b + f) + static_cast<double>(l.max_block_shard) * rs_out);
  t.push_back({"gradient buffers", r, u64(grad_buffers), Where::device});

  const double tokens = mb * T;
  const double per_block = tokens * estimate::block_bytes_per_token(c, m.b);
  const double bias = mb * T * T * static_cast<double>(estimate::attention_bytes(c, m.b));
  const double mask = mb * T * T;  // bool
  const double logits = m.spec->head == Head::causal_lm ? tokens * V * (b + estimate::kTrainLogitsFp32Copies * 4) : 0.0;
  const double workspace = estimate::kBackwardWorkspaceBlocks * per_block;
  double acts;
  if (m.section->checkpointing) {
    // The head's logits are gone before the first block is recomputed: the peak is the larger
    // of the two moments, on top of the block inputs kept for the recomputation (measured on
    // an H200: docs/memory-plan.md). The logits term carries the head's moment; activations
    // carry what the recompute adds beyond it.
    acts = L * tokens * h * b + std::max(0.0, per_block + bias + workspace - logits);
  } else {
    acts = L * (per_block + bias) + workspace;
  }
  acts += mask + estimate::kRootHiddenSaves * tokens * h * b;
  t.push_back({"activations", r, u64(acts), Where::device});
  if (logits > 0) t.push_back({"logits", r, u64(logits), Where::device});
  return t;
}

// A trained model whose micro-batches run as CUDA graphs (train.cuda_graphs, StepGraph): one
// rank, nothing offloaded, on a GPU. Its graphs (one pool) keep the train phase's working set
// reserved through every other phase.
bool graphed(const RoleModel& m, const Config& cfg, bool gpu) {
  return gpu && cfg.train.cuda_graphs && m.spec->trained && m.layout.W == 1 && !m.section->offload_params;
}

std::uint64_t sum_bytes(const std::vector<MemoryTerm>& terms) {
  std::uint64_t n = 0;
  for (const auto& t : terms) n += t.bytes;
  return n;
}

// A forward without graph through one block of batch x T new tokens attending to S slots (S = T
// without a cache).
double no_grad_block(const RoleModel& m, double batch, double T, double S) {
  const ModelConfig& c = m.spec->config;
  const double tokens = batch * T;
  return estimate::kNoGradBlockFraction * tokens * estimate::block_bytes_per_token(c, m.b) +
         batch * T * S * (1.0 + static_cast<double>(estimate::attention_bytes(c, m.b))) +  // mask + bias
         2.0 * tokens * static_cast<double>(c.hidden_size * m.b);  // the block's input and output
}

std::vector<MemoryTerm> score_terms(const RoleModel& m, const Config& cfg) {
  const ModelConfig& c = m.spec->config;
  const Layout& l = m.layout;
  const Role r = m.role;
  const auto b = static_cast<double>(m.b);
  const Shape s = shape_of(cfg);
  const double rb = static_cast<double>(s.rollout_batch), T = static_cast<double>(s.T);
  std::vector<MemoryTerm> t;
  const double gathered = (static_cast<double>(l.padded[0]) + 2.0 * static_cast<double>(l.max_block_padded)) * b +
                          (m.section->offload_params ? 2.0 * static_cast<double>(l.max_block_shard) * b : 0.0);
  t.push_back({"gathered parameters", r, u64(gathered), Where::device});
  t.push_back({"activations", r, u64(no_grad_block(m, rb, T, T)), Where::device});
  if (m.spec->head == Head::causal_lm)
    t.push_back({"logits", r,
                 u64(rb * T * static_cast<double>(c.vocab_size) * (b + estimate::kScoreLogitsFp32Copies * 4)),
                 Where::device});
  return t;
}

std::vector<MemoryTerm> generate_terms(const RoleModel& m, const Config& cfg) {
  const ModelConfig& c = m.spec->config;
  const Role r = m.role;
  const auto b = static_cast<double>(m.b);
  const Shape s = shape_of(cfg);
  const double rb = static_cast<double>(s.rollout_batch), T = static_cast<double>(s.T);
  std::vector<MemoryTerm> t;
  t.push_back({"full model (hybrid engine)", r, u64(static_cast<double>(m.layout.padded_sum) * b), Where::device});
  t.push_back({"kv cache", r,
               u64(2.0 * static_cast<double>(c.num_layers) * rb * static_cast<double>(c.num_kv_heads * c.head_dim) * T * b),
               Where::device});
  // rollout.reuse_prompt_cache: the old log-probs' pass continues from the cache in this phase
  // (rl/experience.hpp score_logprobs_on_cache), with the new tokens' activations and logits,
  // where larger than the prompt's forward and a decoding step's.
  const double P = static_cast<double>(s.prompt), A = T - P, V = static_cast<double>(c.vocab_size);
  const bool on_cache = cfg.rollout.reuse_prompt_cache;
  const double activations = no_grad_block(m, rb, P, P), logits = rb * V * 4;
  t.push_back({"activations", r, u64(on_cache ? std::max(activations, no_grad_block(m, rb, A, T)) : activations),
               Where::device});
  t.push_back({"logits", r,
               u64(on_cache ? std::max(logits, rb * A * V * (b + estimate::kScoreLogitsFp32Copies * 4)) : logits),
               Where::device});
  return t;
}

std::vector<std::string> phases_of(Role role) {
  switch (role) {
    case Role::actor: return {"generate", "score", "train"};
    case Role::critic: return {"score", "train"};
    default: return {"score"};
  }
}

std::string model_text(const ModelSpec& spec, int64_t n) {
  char buf[160];
  const double p = static_cast<double>(n);
  if (p >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", p / 1e9);
  else if (p >= 1e6) std::snprintf(buf, sizeof buf, "%.1fM", p / 1e6);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return spec.config.model_type + " " + buf + " " + short_dtype(spec.dtype) + ", " + head_name(spec.head) +
         ", " + std::to_string(spec.config.num_layers) + " blocks" + (spec.trained ? ", trained" : ", frozen");
}

std::uint64_t host_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

void resolve_device_memory(MemoryPlan& p) {
  const Config& c = p.config;
  // Planned for a GPU unless the run is on the CPU: dist.device = cpu, or auto where this
  // host has no GPU and the deck names no device memory to plan for.
  p.on_gpu = c.dist.device != "cpu";
  if (c.dist.device_memory > 0) {
    p.device_memory = c.dist.device_memory;
    p.device_memory_source = "dist.device_memory, " + c.deck.where("dist.device_memory");
    return;
  }
#ifdef QUARTET_WITH_CUDA
  if (c.dist.device != "cpu") {
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) {
      // Properties, not cudaMemGetInfo: no context is created on the GPU.
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        p.device_memory = prop.totalGlobalMem;
        p.device_memory_source = std::string("GPU 0, ") + prop.name;
        p.on_gpu = true;
        return;
      }
    }
    cudaGetLastError();
  }
#endif
  p.on_gpu = c.dist.device == "cuda";
  const int per_node = p.ranks_per_node > 0 ? p.ranks_per_node : p.world_size;
  p.device_memory = host_memory() / static_cast<std::uint64_t>(std::max(1, per_node));
  p.device_memory_source = "host memory / " + std::to_string(per_node) + " rank" + (per_node == 1 ? "" : "s") +
                           " per node (no GPU; set dist.device_memory to plan for one)";
}

void plan_ranks(MemoryPlan& p) {
  const Config& cfg = p.config;
  p.placement = make_placement(cfg.placement, p.world_size, cfg.deck);
  const double usable = static_cast<double>(p.device_memory) * (1.0 - kSafetyFraction) -
                        static_cast<double>(kCudaContextBytes);
  p.usable = u64(usable);
  std::array<RoleModel, kNumRoles> models{};
  std::array<bool, kNumRoles> present{};
  for (Role r : kAllRoles) {
    const int i = static_cast<int>(r);
    present[i] = p.placement.has(r) && p.has_model[i];
    if (!present[i]) continue;
    const int W = static_cast<int>(p.placement.ranks_of(r).size());
    models[i] = {r, &p.specs[i], &model_section(cfg, r), make_layout(p.unit_params[i], W),
                 dtype_bytes(p.specs[i].dtype)};
  }
  const Shape shape = shape_of(cfg);
  p.ranks.clear();
  for (int rank = 0; rank < p.world_size; ++rank) {
    RankPlan rp;
    rp.rank = rank;
    std::vector<Role> held;
    for (Role r : p.placement.roles_of(rank))
      if (present[static_cast<int>(r)]) held.push_back(r);
    int group = 1;
    for (Role r : held) group = std::max(group, models[static_cast<int>(r)].layout.W > 0 ? static_cast<int>(models[static_cast<int>(r)].layout.W) : 1);
    std::vector<MemoryTerm> comm;
    if (!held.empty()) {
      if (group > 1) comm.push_back({"nccl buffers", held.front(), kNcclBytes, Where::device});
      comm.push_back({"rollout exchange", held.front(),
                      u64(static_cast<double>(shape.rollout_batch * shape.T) * estimate::kExchangeBytesPerToken *
                          estimate::kExchangeCopies),
                      Where::device});
    }
    std::uint64_t comm_bytes = 0;
    for (const auto& t : comm) comm_bytes += t.bytes;

    for (Role active : held) {
      const RoleModel& m = models[static_cast<int>(active)];
      RolePlan plan;
      plan.role = active;
      plan.parameters = 0;
      for (auto n : p.unit_params[static_cast<int>(active)]) plan.parameters += n;
      plan.model = model_text(*m.spec, plan.parameters);
      plan.group_size = static_cast<int>(m.layout.W);
      plan.trained = m.spec->trained;
      for (const auto& t : persistent_terms(m, false)) {
        if (t.name == "parameters") {
          plan.params = t.bytes;
          plan.params_at = t.where;
        } else if (t.name == "gradients") {
          plan.grads = t.bytes;
        } else if (t.name == "master") {
          plan.master = t.bytes;
        } else if (t.name == "moments") {
          plan.moments = t.bytes;
          plan.optimizer_at = t.where;
        } else if (t.name == "gradient staging") {
          plan.staging = t.bytes;
        }
      }
      plan.comm = comm_bytes;
      for (const std::string& phase : phases_of(active)) {
        PhasePlan ph;
        ph.name = phase;
        ph.active = active;
        for (Role other : held) {
          const RoleModel& o = models[static_cast<int>(other)];
          auto terms = persistent_terms(o, other != active && p.park_idle);
          ph.terms.insert(ph.terms.end(), terms.begin(), terms.end());
          // Its train phase's working set, in its CUDA graph's pool (the train phase's own terms
          // are that pool while it trains).
          if (graphed(o, cfg, p.on_gpu) && !(other == active && phase == "train"))
            ph.terms.push_back({"train graph", other, sum_bytes(train_terms(o, cfg)), Where::device});
        }
        std::vector<MemoryTerm> transient = phase == "train"      ? train_terms(m, cfg)
                                            : phase == "generate" ? generate_terms(m, cfg)
                                                                  : score_terms(m, cfg);
        std::uint64_t acts = 0;
        for (const auto& t : transient) {
          if (t.name == "activations" || t.name == "logits") acts += t.bytes;
          if (t.name == "kv cache") plan.kv_cache = std::max(plan.kv_cache, t.bytes);
        }
        plan.activations = std::max(plan.activations, acts);
        ph.terms.insert(ph.terms.end(), transient.begin(), transient.end());
        ph.terms.insert(ph.terms.end(), comm.begin(), comm.end());
        if (plan.phases.empty() || ph.device_bytes() > plan.peak) {
          plan.peak = ph.device_bytes();
          plan.peak_phase = ph;
        }
        plan.host = std::max(plan.host, ph.host_bytes());
        plan.phases.push_back(std::move(ph));
      }
      plan.fits = plan.peak <= p.usable;
      rp.peak = std::max(rp.peak, plan.peak);
      rp.roles.push_back(std::move(plan));
    }
    p.ranks.push_back(std::move(rp));
  }
}

}  // namespace

namespace {

// plan_ranks with placement.park applied: auto parks only when the plan does not fit without
// (moving the idle models to the host and back costs a copy of their shards every phase).
void plan_with_parking(MemoryPlan& p) {
  const std::string& park = p.config.placement.park;
  p.park_idle = p.placement.mode == "colocated" && park == "always";
  plan_ranks(p);
  if (p.placement.mode == "colocated" && park == "auto" && !p.fits()) {
    p.park_idle = true;
    plan_ranks(p);
  }
}

}  // namespace

MemoryPlan make_memory_plan(const Config& config, int world_size, int ranks_per_node) {
  QUARTET_CHECK(world_size >= 1, "memory plan: the world needs at least one rank");
  MemoryPlan p(config);
  p.world_size = world_size;
  p.ranks_per_node = ranks_per_node;
  p.placement = make_placement(config.placement, world_size, config.deck);
  for (Role r : kAllRoles) {
    const int i = static_cast<int>(r);
    p.has_model[i] = p.placement.has(r) && has_model(config, r);
    if (!p.has_model[i]) continue;
    p.specs[i] = resolve_model(config, r);
    p.unit_params[i] = unit_parameter_counts(p.specs[i].config, p.specs[i].head);
  }
  resolve_device_memory(p);
  plan_with_parking(p);
  return p;
}

MemoryPlan replan(const MemoryPlan& base, const Config& config, int world_size) {
  MemoryPlan p(config);
  p.world_size = world_size;
  p.ranks_per_node = base.ranks_per_node;
  p.device_memory = base.device_memory;
  p.device_memory_source = base.device_memory_source;
  p.on_gpu = base.on_gpu;
  p.specs = base.specs;
  p.unit_params = base.unit_params;
  p.placement = make_placement(config.placement, world_size, config.deck);
  for (Role r : kAllRoles) {
    const int i = static_cast<int>(r);
    p.has_model[i] = base.has_model[i] && p.placement.has(r);
    QUARTET_CHECK(!p.placement.has(r) || base.has_model[i] || !has_model(config, r),
                  std::string("replan: the ") + role_name(r) + " gained a model the base plan has not resolved");
  }
  plan_with_parking(p);
  return p;
}

// ---------------------------------------------------------------------------------------------
// The table.

namespace {

std::string g2(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / 1073741824.0);
  return buf;
}

// A row: one role on a run of ranks with identical plans.
struct Row {
  const RolePlan* plan;
  std::vector<int> ranks;
};

bool same(const RolePlan& a, const RolePlan& b) {
  return a.role == b.role && a.params == b.params && a.grads == b.grads && a.master == b.master &&
         a.moments == b.moments && a.staging == b.staging && a.activations == b.activations &&
         a.kv_cache == b.kv_cache && a.comm == b.comm && a.peak == b.peak && a.host == b.host &&
         a.params_at == b.params_at && a.optimizer_at == b.optimizer_at && a.peak_phase.name == b.peak_phase.name;
}

std::vector<Row> rows_of(const MemoryPlan& plan) {
  std::vector<Row> rows;
  for (Role r : kAllRoles)
    for (const auto& rp : plan.ranks)
      for (const auto& role : rp.roles) {
        if (role.role != r) continue;
        bool merged = false;
        for (auto& row : rows)
          if (row.plan->role == r && same(*row.plan, role)) {
            row.ranks.push_back(rp.rank);
            merged = true;
            break;
          }
        if (!merged) rows.push_back({&role, {rp.rank}});
      }
  return rows;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

std::uint64_t gathered_of(const RolePlan& p) {
  std::uint64_t most = 0;
  for (const auto& ph : p.phases) {
    std::uint64_t n = 0;
    for (const auto& t : ph.terms)
      if (t.role == p.role && t.where == Where::device &&
          (t.name == "gathered parameters" || t.name == "gradient buffers" || t.name == "full model (hybrid engine)"))
        n += t.bytes;
    most = std::max(most, n);
  }
  return most;
}

}  // namespace

namespace {

// Per role, the memory its training graphs keep reserved ("train graph" terms; 0 = none).
std::array<std::uint64_t, kNumRoles> train_graph_bytes(const MemoryPlan& plan) {
  std::array<std::uint64_t, kNumRoles> graph{};
  for (const auto& rank : plan.ranks)
    for (const auto& role : rank.roles)
      for (const auto& phase : role.phases)
        for (const auto& t : phase.terms)
          if (t.name == "train graph") {
            auto& g = graph[static_cast<int>(t.role)];
            g = std::max(g, t.bytes);
          }
  return graph;
}

}  // namespace

std::string format_plan(const MemoryPlan& plan) {
  std::ostringstream out;
  char line[512];
  out << "memory plan: " << plan.placement.describe() << " (" << plan.world_size << " rank"
      << (plan.world_size == 1 ? "" : "s") << ")\n";
  std::snprintf(line, sizeof line,
                "device memory %s (%s); usable %s after %.0f%% margin and %s for the CUDA context\n",
                gib(plan.device_memory).c_str(), plan.device_memory_source.c_str(), gib(plan.usable).c_str(),
                kSafetyFraction * 100, gib(kCudaContextBytes).c_str());
  out << line;
  const Shape s = shape_of(plan.config);
  std::snprintf(line, sizeof line,
                "sequences of %lld tokens (%d prompt + %d new); train.micro_batch %d, rollout.batch %d\n",
                static_cast<long long>(s.T), plan.config.rollout.max_prompt_tokens, plan.config.rollout.max_new_tokens,
                plan.config.train.micro_batch, plan.config.rollout.batch);
  out << line;
  for (Role r : kAllRoles) {
    const int i = static_cast<int>(r);
    if (plan.placement.has(r) && !plan.has_model[i])
      out << "  " << role_name(r) << ": no model (rule reward)\n";
    if (!plan.has_model[i]) continue;
    const RolePlan* first = nullptr;
    for (const auto& rp : plan.ranks)
      for (const auto& role : rp.roles)
        if (role.role == r && !first) first = &role;
    if (first) out << "  " << role_name(r) << ": " << first->model << "\n";
  }
  out << "\nGiB per rank    (* = in host memory; peak = the largest phase, every term at once)\n";
  std::snprintf(line, sizeof line, "%-10s %-11s %4s %8s %8s %8s %8s %9s %8s %8s %6s %7s %8s %-9s %7s %4s\n", "role",
                "ranks", "W", "params", "grads", "master", "moments", "gathered", "activ.", "kv cache", "comm",
                "host", "peak", "phase", "usable", "fit");
  out << line;
  auto cell = [](std::uint64_t bytes, bool host) { return bytes == 0 ? std::string("-") : g2(bytes) + (host ? "*" : ""); };
  for (const auto& row : rows_of(plan)) {
    const RolePlan& p = *row.plan;
    const bool opt_host = p.optimizer_at == Where::host;
    std::snprintf(line, sizeof line, "%-10s %-11s %4d %8s %8s %8s %8s %9s %8s %8s %6s %7s %8s %-9s %7s %4s\n",
                  role_name(p.role), rank_list(row.ranks).c_str(), p.group_size,
                  cell(p.params, p.params_at == Where::host).c_str(), cell(p.grads, false).c_str(),
                  cell(p.master, opt_host).c_str(), cell(p.moments, opt_host).c_str(), cell(gathered_of(p), false).c_str(),
                  cell(p.activations, false).c_str(), cell(p.kv_cache, false).c_str(), cell(p.comm, false).c_str(),
                  g2(p.host).c_str(), g2(p.peak).c_str(), p.peak_phase.name.c_str(), g2(plan.usable).c_str(),
                  p.fits ? "yes" : "NO");
    out << line;
  }
  // The graphs' pools are no column of their own: they are the train phase's working set, kept.
  const auto graph = train_graph_bytes(plan);
  for (Role r : kAllRoles)
    if (graph[static_cast<int>(r)] > 0)
      out << "\ntrain graph: the " << role_name(r) << "'s training step runs as a CUDA graph whose "
          << gib(graph[static_cast<int>(r)]) << " stay reserved in its other phases (train.cuda_graphs)";
  if (std::any_of(graph.begin(), graph.end(), [](std::uint64_t b) { return b > 0; })) out << "\n";
  if (plan.placement.mode == "colocated")
    out << "\ncolocated: idle models " << (plan.park_idle ? "are parked in host memory" : "stay on the device")
        << " (placement.park = " << plan.config.placement.park << ")\n";
  out << (plan.fits() ? "\nfits: every rank's peak is within its usable device memory\n"
                      : "\ndoes NOT fit: see below\n");
  return out.str();
}

// ---------------------------------------------------------------------------------------------
// The check and the knob search.

namespace {

// A knob: a change to the deck (or the world) and how to say it.
struct Knob {
  std::string text;  // "--set model.actor.offload_optimizer=true"
  std::function<void(Config&, int&)> apply;
};

ModelSectionConfig& section_of(Config& c, Role r) {
  switch (r) {
    case Role::actor: return c.actor;
    case Role::critic: return c.critic;
    case Role::reference: return c.reference;
    case Role::reward: return c.reward;
  }
  return c.actor;
}

int& placement_count(PlacementConfig& p, Role r) {
  switch (r) {
    case Role::actor: return p.actor;
    case Role::critic: return p.critic;
    case Role::reference: return p.reference;
    case Role::reward: return p.reward;
  }
  return p.actor;
}

std::string key(Role r, const char* k) { return std::string("model.") + role_name(r) + "." + k; }

// Roles that do not fit anywhere.
std::vector<Role> failing_roles(const MemoryPlan& p) {
  std::vector<Role> out;
  for (Role r : kAllRoles) {
    bool bad = false;
    for (const auto& rp : p.ranks)
      for (const auto& role : rp.roles) bad |= role.role == r && !role.fits;
    if (bad) out.push_back(r);
  }
  return out;
}

// Whether `after` fits `role` without breaking a role that fitted in `before`.
bool fixes(const MemoryPlan& before, const MemoryPlan& after, Role role) {
  auto was_bad = failing_roles(before);
  for (Role r : failing_roles(after)) {
    if (r == role) return false;
    if (std::find(was_bad.begin(), was_bad.end(), r) == was_bad.end()) return false;
  }
  return true;
}

std::uint64_t role_peak(const MemoryPlan& p, Role role) {
  std::uint64_t most = 0;
  for (const auto& rp : p.ranks)
    for (const auto& r : rp.roles)
      if (r.role == role) most = std::max(most, r.peak);
  return most;
}

constexpr int kMaxRanks = 4096;

// The config for a colocated job of w ranks: counts that named the old world size follow it.
Config colocated_on(const Config& c0, int w) {
  Config c = c0;
  for (Role r : kAllRoles) {
    int& n = placement_count(c.placement, r);
    if (n > 0) n = w;
  }
  return c;
}

struct Attempt {
  std::string text;
  std::uint64_t peak = 0;
  bool ok = false;
};

// Tries a knob (with config changes already in `c`, world `w`).
Attempt attempt(const MemoryPlan& base, const Config& c, int w, Role role, const std::string& text) {
  Attempt a;
  a.text = text;
  try {
    MemoryPlan p = replan(base, c, w);
    a.peak = role_peak(p, role);
    a.ok = fixes(base, p, role);
  } catch (const Error&) {
    a.ok = false;
  }
  return a;
}

// The smallest count n in (from, kMaxRanks] for which `fits(n)`; 0 if none. Doubling, then
// bisection (fit is monotone in the ranks but for padding, which moves bytes by < 16 elements).
int smallest_fitting(int from, const std::function<bool(int)>& fits) {
  int hi = from;
  do {
    hi = std::min(kMaxRanks, hi * 2);
    if (fits(hi)) break;
    if (hi == kMaxRanks) return 0;
  } while (true);
  int lo = std::max(from, hi / 2);  // lo does not fit (or is `from`)
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    if (fits(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

// The largest value in [1, from) for which `fits(v)`; 0 if none.
int largest_fitting(int from, const std::function<bool(int)>& fits) {
  for (int v = from - 1; v >= 1; --v)
    if (fits(v)) return v;
  return 0;
}

// Whether any rank's plan holds a training graph's pool (the knob that drops them matters).
bool counts_train_graphs(const MemoryPlan& plan) {
  const auto graph = train_graph_bytes(plan);
  return std::any_of(graph.begin(), graph.end(), [](std::uint64_t b) { return b > 0; });
}

// Single knobs that make `role` fit, best first: no training graphs, a smaller micro-batch (same math, less
// throughput), checkpointing (a third more compute), a smaller rollout batch, offloading the
// optimizer (the step runs on the CPU), more ranks (more hardware), offloading parameters (a
// host->device copy of every block in every pass).
std::vector<Attempt> single_knobs(const MemoryPlan& base, Role role) {
  std::vector<Attempt> out;
  const Config& c0 = base.config;
  const int w0 = base.world_size;
  const ModelSectionConfig& sec = model_section(c0, role);
  const bool trained = is_trained(role);
  auto try_flag = [&](const char* k, bool ModelSectionConfig::*flag) {
    if (sec.*flag) return;
    Config c = c0;
    section_of(c, role).*flag = true;
    out.push_back(attempt(base, c, w0, role, "--set " + key(role, k) + "=true"));
  };
  // A smaller value of an integer knob: the largest that fits, if any.
  auto try_smaller = [&](int current, const char* name, void (*set)(Config&, int)) {
    if (current <= 1) return;
    Attempt best;
    const int v = largest_fitting(current, [&](int value) {
      Config c = c0;
      set(c, value);
      best = attempt(base, c, w0, role, std::string("--set ") + name + "=" + std::to_string(value));
      return best.ok;
    });
    if (v > 0) out.push_back(best);
  };
  // The training graphs' pools: launches cost the host again, the math is the same.
  if (counts_train_graphs(base)) {
    Config c = c0;
    c.train.cuda_graphs = false;
    out.push_back(attempt(base, c, w0, role, "--set train.cuda_graphs=false"));
  }
  if (trained) try_smaller(c0.train.micro_batch, "train.micro_batch", [](Config& c, int v) { c.train.micro_batch = v; });
  if (trained) try_flag("reshard_after_forward", &ModelSectionConfig::reshard_after_forward);
  if (trained) try_flag("checkpointing", &ModelSectionConfig::checkpointing);
  try_smaller(c0.rollout.batch, "rollout.batch", [](Config& c, int v) { c.rollout.batch = v; });
  if (trained) try_flag("offload_optimizer", &ModelSectionConfig::offload_optimizer);
  {
    Attempt best;
    if (base.placement.mode == "colocated") {
      const int n = smallest_fitting(w0, [&](int w) {
        best = attempt(base, colocated_on(c0, w), w, role, "--ranks " + std::to_string(w) + " (a job of " + std::to_string(w) + " ranks)");
        return best.ok;
      });
      if (n > 0) out.push_back(best);
    } else {
      const int cur = static_cast<int>(base.placement.ranks_of(role).size());
      const int n = smallest_fitting(cur, [&](int k) {
        Config c = c0;
        placement_count(c.placement, role) = k;
        const int w = w0 - cur + k;
        best = attempt(base, c, w, role,
                       "--set placement." + std::string(role_name(role)) + "=" + std::to_string(k) + " (" +
                           std::to_string(k - cur) + " more rank" + (k - cur == 1 ? "" : "s") + ": a job of " +
                           std::to_string(w) + " ranks)");
        return best.ok;
      });
      if (n > 0) out.push_back(best);
    }
  }
  try_flag("offload_params", &ModelSectionConfig::offload_params);
  out.erase(std::remove_if(out.begin(), out.end(), [](const Attempt& a) { return !a.ok; }), out.end());
  return out;
}

// No single knob fits: switch on the flags one by one (in the order above), then shrink the
// batches, then add ranks, and report the first combination that fits.
Attempt combination(const MemoryPlan& base, Role role, bool allow_ranks) {
  Config c = base.config;
  int w = base.world_size;
  std::string text;
  Attempt last;
  auto check = [&]() {
    last = attempt(base, c, w, role, text);
    return last.ok;
  };
  if (counts_train_graphs(base)) {
    c.train.cuda_graphs = false;
    text = "--set train.cuda_graphs=false";
    if (check()) return last;
  }
  const bool trained = is_trained(role);
  ModelSectionConfig& sec = section_of(c, role);
  std::vector<std::pair<const char*, bool ModelSectionConfig::*>> flags;
  if (trained) flags.push_back({"reshard_after_forward", &ModelSectionConfig::reshard_after_forward});
  if (trained) flags.push_back({"checkpointing", &ModelSectionConfig::checkpointing});
  if (trained) flags.push_back({"offload_optimizer", &ModelSectionConfig::offload_optimizer});
  flags.push_back({"offload_params", &ModelSectionConfig::offload_params});
  for (auto& [name, flag] : flags) {
    if (sec.*flag) continue;
    sec.*flag = true;
    text += (text.empty() ? "" : " ") + std::string("--set ") + key(role, name) + "=true";
    if (check()) return last;
  }
  const std::string flags_text = text;
  if (trained && c.train.micro_batch > 1) {
    const int mb0 = c.train.micro_batch;
    const int v = largest_fitting(mb0, [&](int mb) {
      c.train.micro_batch = mb;
      text = flags_text + " --set train.micro_batch=" + std::to_string(mb);
      return check();
    });
    if (v > 0) return last;
    c.train.micro_batch = 1;
    text = flags_text + " --set train.micro_batch=1";
  }
  const std::string before_rollout = text;
  if (c.rollout.batch > 1) {
    const int v = largest_fitting(c.rollout.batch, [&](int rb) {
      c.rollout.batch = rb;
      text = before_rollout + " --set rollout.batch=" + std::to_string(rb);
      return check();
    });
    if (v > 0) return last;
    c.rollout.batch = 1;
    text = before_rollout + " --set rollout.batch=1";
  }
  const std::string before_ranks = text;
  if (!allow_ranks) {
  } else if (base.placement.mode == "colocated") {
    const Config c_fixed = c;
    const int n = smallest_fitting(w, [&](int k) {
      const int keep = w;
      w = k;
      c = colocated_on(c_fixed, k);
      text = before_ranks + " --ranks " + std::to_string(k);
      const bool ok = check();
      w = keep;
      return ok;
    });
    if (n > 0) {
      w = n;
      c = colocated_on(c_fixed, n);
      text = before_ranks + " --ranks " + std::to_string(n);
      check();
      return last;
    }
  } else {
    const int cur = static_cast<int>(base.placement.ranks_of(role).size());
    const int w0 = w;
    const int n = smallest_fitting(cur, [&](int k) {
      placement_count(c.placement, role) = k;
      w = w0 - cur + k;
      text = before_ranks + " --set placement." + role_name(role) + "=" + std::to_string(k) + " (a job of " +
             std::to_string(w) + " ranks)";
      return check();
    });
    if (n > 0) {
      placement_count(c.placement, role) = n;
      w = w0 - cur + n;
      text = before_ranks + " --set placement." + role_name(role) + "=" + std::to_string(n) + " (a job of " +
             std::to_string(w) + " ranks)";
      check();
      return last;
    }
  }
  last.ok = false;
  last.text = before_ranks;
  return last;
}

}  // namespace

std::string plan_problems(const MemoryPlan& plan) {
  std::ostringstream out;
  for (const auto& row : rows_of(plan)) {
    const RolePlan& p = *row.plan;
    if (p.fits) continue;
    const Role role = p.role;
    out << "the " << role_name(role) << " on " << ranks_text(row.ranks) << " does not fit: peak "
        << gib(p.peak) << " (phase " << p.peak_phase.name << ") > " << gib(plan.usable) << " usable of "
        << gib(plan.device_memory) << " device memory (" << plan.device_memory_source << ")\n";
    // The largest device terms of the peak phase.
    std::vector<MemoryTerm> terms;
    for (const auto& t : p.peak_phase.terms)
      if (t.where == Where::device && t.bytes > 0) terms.push_back(t);
    std::sort(terms.begin(), terms.end(), [](const MemoryTerm& a, const MemoryTerm& b) { return a.bytes > b.bytes; });
    out << "  largest terms:";
    for (size_t i = 0; i < terms.size() && i < 5; ++i)
      out << (i ? ", " : " ") << (terms[i].role == role ? "" : std::string(role_name(terms[i].role)) + " ")
          << terms[i].name << " " << gib(terms[i].bytes);
    out << "\n";
    auto singles = single_knobs(plan, role);
    if (!singles.empty()) {
      out << "  any one of these would make it fit (best first):\n";
      for (const auto& a : singles) out << "    " << a.text << "   (peak " << gib(a.peak) << ")\n";
      // Only more ranks? Say too what fits on the ranks there are.
      bool only_ranks = true;
      for (const auto& a : singles) only_ranks &= a.text.rfind("--set placement.", 0) == 0 || a.text.rfind("--ranks", 0) == 0;
      if (only_ranks) {
        Attempt combo = combination(plan, role, /*allow_ranks=*/false);
        if (combo.ok)
          out << "  or, on the ranks it has, these together:\n    " << combo.text << "   (peak " << gib(combo.peak) << ")\n";
      }
    } else {
      Attempt combo = combination(plan, role, /*allow_ranks=*/true);
      if (combo.ok)
        out << "  no single knob is enough; together these fit:\n    " << combo.text << "   (peak "
            << gib(combo.peak) << ")\n";
      else
        out << "  nothing tried fits: even with " << (combo.text.empty() ? "every knob" : combo.text)
            << " and up to " << kMaxRanks << " ranks the " << role_name(role)
            << " does not fit; use devices with more memory or a smaller model, or shorter sequences "
               "(rollout.max_prompt_tokens, rollout.max_new_tokens)\n";
    }
  }
  const std::string text = out.str();
  return text.empty() ? text : "memory plan: " + text;
}

void check_plan(const MemoryPlan& plan) {
  const std::string problems = plan_problems(plan);
  if (!problems.empty()) throw Error(problems.substr(0, problems.size() - 1));
}

}  // namespace quartet

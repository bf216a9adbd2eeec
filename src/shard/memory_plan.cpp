#include "quartet/shard/memory_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#ifdef QUARTET_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "quartet/core/check.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/placement_config.hpp"
#include "quartet/shard/memory_terms.hpp"

namespace quartet {

using memory::RoleModel;

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

namespace {

const char* short_dtype(torch::ScalarType t) {
  return t == torch::kFloat32 ? "fp32" : t == torch::kBFloat16 ? "bf16" : "fp16";
}

// A trained reward model (quartet rm) scores its held-out pairs and trains, as a critic does.
std::vector<std::string> phases_of(Role role, bool trained) {
  if (role == Role::actor) return {"generate", "score", "train"};
  if (trained) return {"score", "train"};
  return {"score"};
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
  p.on_gpu = c.get<DistConfig>().device != DeviceKind::cpu;
  if (c.get<DistConfig>().device_memory > 0) {
    p.device_memory = c.get<DistConfig>().device_memory;
    p.device_memory_source = "dist.device_memory, " + c.deck.where("dist.device_memory");
    return;
  }
#ifdef QUARTET_WITH_CUDA
  if (c.get<DistConfig>().device != DeviceKind::cpu) {
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
  p.on_gpu = c.get<DistConfig>().device == DeviceKind::cuda;
  const int per_node = p.ranks_per_node > 0 ? p.ranks_per_node : p.world_size;
  p.device_memory = host_memory() / static_cast<std::uint64_t>(std::max(1, per_node));
  p.device_memory_source = "host memory / " + std::to_string(per_node) + " rank" + (per_node == 1 ? "" : "s") +
                           " per node (no GPU; set dist.device_memory to plan for one)";
}

using RoleModels = std::array<RoleModel, kNumRoles>;

// The layout of every role placed with a model (present), on the group the placement gives it.
RoleModels role_models(const MemoryPlan& p, std::array<bool, kNumRoles>& present) {
  RoleModels models{};
  for (Role r : kAllRoles) {
    const int i = static_cast<int>(r);
    present[i] = p.placement.has(r) && p.has_model[i];
    if (!present[i]) continue;
    const int W = static_cast<int>(p.placement.ranks_of(r).size());
    models[i] = {r, &p.specs[i], &model_section(p.config, r), memory::make_layout(p.unit_params[i], W),
                 memory::dtype_bytes(p.specs[i].dtype)};
  }
  return models;
}

// The persistent terms of `plan`'s model at home, into its columns.
void take_persistent(RolePlan& plan, const RoleModel& m) {
  for (const auto& t : memory::persistent_terms(m, false)) {
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
}

// One phase of `active` on a rank holding `held`: every model's persistent terms (idle ones
// parked where the plan parks them), training graphs' pools, the phase's transients and the
// communication buffers. Raises plan's activation and KV cache columns.
PhasePlan plan_phase(const MemoryPlan& p, const RoleModels& models, const std::vector<Role>& held, Role active,
                     const std::string& phase, const std::vector<MemoryTerm>& comm, RolePlan& plan) {
  const Config& cfg = p.config;
  const RoleModel& m = models[static_cast<int>(active)];
  PhasePlan ph;
  ph.name = phase;
  ph.active = active;
  for (Role other : held) {
    const RoleModel& o = models[static_cast<int>(other)];
    auto terms = memory::persistent_terms(o, other != active && p.park_idle);
    ph.terms.insert(ph.terms.end(), terms.begin(), terms.end());
    // Its train phase's working set, in its CUDA graph's pool (the train phase's own terms
    // are that pool while it trains).
    if (memory::graphed(o, cfg, p.on_gpu) && !(other == active && phase == "train"))
      ph.terms.push_back({"train graph", other, memory::sum_bytes(memory::train_terms(o, cfg)), Where::device});
  }
  std::vector<MemoryTerm> transient = phase == "train"      ? memory::train_terms(m, cfg)
                                      : phase == "generate" ? memory::generate_terms(m, cfg)
                                                            : memory::score_terms(m, cfg);
  std::uint64_t acts = 0;
  for (const auto& t : transient) {
    if (t.name == "activations" || t.name == "logits") acts += t.bytes;
    if (t.name == "kv cache") plan.kv_cache = std::max(plan.kv_cache, t.bytes);
  }
  plan.activations = std::max(plan.activations, acts);
  ph.terms.insert(ph.terms.end(), transient.begin(), transient.end());
  ph.terms.insert(ph.terms.end(), comm.begin(), comm.end());
  return ph;
}

// One role active on a rank holding `held`: its columns, its phases and its peak.
RolePlan plan_role(const MemoryPlan& p, const RoleModels& models, const std::vector<Role>& held, Role active,
                   const std::vector<MemoryTerm>& comm) {
  const RoleModel& m = models[static_cast<int>(active)];
  RolePlan plan;
  plan.role = active;
  plan.parameters = 0;
  for (auto n : p.unit_params[static_cast<int>(active)]) plan.parameters += n;
  plan.model = model_text(*m.spec, plan.parameters);
  plan.group_size = static_cast<int>(m.layout.W);
  plan.trained = m.spec->trained;
  take_persistent(plan, m);
  plan.comm = memory::sum_bytes(comm);
  for (const std::string& phase : phases_of(active, m.spec->trained)) {
    PhasePlan ph = plan_phase(p, models, held, active, phase, comm, plan);
    if (plan.phases.empty() || ph.device_bytes() > plan.peak) {
      plan.peak = ph.device_bytes();
      plan.peak_phase = ph;
    }
    plan.host = std::max(plan.host, ph.host_bytes());
    plan.phases.push_back(std::move(ph));
  }
  plan.fits = plan.peak <= p.usable;
  return plan;
}

void plan_ranks(MemoryPlan& p) {
  const Config& cfg = p.config;
  p.placement = make_placement(cfg.get<PlacementConfig>(), p.world_size, cfg.deck);
  const double usable = static_cast<double>(p.device_memory) * (1.0 - kSafetyFraction) -
                        static_cast<double>(kCudaContextBytes);
  p.usable = memory::u64(usable);
  std::array<bool, kNumRoles> present{};
  const RoleModels models = role_models(p, present);
  const memory::Shape shape = memory::shape_of(cfg);
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
    if (!held.empty()) comm = memory::comm_terms(held.front(), group, shape);
    for (Role active : held) {
      RolePlan plan = plan_role(p, models, held, active, comm);
      rp.peak = std::max(rp.peak, plan.peak);
      rp.roles.push_back(std::move(plan));
    }
    p.ranks.push_back(std::move(rp));
  }
}


// plan_ranks with placement.park applied: auto parks only when the plan does not fit without
// (moving the idle models to the host and back costs a copy of their shards every phase).
void plan_with_parking(MemoryPlan& p) {
  const Parking park = p.config.get<PlacementConfig>().park;
  p.park_idle = p.placement.mode == PlacementMode::colocated && park == Parking::always;
  plan_ranks(p);
  if (p.placement.mode == PlacementMode::colocated && park == Parking::automatic && !p.fits()) {
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
  p.placement = make_placement(config.get<PlacementConfig>(), world_size, config.deck);
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
  p.placement = make_placement(config.get<PlacementConfig>(), world_size, config.deck);
  for (Role r : kAllRoles) {
    const int i = static_cast<int>(r);
    p.has_model[i] = base.has_model[i] && p.placement.has(r);
    QUARTET_CHECK(!p.placement.has(r) || base.has_model[i] || !has_model(config, r),
                  std::string("replan: the ") + role_name(r) + " gained a model the base plan has not resolved");
  }
  plan_with_parking(p);
  return p;
}

}  // namespace quartet

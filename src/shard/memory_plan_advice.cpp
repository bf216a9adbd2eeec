// The advice on a plan that does not fit: each knob of the deck (or the world) that would make a
// role fit, found by planning again with it changed; or, when no single one does, the first
// combination that does.
#include <algorithm>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/dist/placement_config.hpp"
#include "quartet/model/models_config.hpp"
#include "quartet/model/rollout_config.hpp"
#include "quartet/shard/memory_plan.hpp"
#include "quartet/shard/memory_plan_table.hpp"
#include "quartet/shard/train_config.hpp"

namespace quartet {

namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

ModelSectionConfig& section_of(Config& c, Role r) {
  switch (r) {
    case Role::actor: return c.edit<ModelsConfig>().actor;
    case Role::critic: return c.edit<ModelsConfig>().critic;
    case Role::reference: return c.edit<ModelsConfig>().reference;
    case Role::reward: return c.edit<ModelsConfig>().reward;
  }
  return c.edit<ModelsConfig>().actor;
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
    int& n = placement_count(c.edit<PlacementConfig>(), r);
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
  const auto graph = memory::train_graph_bytes(plan);
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
  const bool trained = is_trained(c0, role);
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
    c.edit<TrainConfig>().cuda_graphs = false;
    out.push_back(attempt(base, c, w0, role, "--set train.cuda_graphs=false"));
  }
  // A packed micro-batch's token budget, halved until it fits (one step at a time would plan
  // thousands of times).
  auto try_halved = [&](int current, const char* name, void (*set)(Config&, int), int floor = 1) {
    for (int v = current / 2; v >= floor; v /= 2) {
      Config c = c0;
      set(c, v);
      Attempt a = attempt(base, c, w0, role, std::string("--set ") + name + "=" + std::to_string(v));
      if (!a.ok) continue;
      out.push_back(a);
      return;
    }
  };
  if (trained && c0.get<TrainConfig>().micro_batch_tokens > 0)
    try_halved(c0.get<TrainConfig>().micro_batch_tokens, "train.micro_batch_tokens",
               [](Config& c, int v) { c.edit<TrainConfig>().micro_batch_tokens = v; });
  else if (trained)
    try_smaller(c0.get<TrainConfig>().micro_batch, "train.micro_batch", [](Config& c, int v) { c.edit<TrainConfig>().micro_batch = v; });
  if (trained) try_flag("reshard_after_forward", &ModelSectionConfig::reshard_after_forward);
  if (trained) try_flag("checkpointing", &ModelSectionConfig::checkpointing);
  if (role == Role::actor && c0.get<RolloutConfig>().decode_rows > 0) {
    // Paged decoding: a smaller pool (rows then wait for blocks, or restart), down to one whole
    // sequence, the least the deck allows.
    const int whole = c0.get<RolloutConfig>().max_prompt_tokens + c0.get<RolloutConfig>().max_new_tokens;
    const int pool = c0.get<RolloutConfig>().kv_cache_tokens > 0 ? c0.get<RolloutConfig>().kv_cache_tokens : c0.get<RolloutConfig>().decode_rows * whole;
    try_halved(pool, "rollout.kv_cache_tokens", [](Config& c, int v) { c.edit<RolloutConfig>().kv_cache_tokens = v; }, whole);
    // Fewer rows: a smaller default pool, and fewer prompts prefilled at once.
    try_halved(c0.get<RolloutConfig>().decode_rows, "rollout.decode_rows", [](Config& c, int v) { c.edit<RolloutConfig>().decode_rows = v; });
  }
  try_smaller(c0.get<RolloutConfig>().batch, "rollout.batch", [](Config& c, int v) { c.edit<RolloutConfig>().batch = v; });
  if (trained) try_flag("offload_optimizer", &ModelSectionConfig::offload_optimizer);
  {
    Attempt best;
    if (base.placement.mode == PlacementMode::colocated) {
      const int n = smallest_fitting(w0, [&](int w) {
        best = attempt(base, colocated_on(c0, w), w, role, "--ranks " + std::to_string(w) + " (a job of " + std::to_string(w) + " ranks)");
        return best.ok;
      });
      if (n > 0) out.push_back(best);
    } else {
      const int cur = static_cast<int>(base.placement.ranks_of(role).size());
      const int n = smallest_fitting(cur, [&](int k) {
        Config c = c0;
        placement_count(c.edit<PlacementConfig>(), role) = k;
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
    c.edit<TrainConfig>().cuda_graphs = false;
    text = "--set train.cuda_graphs=false";
    if (check()) return last;
  }
  const bool trained = is_trained(c, role);
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
  if (trained && c.get<TrainConfig>().micro_batch_tokens > 1) {
    // Packed micro-batches: the token budget halved, down to one sequence a pass.
    for (int v = c.get<TrainConfig>().micro_batch_tokens / 2; v >= 1; v /= 2) {
      c.edit<TrainConfig>().micro_batch_tokens = v;
      text = flags_text + " --set train.micro_batch_tokens=" + std::to_string(v);
      if (check()) return last;
    }
  } else if (trained && c.get<TrainConfig>().micro_batch > 1) {
    const int mb0 = c.get<TrainConfig>().micro_batch;
    const int v = largest_fitting(mb0, [&](int mb) {
      c.edit<TrainConfig>().micro_batch = mb;
      text = flags_text + " --set train.micro_batch=" + std::to_string(mb);
      return check();
    });
    if (v > 0) return last;
    c.edit<TrainConfig>().micro_batch = 1;
    text = flags_text + " --set train.micro_batch=1";
  }
  const std::string before_rollout = text;
  if (c.get<RolloutConfig>().batch > 1) {
    const int v = largest_fitting(c.get<RolloutConfig>().batch, [&](int rb) {
      c.edit<RolloutConfig>().batch = rb;
      text = before_rollout + " --set rollout.batch=" + std::to_string(rb);
      return check();
    });
    if (v > 0) return last;
    c.edit<RolloutConfig>().batch = 1;
    text = before_rollout + " --set rollout.batch=1";
  }
  const std::string before_ranks = text;
  if (!allow_ranks) {
  } else if (base.placement.mode == PlacementMode::colocated) {
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
      placement_count(c.edit<PlacementConfig>(), role) = k;
      w = w0 - cur + k;
      text = before_ranks + " --set placement." + role_name(role) + "=" + std::to_string(k) + " (a job of " +
             std::to_string(w) + " ranks)";
      return check();
    });
    if (n > 0) {
      placement_count(c.edit<PlacementConfig>(), role) = n;
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
  for (const auto& row : memory::plan_rows(plan)) {
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

#include "quartet/shard/memory_plan_table.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "quartet/dist/placement_config.hpp"
#include "quartet/model/rollout_config.hpp"
#include "quartet/shard/memory_terms.hpp"
#include "quartet/shard/train_config.hpp"

namespace quartet {

std::string gib(std::uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / 1073741824.0);
  return buf;
}

namespace memory {

namespace {

bool same(const RolePlan& a, const RolePlan& b) {
  return a.role == b.role && a.params == b.params && a.grads == b.grads && a.master == b.master &&
         a.moments == b.moments && a.staging == b.staging && a.activations == b.activations &&
         a.kv_cache == b.kv_cache && a.comm == b.comm && a.peak == b.peak && a.host == b.host &&
         a.params_at == b.params_at && a.optimizer_at == b.optimizer_at && a.peak_phase.name == b.peak_phase.name;
}

}  // namespace

std::vector<PlanRow> plan_rows(const MemoryPlan& plan) {
  std::vector<PlanRow> rows;
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

}  // namespace memory

namespace {

std::string g2(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / 1073741824.0);
  return buf;
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
  const memory::Shape s = memory::shape_of(plan.config);
  std::snprintf(line, sizeof line,
                "sequences of %lld tokens (%d prompt + %d new); train.micro_batch %d, rollout.batch %d\n",
                static_cast<long long>(s.T), plan.config.get<RolloutConfig>().max_prompt_tokens, plan.config.get<RolloutConfig>().max_new_tokens,
                plan.config.get<TrainConfig>().micro_batch, plan.config.get<RolloutConfig>().batch);
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
  for (const auto& row : memory::plan_rows(plan)) {
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
  const auto graph = memory::train_graph_bytes(plan);
  for (Role r : kAllRoles)
    if (graph[static_cast<int>(r)] > 0)
      out << "\ntrain graph: the " << role_name(r) << "'s training step runs as a CUDA graph whose "
          << gib(graph[static_cast<int>(r)]) << " stay reserved in its other phases (train.cuda_graphs)";
  if (std::any_of(graph.begin(), graph.end(), [](std::uint64_t b) { return b > 0; })) out << "\n";
  if (plan.placement.mode == PlacementMode::colocated)
    out << "\ncolocated: idle models " << (plan.park_idle ? "are parked in host memory" : "stay on the device")
        << " (placement.park = " << name_of(plan.config.get<PlacementConfig>().park) << ")\n";
  out << (plan.fits() ? "\nfits: every rank's peak is within its usable device memory\n"
                      : "\ndoes NOT fit: see below\n");
  return out.str();
}

}  // namespace quartet

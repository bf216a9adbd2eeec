#pragma once
// The rows of the memory plan's table (format_plan in memory_plan.hpp), which the advice on a
// plan that does not fit (check_plan, plan_problems) reads too.
#include <array>
#include <cstdint>
#include <vector>

#include "quartet/dist/placement.hpp"
#include "quartet/shard/memory_plan.hpp"

namespace quartet::memory {

// A row: one role on a run of ranks with identical plans.
struct PlanRow {
  const RolePlan* plan;
  std::vector<int> ranks;
};

// By role, then by first rank; plans that agree in every column share a row.
std::vector<PlanRow> plan_rows(const MemoryPlan& plan);

// Per role, the memory its training graphs keep reserved ("train graph" terms; 0 = none).
std::array<std::uint64_t, kNumRoles> train_graph_bytes(const MemoryPlan& plan);

}  // namespace quartet::memory

#include "quartet/dist/groups.hpp"

#include <algorithm>
#include <cstring>

#include "quartet/core/check.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/watched_mpi.hpp"

namespace quartet {

ModelGroups::ModelGroups(const World& world, const Placement& placement,
                         Backend backend, Watchdog* watchdog) {
  for (Role role : kAllRoles) {
    if (!placement.has(role)) continue;
    const auto& ranks = placement.ranks_of(role);
    auto same = std::find_if(groups_.begin(), groups_.end(),
                             [&](const auto& g) { return g->world_ranks == ranks; });
    if (same != groups_.end()) {
      (*same)->roles.push_back(role);
      (*same)->name += std::string("+") + role_name(role);
      index_[static_cast<int>(role)] = static_cast<int>(same - groups_.begin());
      continue;
    }
    auto g = std::make_unique<Group>();
    g->name = role_name(role);
    g->roles = {role};
    g->world_ranks = ranks;
    auto it = std::find(ranks.begin(), ranks.end(), world.rank());
    if (it != ranks.end()) g->rank = static_cast<int>(it - ranks.begin());
    // Every world rank takes part in every split, in the same order: no deadlock, no mismatch.
    g->comm = watched::split(world.comm(), g->member() ? 0 : MPI_UNDEFINED, g->rank, "group '" + g->name + "'");
    index_[static_cast<int>(role)] = static_cast<int>(groups_.size());
    groups_.push_back(std::move(g));
  }
  // Backends last, once every group has its name (NCCL set-up is collective over the group).
  for (auto& g : groups_) {
    if (!g->member()) continue;
    g->coll = backend == Backend::nccl ? make_nccl_collectives(g->name, g->world_ranks, g->comm, watchdog)
                                : make_mpi_collectives(g->name, g->world_ranks, g->comm, watchdog);
  }
}

ModelGroups::~ModelGroups() {
  for (auto& g : groups_) {
    g->coll.reset();
    if (g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
  }
}

const Group& ModelGroups::of(Role role) const {
  int i = index_[static_cast<int>(role)];
  QUARTET_CHECK(i >= 0, std::string("this placement has no ") + role_name(role) + " group");
  return *groups_[static_cast<size_t>(i)];
}

Backend resolve_backend(const DistConfig& dist, const torch::Device& device, const Deck& deck) {
  if (dist.backend == Backend::automatic) return device.is_cuda() ? Backend::nccl : Backend::mpi;
  if (dist.backend == Backend::nccl && !device.is_cuda())
    deck.fail("dist.backend", "is nccl, but this rank computes on the CPU (no GPU found)");
  if (dist.backend == Backend::mpi && device.is_cuda())
    deck.fail("dist.backend", "is mpi, which moves CPU tensors only, but this rank computes on " +
              device.str() + ": use nccl (or auto), or dist.device = cpu");
  return dist.backend;
}

std::vector<RankDevice> gather_devices(const World& world, const torch::Device& device) {
  struct Wire {
    std::uint64_t hash;
    int gpu;
    char host[64];
  } mine{};
  mine.hash = world.host_hash();
  mine.gpu = device.is_cuda() ? device.index() : -1;
  std::strncpy(mine.host, world.host().c_str(), sizeof(mine.host) - 1);
  std::vector<Wire> all(static_cast<size_t>(world.size()));
  watched::allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), world.comm(), "every rank's host and GPU");
  std::vector<RankDevice> out;
  for (const auto& w : all) out.push_back({w.hash, w.host, w.gpu});
  return out;
}

}  // namespace quartet

#pragma once
// Model groups: the ranks that hold one model, their MPI sub-communicator (MPI_Comm_split per
// group, as nccl-tests does) and their collective backend. Roles placed on the same ranks
// (colocated placement) share one group, one communicator and one NCCL communicator.
#include <mpi.h>
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/placement.hpp"
#include "quartet/dist/world.hpp"

namespace quartet {

struct Group {
  std::string name;              // "actor", or "actor+critic+reference+reward" when colocated
  std::vector<Role> roles;
  std::vector<int> world_ranks;  // in group-rank order
  MPI_Comm comm = MPI_COMM_NULL; // valid on members only
  int rank = -1;                 // this rank's place in the group, -1 if not a member
  std::unique_ptr<Collectives> coll;  // members only

  bool member() const { return rank >= 0; }
  int size() const { return static_cast<int>(world_ranks.size()); }
};

class ModelGroups {
 public:
  // Collective over the world. `backend`: dist.backend resolved (nccl or mpi).
  ModelGroups(const World& world, const Placement& placement, Backend backend,
              Watchdog* watchdog);
  ~ModelGroups();
  ModelGroups(const ModelGroups&) = delete;
  ModelGroups& operator=(const ModelGroups&) = delete;

  bool has(Role role) const { return index_[static_cast<int>(role)] >= 0; }
  const Group& of(Role role) const;
  const std::vector<std::unique_ptr<Group>>& all() const { return groups_; }

 private:
  std::vector<std::unique_ptr<Group>> groups_;
  int index_[kNumRoles] = {-1, -1, -1, -1};
};

// dist.backend auto -> nccl on a GPU, mpi on the CPU; refuses nccl without a GPU.
Backend resolve_backend(const DistConfig& dist, const torch::Device& device, const Deck& deck);

// Every rank's host and GPU, gathered over the world (for check_gpu_sharing).
std::vector<RankDevice> gather_devices(const World& world, const torch::Device& device);

}  // namespace quartet

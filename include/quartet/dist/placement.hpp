#pragma once
// Placement: which world ranks hold which model. Two modes:
//   disjoint  - each role gets its own block of ranks, in role order actor, critic, reference,
//               reward (e.g. 4/2/1/1 on 8 ranks); a count of 0 leaves the role out.
//   colocated - every role spans every rank and the phases take turns.
// Impossible layouts are refused here, before any GPU work, naming the deck key. Every layout
// gives the actor ranks, except an rm deck's (PlacementConfig::needs_actor: the reward alone).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/dist/placement_config.hpp"

namespace quartet {

enum class Role { actor = 0, critic = 1, reference = 2, reward = 3 };
constexpr int kNumRoles = 4;
constexpr std::array<Role, kNumRoles> kAllRoles = {Role::actor, Role::critic, Role::reference,
                                                   Role::reward};
const char* role_name(Role role);

struct Placement {
  PlacementMode mode = PlacementMode::disjoint;
  std::array<std::vector<int>, kNumRoles> ranks;  // world ranks per role; empty = no such role

  bool has(Role role) const { return !ranks[static_cast<int>(role)].empty(); }
  const std::vector<int>& ranks_of(Role role) const { return ranks[static_cast<int>(role)]; }
  std::vector<Role> roles_of(int world_rank) const;
  // "actor: ranks 0-3 | critic: ranks 4-5 | reference: rank 6 | reward: rank 7"
  std::string describe() const;
};

Placement make_placement(const PlacementConfig& config, int world_size, const Deck& deck);

// Where a rank computes: its host and its GPU (-1 on CPU).
struct RankDevice {
  std::uint64_t host_hash = 0;
  std::string host;
  int gpu = -1;
};

// NCCL cannot hold two ranks of one communicator on one GPU. Ranks of different groups may
// share a GPU; two ranks of one group may not: refuse, naming the role's deck key.
void check_gpu_sharing(const Placement& placement, const std::vector<RankDevice>& devices,
                       const Deck& deck);

// "0-3", "5", "0,2,4"
std::string rank_list(const std::vector<int>& ranks);

}  // namespace quartet

#include "quartet/dist/placement.hpp"

#include <map>
#include <sstream>

#include "quartet/dist/placement_config.hpp"

namespace quartet {

const char* role_name(Role role) {
  switch (role) {
    case Role::actor: return "actor";
    case Role::critic: return "critic";
    case Role::reference: return "reference";
    case Role::reward: return "reward";
  }
  return "?";
}

std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.empty()) return "none";
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) contiguous &= ranks[i] == ranks[i - 1] + 1;
  if (contiguous && ranks.size() > 1)
    return std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

std::vector<Role> Placement::roles_of(int world_rank) const {
  std::vector<Role> out;
  for (Role r : kAllRoles)
    for (int w : ranks_of(r))
      if (w == world_rank) out.push_back(r);
  return out;
}

std::string Placement::describe() const {
  std::string out = std::string(name_of(mode)) + ":";
  for (Role r : kAllRoles) {
    if (!has(r)) continue;
    const auto& rs = ranks_of(r);
    out += std::string(out.back() == ':' ? " " : " | ") + role_name(r) +
           (rs.size() == 1 ? " rank " : " ranks ") + rank_list(rs);
  }
  return out;
}

namespace {
std::string key_of(Role r) { return std::string("placement.") + role_name(r); }
}  // namespace

Placement make_placement(const PlacementConfig& config, int world_size, const Deck& deck) {
  const std::array<int, kNumRoles> counts = {config.actor, config.critic, config.reference,
                                             config.reward};
  Placement p;
  p.mode = config.mode;
  if (config.mode == PlacementMode::colocated) {
    // Every present role spans the whole world; a count, if given, must say so (or 0 = absent).
    for (Role r : kAllRoles) {
      int n = counts[static_cast<int>(r)];
      if (n > 0 && n != world_size)
        deck.fail(key_of(r), "is " + std::to_string(n) + ", but in colocated mode every role "
                  "spans all " + std::to_string(world_size) + " ranks: give " +
                  std::to_string(world_size) + ", 0 (no " + role_name(r) + ") or leave it out");
      if (n != 0)
        for (int w = 0; w < world_size; ++w) p.ranks[static_cast<int>(r)].push_back(w);
    }
    if (!p.has(Role::actor) && config.needs_actor) deck.fail("placement.actor", "is 0: every layout needs the actor");
    return p;
  }

  // Disjoint: blocks of ranks in role order.
  int total = 0;
  std::string sum;
  for (Role r : kAllRoles) {
    int n = std::max(0, counts[static_cast<int>(r)]);
    total += n;
    sum += (sum.empty() ? "" : " + ") + std::to_string(n);
  }
  if (counts[0] < 1 && config.needs_actor)
    deck.fail("placement.actor", deck.given("placement.actor")
                                     ? "is 0: every layout needs at least one actor rank"
                                     : "is not set: disjoint placement needs a rank count per role");
  if (total != world_size)
    deck.fail("placement.actor", "and the other role counts (actor + critic + reference + reward"
              " = " + sum + ") add up to " + std::to_string(total) + " ranks, but the job has " +
              std::to_string(world_size) + " (mpirun -np / srun -n)");
  int next = 0;
  for (Role r : kAllRoles)
    for (int i = 0; i < std::max(0, counts[static_cast<int>(r)]); ++i)
      p.ranks[static_cast<int>(r)].push_back(next++);
  return p;
}

void check_gpu_sharing(const Placement& placement, const std::vector<RankDevice>& devices,
                       const Deck& deck) {
  for (Role r : kAllRoles) {
    std::map<std::pair<std::uint64_t, int>, int> holder;  // (host, gpu) -> first world rank
    for (int w : placement.ranks_of(r)) {
      const RankDevice& d = devices.at(static_cast<size_t>(w));
      if (d.gpu < 0) continue;
      auto [it, fresh] = holder.emplace(std::make_pair(d.host_hash, d.gpu), w);
      if (!fresh)
        deck.fail("placement." + std::string(role_name(r)),
                  "puts world ranks " + std::to_string(it->second) + " and " + std::to_string(w) +
                  " on the same GPU (" + std::to_string(d.gpu) + " of host " + d.host +
                  "), and one NCCL communicator cannot hold two ranks of one GPU: give the " +
                  role_name(r) + " fewer ranks, run on more GPUs, or use dist.backend = mpi");
    }
  }
}

}  // namespace quartet

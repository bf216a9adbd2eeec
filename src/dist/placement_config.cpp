#include "quartet/dist/placement_config.hpp"

namespace quartet {

namespace {

constexpr Choice<PlacementMode> kModes[] = {{"disjoint", PlacementMode::disjoint}, {"colocated", PlacementMode::colocated}};
constexpr Choice<Parking> kParkings[] = {{"auto", Parking::automatic}, {"always", Parking::always}, {"never", Parking::never}};

// -1 is the default ("not given"): a resolved deck spells it out, and must parse back.
const Check<int> kRankCount = [](const int& n) { return n < -1 ? "must not be negative" : ""; };

}  // namespace

const char* name_of(PlacementMode value) { return choice_name(value, kModes); }
const char* name_of(Parking value) { return choice_name(value, kParkings); }

const Section<PlacementConfig>& placement_section() {
  using P = PlacementConfig;
  static const Section<P> section("placement", "Placement", {
      choice("mode", &P::mode, kModes, "disjoint (one role per rank) | colocated (every role on every rank)"),
      key("actor", &P::actor, kRankCount, "ranks for the actor (policy); >= 1"),
      key("critic", &P::critic, kRankCount, "ranks for the critic (value model); 0 = no critic"),
      key("reference", &P::reference, kRankCount, "ranks for the frozen reference policy; 0 = none"),
      key("reward", &P::reward, kRankCount, "ranks for the reward model; 0 = none (rule reward)"),
      choice("park", &P::park, kParkings, "colocated: move idle models' parameter and gradient shards to host memory: auto (only when the plan needs it) | always | never"),
  });
  return section;
}

}  // namespace quartet

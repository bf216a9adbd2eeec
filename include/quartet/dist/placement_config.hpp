#pragma once
// The deck's [placement] section: which ranks hold which model (dist/placement.hpp lays it out).
#include "quartet/core/settings.hpp"

namespace quartet {

enum class PlacementMode { disjoint, colocated };
enum class Parking { automatic, always, never };  // placement.park: auto | always | never
const char* name_of(PlacementMode value);
const char* name_of(Parking value);

struct PlacementConfig {  // [placement]
  PlacementMode mode = PlacementMode::disjoint;
  // Ranks per role. -1 = not given: 0 in disjoint mode, every rank in colocated mode.
  int actor = -1, critic = -1, reference = -1, reward = -1;
  // Colocated: whether the idle models' parameter and gradient shards move to host memory
  // while another model works. auto = only when the memory plan does not fit without it.
  Parking park = Parking::automatic;
  // Not a key: whether the layout must give the actor ranks. false for a deck of a stage that
  // trains another role alone (an rm deck, rm.data set: the reward model on every rank); set
  // once every section is loaded (commands/deck_sections.cpp).
  bool needs_actor = true;
};

const Section<PlacementConfig>& placement_section();

}  // namespace quartet

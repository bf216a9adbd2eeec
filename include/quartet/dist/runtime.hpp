#pragma once
// What every command stands on: the deck read and checked, the device chosen, the placement
// laid out, the watchdog running and the model groups with their collective backends. Start-up
// happens in two agreed steps, so a bad deck or an impossible layout ends every rank cleanly
// (exit status 2) before any NCCL or GPU work.
#include <memory>
#include <string>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/groups.hpp"
#include "quartet/dist/placement.hpp"
#include "quartet/dist/watchdog.hpp"
#include "quartet/dist/world.hpp"

namespace quartet {

struct Runtime {
  const World& world;
  Config config;
  torch::Device device;
  Placement placement;
  Backend backend = Backend::mpi;  // resolved: nccl or mpi
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<ModelGroups> groups;
};

// Collective over the world. Returns nullptr when any rank refused the deck or the layout
// (the reason is already printed); every rank then returns the same.
// `sections`: the sections the deck may hold (commands/deck_sections.hpp).
std::unique_ptr<Runtime> start_runtime(const World& world, const std::string& deck_path,
                                       const std::vector<std::string>& overrides, const DeckSections& sections);

}  // namespace quartet

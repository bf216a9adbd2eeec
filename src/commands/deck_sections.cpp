#include "quartet/commands/deck_sections.hpp"

#include "quartet/core/kernels_config.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/placement_config.hpp"
#include "quartet/engine/checkpoint_config.hpp"
#include "quartet/engine/profile_config.hpp"
#include "quartet/model/models_config.hpp"
#include "quartet/model/rollout_config.hpp"
#include "quartet/rl/algorithm_config.hpp"
#include "quartet/rl/eval_config.hpp"
#include "quartet/rl/output_config.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"
#include "quartet/rl/rewards/reward_config.hpp"
#include "quartet/shard/train_config.hpp"
#include "quartet/tune/dpo_config.hpp"
#include "quartet/tune/rm_config.hpp"
#include "quartet/tune/sft_config.hpp"

namespace quartet {

namespace {

// What the sections say together: which stage the deck is for (a set [sft], [rm] or [dpo] data
// key), and so whether the layout must give the actor ranks (an rm deck trains the reward alone).
void finish(Config& config) {
  RunConfig& run = config.edit<RunConfig>();
  const std::pair<const char*, bool> stages[] = {{"sft", config.get<SftConfig>().enabled()},
                                                 {"rm", config.get<RmConfig>().enabled()},
                                                 {"dpo", config.get<DpoConfig>().enabled()}};
  for (const auto& [stage, set] : stages)
    if (set) run.stages.push_back(stage);
  config.edit<PlacementConfig>().needs_actor = !run.is_stage("rm");
}

}  // namespace

const DeckSections& deck_sections() {
  static const DeckSections sections(
      {&run_section(), &checkpoint_section(), &placement_section(), &dist_section(), &models_section(),
       &reward_call_section(), &train_section(), &algorithm_section(), &output_section(), &rollout_section(),
       &eval_section(), &kernels_section(), &profile_section(), &reward_section(), &sft_section(), &dpo_section(),
       &rm_section()},
      finish);
  return sections;
}

const boost::program_options::options_description& deck_schema() { return deck_sections().schema(); }

Config load_config(const Deck& deck) { return deck_sections().load(deck); }

}  // namespace quartet

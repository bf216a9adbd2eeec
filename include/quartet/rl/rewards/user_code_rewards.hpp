#pragma once
// The kinds of reward that run the user's own code (core/reward_kind.hpp):
//   command:<command line>                 rl/rewards/reward_program.hpp (a program per actor rank)
//   http://... | https://... | http:<URL>   rl/rewards/reward_endpoint.hpp (an HTTP endpoint)
#include <memory>

#include "quartet/core/reward_kind.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"
#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

// Starts the program or connects to the endpoint of a command or http kind (quartet::Error when
// it cannot); call it on the ranks that score, once for the run.
std::unique_ptr<RewardFunction> make_user_code_reward(const RewardKind& kind, const RewardCallConfig& call);

}  // namespace quartet

#pragma once
// The kinds of reward that run the user's own code, as model.reward.kind spells them:
//   command:<command line>                 rl/rewards/reward_program.hpp (a program per actor rank)
//   http://... | https://... | http:<URL>   rl/rewards/reward_endpoint.hpp (an HTTP endpoint)
#include <memory>
#include <string>

#include "quartet/core/config.hpp"
#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

bool is_user_code_reward(const std::string& kind);
// The endpoint's URL of an http kind: "http://h/x" and "http:http://h/x" are both "http://h/x".
std::string reward_endpoint_url(const std::string& kind);
// Starts the program or connects to the endpoint (quartet::Error when it cannot); call it on the
// ranks that score, once for the run.
std::unique_ptr<RewardFunction> make_user_code_reward(const std::string& kind, const RewardCallConfig& call);

}  // namespace quartet

#include "quartet/rl/rewards/user_code_rewards.hpp"

#include "quartet/core/check.hpp"
#include "quartet/rl/rewards/reward_endpoint.hpp"
#include "quartet/rl/rewards/reward_program.hpp"

namespace quartet {

std::unique_ptr<RewardFunction> make_user_code_reward(const RewardKind& kind, const RewardCallConfig& call) {
  QUARTET_CHECK(kind.is_user_code(), "'" + kind.text + "' is not a command: or http: reward kind");
  if (kind.type == RewardKind::Type::command) return start_reward_program(kind.argument, call);
  return connect_reward_endpoint(kind.argument, call);
}

}  // namespace quartet

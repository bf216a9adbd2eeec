#include "quartet/rl/rewards/user_code_rewards.hpp"

#include "quartet/core/check.hpp"
#include "quartet/rl/rewards/reward_endpoint.hpp"
#include "quartet/rl/rewards/reward_program.hpp"

namespace quartet {

namespace {
const std::string kCommand = "command:", kHttp = "http:", kHttps = "https:";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
}  // namespace

bool is_user_code_reward(const std::string& kind) {
  return starts_with(kind, kCommand) || starts_with(kind, kHttp) || starts_with(kind, kHttps);
}

std::string reward_endpoint_url(const std::string& kind) {
  // "http://..." is a URL as it stands; after "http:" anything else is the URL ("http:https://...").
  if (starts_with(kind, "http://") || starts_with(kind, "https://")) return kind;
  if (starts_with(kind, kHttp)) return kind.substr(kHttp.size());
  return kind;
}

std::unique_ptr<RewardFunction> make_user_code_reward(const std::string& kind, const RewardCallConfig& call) {
  if (starts_with(kind, kCommand)) return start_reward_program(kind.substr(kCommand.size()), call);
  QUARTET_CHECK(is_user_code_reward(kind), "'" + kind + "' is not a command: or http: reward kind");
  return connect_reward_endpoint(reward_endpoint_url(kind), call);
}

}  // namespace quartet

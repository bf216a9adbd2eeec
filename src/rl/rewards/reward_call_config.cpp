#include "quartet/rl/rewards/reward_call_config.hpp"

#include "quartet/core/units.hpp"

namespace quartet {

const Section<RewardCallConfig>& reward_call_section() {
  using C = RewardCallConfig;
  static const Section<C> section("model.reward", "Rewards in your own code (model.reward)", {
      key("timeout", &C::timeout, above(0.0, "seconds"), "command: and http: rewards: seconds one batch may take (the program's reply, or one HTTP attempt), > 0; past it the run stops with an error"),
      key("start_timeout", &C::start_timeout, above(0.0, "seconds"), "command: seconds the program may take to start and answer its first, empty request (> 0)"),
      key("retries", &C::retries, at_least(0), "http: further attempts after a connection error (refused, reset, closed without a response), >= 0; a timeout or an HTTP error status is not retried"),
      key("retry_delay", &C::retry_delay, at_least(0.0, "seconds"), "http: seconds before the first retry, doubled for each next one (>= 0)"),
      parsed<C, std::uint64_t>("max_reply", &C::max_reply, "64MiB", parse_bytes, "bytes one reply may hold (a command: line, an http: body), e.g. 64MiB; past it the run stops, naming the program or endpoint, before the reply fills the memory"),
  });
  return section;
}

}  // namespace quartet

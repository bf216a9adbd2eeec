#pragma once
// model.reward's keys for a reward in the user's own code (model.reward.kind or a term of
// reward.terms being command:... or http(s)://...): its deadlines and retries
// (rl/rewards/reward_program.hpp, rl/rewards/reward_endpoint.hpp).
#include <cstdint>

#include "quartet/core/settings.hpp"

namespace quartet {

struct RewardCallConfig {
  double timeout = 60;         // seconds one batch may take: the program's reply, one HTTP attempt
  double start_timeout = 300;  // command: seconds to start and answer the first, empty request
  int retries = 3;             // http: further attempts after a connection error
  double retry_delay = 1;      // http: seconds before the first retry, doubled for each next one
  std::uint64_t max_reply = 64ull << 20;  // bytes one reply may hold (a line, or an HTTP body)
};

const Section<RewardCallConfig>& reward_call_section();

}  // namespace quartet

#pragma once
// model.reward.kind = http://HOST[:PORT]/PATH (or https://, or http:<URL>): a reward served over
// HTTP, as OpenRLHF's remote reward models are. Each actor rank POSTs its batch as one JSON body
// (OpenRLHF's "query", "prompts" and "labels", plus quartet's "samples": rl/rewards/reward_protocol.hpp)
// and reads {"rewards": [...]} or {"scores": [...]} back, through libcurl (core/http_client.hpp).
//
// When the run starts, each actor rank connects once (no request) so that an endpoint that does
// not listen is refused before any model is built. Connection errors (refused, reset, closed
// without a response) are retried model.reward.retries times, the first after
// model.reward.retry_delay seconds and each next after twice as long; a timeout
// (model.reward.timeout per attempt), a status other than 200 (quoted with the first lines of
// its body), a body that is not JSON, or the wrong number of scores or a score that is not a
// finite number (naming its row) is a quartet::Error at once.
#include <memory>
#include <string>

#include "quartet/core/config.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"
#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

// Checks the URL and that something listens there (with the retries above); quartet::Error if not.
std::unique_ptr<RewardFunction> connect_reward_endpoint(const std::string& url, const RewardCallConfig& call,
                                                        const std::string& name = "http");

}  // namespace quartet

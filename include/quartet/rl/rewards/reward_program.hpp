#pragma once
// model.reward.kind = command:<command line>: the user's program as a text reward. Each actor
// rank starts its own copy (core/subprocess.hpp: /bin/sh -c, a process group of its own) when
// the run starts and keeps it for the whole run; every batch is one request line on its stdin
// and one reply line on its stdout (rl/rewards/reward_protocol.hpp; docs/reward-programs.md).
//
// The first request carries no samples (id 0): the program's reply says it is up, within
// model.reward.start_timeout, before any model is built. Each later batch must be answered within
// model.reward.timeout. Whatever goes wrong - the program exits or is killed, closes a pipe,
// replies with something other than one JSON object with the request's id and one finite score
// per sample, reports an error, or misses the deadline - it is killed and reaped, and score()
// throws a quartet::Error that names the program, the row at fault (or the batch's rows) and
// the program's last lines on stderr. An error on one rank ends the job (src/main.cpp), so no
// other rank waits for it.
#include <memory>
#include <string>

#include "quartet/core/config.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"
#include "quartet/rl/rewards/reward_function.hpp"

namespace quartet {

// Starts `command` and waits for its answer to the empty first request; a quartet::Error when
// it does not come (the program exited, said something else, or took longer than
// call.start_timeout). `name` is the reward's name in the metrics.
std::unique_ptr<RewardFunction> start_reward_program(const std::string& command, const RewardCallConfig& call,
                                                     const std::string& name = "command");

}  // namespace quartet

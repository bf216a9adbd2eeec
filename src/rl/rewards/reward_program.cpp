#include "quartet/rl/rewards/reward_program.hpp"

#include <cstdio>

#include "quartet/core/check.hpp"
#include "quartet/core/subprocess.hpp"
#include "quartet/core/units.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"
#include "quartet/rl/rewards/reward_protocol.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

// After a closed pipe: how long the program may take to finish exiting by itself, so that its
// own exit status (and its last words on stderr) are what the error reports, not quartet's kill.
constexpr double kExitGraceSeconds = 2.0;

class RewardProgram : public RewardFunction {
 public:
  RewardProgram(const std::string& command, const RewardCallConfig& call, std::string name)
      : call_(call), name_(std::move(name)), who_("reward program '" + command + "' (model.reward.kind)"),
        process_(std::make_unique<Subprocess>(command)) {
    exchange({}, call_.start_timeout, "its first, empty request (id 0)", "model.reward.start_timeout");
  }

  std::string name() const override { return name_; }

  std::vector<double> score(const std::vector<RewardSample>& batch) override {
    QUARTET_CHECK(process_, who_ + " was stopped by an earlier error");
    if (batch.empty()) return {};
    return exchange(batch, call_.timeout, "the batch of " + batch_rows(batch), "model.reward.timeout");
  }

 private:
  // One request and its reply, checked; on any failure the program is stopped and an Error
  // thrown. `what` names the request, `key` the deadline's deck key.
  std::vector<double> exchange(const std::vector<RewardSample>& batch, double timeout, const std::string& what,
                               const char* key) {
    const int64_t id = next_id_++;
    const Subprocess::Reply reply =
        process_->exchange(program_request(id, batch), timeout, static_cast<std::size_t>(call_.max_reply));
    if (reply.outcome == Subprocess::Outcome::too_long)
      stop("answered " + what + " with more than " + bytes_text(call_.max_reply) +
               " before the end of its reply line (model.reward.max_reply), which begins:" + quoted_lines(reply.line, 1) +
               "\n  (a reply is one line of JSON ending in a newline)",
           0);
    if (reply.outcome == Subprocess::Outcome::timed_out) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout);
      stop("did not answer " + what + " within " + seconds + " s (" + key +
               "), so quartet killed it (a program must flush its stdout after each reply: in Python "
               "print(..., flush=True))",
           0);
    }
    if (reply.outcome == Subprocess::Outcome::closed)
      stop("closed its pipes before answering " + what, kExitGraceSeconds);
    json parsed;
    try {
      parsed = json::parse(reply.line);
    } catch (const json::exception& e) {
      const std::string nonfinite = nonfinite_in_reply(reply.line, batch);
      if (!nonfinite.empty())
        stop("answered " + what + " with " + nonfinite + ", which JSON does not have (Python's json.dumps writes " +
                 "NaN and Infinity for float('nan') and float('inf')): give each row a finite score",
             0);
      stop("answered " + what + " with a line that is not JSON (" + json_reason(e) + "):" + quoted_lines(reply.line, 3) +
               "\n  (stdout is for replies alone: write anything else to stderr)",
           0);
    }
    if (!parsed.is_object()) stop("answered " + what + " with " + parsed.dump().substr(0, 200) + ", not an object", 0);
    if (!parsed.contains("id") || parsed["id"] != json(id))
      stop("answered " + what + " with id " + (parsed.contains("id") ? parsed["id"].dump() : std::string("(none)")) +
               " where " + std::to_string(id) + " was expected",
           0);
    if (parsed.contains("error"))
      stop("reported an error for " + what + ": " +
               (parsed["error"].is_string() ? parsed["error"].get<std::string>() : parsed["error"].dump()),
           0);
    if (!parsed.contains("scores")) stop("answered " + what + " without \"scores\"", 0);
    try {
      return scores_from(parsed["scores"], batch, who_);
    } catch (const Error& e) {
      stop_after(e.what());
    }
  }

  // Kills and reaps the program and throws, naming how it ended and its last stderr lines.
  [[noreturn]] void stop(const std::string& problem, double grace_seconds) {
    const std::string ended = process_->kill_and_reap(grace_seconds);
    const std::string tail = process_->stderr_tail();
    process_.reset();
    fail(__FILE__, __LINE__, who_ + " " + problem + "; the program " + ended + "; its last lines on stderr:" +
                                 quoted_lines(tail, Subprocess::kTailLines, Subprocess::kTailLineBytes));
  }
  // The same for an error already worded (scores_from's, which names the row).
  [[noreturn]] void stop_after(const std::string& message) {
    process_->kill_and_reap(0);
    const std::string tail = process_->stderr_tail();
    process_.reset();
    throw Error(message + "; the program was stopped; its last lines on stderr:" +
                quoted_lines(tail, Subprocess::kTailLines, Subprocess::kTailLineBytes));
  }

  RewardCallConfig call_;
  std::string name_, who_;
  std::unique_ptr<Subprocess> process_;
  int64_t next_id_ = 0;
};

}  // namespace

std::unique_ptr<RewardFunction> start_reward_program(const std::string& command, const RewardCallConfig& call,
                                                     const std::string& name) {
  return std::make_unique<RewardProgram>(command, call, name);
}

}  // namespace quartet

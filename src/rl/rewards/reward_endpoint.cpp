#include "quartet/rl/rewards/reward_endpoint.hpp"

#include <chrono>
#include <thread>

#include "quartet/core/check.hpp"
#include "quartet/core/http_client.hpp"
#include "quartet/core/units.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"
#include "quartet/rl/rewards/reward_protocol.hpp"

namespace quartet {

namespace {

using json = nlohmann::json;

class RewardEndpoint : public RewardFunction {
 public:
  RewardEndpoint(const std::string& url, const RewardCallConfig& call, std::string name)
      : call_(call), name_(std::move(name)), who_("reward endpoint " + url + " (model.reward.kind)"), client_(url) {
    with_retries("connecting", [&] { client_.probe(call_.timeout); });
  }

  std::string name() const override { return name_; }

  std::vector<double> score(const std::vector<RewardSample>& batch) override {
    if (batch.empty()) return {};
    const std::string body = endpoint_request(batch);
    HttpResponse response;
    with_retries("POST", [&] { response = client_.post_json(body, call_.timeout, static_cast<std::size_t>(call_.max_reply)); });
    const std::string what = "the batch of " + batch_rows(batch);
    if (response.too_large)
      fail(__FILE__, __LINE__, who_ + " answered " + what + " with a body of more than " + bytes_text(call_.max_reply) +
                                   " (model.reward.max_reply): quartet stopped reading it; it begins:" +
                                   quoted_lines(response.body, 2));
    if (response.status != 200)
      fail(__FILE__, __LINE__, who_ + " answered " + what + " with HTTP status " + std::to_string(response.status) +
                                   "; the first lines of its body:" + quoted_lines(response.body, 5));
    json parsed;
    try {
      parsed = json::parse(response.body);
    } catch (const json::exception& e) {
      const std::string nonfinite = nonfinite_in_reply(response.body, batch);
      if (!nonfinite.empty())
        fail(__FILE__, __LINE__, who_ + " answered " + what + " with " + nonfinite +
                                     ", which JSON does not have (Python's json.dumps writes NaN and Infinity for "
                                     "float('nan') and float('inf')): give each row a finite score");
      fail(__FILE__, __LINE__, who_ + " answered " + what + " with a body that is not JSON (" + json_reason(e) +
                                   "):" + quoted_lines(response.body, 5));
    }
    // OpenRLHF reads "rewards"; "scores" is the command: protocol's word.
    const char* key = parsed.is_object() && parsed.contains("rewards") ? "rewards" : "scores";
    if (!parsed.is_object() || !parsed.contains(key))
      fail(__FILE__, __LINE__, who_ + " answered " + what + " without \"rewards\" or \"scores\":" +
                                   quoted_lines(response.body, 5));
    return scores_from(parsed[key], batch, who_);
  }

 private:
  // `attempt` again after connection errors, up to call_.retries more times with doubling waits.
  template <class F>
  void with_retries(const char* doing, F attempt) {
    double delay = call_.retry_delay;
    for (int tries = 0;; ++tries) {
      try {
        attempt();
        return;
      } catch (const HttpTransportError& e) {
        if (!e.connection() || tries == call_.retries)
          fail(__FILE__, __LINE__, who_ + ": " + doing + " failed" +
                                       (e.connection() ? " after " + std::to_string(tries) + " retries (model.reward.retries)"
                                                       : std::string(" (not retried: only connection errors are)")) +
                                       ": " + e.what());
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
      delay *= 2;
    }
  }

  RewardCallConfig call_;
  std::string name_, who_;
  HttpClient client_;
};

}  // namespace

std::unique_ptr<RewardFunction> connect_reward_endpoint(const std::string& url, const RewardCallConfig& call,
                                                        const std::string& name) {
  return std::make_unique<RewardEndpoint>(url, call, name);
}

}  // namespace quartet

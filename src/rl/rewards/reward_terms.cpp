#include "quartet/rl/rewards/reward_terms.hpp"

#include <torch/types.h>

#include <cmath>

#include "quartet/core/check.hpp"
#include "quartet/rl/rewards/format_reward.hpp"
#include "quartet/rl/rewards/match_answer.hpp"
#include "quartet/rl/rewards/math_answer.hpp"
#include "quartet/rl/rewards/reward_samples.hpp"
#include "quartet/rl/rewards/rule_rewards.hpp"
#include "quartet/rl/rewards/user_code_rewards.hpp"

namespace quartet {

namespace {

// A built-in rule as a text reward: it works the answer out from the prompt text.
class RuleRewardFunction : public RewardFunction {
 public:
  explicit RuleRewardFunction(std::unique_ptr<RuleReward> rule) : rule_(std::move(rule)) {}
  std::string name() const override { return "rule_" + rule_->name(); }
  std::vector<double> score(const std::vector<RewardSample>& batch) override {
    std::vector<double> out;
    out.reserve(batch.size());
    for (const RewardSample& s : batch) out.push_back(rule_->score(s.prompt, s.completion));
    return out;
  }

 private:
  std::unique_ptr<RuleReward> rule_;
};

// The factory's rows: a kind's name (before any ':'), what it makes.
struct Kind {
  const char* name;
  std::unique_ptr<RewardFunction> (*make)(const std::string& argument, const Config& config);
};
const Kind kKinds[] = {
    {"rule", [](const std::string& task, const Config&) -> std::unique_ptr<RewardFunction> {
       return std::make_unique<RuleRewardFunction>(make_rule_reward(task));
     }},
    {"math", [](const std::string&, const Config& c) -> std::unique_ptr<RewardFunction> {
       return std::make_unique<MathAnswerReward>(c.rewards);
     }},
    {"match", [](const std::string&, const Config& c) -> std::unique_ptr<RewardFunction> {
       return std::make_unique<ExactMatchReward>(c.rewards);
     }},
    {"regex", [](const std::string&, const Config& c) -> std::unique_ptr<RewardFunction> {
       return std::make_unique<RegexMatchReward>(c.rewards);
     }},
    {"format", [](const std::string&, const Config& c) -> std::unique_ptr<RewardFunction> {
       return std::make_unique<FormatReward>(c.rewards);
     }},
    {"command", [](const std::string& command, const Config& c) -> std::unique_ptr<RewardFunction> {
       return make_user_code_reward("command:" + command, c.reward.call);
     }},
    {"http", [](const std::string& url, const Config& c) -> std::unique_ptr<RewardFunction> {
       return make_user_code_reward("http:" + url, c.reward.call);
     }},
    {"https", [](const std::string& url, const Config& c) -> std::unique_ptr<RewardFunction> {
       return make_user_code_reward("https:" + url, c.reward.call);
     }},
};

// The kinds whose name takes an argument after ':'.
bool takes_argument(const std::string& head) {
  return head == "rule" || head == "command" || head == "http" || head == "https";
}

std::string kind_list() {
  std::string list = "model";
  for (const Kind& k : kKinds) {
    const std::string name = k.name;
    list += ", " + name + (name == "rule" ? ":<task>" : name == "command" ? ":<command line>" : takes_argument(name) ? "://..." : "");
  }
  return list;
}

}  // namespace

std::unique_ptr<RewardFunction> make_reward_function(const std::string& kind, const Config& config,
                                                     const std::string& key) {
  const size_t colon = kind.find(':');
  const std::string head = kind.substr(0, colon), argument = colon == std::string::npos ? "" : kind.substr(colon + 1);
  for (const Kind& k : kKinds) {
    if (head != k.name) continue;
    const bool argument_given = colon != std::string::npos && colon + 1 < kind.size();
    if (takes_argument(head) != argument_given)
      config.deck.fail(key, "names '" + kind + "': " + (takes_argument(head) ? head + " needs what follows its ':' (" + kind_list() + ")"
                                                                           : head + " takes no ':' argument"));
    try {
      return k.make(argument, config);
    } catch (const DeckError&) {
      throw;
    } catch (const Error& e) {
      config.deck.fail(key, "names '" + kind + "', which cannot be made: " + e.what());
    }
  }
  config.deck.fail(key, "names '" + kind + "', which is not a reward kind (known: " + kind_list() + ")");
}

// A term of `kind`: the reward model's score ("model"), a built-in text reward made now, or the
// user's code, its spelling checked now and started by start_user_code.
RewardTerms::Term RewardTerms::make_term(const std::string& kind, double weight, const Config& config,
                                        const std::string& key) {
  Term term{kind, weight, kind, nullptr};
  if (kind == "model") return term;
  if (is_user_code_reward(kind)) {
    term.name = kind.rfind("command:", 0) == 0 ? "command" : "http";
    const size_t colon = kind.find(':');
    if (colon + 1 >= kind.size()) config.deck.fail(key, "names '" + kind + "' with nothing after its ':'");
    return term;
  }
  term.function = make_reward_function(kind, config, key);
  term.name = term.function->name();
  return term;
}

void RewardTerms::start_user_code(const RewardCallConfig& call) {
  for (Term& term : terms_)
    if (is_user_code_reward(term.kind)) term.function = make_user_code_reward(term.kind, call);
}

RewardTerms::RewardTerms(const Config& config, const std::string& kind, const std::string& key)
    : prompt_field_(config.rollout.prompt_field) {
  if (kind == "model") config.deck.fail(key, "names the reward model, which is not a text reward");
  terms_.push_back(make_term(kind, 1.0, config, key));
}

RewardTerms::RewardTerms(const Config& config) : prompt_field_(config.rollout.prompt_field) {
  const RewardConfig& rc = config.rewards;
  if (rc.terms.empty()) {
    // model.reward.kind alone: the reward model's score stands as it comes.
    if (config.reward.kind != "model") terms_.push_back(make_term(config.reward.kind, 1.0, config, "model.reward.kind"));
    return;
  }
  for (size_t t = 0; t < rc.terms.size(); ++t) {
    Term term = make_term(rc.terms[t], rc.weights[t], config, "reward.terms");
    for (const std::string& earlier : logged_)
      if (earlier == term.name) config.deck.fail("reward.terms", "names two terms logged as " + term.name);
    logged_.push_back(term.name);
    terms_.push_back(std::move(term));
  }
}

void RewardTerms::score(Iteration& it) {
  if (terms_.empty()) return;  // the reward model's scores are the total
  Totals t = totals(reward_samples(it, prompt_field_), it.scores);
  it.scores = t.total;
  it.reward_terms = t.terms;
}

RewardTerms::Totals RewardTerms::totals(const std::vector<RewardSample>& samples, const torch::Tensor& model_scores) {
  if (terms_.empty()) return {model_scores, {}};
  const int64_t rows = static_cast<int64_t>(samples.size());
  std::vector<std::vector<double>> columns;
  for (Term& term : terms_) {
    if (term.kind == "model") {
      QUARTET_CHECK(model_scores.defined() && model_scores.numel() == rows,
                    "reward term model: the reward model scored " +
                        std::to_string(model_scores.defined() ? model_scores.numel() : 0) + " of " +
                        std::to_string(rows) + " rows");
      const auto model = model_scores.to(torch::kCPU).to(torch::kFloat64).contiguous();
      columns.emplace_back(model.data_ptr<double>(), model.data_ptr<double>() + rows);
      continue;
    }
    QUARTET_CHECK(term.function, "reward term " + term.name + ": scored before its program started");
    std::vector<double> s = term.function->score(samples);
    QUARTET_CHECK(static_cast<int64_t>(s.size()) == rows, "reward term " + term.name + ": " +
                                                               std::to_string(s.size()) + " scores for " +
                                                               std::to_string(rows) + " rows");
    for (int64_t r = 0; r < rows; ++r)
      QUARTET_CHECK(std::isfinite(s[static_cast<size_t>(r)]),
                    "reward term " + term.name + ": row " + std::to_string(r) + " (prompt \"" +
                        samples[static_cast<size_t>(r)].prompt + "\") scored " + std::to_string(s[static_cast<size_t>(r)]));
    columns.push_back(std::move(s));
  }
  // Summed in double, then made float: a lone term of weight 1 is the total bit for bit.
  std::vector<float> total(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double sum = terms_[0].weight * columns[0][static_cast<size_t>(r)];
    for (size_t t = 1; t < terms_.size(); ++t) sum += terms_[t].weight * columns[t][static_cast<size_t>(r)];
    total[static_cast<size_t>(r)] = static_cast<float>(sum);
  }
  Totals out{torch::tensor(total, torch::kFloat32), {}};
  if (logged_.empty()) return out;
  out.terms = torch::empty({rows, static_cast<int64_t>(terms_.size())}, torch::kFloat64);
  auto a = out.terms.accessor<double, 2>();
  for (int64_t r = 0; r < rows; ++r)
    for (size_t t = 0; t < terms_.size(); ++t) a[r][static_cast<int64_t>(t)] = columns[t][static_cast<size_t>(r)];
  return out;
}

}  // namespace quartet

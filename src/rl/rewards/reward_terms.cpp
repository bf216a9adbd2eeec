#include "quartet/rl/rewards/reward_terms.hpp"

#include <torch/types.h>

#include <cmath>

#include "quartet/core/check.hpp"
#include "quartet/rl/rewards/format_reward.hpp"
#include "quartet/rl/rewards/match_answer.hpp"
#include "quartet/rl/rewards/math_answer.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"
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

// The factory: what each kind of text reward makes.
std::unique_ptr<RewardFunction> make(const RewardKind& kind, const Config& c) {
  using Type = RewardKind::Type;
  switch (kind.type) {
    case Type::rule: return std::make_unique<RuleRewardFunction>(make_rule_reward(kind.argument));
    case Type::math: return std::make_unique<MathAnswerReward>(c.get<RewardConfig>());
    case Type::match: return std::make_unique<ExactMatchReward>(c.get<RewardConfig>());
    case Type::regex: return std::make_unique<RegexMatchReward>(c.get<RewardConfig>());
    case Type::format: return std::make_unique<FormatReward>(c.get<RewardConfig>());
    case Type::command:
    case Type::http: return make_user_code_reward(kind, c.get<RewardCallConfig>());
    case Type::model: break;
  }
  QUARTET_CHECK(false, "reward kind '" + kind.text + "' is the reward model, not a text reward");
}

}  // namespace

std::unique_ptr<RewardFunction> make_reward_function(const RewardKind& kind, const Config& config,
                                                     const std::string& key) {
  try {
    return make(kind, config);
  } catch (const DeckError&) {
    throw;
  } catch (const Error& e) {
    config.deck.fail(key, "names '" + kind.text + "', which cannot be made: " + e.what());
  }
}

// A term of `kind`: the reward model's score ("model"), a built-in text reward made now, or the
// user's code, started by start_user_code.
RewardTerms::Term RewardTerms::make_term(const RewardKind& kind, double weight, const Config& config,
                                        const std::string& key) {
  Term term{kind.type_name(), weight, kind, nullptr};
  if (kind.is_model() || kind.is_user_code()) return term;
  term.function = make_reward_function(kind, config, key);
  term.name = term.function->name();
  return term;
}

void RewardTerms::start_user_code(const RewardCallConfig& call) {
  for (Term& term : terms_)
    if (term.kind.is_user_code()) term.function = make_user_code_reward(term.kind, call);
}

RewardTerms::RewardTerms(const Config& config, const RewardKind& kind, const std::string& key)
    : prompt_field_(config.get<RolloutConfig>().prompt_field) {
  if (kind.is_model()) config.deck.fail(key, "names the reward model, which is not a text reward");
  terms_.push_back(make_term(kind, 1.0, config, key));
}

RewardTerms::RewardTerms(const Config& config) : prompt_field_(config.get<RolloutConfig>().prompt_field) {
  const RewardConfig& rc = config.get<RewardConfig>();
  if (rc.terms.empty()) {
    // model.reward.kind alone: the reward model's score stands as it comes.
    const RewardKind& kind = config.get<ModelsConfig>().reward.kind;
    if (!kind.is_model()) terms_.push_back(make_term(kind, 1.0, config, "model.reward.kind"));
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
    if (term.kind.is_model()) {
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

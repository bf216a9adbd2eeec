#include "quartet/rl/reward_terms.hpp"

#include <torch/torch.h>

#include <cmath>

#include "quartet/core/check.hpp"
#include "quartet/rl/format_reward.hpp"
#include "quartet/rl/match_answer.hpp"
#include "quartet/rl/math_answer.hpp"
#include "quartet/rl/rule_rewards.hpp"

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
};

std::string kind_list() {
  std::string list = "model";
  for (const Kind& k : kKinds) list += std::string(", ") + k.name + (std::string(k.name) == "rule" ? ":<task>" : "");
  return list;
}

}  // namespace

std::unique_ptr<RewardFunction> make_reward_function(const std::string& kind, const Config& config,
                                                     const std::string& key) {
  const size_t colon = kind.find(':');
  const std::string head = kind.substr(0, colon), argument = colon == std::string::npos ? "" : kind.substr(colon + 1);
  for (const Kind& k : kKinds) {
    if (head != k.name) continue;
    if ((head == "rule") != (colon != std::string::npos))
      config.deck.fail(key, "names '" + kind + "': " + (head == "rule" ? "rule needs its task (rule:<task>)"
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

std::vector<RewardSample> reward_samples(const Iteration& it, const std::string& prompt_field) {
  std::vector<RewardSample> out(it.completions.size());
  for (size_t r = 0; r < out.size(); ++r) {
    RewardSample& s = out[r];
    s.prompt = r < it.prompts.size() ? it.prompts[r] : "";
    s.completion = it.completions[r];
    s.row = static_cast<int64_t>(r);
    const std::string record = r < it.records.size() ? it.records[r] : "";
    nlohmann::json row = record.empty() ? nlohmann::json() : nlohmann::json::parse(record, nullptr, false);
    if (row.is_object()) {
      if (row.contains("answer")) s.answer = row["answer"];
      for (const std::string& own : {prompt_field, std::string("prompt"), std::string("answer")}) row.erase(own);
      if (!row.empty()) s.metadata = std::move(row);
    }
    if (s.answer.is_null() && r < it.answers.size() && !it.answers[r].empty()) s.answer = it.answers[r];
  }
  return out;
}

RewardTerms::RewardTerms(const Config& config) : prompt_field_(config.rollout.prompt_field) {
  const RewardConfig& rc = config.rewards;
  if (rc.terms.empty()) {
    // model.reward.kind alone: the reward model's score stands as it comes.
    if (config.reward.kind != "model")
      terms_.push_back({config.reward.kind, 1.0, make_reward_function(config.reward.kind, config, "model.reward.kind")});
    return;
  }
  for (size_t t = 0; t < rc.terms.size(); ++t) {
    Term term{rc.terms[t], rc.weights[t], nullptr};
    if (rc.terms[t] != "model") {
      term.function = make_reward_function(rc.terms[t], config, "reward.terms");
      term.name = term.function->name();
    }
    for (const std::string& earlier : logged_)
      if (earlier == term.name) config.deck.fail("reward.terms", "names two terms logged as " + term.name);
    logged_.push_back(term.name);
    terms_.push_back(std::move(term));
  }
}

void RewardTerms::score(Iteration& it) {
  if (terms_.empty()) return;  // the reward model's scores are the total
  const int64_t rows = static_cast<int64_t>(it.completions.size());
  const std::vector<RewardSample> samples = reward_samples(it, prompt_field_);
  std::vector<std::vector<double>> columns;
  for (Term& term : terms_) {
    if (!term.function) {
      QUARTET_CHECK(it.scores.defined() && it.scores.numel() == rows,
                    "reward term model: the reward model scored " +
                        std::to_string(it.scores.defined() ? it.scores.numel() : 0) + " of " + std::to_string(rows) +
                        " rows");
      const auto model = it.scores.to(torch::kCPU).to(torch::kFloat64).contiguous();
      columns.emplace_back(model.data_ptr<double>(), model.data_ptr<double>() + rows);
      continue;
    }
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
  it.scores = torch::tensor(total, torch::kFloat32);
  if (logged_.empty()) return;
  auto per_term = torch::empty({rows, static_cast<int64_t>(terms_.size())}, torch::kFloat64);
  auto a = per_term.accessor<double, 2>();
  for (int64_t r = 0; r < rows; ++r)
    for (size_t t = 0; t < terms_.size(); ++t) a[r][static_cast<int64_t>(t)] = columns[t][static_cast<size_t>(r)];
  it.reward_terms = per_term;
}

}  // namespace quartet

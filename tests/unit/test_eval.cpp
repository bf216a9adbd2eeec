// Evaluation ([eval]): the pass@k estimator and the metrics against hand-worked cases, and the
// deck's [eval] keys with their refusals.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/rl/eval_config.hpp"
#include "quartet/rl/eval_metrics.hpp"
#include "quartet/rl/prompt_dataset.hpp"
#include "quartet/rl/rewards/rule_rewards.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_eval {

TEST(PassAtK, HandWorked) {
  // n = 5 samples, c = 2 of them pass: pass@k = 1 - C(3, k) / C(5, k).
  EXPECT_DOUBLE_EQ(pass_at_k(5, 2, 1), 1.0 - 3.0 / 5.0);    // = c / n
  EXPECT_DOUBLE_EQ(pass_at_k(5, 2, 2), 1.0 - 3.0 / 10.0);   // C(3,2) = 3, C(5,2) = 10
  EXPECT_NEAR(pass_at_k(5, 2, 3), 1.0 - 1.0 / 10.0, 1e-15);  // C(3,3) = 1, C(5,3) = 10
  EXPECT_DOUBLE_EQ(pass_at_k(5, 2, 4), 1.0);                // n - c = 3 < k: every draw of 4 holds a pass
  EXPECT_DOUBLE_EQ(pass_at_k(5, 2, 5), 1.0);
  // n = 10, c = 3, k = 5: C(7,5) / C(10,5) = 21 / 252 = 1/12.
  EXPECT_NEAR(pass_at_k(10, 3, 5), 11.0 / 12.0, 1e-15);
  EXPECT_DOUBLE_EQ(pass_at_k(8, 0, 4), 0.0);
  EXPECT_DOUBLE_EQ(pass_at_k(8, 8, 1), 1.0);
  EXPECT_DOUBLE_EQ(pass_at_k(1, 1, 1), 1.0);
  // Large n: the product form stays exact where the binomials would overflow a double.
  EXPECT_NEAR(pass_at_k(2000, 1, 1), 1.0 / 2000.0, 1e-15);
  EXPECT_NEAR(pass_at_k(2000, 1000, 2), 1.0 - (1000.0 * 999.0) / (2000.0 * 1999.0), 1e-12);
}

TEST(PassAtK, RefusesImpossibleCounts) {
  for (auto [n, c, k] : {std::array<int64_t, 3>{4, 5, 1}, {4, -1, 1}, {4, 2, 0}, {4, 2, 5}, {0, 0, 1}})
    EXPECT_NE(test::error_of([&] { pass_at_k(n, c, k); }).find("pass_at_k"), std::string::npos)
        << n << " " << c << " " << k;
}

TEST(EvalMetrics, TwoPromptsHandWorked) {
  // Threshold 1.0, n = 4 samples, pass@1, @2, @4.
  EvalMetrics m(20, 4, {1, 2, 4});
  // Prompt A: greedy right; 2 of 4 samples right: pass@2 = 1 - C(2,2)/C(4,2) = 5/6.
  m.add_prompt(1.0, 3, {1.0, 0.5, 1.0, 0.2}, {3, 4, 3, 5}, 1.0);
  // Prompt B: greedy wrong; 1 of 4 right: pass@2 = 1 - C(3,2)/C(4,2) = 1/2.
  m.add_prompt(0.4, 2, {0.0, 0.0, 0.0, 1.0}, {1, 1, 1, 3}, 1.0);
  m.reduce(test::world().comm());  // one rank: the sums stay
  const auto v = m.named();
  EXPECT_DOUBLE_EQ(v.at("prompts"), 2);
  EXPECT_DOUBLE_EQ(v.at("samples"), 4);
  EXPECT_DOUBLE_EQ(v.at("greedy_pass@1"), 0.5);
  EXPECT_DOUBLE_EQ(v.at("greedy_reward"), 0.7);
  EXPECT_DOUBLE_EQ(v.at("greedy_length"), 2.5);
  EXPECT_DOUBLE_EQ(v.at("pass@1"), (0.5 + 0.25) / 2);
  EXPECT_NEAR(v.at("pass@2"), (5.0 / 6.0 + 0.5) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(v.at("pass@4"), 1.0);
  EXPECT_NEAR(v.at("sample_reward"), (2.7 / 4 + 1.0 / 4) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(v.at("sample_length"), (15.0 / 4 + 6.0 / 4) / 2);
  EXPECT_EQ(v.size(), 10u);  // pass@1 once, though k lists 1
  const std::string line = m.log_line(200);
  EXPECT_EQ(line.rfind("eval  20/200 | greedy pass@1 0.500 reward 0.700 len 2.5 | 4 samples pass@1 0.375 pass@2 0.667 "
                       "pass@4 1.000 reward 0.463 len 2.6 | 2 prompts", 0),
            0u)
      << line;
}

TEST(EvalMetrics, GreedyOnlyAndThreshold) {
  EvalMetrics m(0, 0, {});
  m.add_prompt(0.75, 4, {}, {}, 0.7);  // passes at threshold 0.7
  m.add_prompt(0.69, 4, {}, {}, 0.7);
  const auto v = m.named();
  EXPECT_DOUBLE_EQ(v.at("greedy_pass@1"), 0.5);
  EXPECT_EQ(v.count("pass@1"), 0u);
  EXPECT_EQ(v.size(), 4u);
  EXPECT_NE(test::error_of([&] { m.add_prompt(1, 1, {1.0}, {1.0}, 1.0); }).find("expected 0"), std::string::npos);
}

namespace {

std::string held_out() {
  return std::string(std::getenv("QUARTET_SOURCE_DIR")) + "/inputs/prompts/sort_digits_heldout.jsonl";
}

Config parse(const std::string& eval_keys) {
  const std::string deck = "[rollout]\nmax_new_tokens = 8\nprompt_field = question\n[eval]\n" + eval_keys;
  return load_config(Deck("test.deck", deck, {}, deck_schema()));
}

std::string error_of(const std::string& eval_keys) {
  try {
    parse(eval_keys);
  } catch (const DeckError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(EvalDeck, DefaultsAndTypedKeys) {
  ASSERT_NE(std::getenv("QUARTET_SOURCE_DIR"), nullptr) << "ctest sets QUARTET_SOURCE_DIR";
  EXPECT_FALSE(parse("").get<EvalConfig>().enabled());
  const EvalConfig e = parse("prompts = " + held_out() + "\nsamples = 8\nk = 8, 2,4,2\nevery = 10\n").get<EvalConfig>();
  EXPECT_TRUE(e.enabled());
  EXPECT_EQ(e.prompt_field, "question");  // the rollout's
  EXPECT_EQ(e.every, 10);
  EXPECT_TRUE(e.at_end);
  EXPECT_FALSE(e.at_start);
  EXPECT_EQ(e.count, 0);
  EXPECT_EQ(e.max_new_tokens, 8);  // the rollout's
  EXPECT_EQ(e.k, (std::vector<int>{2, 4, 8}));
  EXPECT_DOUBLE_EQ(e.temperature, 1.0);
  EXPECT_DOUBLE_EQ(e.pass_threshold, 1.0);
}

TEST(EvalDeck, RefusalsNameTheKeyAndLine) {
  const std::string p = "prompts = " + held_out() + "\n";
  EXPECT_NE(error_of("every = 5\n").find("test.deck:5: eval.every is set, but eval.prompts is not"), std::string::npos)
      << error_of("every = 5\n");
  EXPECT_EQ(error_of("every = 0\nat_end = true\ntemperature = 1\n"), "<no error>");  // defaults, as a resolved deck has them
  EXPECT_NE(error_of("prompts = /no/such/file.jsonl\n").find("eval.prompts is '/no/such/file.jsonl', which is not a "
                                                             "readable file"),
            std::string::npos);
  EXPECT_NE(error_of(p + "samples = 4\nk = 1, 5\n").find("eval.k asks for pass@5, which needs eval.samples >= 5"),
            std::string::npos);
  EXPECT_NE(error_of(p + "k = 1\n").find("eval.samples >= 1 (it is 0)"), std::string::npos);
  EXPECT_NE(error_of(p + "samples = 4\nk = 2x\n").find("eval.k holds '2x'"), std::string::npos);
  EXPECT_NE(error_of(p + "samples = 4\nk = 0\n").find("eval.k holds '0'"), std::string::npos);
  EXPECT_NE(error_of(p + "max_new_tokens = 9\n").find("eval.max_new_tokens is 9, more than rollout.max_new_tokens = 8"),
            std::string::npos);
  EXPECT_NE(error_of(p + "temperature = 0\n").find("eval.temperature must be > 0"), std::string::npos);
  EXPECT_NE(error_of(p + "every = -1\n").find("eval.every must be >= 0"), std::string::npos);
  EXPECT_NE(error_of(p + "at_end = false\n").find("the run would never evaluate"), std::string::npos);
  EXPECT_NE(error_of(p + "pass_threshold = nan\n").find("eval.pass_threshold is nan: expected a finite number"),
            std::string::npos);
}

// inputs/prompts/sort_digits_heldout.jsonl, the demo's held-out prompts: the first 64 distinct
// prompts of make_prompts(256, seed 3) that the training file (make_prompts(512, seed 1)) lacks.
TEST(EvalPrompts, HeldOutFileIsDisjointFromTraining) {
  const char* src = std::getenv("QUARTET_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "ctest sets QUARTET_SOURCE_DIR";
  auto rule = make_rule_reward("sort_digits");
  const auto training = rule->make_prompts(512, 1);
  std::set<std::string> seen(training.begin(), training.end());
  std::string want;
  int taken = 0;
  for (const auto& p : rule->make_prompts(256, 3)) {
    if (taken == 64 || !seen.insert(p).second) continue;
    want += "{\"prompt\": \"" + p + "\", \"answer\": \"" + rule->answer(p) + "\"}\n";
    ++taken;
  }
  ASSERT_EQ(taken, 64);
  const std::string path = held_out();
  std::ifstream in(path, std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), want) << path << " is not the held-out draw described above";
  auto tok = make_builtin_tokenizer();
  PromptDataset ds(path, "prompt", tok.get(), 16);
  ASSERT_EQ(ds.size(), 64);
  for (int64_t i = 0; i < ds.size(); ++i) EXPECT_EQ(ds.get(i).answer, rule->answer(ds.get(i).text));
}

}  // namespace test_eval

// The answer-checked rewards on tables of answers as GSM8K, MATH and models write them (the math
// checker's extraction and equality, exact and regex matching, the format reward), the [reward]
// deck section, and several rewards at once: the weighted total, each term's metric.
#include <gtest/gtest.h>

#include <torch/types.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/rl/algorithm_config.hpp"
#include "quartet/rl/iteration_metrics.hpp"
#include "quartet/rl/prompt_dataset.hpp"
#include "quartet/rl/rewards/format_reward.hpp"
#include "quartet/rl/rewards/match_answer.hpp"
#include "quartet/rl/rewards/math_answer.hpp"
#include "quartet/rl/rewards/reward_samples.hpp"
#include "quartet/rl/rewards/reward_terms.hpp"
#include "quartet/rl/rewards/rule_rewards.hpp"
#include "test_main.hpp"

using namespace quartet;
using quartet::test::error_of;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_rewards {

namespace {

Config config_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return load_config(Deck("rewards.deck", text, overrides, deck_schema()));
}

std::string deck_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    config_of(text, overrides);
  } catch (const DeckError& e) {
    return e.what();
  }
  return "<no error>";
}

// GSM8K's answer field: the worked solution, then "#### N" (rows of the test split).
const char* kJanet =
    "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
    "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer\xE2\x80\x99s market.\n#### 18";
const char* kNatalia =
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72";
const char* kWeng =
    "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\n"
    "Working 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10";
// MATH's solution field: the answer in the last \boxed{...}.
const char* kPolar =
    "We have that $r = \\sqrt{0^2 + 3^2} = 3.$  Also, if we draw the line connecting the origin and $(0,3),$ "
    "this line makes an angle of $\\frac{\\pi}{2}$ with the positive $x$-axis.\n\nTherefore, the polar "
    "coordinates are $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$";
const char* kFourteenThirds =
    "$f(-2)+f(-1)+f(0)=\\frac{3(-2)-2}{-2-2}+\\frac{3(-1)-2}{-1-2}+\\frac{3(0)-2}{0-2}=\\frac{-8}{-4}+"
    "\\frac{-5}{-3}+\\frac{-2}{-2}=2+\\frac{5}{3}+1=\\boxed{\\frac{14}{3}}$";

}  // namespace

// ---- the math checker ---------------------------------------------------------------------------

TEST(MathAnswer, ReferenceAnswers) {
  struct Row {
    std::string answer, expected;
  } rows[] = {
      {kJanet, "18"},
      {kNatalia, "72"},
      {kWeng, "10"},
      {"#### 1,600", "1,600"},
      {"#### -3", "-3"},
      {kPolar, "\\left( 3, \\frac{\\pi}{2} \\right)"},
      {kFourteenThirds, "\\frac{14}{3}"},
      {"72", "72"},
      {"  \\frac{3}{4} ", "\\frac{3}{4}"},
  };
  for (const Row& r : rows) EXPECT_EQ(reference_final_answer(r.answer), r.expected) << r.answer;
}

TEST(MathAnswer, FinalAnswersOfCompletions) {
  struct Row {
    std::string completion;
    std::optional<std::string> expected;
  } rows[] = {
      // GSM8K's own form, as a fine-tuned model writes it.
      {"Janet sells 16 - 3 - 4 = 9 duck eggs a day.\nShe makes 9 * 2 = $18 every day.\n#### 18", "18"},
      {"#### $1,080", "$1,080"},
      {"First try #### 5\nNo, recount: #### 6", "6"},
      // \boxed, nested braces, the last one.
      {"Thus, $x-p=\\boxed{2-2p}$.", "2-2p"},
      {"We get \\boxed{3} at first, then \\boxed{\\frac{14}{3}}.", "\\frac{14}{3}"},
      {"so the answer is $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$", "\\left( 3, \\frac{\\pi}{2} \\right)"},
      {"\\boxed 5", "5"},
      {"\\fbox{7}", "7"},
      // "The answer is ...", Minerva's "Final Answer: The final answer is $X$. I hope it is correct."
      {"So she makes $18 every day.\nThe answer is 18.", "18"},
      {"Final Answer: The final answer is $28 \\%$. I hope it is correct.", "28 \\%"},
      {"The answer is: 42", "42"},
      {"The answer is 18 dollars.", "18"},
      {"The answer is \\frac{1}{2} cup.", "\\frac{1}{2}"},
      {"answer: x = 5", "x = 5"},
      {"Therefore the answer is Evelyn.", "Evelyn"},
      // The last number.
      {"She has 12 apples left.", "12"},
      {"Solving gives x = -3", "-3"},
      {"The total is 7,425,000 dollars", "7,425,000"},
      {"so k = \\frac{1}{3}", "\\frac{1}{3}"},
      {"that leaves 3/4 of the pie", "3/4"},
      {"It costs .5 dollars", ".5"},
      {"5-3 = 2", "2"},
      // No number at all, or only inside words.
      {"I do not know.", std::nullopt},
      {"AZYUK2A", std::nullopt},
      {"", std::nullopt},
  };
  for (const Row& r : rows) EXPECT_EQ(completion_final_answer(r.completion, true), r.expected) << r.completion;
  // Without the last-number fallback only a stated answer counts.
  EXPECT_EQ(completion_final_answer("She has 12 apples left.", false), std::nullopt);
  EXPECT_EQ(completion_final_answer("#### 12", false), std::optional<std::string>("12"));
}

TEST(MathAnswer, Equivalence) {
  struct Row {
    std::string given, reference;
    bool equal;
  } rows[] = {
      // Integers, signs, separators, trailing periods.
      {"72", "72", true},
      {"-5", "-5", true},
      {"+5", "5", true},
      {"72.", "72", true},
      {"72.0", "72", true},
      {"7,425,000", "7425000", true},
      {"1,000.0", "1000", true},
      {"14{,}916", "14916", true},
      {"1\\,000", "1000", true},
      {"$1,080", "1080", true},
      {"\\$18.90", "18.9", true},
      {"3.50", "3.5", true},
      // Fractions and decimals.
      {"3/4", "0.75", true},
      {"\\frac{3}{4}", "3/4", true},
      {"\\dfrac{9}{7}", "\\frac{9}{7}", true},
      {"\\tfrac{3}{4}", "0.75", true},
      {"\\cfrac{1}{3}", "1/3", true},
      {"\\frac34", "3/4", true},
      {"-\\frac{2}{3}", "-2/3", true},
      {"\\frac{-2}{3}", "-\\frac{2}{3}", true},
      {".5", "1/2", true},
      {"1\\frac{1}{2}", "3/2", true},
      {"\\frac{14}{3}", "14/3", true},
      // Units, degrees, percent, delimiters, equations.
      {"10\\text{ inches}", "10", true},
      {"5\\text{ cm}^2", "5", true},
      {"\\frac{1}{3} \\text{meters}", "1/3", true},
      {"90^\\circ", "90", true},
      {"90^{\\circ}", "90", true},
      {"50\\%", "50", true},
      {"28 \\%", "28", true},
      {"$\\frac{1}{3}$", "1/3", true},
      {"\\left( \\frac{1}{3} \\right)", "1/3", true},
      {"k = \\frac{1}{3}", "\\frac{1}{3}", true},
      {"x = 5", "5", true},
      {"\\boxed{\\frac{1}{3}}", "1/3", true},
      // Tuples, intervals, text, expressions.
      {"\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", true},
      {"(1, \\frac{1}{2})", "(1,0.5)", true},
      {"[0,1)", "[0,1)", true},
      {"\\text{Evelyn}", "\\text{Evelyn}", true},
      {"\\text{(C)}", "(C)", true},
      {"3\\sqrt{13}", "3 \\sqrt{13}", true},
      {"5\\sqrt2", "5\\sqrt{2}", true},  // one token, as LaTeX reads it: \sqrt13 is \sqrt{1}3
      {"2-2p", "2 - 2p", true},
      // Must not match.
      {"73", "72", false},
      {"5", "-5", false},
      {"2/3", "-\\frac{2}{3}", false},
      {"0.333", "1/3", false},
      {"4.6667", "\\frac{14}{3}", false},
      {"50\\%", "0.5", false},
      {"[0,1)", "(0,1)", false},
      {"(0,9)", "[0,9)", false},
      {"(1,2)", "(1,2,3)", false},
      {"x^2+1", "1+x^2", false},
      {"1000001", "1000000", false},
      {"\\frac{1}{0}", "1", false},
      {"", "0", false},
      {"12", "1,2", false},
  };
  for (const Row& r : rows)
    EXPECT_EQ(math_answers_equal(r.given, r.reference, 1e-9), r.equal) << r.given << " vs " << r.reference;
  // Deep nesting is compared as text, not read recursively.
  const std::string deep = std::string(20000, '{') + "1" + std::string(20000, '}');
  EXPECT_TRUE(math_answers_equal(deep, deep, 1e-9));
  EXPECT_FALSE(math_answers_equal(deep, "1", 1e-9));
  EXPECT_EQ(completion_final_answer("\\boxed{" + deep + "}", true), deep);
  // The tolerance is relative to the larger magnitude (at least 1).
  EXPECT_TRUE(math_answers_equal("0.3333333", "1/3", 1e-6));
  EXPECT_FALSE(math_answers_equal("0.3333333", "1/3", 1e-9));
}

TEST(MathAnswer, ScoresCompletionsAgainstAnswers) {
  RewardConfig cfg;
  MathAnswerReward math(cfg);
  struct Row {
    std::string completion, answer;
    double score;
  } rows[] = {
      {"Janet sells 16 - 3 - 4 = 9 duck eggs a day.\nShe makes 9 * 2 = $18 every day at the farmer's market.\n#### 18",
       kJanet, 1},
      {"Natalia sold 48/2 = 24 clips in May. Altogether 48+24 = 72 clips.\nThe answer is 72.", kNatalia, 1},
      {"She earned 0.2 x 50 = $10.", kWeng, 1},
      {"She earned 0.2 x 50 = $10. Then she spent $3.", kWeng, 0},  // the last number is not the answer
      {"Let me think: 48 + 24 = 72, so \\boxed{72}.", "72", 1},
      {"\\boxed{\\dfrac{14}{3}}", kFourteenThirds, 1},
      {"The polar coordinates are $\\boxed{(3, \\frac{\\pi}{2})}$.", kPolar, 1},
      {"Final Answer: The final answer is $28 \\%$. I hope it is correct.", "28", 1},
      {"#### 71", kNatalia, 0},
      {"I cannot tell.", kNatalia, 0},
      {"", "0", 0},
  };
  for (const Row& r : rows) EXPECT_EQ(math.score_one(r.completion, r.answer), r.score) << r.completion;

  // Within the deck's tags only.
  cfg.answer_in_tags = true;
  MathAnswerReward tagged(cfg);
  EXPECT_EQ(tagged.score_one("Reasoning: 48 + 24 = 72.\n<answer>72</answer>", "#### 72"), 1.0);
  EXPECT_EQ(tagged.score_one("72", "#### 72"), 0.0);
  EXPECT_EQ(tagged.score_one("<answer>70</answer> no, 72", "#### 72"), 0.0);

  // A row without an answer is an error naming the row.
  RewardSample row{"What is 2+2?", "4", nlohmann::json(), nlohmann::json(), 3};
  EXPECT_NE(error_of([&] { math.score({row}); }).find("row 3 (prompt \"What is 2+2?\") has none"), std::string::npos);
  row.answer = 4;  // a number is read as JSON writes it
  EXPECT_EQ(math.score({row}), std::vector<double>{1.0});
}

// ---- exact and regex matching, format ----------------------------------------------------------

TEST(MatchAnswer, ExactMatch) {
  RewardConfig cfg;
  struct Row {
    std::string completion, answer;
    bool strip, ignore_case;
    double score;
  } rows[] = {
      {"Paris", "Paris", true, false, 1},
      {"  Paris\n", "Paris", true, false, 1},
      {"  Paris\n", "Paris", false, false, 0},
      {"paris", "Paris", true, false, 0},
      {"paris", "Paris", true, true, 1},
      {"Paris.", "Paris", true, false, 0},
      {"The capital is Paris", "Paris", true, true, 0},
      {"", "Paris", true, false, 0},
  };
  for (const Row& r : rows) {
    cfg.match_strip = r.strip;
    cfg.match_ignore_case = r.ignore_case;
    EXPECT_EQ(ExactMatchReward(cfg).score_one(r.completion, r.answer), r.score) << r.completion;
  }
  cfg = RewardConfig();
  cfg.answer_in_tags = true;
  EXPECT_EQ(ExactMatchReward(cfg).score_one("It is France's capital. <answer> Paris </answer>", "Paris"), 1.0);
  EXPECT_EQ(ExactMatchReward(cfg).score_one("<answer>Paris", "Paris"), 0.0);
}

TEST(MatchAnswer, RegexExtractsTheAnswer) {
  RewardConfig cfg;
  cfg.regex_pattern = "[Aa]nswer: *\\(?([A-D])\\)?";
  RegexMatchReward regex(cfg);
  EXPECT_EQ(regex.score_one("The reaction is exothermic, so Answer: (B)", "B"), 1.0);
  EXPECT_EQ(regex.score_one("answer: C", "B"), 0.0);
  EXPECT_EQ(regex.score_one("Answer: A ... on reflection, answer: B", "B"), 1.0);  // the last match
  EXPECT_EQ(regex.score_one("I would pick B", "B"), 0.0);
  cfg.regex_pattern = "\\d+";  // no group: the whole match
  EXPECT_EQ(RegexMatchReward(cfg).score_one("roughly 40, exactly 42", "42"), 1.0);
  cfg.regex_pattern = "(";
  EXPECT_NE(error_of([&] { RegexMatchReward bad(cfg); }).find("reward.regex_pattern"), std::string::npos);
}

TEST(MatchAnswer, RegexAnswerIsThePattern) {
  RewardConfig cfg;
  RegexMatchReward regex(cfg);
  EXPECT_EQ(regex.score_one(" seven\n", "7|seven"), 1.0);
  EXPECT_EQ(regex.score_one("seventy", "7|seven"), 0.0);
  EXPECT_EQ(regex.score_one("Yes", "(?i)yes|y"), 1.0);
  EXPECT_EQ(regex.score_one("Yes, definitely", "(?i)yes|y"), 0.0);
  EXPECT_EQ(regex.score_one("3.50", "3\\.50*"), 1.0);
  EXPECT_NE(error_of([&] { regex.score_one("x", "(", 5); }).find("row 5"), std::string::npos);
}

TEST(FormatReward, Tags) {
  RewardConfig cfg;
  FormatReward format(cfg);
  struct Row {
    std::string completion;
    double score;
  } rows[] = {
      {"<answer>72</answer>", 1},
      {"48 + 24 = 72, so <answer>72</answer>", 1},
      {"<answer>\n72\n</answer>\n", 1},
      {"<answer></answer>", 0},
      {"<answer>  </answer>", 0},
      {"<answer>72", 0},
      {"72</answer>", 0},
      {"</answer>72<answer>", 0},
      {"<answer>1</answer><answer>2</answer>", 0},
      {"72", 0},
  };
  for (const Row& r : rows) EXPECT_EQ(format.score_one(r.completion), r.score) << r.completion;
  cfg.format_open = cfg.format_close = "```";
  EXPECT_EQ(FormatReward(cfg).score_one("```x = 1```"), 1.0);
  EXPECT_EQ(FormatReward(cfg).score_one("```x = 1"), 0.0);
}

TEST(FormatReward, Pattern) {
  RewardConfig cfg;
  cfg.format_regex = "(?s)<think>.*?</think>\\s*<answer>.*?</answer>";
  FormatReward format(cfg);
  EXPECT_EQ(format.score_one("<think>48 + 24\n= 72</think>\n<answer>72</answer>"), 1.0);
  EXPECT_EQ(format.score_one("<answer>72</answer>"), 0.0);
  EXPECT_EQ(format.score_one("<think>a</think><answer>72</answer> and more"), 0.0);
  cfg.format_regex = "<think>[";
  EXPECT_NE(error_of([&] { FormatReward bad(cfg); }).find("reward.format_regex"), std::string::npos);
}

// ---- the deck -----------------------------------------------------------------------------------

TEST(RewardDeck, TermsAndWeights) {
  Config c = config_of("[reward]\nterms = math, format\nweights = 1.0, 0.2\nformat_open = <sol>\n");
  ASSERT_EQ(c.get<RewardConfig>().terms.size(), 2u);
  EXPECT_EQ(c.get<RewardConfig>().terms[0].type, RewardKind::Type::math);
  EXPECT_EQ(c.get<RewardConfig>().terms[1].type, RewardKind::Type::format);
  EXPECT_EQ(c.get<RewardConfig>().weights, (std::vector<double>{1.0, 0.2}));
  EXPECT_EQ(c.get<RewardConfig>().format_open, "<sol>");
  EXPECT_FALSE(uses_reward_model(c));
  c = config_of("[reward]\nterms = model, rule:add\n[model.reward]\npath = random:llama\n");
  EXPECT_EQ(c.get<RewardConfig>().weights, (std::vector<double>{1.0, 1.0}));
  EXPECT_TRUE(uses_reward_model(c));
  // Without terms: model.reward.kind alone, as before.
  c = config_of("[model.reward]\nkind = rule:add\n");
  EXPECT_TRUE(c.get<RewardConfig>().terms.empty());
  EXPECT_FALSE(uses_reward_model(c));
  EXPECT_TRUE(uses_reward_model(config_of("")));
}

TEST(RewardDeck, RefusalsNameTheKey) {
  struct Row {
    std::string deck, expected;
  } rows[] = {
      {"[reward]\nterms = math, format\nweights = 1\n", "rewards.deck:3: reward.weights has 1 weights for the 2 terms"},
      {"[reward]\nterms = math\nweights = heavy\n", "reward.weights has 'heavy', which is not a finite number"},
      {"[reward]\nweights = 1\n", "reward.weights is given, but reward.terms names no terms"},
      {"[reward]\nterms = math, math\n", "reward.terms names math twice"},
      {"[model.reward]\nkind = rule:add\n[reward]\nterms = math\n", "rewards.deck:2: model.reward.kind is given, and so is reward.terms"},
      {"[model.reward]\npath = random:llama\n[reward]\nterms = math\n", "model.reward.path is set, but reward.terms has no model term"},
      {"[reward]\nmath_tolerance = -1\n", "reward.math_tolerance must be a finite number >= 0"},
      {"[reward]\nformat_close =\n", "reward.format_close"},
  };
  for (const Row& r : rows) EXPECT_NE(deck_error(r.deck).find(r.expected), std::string::npos) << deck_error(r.deck);
  // Kinds are parsed when the deck is read, which names the key; what a kind needs beyond its
  // spelling (a rule's task, a pattern that compiles) is checked by the factory, which names it too.
  const std::string e = deck_error("[reward]\nterms = math, maths\n");
  EXPECT_NE(e.find("rewards.deck:2: reward.terms names 'maths', which is not a reward kind (known: model, rule:<task>, "
                   "math, match, regex, format"),
            std::string::npos)
      << e;
  EXPECT_NE(deck_error("[reward]\nterms = rule\n").find("reward.terms names 'rule': rule needs what follows its ':' (model, rule:<task>"),
            std::string::npos)
      << deck_error("[reward]\nterms = rule\n");
  EXPECT_NE(deck_error("[reward]\nterms = math:x\n").find("reward.terms names 'math:x': math takes no ':' argument"),
            std::string::npos);
  EXPECT_NE(error_of([&] { RewardTerms terms(config_of("[reward]\nterms = rule:multiply\n")); })
                .find("reward.terms names 'rule:multiply', which cannot be made: "),
            std::string::npos);
  EXPECT_NE(error_of([&] { RewardTerms terms(config_of("[model.reward]\nkind = rule:nope\n")); })
                .find("model.reward.kind names 'rule:nope'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { RewardTerms terms(config_of("[reward]\nterms = regex\nregex_pattern = ([\n")); })
                .find("reward.regex_pattern"),
            std::string::npos);
}

// ---- several rewards at once ----------------------------------------------------------------------

namespace {

Iteration iteration_of(const std::vector<std::string>& prompts, const std::vector<std::string>& completions,
                       const std::vector<std::string>& records) {
  Iteration it;
  it.prompts = prompts;
  it.completions = completions;
  it.records = records;
  it.answers.assign(prompts.size(), "");
  for (size_t r = 0; r < prompts.size(); ++r) it.rows.push_back(static_cast<int64_t>(r));  // the prompt file's rows
  return it;
}

}  // namespace

TEST(RewardTerms, SamplesCarryAnswerAndMetadata) {
  Iteration it = iteration_of({"add 2+3=", "q", "h5"}, {"5", "x", "y"},
                              {R"({"prompt": "add 2+3=", "answer": 5, "level": 2})", R"({"question": "q", "answer": "#### 7"})",
                               ""});
  const std::vector<RewardSample> s = reward_samples(it, "question");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].answer, nlohmann::json(5));
  EXPECT_EQ(s[0].metadata, nlohmann::json({{"level", 2}}));
  EXPECT_EQ(s[1].answer, "#### 7");
  EXPECT_TRUE(s[1].metadata.is_null());
  EXPECT_TRUE(s[2].answer.is_null());
  EXPECT_EQ(s[2].row, 2);
}

TEST(RewardTerms, WeightedSumAndEachTerm) {
  const Config c = config_of("[reward]\nterms = math, format\nweights = 1.0, 0.25\n");
  RewardTerms terms(c);
  EXPECT_EQ(terms.logged_names(), (std::vector<std::string>{"math", "format"}));
  Iteration it = iteration_of({"add 2+3=", "add 4+4=", "add 1+1="},
                              {"<answer>5</answer>", "I think 8", "<answer>3</answer>"},
                              {R"({"prompt": "add 2+3=", "answer": "5"})", R"({"prompt": "add 4+4=", "answer": "8"})",
                               R"({"prompt": "add 1+1=", "answer": "2"})"});
  terms.score(it);
  ASSERT_TRUE(it.reward_terms.defined());
  EXPECT_TRUE(torch::equal(it.reward_terms, torch::tensor({1.0, 1.0, 1.0, 0.0, 0.0, 1.0}, torch::kFloat64).view({3, 2})));
  EXPECT_TRUE(torch::equal(it.scores, torch::tensor({1.25f, 1.0f, 0.25f})));

  // The metrics: each term's mean before its weight; the total's mean is their weighted sum.
  IterationMetrics m;
  m.name_reward_terms(terms.logged_names());
  auto mask = torch::ones({3, 4});
  m.add_rollouts(it.scores, mask, torch::Tensor());
  m.add_reward_terms(it.reward_terms);
  const auto named = m.named(algorithm_spec(Algorithm::grpo));
  EXPECT_DOUBLE_EQ(named.at("reward.math"), 2.0 / 3);
  EXPECT_DOUBLE_EQ(named.at("reward.format"), 2.0 / 3);
  EXPECT_NEAR(named.at("reward_mean"), 1.0 * 2.0 / 3 + 0.25 * 2.0 / 3, 1e-7);
  const std::string line = m.log_line(1, 10, algorithm_spec(Algorithm::grpo), 0);
  EXPECT_NE(line.find("reward 0.833 ±0.425 [0.25, 1.25] (math 0.667 format 0.667) | kl"), std::string::npos) << line;
}

TEST(RewardTerms, ModelScoreIsOneTerm) {
  const Config c = config_of("[model.reward]\npath = random:llama\n[reward]\nterms = model, rule:add\nweights = 0.5, 2\n");
  RewardTerms terms(c);
  EXPECT_EQ(terms.logged_names(), (std::vector<std::string>{"model", "rule_add"}));
  Iteration it = iteration_of({"add 2+3=", "add 4+4="}, {"5", ""}, {"", ""});
  it.scores = torch::tensor({0.4f, -1.0f});  // what the reward model returned
  terms.score(it);
  EXPECT_TRUE(torch::allclose(it.scores, torch::tensor({0.5f * 0.4f + 2.0f, -0.5f})));
  EXPECT_NEAR(it.reward_terms[0][0].item<double>(), 0.4, 1e-7);
}

TEST(RewardTerms, LoneRuleIsTheRuleBitForBit) {
  const Config c = config_of("[model.reward]\nkind = rule:add\n");
  RewardTerms terms(c);
  EXPECT_TRUE(terms.logged_names().empty());
  const auto rule = make_rule_reward("add");
  const std::vector<std::string> prompts = rule->make_prompts(64, 9);
  std::vector<std::string> completions;
  std::vector<float> expected;
  for (size_t i = 0; i < prompts.size(); ++i) {
    completions.push_back(i % 3 ? rule->answer(prompts[i]) : std::to_string(i) + "x");
    expected.push_back(static_cast<float>(rule->score(prompts[i], completions.back())));
  }
  Iteration it = iteration_of(prompts, completions, std::vector<std::string>(prompts.size()));
  terms.score(it);
  EXPECT_FALSE(it.reward_terms.defined());
  EXPECT_TRUE(torch::equal(it.scores, torch::tensor(expected, torch::kFloat32)));
  // A reward model alone: its scores stand.
  const Config model = config_of("[model.reward]\npath = random:llama\n");
  RewardTerms none(model);
  Iteration scored = iteration_of({"p"}, {"c"}, {""});
  scored.scores = torch::tensor({0.125f});
  none.score(scored);
  EXPECT_EQ(scored.scores.item<float>(), 0.125f);
}

TEST(RewardTerms, AMissingAnswerNamesTheRow) {
  const Config c = config_of("[reward]\nterms = math\n");
  RewardTerms terms(c);
  Iteration it = iteration_of({"add 1+1="}, {"2"}, {R"({"prompt": "add 1+1="})"});
  EXPECT_NE(error_of([&] { terms.score(it); }).find("row 0 (prompt \"add 1+1=\") has none"), std::string::npos);
}

// inputs/prompts/add_gsm8k.jsonl (the math learning test's prompts): every single-digit sum once,
// its answer GSM8K-shaped, graded right by the math reward for the sum and wrong otherwise.
TEST(RewardTerms, ShippedGsm8kShapedAdditions) {
  const char* src = std::getenv("QUARTET_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "ctest sets QUARTET_SOURCE_DIR";
  const std::string path = std::string(src) + "/inputs/prompts/add_gsm8k.jsonl";
  auto tok = make_builtin_tokenizer();
  PromptDataset ds(path, "prompt", tok.get(), 16);
  ASSERT_EQ(ds.size(), 55);
  const auto add = make_rule_reward("add");
  MathAnswerReward math{RewardConfig()};
  for (int64_t i = 0; i < ds.size(); ++i) {
    const DatasetPrompt p = ds.get(i);
    const std::string sum = add->answer(p.text);
    EXPECT_EQ(p.answer.substr(p.answer.size() - sum.size() - 5), "#### " + sum) << path << " line " << i + 1;
    EXPECT_EQ(math.score_one(sum, p.answer), 1.0) << p.text;
    EXPECT_EQ(math.score_one(std::to_string(std::stoi(sum) + 1), p.answer), 0.0) << p.text;
  }
}

}  // namespace test_rewards

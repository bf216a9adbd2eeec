// Preference-pair files (io/pairs.hpp, tune/pair_dataset.hpp): plain pairs tokenized with the
// run's tokenizer (the built-in character one here, whose ids are worked out by hand), prepared
// pairs used as they are, every refusal naming the file and line, the refusal of a file made
// for another tokenizer, and the batches: left-padded prompts, right-padded responses, action
// masks on the response tokens. The end-to-end test against transformers is
// tests/data/check_prepared_pairs.py.
#include <gtest/gtest.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>
#include <torch/types.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/sha256.hpp"
#include "quartet/io/pairs.hpp"
#include "quartet/io/prompt_identity.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/tokenizer/builtin_tokenizer_files.hpp"
#include "quartet/tune/pair_dataset.hpp"
#include "test_main.hpp"

using namespace quartet;
using Ids = std::vector<int64_t>;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_pair_dataset {

namespace {


#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// The built-in tokenizer: <pad> 0, <bos> 1, <eos> 2, then printable ASCII from ' ' (3).
int64_t ch(char c) { return 3 + (c - ' '); }
constexpr int64_t kBos = 1, kEos = 2, kPad = 0;

std::string lines(const std::vector<nlohmann::json>& rows) {
  std::string s;
  for (const auto& r : rows) s += r.dump() + "\n";
  return s;
}

nlohmann::json pairs_header(const std::string& tok_sha, bool applied = false) {
  return {{"quartet_pairs", 1},
          {"tokenizer", {{"sha256", tok_sha}, {"source", "/m/tokenizer.json"}}},
          {"chat_template", {{"applied", applied}, {"sha256", std::string(64, 'c')}, {"source", "/m/chat_template.jinja"}}}};
}

nlohmann::json prepared_row(const Ids& p, const Ids& c, const Ids& r) {
  return {{"prompt", "p"}, {"prompt_ids", p}, {"chosen", "c"}, {"chosen_ids", c}, {"rejected", "r"}, {"rejected_ids", r}};
}

}  // namespace

// Plain rows: the prompt with the BOS the tokenizer adds, each response without it and with the
// EOS after it. A margin where given, 0 elsewhere; a blank line is skipped but counted.
TEST(PairDataset, PlainPairsTokenizedWithTheRunsTokenizer) {
  test::ScratchDir dir{"quartet_pairs"};
  const std::string path = dir.file("pairs.jsonl", "{\"prompt\": \"ab\", \"chosen\": \"x\", \"rejected\": \"yz\", \"margin\": 0.5}\n"
                                                   "\n"
                                                   "{\"prompt\": \"c\", \"chosen\": \"\", \"rejected\": \"w\", \"id\": 7}\n");
  auto tok = make_builtin_tokenizer();
  PairDataset d(path, *tok, 16);
  ASSERT_EQ(d.size(), 2);
  EXPECT_FALSE(d.prepared());
  EXPECT_TRUE(d.has_margins());
  const PreferencePair a = d.get(0), b = d.get(1);
  EXPECT_EQ(a.prompt, (Ids{kBos, ch('a'), ch('b')}));
  EXPECT_EQ(a.chosen, (Ids{ch('x'), kEos}));
  EXPECT_EQ(a.rejected, (Ids{ch('y'), ch('z'), kEos}));
  EXPECT_EQ(a.margin, 0.5);
  EXPECT_EQ(b.chosen, (Ids{kEos}));  // an empty reply is its stop token alone
  EXPECT_EQ(b.margin, 0.0);
  EXPECT_EQ(d.where(1), path + ":3");
}

// Pair 0: prompt 3 tokens, chosen 2, rejected 3; pair 1: prompt 2, chosen 1, rejected 2. P = 3,
// A = 3. Row 1 of the chosen side: one pad, the prompt, the response, two pads.
TEST(PairDataset, BatchesLeftPadPromptsAndRightPadResponses) {
  PreferencePair p0{0, {1, 10, 11}, {20, 2}, {30, 31, 2}, 0.5};
  PreferencePair p1{5, {1, 12}, {21}, {32, 2}, 0.0};
  const PairBatch b = make_pair_batch({p0, p1}, kPad);
  ASSERT_EQ(b.rows(), 2);
  EXPECT_TRUE(torch::equal(b.chosen.sequences, torch::tensor({1, 10, 11, 20, 2, 0, 0, 1, 12, 21, 0, 0}).view({2, 6})))
      << b.chosen.sequences;
  EXPECT_TRUE(torch::equal(b.chosen.attention_mask, torch::tensor({1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0}).view({2, 6})));
  EXPECT_TRUE(torch::equal(b.chosen.action_mask, torch::tensor({1, 1, 0, 1, 0, 0}).view({2, 3})));
  EXPECT_TRUE(torch::equal(b.rejected.sequences, torch::tensor({1, 10, 11, 30, 31, 2, 0, 1, 12, 32, 2, 0}).view({2, 6})));
  EXPECT_TRUE(torch::equal(b.rejected.action_mask, torch::tensor({1, 1, 1, 1, 1, 0}).view({2, 3})));
  EXPECT_EQ(b.chosen.prompt_len(), 3);
  EXPECT_EQ(b.rejected.actions(), 3);
  EXPECT_TRUE(torch::equal(b.margin, torch::tensor({0.5f, 0.0f})));
  EXPECT_EQ(b.index, (Ids{0, 5}));

  // Both sides as one batch, and a result over it split back.
  const RolloutBatch both = both_sides(b);
  EXPECT_TRUE(torch::equal(both.sequences, torch::cat({b.chosen.sequences, b.rejected.sequences})));
  const auto [c, r] = split_sides(torch::arange(4));
  EXPECT_TRUE(torch::equal(c, torch::tensor({0, 1}, torch::kLong)));
  EXPECT_TRUE(torch::equal(r, torch::tensor({2, 3}, torch::kLong)));

  // Width buckets: P + A rounded up to 64, capped by max_width.
  EXPECT_EQ(make_pair_batch({p0, p1}, kPad, 256).chosen.sequences.size(1), 64);
  EXPECT_EQ(make_pair_batch({p0, p1}, kPad, 256).chosen.actions(), 61);
  EXPECT_EQ(make_pair_batch({p0, p1}, kPad, 10).chosen.sequences.size(1), 10);
}

TEST(PairDataset, PreparedPairsUsedAsTheyAre) {
  test::ScratchDir dir{"quartet_pairs"};
  const std::string sha = sha256_hex(builtin_tokenizer_json());
  const std::string path = dir.file("prepared.jsonl", lines({pairs_header(sha), prepared_row({1, 40}, {50, 2}, {51, 2}),
                                                             [] {
                                                               auto r = prepared_row({1, 41}, {52}, {53, 54});
                                                               r["margin"] = -1.25;
                                                               return r;
                                                             }()}));
  auto tok = make_builtin_tokenizer();
  const TokenizerIdentity builtin = builtin_tokenizer_identity();
  EXPECT_EQ(pair_file_misfit(path, builtin, {"pairs", "reward model", "prepare_pairs.py"}), "");
  PairDataset d(path, *tok, 8, &builtin);
  ASSERT_EQ(d.size(), 2);
  EXPECT_TRUE(d.prepared());
  EXPECT_EQ(d.get(0).chosen, (Ids{50, 2}));
  EXPECT_EQ(d.get(1).rejected, (Ids{53, 54}));
  EXPECT_EQ(d.get(1).margin, -1.25);
  EXPECT_EQ(d.where(0), path + ":2");

  // Made for another tokenizer: named by file and line, with the script that prepares pairs.
  const std::string other = dir.file("other.jsonl", lines({pairs_header(std::string(64, 'a')),
                                                           prepared_row({1, 40}, {50, 2}, {51, 2})}));
  const std::string misfit = pair_file_misfit(other, builtin, {"pairs", "reward model", "prepare_pairs.py"});
  EXPECT_HAS(misfit, other + ":1 says its pairs were tokenized with /m/tokenizer.json");
  EXPECT_HAS(misfit, "the reward model's tokenizer is quartet's built-in");
  EXPECT_HAS(misfit, "inputs/prepare/prepare_pairs.py --model DIR");
  EXPECT_HAS(test::error_of([&] { PairDataset(other, *tok, 8, &builtin); }), other + ":1 says its pairs");
  // Without an identity the dataset does not ask.
  EXPECT_EQ(PairDataset(other, *tok, 8).size(), 1);
  // Rendered with a template, for a model without one.
  const std::string templated = dir.file("templated.jsonl", lines({pairs_header(sha, true), prepared_row({1}, {50}, {51})}));
  EXPECT_HAS(pair_file_misfit(templated, builtin, {"pairs", "policy", "prepare_pairs.py"}), "but the policy (");
}

// Every bad row is refused naming the file, the line and what is wrong.
TEST(PairDataset, BadRowsNamedByFileAndLine) {
  test::ScratchDir dir{"quartet_pairs"};
  auto tok = make_builtin_tokenizer();
  const std::string sha = sha256_hex(builtin_tokenizer_json());
  const auto refusal = [&](const std::string& name, const std::string& text, int64_t max_tokens = 16) {
    const std::string path = dir.file(name, text);
    return std::make_pair(path, test::error_of([&] { PairDataset(path, *tok, max_tokens); }));
  };
  const std::string good = "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n";
  struct Case {
    std::string name, text, expect;
    int64_t max_tokens = 16;
  };
  const std::vector<Case> cases = {
      {"no_rejected.jsonl", good + "{\"prompt\": \"a\", \"chosen\": \"b\"}\n", ":2: no \"rejected\""},
      {"number.jsonl", good + good + "{\"prompt\": \"a\", \"chosen\": 5, \"rejected\": \"c\"}\n",
       ":3: \"chosen\" is number, not a string"},
      {"empty_prompt.jsonl", "{\"prompt\": \"\", \"chosen\": \"b\", \"rejected\": \"c\"}\n", ":1: \"prompt\" is empty"},
      {"not_json.jsonl", good + "{nope\n", ":2: not JSON"},
      {"array.jsonl", "[1, 2]\n", ":1: expected a JSON object, found array"},
      {"margin.jsonl", "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\", \"margin\": \"big\"}\n",
       ":1: \"margin\" is \"big\", not a finite number"},
      {"same.jsonl", "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"b\"}\n",
       ":1: chosen and rejected are the same response"},
      {"outside.jsonl", "{\"prompt\": \"a\", \"chosen\": \"\\u00e9\", \"rejected\": \"c\"}\n", ":1: cannot tokenize the pair"},
      // prompt BOS a (2) + chosen bbbb EOS (5) = 7 > 6
      {"long.jsonl", good + "{\"prompt\": \"a\", \"chosen\": \"bbbb\", \"rejected\": \"c\"}\n",
       ":2: the prompt and the chosen response have 7 tokens, more than the 6 allowed", 6},
      {"empty.jsonl", "\n\n", "holds no pairs"},
      {"past_vocab.jsonl", lines({pairs_header(sha), prepared_row({1}, {2}, {3}), prepared_row({1}, {2, 999}, {3})}),
       ":3: chosen_ids[1] = 999 is outside the tokenizer's vocabulary of"},
      {"no_ids.jsonl", lines({pairs_header(sha), [] {
                                auto r = prepared_row({1}, {2}, {3});
                                r.erase("rejected_ids");
                                return r;
                              }()}),
       ":2: no \"rejected_ids\" list"},
      {"negative.jsonl", lines({pairs_header(sha), prepared_row({1, -4}, {2}, {3})}), ":2: \"prompt_ids\"[1] is -4, not a token id"},
      {"empty_ids.jsonl", lines({pairs_header(sha), prepared_row({1}, {}, {3})}), ":2: \"chosen_ids\" is empty"},
      {"two_headers.jsonl", lines({pairs_header(sha), pairs_header(sha)}), ":2: a second prepared-pairs header"},
      {"header_only.jsonl", lines({pairs_header(sha)}), "a header and no rows"},
      {"bad_header.jsonl", lines({[&] {
                                    auto h = pairs_header(sha);
                                    h["tokenizer"]["sha256"] = "short";
                                    return h;
                                  }()}),
       ":1: a malformed prepared-pairs header: \"tokenizer.sha256\""},
      {"version.jsonl", lines({[&] {
                                 auto h = pairs_header(sha);
                                 h["quartet_pairs"] = 2;
                                 return h;
                               }()}),
       ":1: a malformed prepared-pairs header: \"quartet_pairs\" is version 2"},
      {"prompts.jsonl",
       lines({{{"quartet_prompts", 1},
               {"tokenizer", {{"sha256", sha}, {"source", "x"}}},
               {"chat_template", {{"applied", false}}}}}),
       ":1: a prepared prompts file (header \"quartet_prompts\"), not preference pairs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto [path, error] = refusal(c.name, c.text, c.max_tokens);
    EXPECT_HAS(error, c.name);
    EXPECT_HAS(error, c.expect);
  }
  EXPECT_HAS(test::error_of([&] { PairDataset(dir.file("missing/none.jsonl", ""), *tok, 16); }), "cannot read pairs file");
  EXPECT_HAS(test::error_of([&] { make_pair_batch({}, 0); }), "no pairs");
}

}  // namespace test_pair_dataset

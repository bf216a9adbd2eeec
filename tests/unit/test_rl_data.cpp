// The prompts of an RL run and the rule rewards: reading JSONL and pre-tokenised HDF5 prompt
// files (and refusing broken ones by file and line), the seeded per-rank order and its cursor,
// and the verifiable tasks with the prompt files shipped in inputs/prompts.
#include <gtest/gtest.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/engine/prompt_sampler.hpp"
#include "quartet/io/tensor_h5.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/rl/prompt_dataset.hpp"
#include "quartet/rl/rewards/rule_rewards.hpp"
#include "test_main.hpp"

using quartet::DatasetPrompt;
using quartet::PromptCursor;
using quartet::PromptDataset;
using quartet::PromptSampler;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_rl_data {

namespace {

// A scratch directory of this test, removed with its contents at the end. (POSIX calls, not
// std::filesystem: libtorch exports std::filesystem symbols of its own build, and the dynamic
// linker binds the test to those.)

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The message of the quartet::Error that `f` throws ("" and a test failure if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const quartet::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a quartet::Error";
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// ---- JSONL ------------------------------------------------------------------------------------

TEST(PromptDataset, ReadsJsonlFieldsAnswersAndTokenises) {
  quartet::test::ScratchDir dir{"quartet_rl_data"};
  auto tok = quartet::make_builtin_tokenizer();
  const std::string path = dir.file(
      "p.jsonl",
      "{\"prompt\": \"sort 381=\", \"answer\": \"138\"}\n"
      "\n"  // a blank line is skipped
      "{\"q\": \"other field\", \"prompt\": \"add 1+2=\", \"extra\": [1, 2]}\r\n"
      "{\"prompt\": \"hi\"}");  // no trailing newline
  PromptDataset ds(path, "prompt", tok.get(), 64);
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.path(), path);

  DatasetPrompt p0 = ds.get(0);
  EXPECT_EQ(p0.index, 0);
  EXPECT_EQ(p0.text, "sort 381=");
  EXPECT_EQ(p0.answer, "138");
  EXPECT_EQ(p0.ids, tok->encode("sort 381=", true));
  ASSERT_TRUE(tok->bos_id);
  EXPECT_EQ(p0.ids.front(), *tok->bos_id);  // the tokenizer's special tokens are included

  DatasetPrompt p1 = ds.get(1);
  EXPECT_EQ(p1.index, 1);
  EXPECT_EQ(p1.text, "add 1+2=");
  EXPECT_EQ(p1.answer, "");  // no answer field

  // Another field name picks that field.
  const std::string q = dir.file("q.jsonl", "{\"question\": \"abc\", \"answer\": \"x\"}\n");
  PromptDataset dq(q, "question", tok.get(), 64);
  EXPECT_EQ(dq.get(0).text, "abc");
  EXPECT_EQ(dq.get(0).answer, "x");

  EXPECT_HAS(error_of([&] { ds.get(3); }), "outside 0..2");
  EXPECT_HAS(error_of([&] { ds.get(-1); }), "outside 0..2");
}

TEST(PromptDataset, JsonlErrorsNameFileAndLine) {
  quartet::test::ScratchDir dir{"quartet_rl_data"};
  auto tok = quartet::make_builtin_tokenizer();
  const std::string good = "{\"prompt\": \"ok\"}\n";
  auto error_for = [&](const std::string& name, const std::string& text) {
    const std::string path = dir.file(name, text);
    return error_of([&] { PromptDataset(path, "prompt", tok.get(), 64); });
  };
  std::string e = error_for("broken.jsonl", good + "\n" + "{\"prompt\": \"unterminated}\n");
  EXPECT_HAS(e, dir.path("broken.jsonl") + ":3:");  // blank lines still count as lines
  EXPECT_HAS(e, "not JSON");

  e = error_for("array.jsonl", good + "[\"prompt\"]\n");
  EXPECT_HAS(e, dir.path("array.jsonl") + ":2:");
  EXPECT_HAS(e, "JSON object");

  e = error_for("missing.jsonl", good + good + "{\"text\": \"no prompt\"}\n");
  EXPECT_HAS(e, dir.path("missing.jsonl") + ":3:");
  EXPECT_HAS(e, "no \"prompt\" field");

  e = error_for("number.jsonl", "{\"prompt\": 17}\n");
  EXPECT_HAS(e, dir.path("number.jsonl") + ":1:");
  EXPECT_HAS(e, "not a string");

  e = error_for("answer.jsonl", "{\"prompt\": \"add 1+2=\", \"answer\": 3}\n");
  EXPECT_HAS(e, dir.path("answer.jsonl") + ":1:");
  EXPECT_HAS(e, "\"answer\" is number");

  e = error_for("empty.jsonl", "");
  EXPECT_HAS(e, dir.path("empty.jsonl"));
  EXPECT_HAS(e, "no prompts");
  e = error_for("blank.jsonl", "\n  \n\n");
  EXPECT_HAS(e, "no prompts");

  e = error_of([&] { PromptDataset(dir.path("absent.jsonl"), "prompt", tok.get(), 64); });
  EXPECT_HAS(e, "cannot read prompts file");
}

TEST(PromptDataset, OverLongAndUntokenisablePromptsAreRefusedWhenDrawn) {
  quartet::test::ScratchDir dir{"quartet_rl_data"};
  auto tok = quartet::make_builtin_tokenizer();
  // "sort 1234=" is 10 characters: 11 tokens with <bos>.
  const std::string path = dir.file("long.jsonl",
                                    "{\"prompt\": \"sort 12=\"}\n"
                                    "{\"prompt\": \"sort 1234=\"}\n"
                                    "{\"prompt\": \"caf\\u00e9\"}\n");
  PromptDataset ds(path, "prompt", tok.get(), 10);
  EXPECT_EQ(ds.size(), 3);  // read, not yet refused
  EXPECT_EQ(ds.get(0).ids.size(), 9u);
  std::string e = error_of([&] { ds.get(1); });
  EXPECT_HAS(e, path + ":2:");
  EXPECT_HAS(e, "11 tokens");
  EXPECT_HAS(e, "10 allowed");
  // A character the tokenizer does not know: the tokenizer's error, with file and line.
  e = error_of([&] { ds.get(2); });
  EXPECT_HAS(e, path + ":3:");
  EXPECT_HAS(e, "cannot tokenise");
  // The limit exactly is fine.
  PromptDataset exact(path, "prompt", tok.get(), 11);
  EXPECT_EQ(exact.get(1).ids.size(), 11u);
}

// ---- pre-tokenised HDF5 -----------------------------------------------------------------------

TEST(PromptDataset, ReadsPreTokenisedHdf5) {
  quartet::test::ScratchDir dir{"quartet_rl_data"};
  const std::string path = dir.path("tok.h5");
  quartet::write_tensors_h5(
      path, {{"input_ids", torch::tensor({{1, 5, 6, 7}, {1, 8, 0, 0}, {1, 9, 10, 0}}, torch::kLong)},
             {"lengths", torch::tensor({4, 2, 3}, torch::kLong)}});
  auto tok = quartet::make_builtin_tokenizer();
  PromptDataset ds(path, "prompt", tok.get(), 4);
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.get(0).ids, (std::vector<int64_t>{1, 5, 6, 7}));
  EXPECT_EQ(ds.get(1).ids, (std::vector<int64_t>{1, 8}));  // padding is cut by length
  EXPECT_EQ(ds.get(2).ids, (std::vector<int64_t>{1, 9, 10}));
  EXPECT_EQ(ds.get(2).index, 2);
  EXPECT_EQ(ds.get(2).text, "");
  EXPECT_EQ(ds.get(2).answer, "");

  // Over-long rows are refused when drawn, naming the row.
  PromptDataset small(path, "prompt", nullptr, 3);  // no tokenizer needed
  EXPECT_EQ(small.get(1).ids.size(), 2u);
  std::string e = error_of([&] { small.get(0); });
  EXPECT_HAS(e, path + ": row 0");
  EXPECT_HAS(e, "4 tokens");

  // Any integer type is read; the name need not say .h5 (the signature does), and ids beyond the
  // tokenizer's vocabulary are refused when drawn.
  const std::string i32 = dir.path("tok32.bin");
  quartet::write_tensors_h5(i32, {{"input_ids", torch::tensor({{1, 2}, {1, 100000}}, torch::kInt)},
                                  {"lengths", torch::tensor({2, 2}, torch::kInt)}});
  PromptDataset d32(i32, "prompt", tok.get(), 8);
  EXPECT_EQ(d32.get(0).ids, (std::vector<int64_t>{1, 2}));
  e = error_of([&] { d32.get(1); });
  EXPECT_HAS(e, "row 1");
  EXPECT_HAS(e, "100000");
}

TEST(PromptDataset, Hdf5ErrorsNameTheFile) {
  quartet::test::ScratchDir dir{"quartet_rl_data"};
  auto open = [](const std::string& path) {
    return error_of([&] { PromptDataset(path, "prompt", nullptr, 16); });
  };
  const std::string no_ids = dir.path("no_ids.h5");
  quartet::write_tensors_h5(no_ids, {{"tokens", torch::ones({2, 3}, torch::kLong)},
                                     {"lengths", torch::tensor({3, 3}, torch::kLong)}});
  std::string e = open(no_ids);
  EXPECT_HAS(e, no_ids);
  EXPECT_HAS(e, "no dataset \"input_ids\"");

  const std::string no_len = dir.path("no_len.h5");
  quartet::write_tensors_h5(no_len, {{"input_ids", torch::ones({2, 3}, torch::kLong)}});
  EXPECT_HAS(open(no_len), "no dataset \"lengths\"");

  const std::string bad_len = dir.path("bad_len.h5");
  quartet::write_tensors_h5(bad_len, {{"input_ids", torch::ones({2, 3}, torch::kLong)},
                                      {"lengths", torch::tensor({3, 4}, torch::kLong)}});
  e = open(bad_len);
  EXPECT_HAS(e, "row 1: length 4 is outside 1..3");

  const std::string floats = dir.path("floats.h5");
  quartet::write_tensors_h5(floats, {{"input_ids", torch::ones({2, 3})},
                                     {"lengths", torch::tensor({3, 3}, torch::kLong)}});
  EXPECT_HAS(open(floats), "does not hold integers");

  // A truncated file: the signature is there, the rest is not.
  const std::string whole = read_all(bad_len);
  const std::string cut = dir.file("cut.h5", whole.substr(0, 200));
  e = open(cut);
  EXPECT_HAS(e, cut + ": not a readable HDF5 file");
  // A foreign file under an HDF5 name.
  const std::string foreign = dir.file("foreign.h5", "{\"prompt\": \"this is JSON\"}\n");
  e = open(foreign);
  EXPECT_HAS(e, foreign + ": not a readable HDF5 file");
}

// ---- the sampler ------------------------------------------------------------------------------

// R samplers drawn in lock-step, as R actor ranks would: the global position stream, rank by
// rank within each draw, as global positions g = cursor + k * R + r.
std::vector<int64_t> lockstep_stream(int64_t n, uint64_t seed, int ranks, int count, int draws) {
  std::vector<PromptSampler> s;
  for (int r = 0; r < ranks; ++r) s.emplace_back(n, seed, r, ranks);
  std::vector<int64_t> stream;
  for (int d = 0; d < draws; ++d) {
    std::vector<std::vector<int64_t>> got;
    for (auto& sampler : s) got.push_back(sampler.next(count));
    for (int k = 0; k < count; ++k)
      for (int r = 0; r < ranks; ++r) stream.push_back(got[static_cast<size_t>(r)][static_cast<size_t>(k)]);
    for (auto& sampler : s) {
      EXPECT_EQ(sampler.cursor().epoch, s[0].cursor().epoch);
      EXPECT_EQ(sampler.cursor().position, s[0].cursor().position);
    }
  }
  return stream;
}

TEST(PromptSampler, RanksAreDisjointAndCoverEveryPromptOncePerEpoch) {
  const int64_t n = 7;  // not a multiple of 2 or 3
  for (int ranks : {1, 2, 3}) {
    for (int count : {1, 2, 5}) {
      SCOPED_TRACE("ranks " + std::to_string(ranks) + ", count " + std::to_string(count));
      const int draws = 6;
      const auto stream = lockstep_stream(n, 42, ranks, count, draws);
      ASSERT_EQ(stream.size(), static_cast<size_t>(ranks * count * draws));
      // Every whole epoch of the stream is a permutation of all prompts: the ranks' shares are
      // disjoint and together complete, and the remainder of one epoch's last draw is the start of
      // the next epoch, not a prompt dropped or repeated.
      for (size_t e = 0; (e + 1) * n <= stream.size(); ++e) {
        std::vector<int64_t> epoch(stream.begin() + e * n, stream.begin() + (e + 1) * n);
        std::sort(epoch.begin(), epoch.end());
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(epoch[static_cast<size_t>(i)], i) << "epoch " << e;
      }
      // And the cursor is where the stream ends.
      PromptSampler one(n, 42, 0, ranks);
      for (int d = 0; d < draws; ++d) one.next(count);
      const int64_t total = static_cast<int64_t>(ranks) * count * draws;
      EXPECT_EQ(one.cursor().epoch, total / n);
      EXPECT_EQ(one.cursor().position, total % n);
    }
  }
}

TEST(PromptSampler, RankOneOfTwoTakesOddPositionsOfTheEpoch) {
  PromptSampler all(10, 5, 0, 1), odd(10, 5, 1, 2);
  const auto order = all.next(10);
  EXPECT_EQ(odd.next(5), (std::vector<int64_t>{order[1], order[3], order[5], order[7], order[9]}));
}

TEST(PromptSampler, MoreRanksThanPrompts) {
  // 2 prompts, 5 ranks: one draw spans several epochs; still every epoch is a permutation.
  const auto stream = lockstep_stream(2, 9, 5, 1, 4);
  for (size_t e = 0; (e + 1) * 2 <= stream.size(); ++e) {
    std::set<int64_t> epoch(stream.begin() + e * 2, stream.begin() + (e + 1) * 2);
    EXPECT_EQ(epoch, (std::set<int64_t>{0, 1}));
  }
}

TEST(PromptSampler, DeterministicInSeedAndEpochsDiffer) {
  const int64_t n = 50;
  PromptSampler a(n, 1234, 0, 1), b(n, 1234, 0, 1), c(n, 1235, 0, 1);
  const auto a0 = a.next(n), a1 = a.next(n);
  EXPECT_EQ(a0, b.next(n));
  EXPECT_EQ(a1, b.next(n));
  EXPECT_NE(a0, a1);         // epoch 1 is another order
  EXPECT_NE(a0, c.next(n));  // and so is another seed's
  // The order is part of what a checkpoint resumes: it must not change between builds or
  // platforms (mt19937_64 is fixed by the standard, the shuffle is written out). Golden value of
  // this implementation.
  PromptSampler g(10, 1, 0, 1);
  const auto first = g.next(10);
  std::vector<int64_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_EQ(first, (std::vector<int64_t>{4, 6, 8, 9, 3, 5, 7, 2, 0, 1}));
}

TEST(PromptSampler, CursorSaveAndRestoreContinuesIdentically) {
  const int64_t n = 11;
  for (int ranks : {1, 3}) {
    for (int rank = 0; rank < ranks; ++rank) {
      PromptSampler run(n, 77, rank, ranks);
      run.next(2);
      run.next(2);
      const PromptCursor saved = run.cursor();
      std::vector<int64_t> after;
      for (int d = 0; d < 5; ++d) {  // crosses epoch boundaries
        const auto v = run.next(2);
        after.insert(after.end(), v.begin(), v.end());
      }
      PromptSampler resumed(n, 77, rank, ranks);
      resumed.set_cursor(saved);
      std::vector<int64_t> again;
      for (int d = 0; d < 5; ++d) {
        const auto v = resumed.next(2);
        again.insert(again.end(), v.begin(), v.end());
      }
      EXPECT_EQ(after, again) << "rank " << rank << " of " << ranks;
      EXPECT_EQ(run.cursor().epoch, resumed.cursor().epoch);
      EXPECT_EQ(run.cursor().position, resumed.cursor().position);
    }
  }
  // A cursor that does not fit the dataset (another prompts file) is refused.
  PromptSampler s(n, 77, 0, 1);
  s.set_cursor({0, n});
  EXPECT_HAS(error_of([&] { s.next(1); }), "does not fit a dataset of 11");
  EXPECT_HAS(error_of([&] { PromptSampler(0, 1, 0, 1); }), "no rows");
  EXPECT_HAS(error_of([&] { PromptSampler(5, 1, 2, 2); }), "rank 2 of 2");
}

// ---- rule rewards -----------------------------------------------------------------------------

TEST(RuleReward, Answers) {
  auto sort = quartet::make_rule_reward("sort_digits");
  auto add = quartet::make_rule_reward("add");
  EXPECT_EQ(sort->name(), "sort_digits");
  EXPECT_EQ(add->name(), "add");
  EXPECT_EQ(sort->answer("sort 3817="), "1378");
  EXPECT_EQ(sort->answer("sort 900="), "009");
  EXPECT_EQ(sort->answer("sort 987654="), "456789");
  EXPECT_EQ(add->answer("add 27+58="), "85");
  EXPECT_EQ(add->answer("add 0+0="), "0");
  EXPECT_EQ(add->answer("add 99+99="), "198");
  EXPECT_EQ(add->answer("add 5+10="), "15");
}

TEST(RuleReward, RefusesOtherPromptsNamingThem) {
  auto sort = quartet::make_rule_reward("sort_digits");
  auto add = quartet::make_rule_reward("add");
  for (const char* p : {"", "sort", "sort =", "sort 12=", "sort 1234567=", "sort 12a4=", "sort 1234",
                        "sort  1234=", "Sort 1234=", "sort 1234=\n", "add 1+2="}) {
    const std::string e = error_of([&] { sort->answer(p); });
    EXPECT_HAS(e, "\"" + std::string(p) + "\" is not a sort_digits prompt");
  }
  for (const char* p : {"", "add", "add 1+2", "add 1+=", "add +2=", "add 07+2=", "add 100+1=",
                        "add 1+2+3=", "add -1+2=", "add 1 + 2=", "add 1-2=", "sort 123="}) {
    const std::string e = error_of([&] { add->answer(p); });
    EXPECT_HAS(e, "\"" + std::string(p) + "\" is not a add prompt");
  }
  // score() checks the prompt too.
  EXPECT_HAS(error_of([&] { add->score("sort 123=", "123"); }), "not a add prompt");
  const std::string e = error_of([&] { quartet::make_rule_reward("multiply"); });
  EXPECT_HAS(e, "'multiply'");
  EXPECT_HAS(e, "sort_digits, add");
}

TEST(RuleReward, Scores) {
  auto sort = quartet::make_rule_reward("sort_digits");
  auto add = quartet::make_rule_reward("add");
  EXPECT_DOUBLE_EQ(sort->score("sort 3817=", "1378"), 1.0);
  EXPECT_DOUBLE_EQ(sort->score("sort 3817=", "1378\nmore text"), 1.0);  // cut at the newline
  // 0.6 in place/L + 0.25 common/L + 0.15 digits/len (rule_rewards.hpp)
  EXPECT_DOUBLE_EQ(sort->score("sort 3817=", "1387"), 0.6 * 2 / 4 + 0.25 * 4 / 4 + 0.15);  // two in place
  EXPECT_DOUBLE_EQ(sort->score("sort 3817=", "13"), 0.6 * 2 / 4 + 0.25 * 2 / 4 + 0.15);  // short
  EXPECT_DOUBLE_EQ(sort->score("sort 3817=", "137800"), 0.6 * 4 / 6 + 0.25 * 4 / 6 + 0.15);  // long, never 1
  EXPECT_DOUBLE_EQ(sort->score("sort 3817=", "8731"), 0.25 + 0.15);  // right digits, none in place
  EXPECT_DOUBLE_EQ(sort->score("sort 3817=", "xy"), 0.0);
  EXPECT_DOUBLE_EQ(sort->score("sort 3817=", ""), 0.0);
  EXPECT_DOUBLE_EQ(sort->score("sort 3817=", "\n1378"), 0.0);  // empty before the stop
  EXPECT_DOUBLE_EQ(sort->score("sort 3817=", " 1378"), 0.25 * 4 / 5 + 0.15 * 4 / 5);  // none in place
  EXPECT_DOUBLE_EQ(add->score("add 27+58=", "85"), 1.0);
  EXPECT_DOUBLE_EQ(add->score("add 27+58=", "84"), 0.6 * 1 / 2 + 0.25 * 1 / 2 + 0.15);
  EXPECT_DOUBLE_EQ(add->score("add 27+58=", "8"), 0.6 * 1 / 2 + 0.25 * 1 / 2 + 0.15);
  EXPECT_DOUBLE_EQ(add->score("add 27+58=", "850"), 0.6 * 2 / 3 + 0.25 * 2 / 3 + 0.15);
  EXPECT_DOUBLE_EQ(add->score("add 99+99=", "198"), 1.0);
  // Only the exact answer scores 1.
  for (const char* c : {"1378 ", "01378", "137", "13788"}) EXPECT_LT(sort->score("sort 3817=", c), 1.0) << c;
}

TEST(RuleReward, MakePromptsIsDeterministicAndWellFormed) {
  for (const char* task : {"sort_digits", "add"}) {
    auto r = quartet::make_rule_reward(task);
    const auto a = r->make_prompts(300, 11), b = r->make_prompts(300, 11), c = r->make_prompts(300, 12);
    EXPECT_EQ(a, b) << task;
    EXPECT_NE(a, c) << task;
    EXPECT_EQ(r->make_prompts(0, 11).size(), 0u);
    // A longer list starts with the shorter one: count does not change the draws.
    const auto longer = r->make_prompts(400, 11);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), longer.begin())) << task;
    std::set<size_t> lengths;
    for (const auto& p : a) {
      const std::string answer = r->answer(p);  // every prompt parses
      EXPECT_DOUBLE_EQ(r->score(p, answer), 1.0);
      lengths.insert(p.size());
    }
    if (std::string(task) == "sort_digits") {
      // All of 3 to 6 digits occur.
      EXPECT_EQ(lengths, (std::set<size_t>{9, 10, 11, 12}));
    }
  }
}

TEST(RuleReward, ShippedPromptFilesAreMakePromptsOutput) {
  const char* src = std::getenv("QUARTET_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "ctest sets QUARTET_SOURCE_DIR";
  auto tok = quartet::make_builtin_tokenizer();
  const struct { const char* task; uint64_t seed; } files[] = {{"sort_digits", 1}, {"add", 2}};
  for (const auto& f : files) {
    auto r = quartet::make_rule_reward(f.task);
    std::string want;
    for (const auto& p : r->make_prompts(512, f.seed))
      want += "{\"prompt\": \"" + p + "\", \"answer\": \"" + r->answer(p) + "\"}\n";
    const std::string path = std::string(src) + "/inputs/prompts/" + f.task + ".jsonl";
    EXPECT_EQ(read_all(path), want) << path << " is not make_prompts(512, " << f.seed << ")";
    // And the dataset reads it with the demo's tokenizer, answers intact.
    PromptDataset ds(path, "prompt", tok.get(), 16);
    ASSERT_EQ(ds.size(), 512);
    for (int64_t i = 0; i < ds.size(); ++i) {
      const DatasetPrompt p = ds.get(i);
      ASSERT_EQ(p.answer, r->answer(p.text)) << path << " line " << i + 1;
    }
  }
}

}  // namespace

}  // namespace test_rl_data

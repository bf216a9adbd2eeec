// The pieces of `quartet sft` (docs/sft.md): plain and prepared demonstration files and their
// refusals by file and line, plain rows as token ids and targets, bucketing by length into
// micro-batches, and the loss of a bucketed step, which must equal the sum of every sequence's
// own loss computed alone (right padding behind causal attention is invisible). The whole
// command is tested by tests/tune/check_sft.py.
#include <gtest/gtest.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>
#include <torch/types.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/files.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/io/prompt_identity.hpp"
#include "quartet/io/sft_file.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/shard/sharded_model.hpp"
#include "quartet/tune/sft_batches.hpp"
#include "quartet/tune/sft_config.hpp"
#include "quartet/tune/sft_dataset.hpp"
#include "quartet/tune/sft_eval.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_sft_data {

namespace {


#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

std::string header_line(const std::string& sha) {
  nlohmann::json h = {{"quartet_sft", 1},
                      {"tokenizer", {{"sha256", sha}, {"source", "built-in"}}},
                      {"chat_template", {{"applied", false}, {"sha256", nullptr}, {"source", nullptr}}}};
  return h.dump() + "\n";
}

std::string builtin_sha() { return builtin_tokenizer_identity().tokenizer_sha256; }

Config sft_config(const std::string& data, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"sft.data=" + data};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_config(Deck("sft.deck", "[model.actor]\npath = random:llama\n", sets, deck_schema()));
}

SftExample example(std::vector<int64_t> ids, int64_t prompt_length) {
  SftExample e;
  e.ids = std::move(ids);
  e.prompt_length = prompt_length;
  e.targets.assign(e.ids.size(), 0);
  for (size_t t = static_cast<size_t>(prompt_length); t < e.ids.size(); ++t) e.targets[t] = 1;
  return e;
}

}  // namespace

TEST(SftFile, PlainRowsAndTheirRefusals) {
  test::ScratchDir dir{"quartet_sft"};
  const std::string good = dir.file("good.jsonl", "{\"prompt\": \"sort 21=\", \"answer\": \"12\", \"x\": 1}\n\n"
                                                  "{\"prompt\": \"sort 3=\", \"answer\": \"3\"}\n");
  const auto rows = read_sft_rows(good, "prompt", "answer");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].prompt, "sort 3=");
  EXPECT_EQ(rows[1].response, "3");
  EXPECT_EQ(rows[1].where, good + ":3");
  EXPECT_TRUE(rows[0].ids.empty());
  auto refusal = [&](const std::string& text) {
    const std::string path = dir.file("bad.jsonl", text);
    return test::error_of([&] { read_sft_rows(path, "prompt", "response"); });
  };
  EXPECT_HAS(refusal("{\"prompt\": \"a\", \"response\": \"b\"}\nnot json\n"), "bad.jsonl:2: not JSON");
  EXPECT_HAS(refusal("{\"prompt\": \"a\"}\n"), "bad.jsonl:1: no \"response\" field");
  EXPECT_HAS(refusal("{\"prompt\": \"a\", \"response\": 3}\n"), "bad.jsonl:1: \"response\" is number, not a string");
  EXPECT_HAS(refusal("{\"prompt\": \"a\", \"response\": \"\"}\n"), "bad.jsonl:1: \"response\" is empty");
  EXPECT_HAS(refusal("[1, 2]\n"), "bad.jsonl:1: expected a JSON object, found array");
  EXPECT_HAS(refusal("{\"prompt\": \"a\", \"response\": \"b\", \"input_ids\": [1, 2]}\n"),
             "bad.jsonl:1: a row with token ids, but the file has no prepared-sft header");
  EXPECT_HAS(refusal("\n\n"), "holds no rows");
}

TEST(SftFile, PreparedRowsAndTheirRefusals) {
  test::ScratchDir dir{"quartet_sft"};
  const std::string h = header_line(builtin_sha());
  auto row = [](nlohmann::json patch) {
    nlohmann::json r = {{"prompt", "sort 1="}, {"response", "1"}, {"input_ids", {1, 85, 4, 5}},
                        {"loss_mask", {0, 0, 1, 1}}, {"prompt_length", 2}};
    if (patch.is_object()) r.merge_patch(patch);
    return r.dump() + "\n";
  };
  const std::string good = dir.file("good.jsonl", h + row({}));
  const auto header = read_sft_header(good);
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->tokenizer_sha256, builtin_sha());
  const auto rows = read_sft_rows(good, "prompt", "response");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].ids, (std::vector<int64_t>{1, 85, 4, 5}));
  EXPECT_EQ(rows[0].loss_mask, (std::vector<uint8_t>{0, 0, 1, 1}));
  EXPECT_EQ(rows[0].prompt_length, 2);
  auto refusal = [&](const std::string& text) {
    const std::string path = dir.file("bad.jsonl", text);
    return test::error_of([&] { read_sft_rows(path, "prompt", "response"); });
  };
  EXPECT_HAS(refusal(h + row({{"loss_mask", {0, 1, 1}}})), "bad.jsonl:2: \"loss_mask\" has 3 entries for 4 input_ids");
  EXPECT_HAS(refusal(h + row({{"loss_mask", {0, 0, 2, 1}}})), "bad.jsonl:2: \"loss_mask\"[2] is 2, not 0 or 1");
  EXPECT_HAS(refusal(h + row({{"loss_mask", {1, 0, 1, 1}}})), "bad.jsonl:2: \"loss_mask\"[0] is 1");
  EXPECT_HAS(refusal(h + row({{"loss_mask", {0, 1, 0, 0}}})),
             "bad.jsonl:2: \"loss_mask\" counts no token of the final response");
  EXPECT_HAS(refusal(h + row({{"prompt_length", 4}})), "bad.jsonl:2: \"prompt_length\" is 4; expected 1 .. 3");
  EXPECT_HAS(refusal(h + row({{"input_ids", {1, -2, 4, 5}}})), "bad.jsonl:2: \"input_ids\"[1] is -2, not a token id");
  EXPECT_HAS(refusal(h + row({}) + h), "bad.jsonl:3: a second prepared-sft header");
  EXPECT_HAS(refusal("{\"quartet_sft\": 2}\n" + row({})), "bad.jsonl:1: a malformed prepared-sft header");
}

TEST(SftDataset, PlainRowsAreTheTokenizersIdsAndTheResponseIsTheTarget) {
  const auto tok = make_builtin_tokenizer();
  SftRow row;
  row.prompt = "sort 21=";
  row.response = "12";
  const SftExample e = tokenize_plain(row, *tok, false);
  std::vector<int64_t> want = tok->encode("sort 21=", true);
  const int64_t P = static_cast<int64_t>(want.size());
  EXPECT_EQ(want.front(), *tok->bos_id);
  for (int64_t id : tok->encode("12", false)) want.push_back(id);
  want.push_back(*tok->eos_id);
  EXPECT_EQ(e.ids, want);
  EXPECT_EQ(e.prompt_length, P);
  EXPECT_EQ(e.target_count(), 3);  // "1", "2", EOS
  for (int64_t t = 0; t < static_cast<int64_t>(e.ids.size()); ++t) EXPECT_EQ(e.targets[t], t >= P ? 1 : 0);
  const SftExample all = tokenize_plain(row, *tok, true);
  EXPECT_EQ(all.target_count(), static_cast<int64_t>(all.ids.size()) - 1);
  EXPECT_EQ(expected_completion(e, {*tok->eos_id}), std::vector<int64_t>(want.begin() + P, want.end()));
}

TEST(SftDataset, RefusesRowsByFileAndLine) {
  test::ScratchDir dir{"quartet_sft"};
  const std::string data = dir.file("d.jsonl", "{\"prompt\": \"sort 1=\", \"response\": \"1\"}\n"
                                               "{\"prompt\": \"sort 987654321=\", \"response\": \"123456789\"}\n");
  const auto tok = make_builtin_tokenizer();
  const TokenizerIdentity id = builtin_tokenizer_identity();
  const Config long_rows = sft_config(data, {"sft.max_tokens=12"});
  EXPECT_HAS(test::error_of([&] { SftDataset(long_rows.get<SftConfig>().data, "sft.data", long_rows, *tok, id); }),
             "sft.data names '" + data + "': " + data + ":2: prompt and response are 26 tokens, more than sft.max_tokens = 12");
  const Config fits = sft_config(data);
  EXPECT_EQ(SftDataset(fits.get<SftConfig>().data, "sft.data", fits, *tok, id).size(), 2);
  // A prepared file: made for another tokenizer, or with an id outside this one.
  nlohmann::json r = {{"prompt", "a"}, {"response", "b"}, {"input_ids", {1, 5000}}, {"loss_mask", {0, 1}},
                      {"prompt_length", 1}};
  const std::string other = dir.file("other.jsonl", header_line(std::string(64, 'a')) + r.dump() + "\n");
  const Config c_other = sft_config(other);
  EXPECT_HAS(test::error_of([&] { SftDataset(c_other.get<SftConfig>().data, "sft.data", c_other, *tok, id); }),
             "sft.data names a file prepared for another actor");
  const std::string wide = dir.file("wide.jsonl", header_line(builtin_sha()) + r.dump() + "\n");
  const Config c_wide = sft_config(wide);
  EXPECT_HAS(test::error_of([&] { SftDataset(c_wide.get<SftConfig>().data, "sft.data", c_wide, *tok, id); }),
             wide + ":2: token 1 is id 5000, outside the actor's tokenizer");
}

TEST(SftBatches, BucketsSortByLengthAndCutByRowsOrTokens) {
  std::vector<SftExample> ex;
  for (int64_t len : {5, 9, 3, 9, 7, 4, 6}) {
    std::vector<int64_t> ids(static_cast<size_t>(len));
    for (int64_t t = 0; t < len; ++t) ids[static_cast<size_t>(t)] = 10 + t;
    ex.push_back(example(ids, 2));
  }
  std::vector<const SftExample*> rows;
  for (const auto& e : ex) rows.push_back(&e);
  const auto by_rows = bucket_examples(rows, 3, 0, 0, torch::kCPU);
  ASSERT_EQ(by_rows.size(), 3u);
  EXPECT_EQ(by_rows[0].ids.sizes(), (std::vector<int64_t>{3, 9}));  // 9, 9, 7
  EXPECT_EQ(by_rows[1].ids.sizes(), (std::vector<int64_t>{3, 6}));  // 6, 5, 4
  EXPECT_EQ(by_rows[2].ids.sizes(), (std::vector<int64_t>{1, 3}));  // 3
  int64_t targets = 0, tokens = 0;
  for (const auto& mb : by_rows) {
    targets += mb.target_tokens;
    tokens += mb.tokens;
    EXPECT_EQ(mb.targets.sum().item<double>(), static_cast<double>(mb.target_tokens));
    // Every row is its tokens, then padding.
    EXPECT_TRUE(mb.attention.sum(1).eq(mb.attention.cumsum(1).select(1, mb.attention.size(1) - 1)).all().item<bool>());
  }
  EXPECT_EQ(tokens, 5 + 9 + 3 + 9 + 7 + 4 + 6);
  EXPECT_EQ(targets, 3 + 7 + 1 + 7 + 5 + 2 + 4);
  // Row 0 of the second micro-batch is the 6-token example: its targets shifted by one.
  EXPECT_EQ(by_rows[1].targets[0].narrow(0, 0, 5).sum().item<double>(), 4.0);
  EXPECT_EQ(by_rows[1].targets[0][0].item<float>(), 0.0f);
  EXPECT_EQ(by_rows[1].targets[0][1].item<float>(), 1.0f);
  const auto by_tokens = bucket_examples(rows, 1, 20, 0, torch::kCPU);
  for (const auto& mb : by_tokens) EXPECT_LE(mb.ids.numel(), 20);
  EXPECT_EQ(by_tokens.size(), 3u);  // 9 9 | 7 6 | 5 4 3 (18, 14 and 15 padded tokens)
}

// The loss of a step cut into bucketed micro-batches is the sum of every sequence's loss alone,
// computed here independently (one row, no padding, log_softmax); so are the predicted targets.
TEST(SftBatches, BucketedLossEqualsEverySequenceAlone) {
  ModelConfig m;
  m.model_type = "llama";
  m.vocab_size = 40;
  m.hidden_size = 32;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.intermediate_size = 48;
  m.max_positions = 64;
  m.activation = "silu";
  m.complete("test config");
  auto self = make_mpi_collectives("sft_self", {test::world().rank()}, MPI_COMM_SELF, nullptr);
  ShardOptions so;
  so.trainable = false;
  ShardedModel model(m, Head::causal_lm, *self, so, source_random(m, 7, torch::kCPU));
  auto gen = at::detail::createCPUGenerator(3);
  std::vector<SftExample> ex;
  for (int64_t len : {12, 5, 17, 9, 9, 3, 14, 6}) {
    auto ids = torch::randint(1, 40, {len}, gen, torch::kLong);
    ex.push_back(example(std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + len), len / 2));
  }
  ex[3].targets[1] = 1;  // an earlier assistant turn, as a prepared chat's mask may have
  torch::NoGradGuard no_grad;
  double alone = 0, alone_correct = 0;
  for (const auto& e : ex) {
    const int64_t T = static_cast<int64_t>(e.ids.size());
    auto ids = torch::tensor(e.ids, torch::kLong).unsqueeze(0);
    auto logits = model.forward(ids, torch::ones_like(ids)).squeeze(0).to(torch::kFloat64);
    auto logp = torch::log_softmax(logits, -1);
    for (int64_t t = 1; t < T; ++t) {
      if (!e.targets[static_cast<size_t>(t)]) continue;
      alone -= logp[t - 1][e.ids[static_cast<size_t>(t)]].item<double>();
      alone_correct += logits[t - 1].argmax().item<int64_t>() == e.ids[static_cast<size_t>(t)] ? 1 : 0;
    }
  }
  std::vector<const SftExample*> rows;
  for (const auto& e : ex) rows.push_back(&e);
  for (auto [max_rows, max_tokens] : {std::pair<int64_t, int64_t>{3, 0}, {8, 0}, {1, 40}}) {
    double bucketed = 0, correct = 0;
    for (const auto& mb : bucket_examples(rows, max_rows, max_tokens, 0, torch::kCPU)) {
      const SftLoss l = sft_loss(model, mb);
      bucketed += l.nll_sum.item<double>();
      correct += l.correct.item<double>();
    }
    EXPECT_NEAR(bucketed, alone, 1e-5 * alone) << "micro-batches of " << max_rows << " rows, " << max_tokens << " tokens";
    EXPECT_EQ(correct, alone_correct);
  }
}

}  // namespace test_sft_data

// What every command's generation stops at, pads with and may pick (engine/sampling_setup.hpp):
// the tokenizer's EOS, every eos_token_id of the model's config.json and generation_config.json
// and rollout.stop's tokens, each once, ids the tokenizer cannot produce left out; the pad and
// the vocabulary limit from the tokenizer; a bad stop or file refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/engine/sampling_setup.hpp"
#include "quartet/model/generation_config.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_sampling_setup {

namespace {

Config deck(const std::string& text) { return load_config(Deck("t.deck", text, {}, deck_schema())); }

// The built-in character tokenizer (<pad> 0, <bos> 1, <eos> 2, then printable ASCII) and a model
// whose config.json lists `config_eos` and whose directory is `dir`.
ModelSpec model(const std::string& dir, std::vector<int64_t> config_eos) {
  ModelSpec spec;
  spec.dir = dir;
  spec.config.eos_token_ids = std::move(config_eos);
  return spec;
}

}  // namespace

TEST(SamplingSetup, StopsAtEveryEosIdOnce) {
  test::ScratchDir dir;
  dir.file("generation_config.json", R"({"eos_token_id": [2, 7, 9, 100000], "pad_token_id": 0})");
  const auto tok = make_builtin_tokenizer();
  const int64_t a = *tok->token_to_id("a"), b = *tok->token_to_id("b");
  const SamplingSetup s = sampling_setup(deck("[rollout]\nstop = a, b, a\n"), *tok, model(dir.directory(), {2, 5, 7}));
  // EOS, config.json's 5 and 7, generation_config.json's 9 (100000 is no id of the tokenizer), the stops.
  EXPECT_EQ(s.stop_ids, (std::vector<int64_t>{2, 5, 7, 9, a, b}));
  EXPECT_EQ(s.pad_id, 0);  // the tokenizer's <pad>
  EXPECT_EQ(s.vocab_limit, tok->vocab_size());
  // The rollout's sampling carries them.
  const SamplingParams p = rollout_sampling(deck("[rollout]\ntemperature = 0.5\ntop_k = 3\n"), s);
  EXPECT_EQ(p.stop_ids, s.stop_ids);
  EXPECT_EQ(p.pad_id, s.pad_id);
  EXPECT_EQ(p.vocab_limit, s.vocab_limit);
  EXPECT_EQ(p.temperature, 0.5);
  EXPECT_EQ(p.top_k, 3);
}

TEST(SamplingSetup, WithoutGenerationConfigTheModelsConfigAlone) {
  test::ScratchDir dir;
  const auto tok = make_builtin_tokenizer();
  EXPECT_TRUE(generation_stop_ids(dir.directory()).empty());
  EXPECT_EQ(sampling_setup(deck(""), *tok, model(dir.directory(), {2, 11})).stop_ids, (std::vector<int64_t>{2, 11}));
  // Random weights have no directory.
  EXPECT_EQ(sampling_setup(deck(""), *tok, model("", {})).stop_ids, (std::vector<int64_t>{2}));
  dir.file("generation_config.json", R"({"eos_token_id": 13})");
  EXPECT_EQ(generation_stop_ids(dir.directory()), (std::vector<int64_t>{13}));
  dir.file("generation_config.json", R"({"eos_token_id": null, "do_sample": true})");
  EXPECT_TRUE(generation_stop_ids(dir.directory()).empty());
}

TEST(SamplingSetup, RefusesByName) {
  test::ScratchDir dir;
  const auto tok = make_builtin_tokenizer();
  EXPECT_NE(test::error_of([&] { sampling_setup(deck("[rollout]\nstop = ab\n"), *tok, model("", {})); })
                .find("t.deck:2: rollout.stop names 'ab', which is not a token of the tokenizer"),
            std::string::npos);
  const std::string path = dir.file("generation_config.json", R"({"eos_token_id": ["</s>"]})");
  const std::string e = test::error_of([&] { generation_stop_ids(dir.directory()); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("eos_token_id[0]"), std::string::npos) << e;
  dir.file("generation_config.json", "{\"eos_token_id\": [2,");
  EXPECT_NE(test::error_of([&] { generation_stop_ids(dir.directory()); }).find("generation_config.json"), std::string::npos);
}

}  // namespace test_sampling_setup

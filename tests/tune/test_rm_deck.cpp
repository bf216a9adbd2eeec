// The pieces of `quartet rm` (docs/rm.md) below the command: the [rm] section (typed, refused by
// key, its resolved deck parsing back), the layout without an actor that only an rm deck may
// have, the reward as the trained role and the tokenizer's owner, the memory plan of an rm deck,
// the run's length, pair files read as one dataset, and micro-batches of pairs. The command is
// tested end to end by tests/tune/check_rm.py.
#include <gtest/gtest.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>
#include <torch/types.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/dist/placement.hpp"
#include "quartet/io/prompt_identity.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/shard/memory_plan.hpp"
#include "quartet/shard/train_config.hpp"
#include "quartet/tune/pair_stage.hpp"
#include "quartet/tune/rm.hpp"
#include "quartet/tune/rm_config.hpp"
#include "quartet/tune/stage_plan.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_rm_deck {

namespace {

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

std::string source_dir() {
  const char* src = std::getenv("QUARTET_SOURCE_DIR");
  return src ? src : ".";
}

Config example_deck(const std::vector<std::string>& sets = {}) {
  EXPECT_EQ(::chdir(source_dir().c_str()), 0);
  return load_config(Deck::from_file("inputs/rm/sort_digits.deck", sets, deck_schema()));
}

std::string refusal(const std::vector<std::string>& sets) {
  return test::error_of([&] { example_deck(sets); });
}


std::string pair_line(const std::string& prompt, const std::string& chosen, const std::string& rejected) {
  return "{\"prompt\": \"" + prompt + "\", \"chosen\": \"" + chosen + "\", \"rejected\": \"" + rejected + "\"}\n";
}

}  // namespace

TEST(RmDeck, TheExampleLoadsAndItsResolvedDeckParsesBack) {
  const Config c = example_deck();
  EXPECT_TRUE(c.get<RmConfig>().enabled());
  EXPECT_EQ(c.get<RmConfig>().data, std::vector<std::string>{"inputs/rm/sort_digits_pairs.jsonl"});
  EXPECT_EQ(c.get<RmConfig>().stage.batch, 16);
  EXPECT_EQ(c.get<RmConfig>().stage.max_tokens, 32);
  EXPECT_TRUE(c.get<RmConfig>().margin);
  EXPECT_FALSE(c.get<PlacementConfig>().needs_actor);
  const Config again = load_config(Deck("resolved.deck", c.deck.resolved(), {}, deck_schema()));
  EXPECT_EQ(again.deck.resolved(), c.deck.resolved());
  EXPECT_EQ(again.get<RmConfig>().stage.heldout, c.get<RmConfig>().stage.heldout);
}

TEST(RmDeck, KeysAreRefusedByName) {
  EXPECT_HAS(refusal({"rm.batch=0"}), "rm.batch must be at least 1");
  EXPECT_HAS(refusal({"rm.epochs=0"}), "rm.epochs must be a number > 0");
  EXPECT_HAS(refusal({"rm.steps=-1"}), "rm.steps must be >= 0");
  EXPECT_HAS(refusal({"rm.max_tokens=1"}), "rm.max_tokens must be at least 2");
  EXPECT_HAS(refusal({"rm.data=nowhere.jsonl"}), "rm.data names 'nowhere.jsonl', which is not a readable file");
  EXPECT_HAS(refusal({"rm.heldout="}), "rm.eval_every is set, but rm.heldout is not");
  EXPECT_HAS(refusal({"rm.eval_every=0", "rm.eval_at_end=false"}), "rm.eval_at_end is false");
  // Defaults spelled out without a held-out file, as a resolved deck spells them, are fine.
  EXPECT_EQ(refusal({"rm.heldout=", "rm.eval_every=0", "rm.eval_at_end=true", "rm.eval_count=0"}), "<no error>");
}

TEST(RmDeck, OnlyAnRmDeckMayLeaveTheActorOut) {
  const Config c = example_deck();
  const Placement p = make_placement(c.get<PlacementConfig>(), 2, c.deck);
  EXPECT_FALSE(p.has(Role::actor));
  EXPECT_EQ(p.ranks_of(Role::reward), (std::vector<int>{0, 1}));
  EXPECT_EQ(p.describe(), "disjoint: reward ranks 0-1");
  EXPECT_NO_THROW(check_rm_deck(c, p));
  // The same layout in a deck without rm.data is train's, which needs the actor.
  const Config train = example_deck({"rm.data=", "rm.heldout=", "rm.eval_every=0"});
  EXPECT_HAS(test::error_of([&] { make_placement(train.get<PlacementConfig>(), 2, train.deck); }), "placement.actor is not set");
  EXPECT_HAS(test::error_of([&] { check_rm_deck(train, p); }), "rm.data is not set");
  const Config with_actor = example_deck({"placement.actor=1"});
  EXPECT_HAS(test::error_of([&] { check_rm_deck(with_actor, make_placement(with_actor.get<PlacementConfig>(), 3, with_actor.deck)); }),
             "placement.actor places the actor on ranks, but quartet rm trains the reward model alone");
}

TEST(RmDeck, TheRewardIsTrainedAndOwnsTheTokenizer) {
  const Config c = example_deck();
  EXPECT_TRUE(is_trained(c, Role::reward));
  EXPECT_FALSE(is_trained(c, Role::actor));
  EXPECT_EQ(tokenizer_role(c), Role::reward);
  const ModelSpec reward = resolve_model(c, Role::reward);
  EXPECT_TRUE(reward.trained);
  EXPECT_EQ(reward.head, Head::sequence_reward);
  // In train's decks the reward model stays frozen and the actor's tokenizer is the run's.
  const Config train = example_deck({"rm.data=", "rm.heldout=", "rm.eval_every=0"});
  EXPECT_FALSE(is_trained(train, Role::reward));
  EXPECT_TRUE(is_trained(train, Role::actor));
  EXPECT_EQ(tokenizer_role(train), Role::actor);
}

TEST(RmDeck, ThePlanTrainsTheRewardOnPairBatches) {
  const Config c = example_deck();
  const Config planned = stage_plan_config(c);
  EXPECT_EQ(planned.get<RolloutConfig>().max_prompt_tokens + planned.get<RolloutConfig>().max_new_tokens, widest_pair_batch(c));
  EXPECT_EQ(widest_pair_batch(c), 62);
  EXPECT_EQ(planned.get<TrainConfig>().micro_batch, 2 * c.get<TrainConfig>().micro_batch);  // both sides of each pair
  const MemoryPlan plan = make_memory_plan(planned, 2, 2);
  ASSERT_EQ(plan.ranks.size(), 2u);
  for (const RankPlan& rank : plan.ranks) {
    ASSERT_EQ(rank.roles.size(), 1u);
    const RolePlan& r = rank.roles[0];
    EXPECT_EQ(r.role, Role::reward);
    EXPECT_TRUE(r.trained);
    EXPECT_GT(r.grads, 0u);
    EXPECT_GT(r.moments, 0u);
    std::vector<std::string> phases;
    for (const PhasePlan& ph : r.phases) phases.push_back(ph.name);
    EXPECT_EQ(phases, (std::vector<std::string>{"score", "train"}));
  }
}

TEST(RmDeck, StepsFromEpochsOrGiven) {
  RmConfig rm;
  rm.stage.epochs = 8;
  rm.stage.batch = 16;
  EXPECT_EQ(rm_steps(rm, 1024, 2), 256);
  rm.stage.epochs = 0.5;
  EXPECT_EQ(rm_steps(rm, 1000, 3), 11);  // ceil(500 / 48)
  rm.stage.steps = 7;
  EXPECT_EQ(rm_steps(rm, 1000, 3), 7);
}

TEST(PairStage, FilesAreOneDatasetAndMicroBatchesRoundTrip) {
  test::ScratchDir dir{"quartet_rm"};
  const std::string a = dir.file("a.jsonl", pair_line("sort 21=", "12", "21") + pair_line("sort 3=", "3", "33"));
  const std::string b = dir.file("b.jsonl", pair_line("sort 987=", "789", "798"));
  const Config c = example_deck({"rm.data=" + a + "," + b});
  auto tokenizer = make_builtin_tokenizer();
  const TokenizerIdentity identity = builtin_tokenizer_identity();
  const PreparedFileKind kind{"pairs", "reward model", "prepare_pairs.py"};
  const PairFiles files(c.get<RmConfig>().data, "rm.data", c, *tokenizer, 32, identity, kind);
  ASSERT_EQ(files.size(), 3);
  const PreferencePair third = files.get(2);
  EXPECT_EQ(third.index, 2);
  EXPECT_EQ(third.prompt, tokenizer->encode("sort 987=", true));
  std::vector<int64_t> chosen = tokenizer->encode("789", false);
  chosen.push_back(*tokenizer->eos_id);
  EXPECT_EQ(third.chosen, chosen);
  EXPECT_HAS(test::error_of([&] { PairFiles(c.get<RmConfig>().data, "rm.data", c, *tokenizer, 32, identity, kind, 4, "rm.eval_count"); }),
             "rm.eval_count is 4, but rm.data holds 3 pairs");
  EXPECT_EQ(PairFiles(c.get<RmConfig>().data, "rm.data", c, *tokenizer, 32, identity, kind, 2, "rm.eval_count").size(), 2);
  const std::string bad = dir.file("bad.jsonl", pair_line("sort 1=", "1", "1"));
  const std::string same = test::error_of([&] { PairFiles({bad}, "rm.heldout", c, *tokenizer, 32, identity, kind); });
  EXPECT_HAS(same, "rm.heldout names '" + bad + "': ");
  EXPECT_HAS(same, bad + ":1: chosen and rejected are the same response");

  std::vector<PreferencePair> pairs = {files.get(0), files.get(1), files.get(2)};
  const int64_t pad = *tokenizer->pad_id;
  const auto mbs = pair_micro_batches(pairs, 2, pad, torch::kCPU);
  ASSERT_EQ(mbs.size(), 2u);
  EXPECT_EQ(mbs[0].units, 2.0);
  EXPECT_EQ(mbs[1].units, 1.0);
  const PairBatch want = make_pair_batch({pairs[0], pairs[1]}, pad);
  const PairBatch got = pair_batch_of(mbs[0]);
  EXPECT_TRUE(torch::equal(got.chosen.sequences, want.chosen.sequences));
  EXPECT_TRUE(torch::equal(got.rejected.attention_mask, want.rejected.attention_mask));
  EXPECT_TRUE(torch::equal(got.rejected.action_mask, want.rejected.action_mask));
  EXPECT_TRUE(torch::equal(got.margin, want.margin));
  // The tokens trained, padding left out (as sft and dpo count them).
  EXPECT_EQ(mbs[0].tokens, (want.chosen.attention_mask.sum() + want.rejected.attention_mask.sum()).item<int64_t>());
  EXPECT_LT(mbs[0].tokens, 2 * want.chosen.sequences.numel());  // these pairs have padding
  EXPECT_EQ(share_of_rows(5, 1, 2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(share_of_rows(5, -1, 2), std::vector<int64_t>{});
}

}  // namespace test_rm_deck

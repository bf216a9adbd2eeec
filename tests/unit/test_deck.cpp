// Deck parsing and every error path: syntax, unknown keys and sections, repeated keys, types,
// ranges, overrides. Each error must name the file, the line (or the --set argument) and the key.
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>
#include <fstream>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/placement_config.hpp"
#include "quartet/model/models_config.hpp"
#include "quartet/rl/rewards/reward_call_config.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_deck {

namespace {

Config parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return load_config(Deck("test.deck", text, overrides, deck_schema()));
}

// The DeckError message of parsing `text`, or "" when it parses.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse(text, overrides);
  } catch (const DeckError& e) {
    return e.what();
  }
  return "";
}

const char* kGood = R"(# a complete deck
[run]
name = demo    # inline comment
out = runs/demo
seed = 7
iterations = 3

[placement]
mode = disjoint
actor = 4
critic = 2
reference = 1
reward = 1

[dist]
backend = mpi
watchdog_timeout = 2.5
)";

}  // namespace

TEST(Deck, ParsesTypedValuesAndComments) {
  Config c = parse(kGood);
  EXPECT_EQ(c.get<RunConfig>().name, "demo");
  EXPECT_EQ(c.get<RunConfig>().out, "runs/demo");
  EXPECT_EQ(c.get<RunConfig>().seed, 7u);
  EXPECT_EQ(c.get<RunConfig>().iterations, 3);
  EXPECT_EQ(c.get<PlacementConfig>().mode, PlacementMode::disjoint);
  EXPECT_EQ(c.get<PlacementConfig>().actor, 4);
  EXPECT_EQ(c.get<PlacementConfig>().critic, 2);
  EXPECT_EQ(c.get<DistConfig>().backend, Backend::mpi);
  EXPECT_DOUBLE_EQ(c.get<DistConfig>().watchdog_timeout, 2.5);
}

TEST(Deck, DefaultsFillMissingKeys) {
  Config c = parse("[placement]\nactor = 1\n");
  EXPECT_EQ(c.get<RunConfig>().iterations, RunConfig{}.iterations);
  EXPECT_EQ(c.get<DistConfig>().backend, Backend::automatic);
  EXPECT_EQ(c.get<PlacementConfig>().critic, -1);
  EXPECT_FALSE(c.deck.given("placement.critic"));
  EXPECT_TRUE(c.deck.given("placement.actor"));
}

TEST(Deck, OverridesWinAndAreNamedInErrors) {
  Config c = parse(kGood, {"placement.actor=5", "run.name=swept"});
  EXPECT_EQ(c.get<PlacementConfig>().actor, 5);
  EXPECT_EQ(c.get<RunConfig>().name, "swept");
  EXPECT_EQ(c.deck.where("placement.actor"), "--set placement.actor=5");
  EXPECT_EQ(c.deck.where("placement.critic"), "test.deck:11");
  EXPECT_EQ(c.deck.where("run.seed"), "test.deck:5");
  EXPECT_EQ(c.deck.where("dist.device"), "test.deck (default)");
  EXPECT_EQ(error_of(kGood, {"run.iterations=0"}),
            "--set run.iterations=0: run.iterations must be at least 1");
}

TEST(Deck, ResolvedDeckParsesBackToTheSameConfig) {
  Config c = parse(kGood, {"placement.actor=5"});
  std::string resolved = c.deck.resolved();
  EXPECT_NE(resolved.find("[placement]\nmode = disjoint\nactor = 5\n"), std::string::npos) << resolved;
  Config again = parse(resolved);
  EXPECT_EQ(again.get<PlacementConfig>().actor, 5);
  EXPECT_EQ(again.get<RunConfig>().seed, 7u);
  EXPECT_DOUBLE_EQ(again.get<DistConfig>().watchdog_timeout, 2.5);
}

TEST(DeckErrors, UnknownKeyNamesLineSectionAndKnownKeys) {
  std::string e = error_of("[run]\nname = x\n\n[placement]\nactr = 2\n");
  EXPECT_NE(e.find("test.deck:5: unknown key 'actr' in section [placement]"), std::string::npos) << e;
  EXPECT_NE(e.find("known keys: mode, actor, critic, reference, reward"), std::string::npos) << e;
}

TEST(DeckErrors, UnknownSection) {
  EXPECT_EQ(error_of("[run]\nname = x\n[ppo_typo]\nclip = 0.2\n"),
            "test.deck:3: unknown section [ppo_typo]");
}

TEST(DeckErrors, Syntax) {
  EXPECT_EQ(error_of("[run\n"), "test.deck:1: malformed section header '[run' (expected [name])");
  EXPECT_EQ(error_of("[run]\njust words\n"),
            "test.deck:2: expected 'key = value' or '[section]', found 'just words'");
  EXPECT_EQ(error_of("name = x\n"), "test.deck:1: key 'name' stands before any [section] header");
  EXPECT_EQ(error_of("[run]\nname =   # nothing\n"), "test.deck:2: key 'run.name' has an empty value");
}

TEST(DeckErrors, RepeatedKeyNamesBothLines) {
  EXPECT_EQ(error_of("[run]\nseed = 1\n\nseed = 2\n"),
            "test.deck:4: key 'run.seed' is set twice (first on line 2)");
}

TEST(DeckErrors, WrongTypeNamesLineAndExpectedType) {
  std::string e = error_of("[placement]\nactor = two\n");
  EXPECT_EQ(e.rfind("test.deck:2: placement.actor has a bad value: expected an integer", 0), 0u) << e;
  e = error_of("[dist]\nwatchdog_timeout = soon\n");
  EXPECT_EQ(e.rfind("test.deck:2: dist.watchdog_timeout has a bad value: expected a number", 0), 0u) << e;
  e = error_of("[run]\nseed = 1.5\n");
  EXPECT_EQ(e.rfind("test.deck:2: run.seed has a bad value: expected a non-negative integer", 0), 0u) << e;
}

TEST(DeckErrors, OutOfRangeAndEnumValues) {
  EXPECT_EQ(error_of("[run]\niterations = 0\n"), "test.deck:2: run.iterations must be at least 1");
  EXPECT_EQ(error_of("[placement]\nmode = scattered\n"),
            "test.deck:2: placement.mode is 'scattered'; expected one of: disjoint | colocated");
  EXPECT_EQ(error_of("[placement]\ncritic = -2\n"), "test.deck:2: placement.critic must not be negative");
  EXPECT_EQ(error_of("[rollout]\nmax_new_tokens = 8\nmin_new_tokens = 9\n"),
            "test.deck:3: rollout.min_new_tokens must be in 0 .. rollout.max_new_tokens (8)");
  EXPECT_EQ(error_of("[rollout]\nscore_micro_batch = -1\n"), "test.deck:2: rollout.score_micro_batch must be >= 0");
  EXPECT_EQ(error_of("[rollout]\nkv_block = 0\n"), "test.deck:2: rollout.kv_block must be at least 1");
  EXPECT_EQ(error_of("[rollout]\nmax_prompt_tokens = 8\nmax_new_tokens = 8\nkv_cache_tokens = 15\n"),
            "test.deck:4: rollout.kv_cache_tokens must be 0 or at least max_prompt_tokens + max_new_tokens (16), the "
            "slots of one whole sequence");
  EXPECT_EQ(error_of("[rollout]\ndecode_rows = 4\nreuse_prompt_cache = true\n"),
            "test.deck:2: rollout.decode_rows cannot be combined with rollout.reuse_prompt_cache = true: the paged "
            "cache is not handed to the old log-probs' pass");
  EXPECT_EQ(error_of("[dist]\nwatchdog_timeout = 0\n"),
            "test.deck:2: dist.watchdog_timeout must be > 0 seconds");
  EXPECT_EQ(error_of("[dist]\nbackend = nccl\ndevice = cpu\n"),
            "test.deck:2: dist.backend is nccl, which needs GPUs, but dist.device is cpu");
}

TEST(DeckErrors, MalformedOverrides) {
  EXPECT_EQ(error_of(kGood, {"actor=3"}), "--set actor=3: expected section.key=value");
  EXPECT_EQ(error_of(kGood, {"placement.actor"}), "--set placement.actor: expected section.key=value");
  EXPECT_EQ(error_of(kGood, {"placement.actors=3"}), "--set placement.actors=3: unknown key 'placement.actors'");
  EXPECT_EQ(error_of(kGood, {"run.seed=1", "run.seed=2"}), "--set run.seed=2: key 'run.seed' set twice");
  std::string e = error_of(kGood, {"placement.actor=x"});
  EXPECT_EQ(e.rfind("--set placement.actor=x: placement.actor has a bad value: expected an integer", 0), 0u) << e;
}

TEST(DeckErrors, MissingFile) {
  try {
    Deck::from_file("/nonexistent/dir/x.deck", {}, deck_schema());
    FAIL() << "a missing deck must be refused";
  } catch (const DeckError& e) {
    EXPECT_STREQ(e.what(), "cannot read deck '/nonexistent/dir/x.deck': no such file or not readable");
  }
}

TEST(Deck, ShippedDecksParse) {
  const char* src = std::getenv("QUARTET_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "ctest sets QUARTET_SOURCE_DIR";
  int decks = 0;
  // Paths in the shipped decks (prompt files) are relative to the repository root, where
  // `make run` and the docs run them.
  ASSERT_EQ(::chdir(src), 0);
  // opendir, not std::filesystem (see include/quartet/core/files.hpp).
  const std::string dir = std::string(src) + "/inputs/";
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() < 5 || name.substr(name.size() - 5) != ".deck") continue;
    ++decks;
    EXPECT_NO_THROW(load_config(Deck::from_file(dir + name, {}, deck_schema()))) << name;
  }
  closedir(d);
  EXPECT_GE(decks, 2);
  Config c = load_config(Deck::from_file(std::string(src) + "/inputs/selfcheck.deck", {}, deck_schema()));
  EXPECT_EQ(c.get<PlacementConfig>().actor + c.get<PlacementConfig>().critic + c.get<PlacementConfig>().reference + c.get<PlacementConfig>().reward, 6);
}

TEST(Deck, RewardsInTheUsersCode) {
  Config c = parse("[model.reward]\nkind = command:python3 inputs/rewards/gsm8k_reward.py --strict   # comment\n"
                   "timeout = 2.5\nretries = 0\n");
  const RewardKind& command = c.get<ModelsConfig>().reward.kind;
  EXPECT_EQ(command.text, "command:python3 inputs/rewards/gsm8k_reward.py --strict");
  EXPECT_EQ(command.type, RewardKind::Type::command);
  EXPECT_EQ(command.argument, "python3 inputs/rewards/gsm8k_reward.py --strict");
  EXPECT_EQ(c.get<RewardCallConfig>().timeout, 2.5);
  EXPECT_EQ(c.get<RewardCallConfig>().start_timeout, 300);
  EXPECT_EQ(c.get<RewardCallConfig>().retries, 0);
  EXPECT_EQ(c.get<RewardCallConfig>().retry_delay, 1);
  const RewardKind http = parse("[model.reward]\nkind = http://127.0.0.1:5000/get_reward\n").get<ModelsConfig>().reward.kind;
  EXPECT_EQ(http.type, RewardKind::Type::http);
  EXPECT_EQ(http.argument, "http://127.0.0.1:5000/get_reward");
  const RewardKind prefixed = parse("", {"model.reward.kind=http:https://rm.example/score"}).get<ModelsConfig>().reward.kind;
  EXPECT_EQ(prefixed.text, "http:https://rm.example/score");
  EXPECT_EQ(prefixed.argument, "https://rm.example/score");
  EXPECT_EQ(error_of("[model.reward]\nkind = command:  \n"),
            "test.deck:2: model.reward.kind is 'command:': command: needs the command line to run after it");
  EXPECT_EQ(error_of("[model.reward]\nkind = ftp://host/x\n"),
            "test.deck:2: model.reward.kind is 'ftp://host/x'; expected model, rule:<task> (rule:sort_digits, "
            "rule:add), command:<command line> or an http(s):// URL");
  EXPECT_EQ(error_of("[model.actor]\nkind = command:cat\n"), "test.deck:2: model.actor.kind is 'command:cat'; expected model");
  EXPECT_EQ(error_of("[model.reward]\ntimeout = 0\n"), "test.deck:2: model.reward.timeout must be > 0 seconds");
  EXPECT_EQ(error_of("[model.reward]\nstart_timeout = -1\n"),
            "test.deck:2: model.reward.start_timeout must be > 0 seconds");
  EXPECT_EQ(error_of("[model.reward]\nretries = -1\n"), "test.deck:2: model.reward.retries must be >= 0");
  EXPECT_EQ(error_of("[model.reward]\nretry_delay = -0.5\n"), "test.deck:2: model.reward.retry_delay must be >= 0 seconds");
}

}  // namespace test_deck

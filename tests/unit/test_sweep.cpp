// `quartet sweep`: the decks it writes (one per combination, the base deck with the swept keys
// set, each its own run directory), the list for the job array, and every refusal, which must
// name the sweep file's line.
#include <gtest/gtest.h>

#include <ftw.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/commands/sweep_command.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/model/models_config.hpp"
#include "quartet/model/rollout_config.hpp"
#include "quartet/rl/algorithm_config.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_sweep {

namespace {

// A base deck without file references, so it loads from any directory. Its comments must
// survive into the generated decks; [algorithm] is missing on purpose (a swept key there adds
// the section), and [model.actor] has no lr line (a swept lr is added to that section).
const char* kBase = R"(# base.deck - a marker comment that must survive
[run]
name = base
out = runs/base
seed = 7          # the base seed
iterations = 3

[placement]
mode = disjoint
actor = 1
critic = 1

[model.actor]
path = random:llama
hidden = 32

[model.critic]
path = random:llama
lr = 2e-3
)";

class Sweep : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/quartet-test-sweep.XXXXXX";
    ASSERT_NE(::mkdtemp(templ), nullptr);
    dir_ = templ;
    write(dir_ + "/base.deck", kBase);
  }
  void TearDown() override {
    // Depth-first removal of the temporary tree (not std::filesystem: see core/files.hpp).
    ::nftw(dir_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); },
           16, FTW_DEPTH | FTW_PHYS);
  }
  static void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Runs the sweep whose [values] lines are `values`; the summary it prints.
  std::string sweep(const std::string& values, const std::string& out = "", const std::string& head = "") {
    write(dir_ + "/t.sweep", (head.empty() ? "deck = " + dir_ + "/base.deck\n" : head) + "[values]\n" + values);
    CommandLine cl;
    cl.command = "sweep";
    cl.operand = dir_ + "/t.sweep";
    if (!out.empty()) cl.options["out"] = out;
    std::ostringstream printed;
    sweep_to(cl, printed);
    return printed.str();
  }
  // The DeckError message of such a sweep, or "<no error>".
  std::string refusal(const std::string& values, const std::string& head = "") {
    try {
      sweep(values, dir_ + "/out", head);
    } catch (const DeckError& e) {
      return e.what();
    }
    return "<no error>";
  }
  std::string dir_;
};

}  // namespace

TEST_F(Sweep, OneDeckPerCombinationFirstKeySlowest) {
  const std::string out = dir_ + "/out";
  const std::string printed = sweep("run.seed = 1, 2   # a comment\nmodel.actor.lr = 1e-3, 2e-3, 3e-3\n"
                                    "algorithm.kl_coef = 0.02\n", out);
  // The list: line i is run i, six runs, one digit each.
  std::vector<std::string> list;
  std::istringstream lines(read(out + "/decks.list"));
  for (std::string l; std::getline(lines, l);) list.push_back(l);
  ASSERT_EQ(list.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(list[i], out + "/decks/run_" + std::to_string(i + 1) + ".deck");
  EXPECT_NE(printed.find("sbatch --array=1-6 slurm/sweep.sbatch " + out + "/decks.list"), std::string::npos)
      << printed;

  // Run 5 = seed 2 (runs 4-6), lr 2e-3; every deck loads as train would load it.
  for (int i = 1; i <= 6; ++i) {
    const Config c = load_config(Deck::from_file(list[i - 1], {}, deck_schema()));
    EXPECT_EQ(c.get<RunConfig>().seed, i <= 3 ? 1u : 2u) << i;
    EXPECT_DOUBLE_EQ(c.get<ModelsConfig>().actor.lr, (i - 1) % 3 == 0 ? 1e-3 : (i - 1) % 3 == 1 ? 2e-3 : 3e-3) << i;
    EXPECT_DOUBLE_EQ(c.get<AlgorithmConfig>().kl_coef, 0.02) << i;   // a new [algorithm] section
    EXPECT_DOUBLE_EQ(c.get<ModelsConfig>().critic.lr, 2e-3) << i;           // untouched base value
    EXPECT_EQ(c.get<RunConfig>().iterations, 3) << i;
    EXPECT_EQ(c.get<RunConfig>().out, out + "/run_" + std::to_string(i)) << i;  // a directory per run
    EXPECT_EQ(c.get<RunConfig>().name, "base_" + std::to_string(i)) << i;
  }
  // The text is the base deck's, edited: its comments stay, the header names the combination.
  const std::string text = read(list[4]);
  EXPECT_NE(text.find("# base.deck - a marker comment that must survive"), std::string::npos) << text;
  EXPECT_NE(text.find("#   run.seed = 2\n#   model.actor.lr = 2e-3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("run 5 of 6 of the sweep " + dir_ + "/t.sweep"), std::string::npos) << text;
  EXPECT_NE(text.find("seed = 2   # swept: " + dir_ + "/t.sweep:3 (base deck: 7)"), std::string::npos) << text;
  // The added lr sits in [model.actor], after its last key, not in another section.
  EXPECT_NE(text.find("hidden = 32\nlr = 2e-3   # swept"), std::string::npos) << text;
}

TEST_F(Sweep, RunNumbersArePaddedToTheCount) {
  const std::string out = dir_ + "/out";
  sweep("run.seed = 1, 2, 3, 4, 5, 6\nmodel.actor.hidden = 16, 32\n", out);
  EXPECT_TRUE(is_regular_file(out + "/decks/run_01.deck"));
  EXPECT_TRUE(is_regular_file(out + "/decks/run_12.deck"));
  EXPECT_FALSE(is_regular_file(out + "/decks/run_1.deck"));
  const Config c = load_config(Deck::from_file(out + "/decks/run_12.deck", {}, deck_schema()));
  EXPECT_EQ(c.get<RunConfig>().out, out + "/run_12");
  EXPECT_EQ(c.get<ModelsConfig>().actor.hidden, 32);
  EXPECT_EQ(c.get<RunConfig>().seed, 6u);
}

TEST_F(Sweep, QuotedValuesKeepTheirCommas) {
  const std::string out = dir_ + "/out";
  sweep("rollout.stop = \"a, b\", c\n", out);
  EXPECT_EQ(load_config(Deck::from_file(out + "/decks/run_1.deck", {}, deck_schema())).get<RolloutConfig>().stop,
            (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(load_config(Deck::from_file(out + "/decks/run_2.deck", {}, deck_schema())).get<RolloutConfig>().stop,
            (std::vector<std::string>{"c"}));
}

TEST_F(Sweep, SweptRunOutAndNameAreKept) {
  const std::string out = dir_ + "/out";
  sweep("run.out = " + dir_ + "/a, " + dir_ + "/b\nrun.name = x\n", out);
  EXPECT_EQ(read(out + "/decks.list"), out + "/decks/run_1.deck\n" + out + "/decks/run_2.deck\n");
  const Config c = load_config(Deck::from_file(out + "/decks/run_1.deck", {}, deck_schema()));
  EXPECT_EQ(c.get<RunConfig>().out, dir_ + "/a");
  EXPECT_EQ(c.get<RunConfig>().name, "x");  // not base_1: the sweep set it
  EXPECT_EQ(load_config(Deck::from_file(out + "/decks/run_2.deck", {}, deck_schema())).get<RunConfig>().out, dir_ + "/b");
}

TEST_F(Sweep, OutComesFromTheFileOrTheDefault) {
  // `out =` in the file; --out would replace it.
  sweep("run.seed = 1\n", "", "deck = " + dir_ + "/base.deck\nout = " + dir_ + "/from-file\n");
  EXPECT_TRUE(is_regular_file(dir_ + "/from-file/decks.list"));
  // Neither: runs/<the sweep file's name without extension>, relative to the current directory.
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(dir_.c_str()), 0);
  sweep("run.seed = 1\n");
  const bool made = is_regular_file(dir_ + "/runs/t/decks/run_1.deck");
  ASSERT_EQ(::chdir(cwd), 0);
  EXPECT_TRUE(made);
}

TEST_F(Sweep, ABaseDeckMayBeCompletedByTheSweptKeys) {
  // grpo needs at least 2 samples per prompt: this base deck alone is refused, every run is not.
  write(dir_ + "/grpo.deck", std::string(kBase) + "[algorithm]\nname = grpo\n");
  const std::string out = dir_ + "/out";
  sweep("algorithm.samples_per_prompt = 2, 4\n", out, "deck = " + dir_ + "/grpo.deck\n");
  EXPECT_EQ(load_config(Deck::from_file(out + "/decks/run_2.deck", {}, deck_schema())).get<AlgorithmConfig>().samples_per_prompt, 4);
  // A value that leaves it incomplete is refused, naming the combination and its lines.
  std::string message;
  try {
    sweep("run.seed = 3\nalgorithm.samples_per_prompt = 2, 1\n", out, "deck = " + dir_ + "/grpo.deck\n");
  } catch (const DeckError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(dir_ + "/t.sweep:4: algorithm.samples_per_prompt = 1 (run 2 of 2)"), std::string::npos)
      << message;
}

TEST_F(Sweep, RefusalsNameTheLine) {
  const std::string f = dir_ + "/t.sweep";
  // Line numbers: 1 deck, 2 [values], 3 the first value line.
  EXPECT_NE(refusal("model.actor.lrr = 1, 2\n").find(f + ":3: unknown deck key 'model.actor.lrr'"),
            std::string::npos) << refusal("model.actor.lrr = 1, 2\n");
  EXPECT_NE(refusal("seed = 1, 2\n").find(f + ":3: unknown deck key 'seed'"), std::string::npos);
  EXPECT_NE(refusal("run.seed =\n").find(f + ":3: run.seed has no values"), std::string::npos);
  EXPECT_NE(refusal("run.seed = 1,,2\n").find(f + ":3: run.seed has an empty value"), std::string::npos);
  EXPECT_NE(refusal("run.seed = 1\nmodel.actor.lr = 1\nrun.seed = 2\n").find(f + ":5: run.seed is listed twice (first on line 3)"),
            std::string::npos);
  EXPECT_NE(refusal("run.seed = 1, 2, 1\n").find(f + ":3: run.seed lists the value '1' twice"), std::string::npos);
  EXPECT_NE(refusal("rollout.stop = \"a, b\n").find(f + ":3: rollout.stop: a quote is not closed"), std::string::npos);
  // Values are checked as train checks them; the refusal names the line of the swept key.
  const std::string bad_type = refusal("run.seed = 1\nmodel.actor.lr = 1e-3, fast\n");
  EXPECT_NE(bad_type.find(f + ":4: model.actor.lr = fast (run 2 of 2): model.actor.lr has a bad value"),
            std::string::npos) << bad_type;
  const std::string bad_range = refusal("model.actor.lr = 1e-3, -1\n");
  EXPECT_NE(bad_range.find(f + ":3: model.actor.lr = -1 (run 2 of 2): model.actor.lr must be > 0"),
            std::string::npos) << bad_range;
  // Two runs in one directory would resume each other's checkpoints.
  const std::string shared = refusal("run.out = " + dir_ + "/same\nrun.seed = 1, 2\n");
  EXPECT_NE(shared.find(f + ":3: run.out: runs 1 and 2 would share the run directory"), std::string::npos) << shared;
  // 11^4 = 14641 runs: refused at the key that crosses 10000.
  const std::string many = refusal("run.seed = 1,2,3,4,5,6,7,8,9,10,11\nrun.iterations = 1,2,3,4,5,6,7,8,9,10,11\n"
                                   "model.actor.hidden = 4,8,12,16,20,24,28,32,36,40,44\n"
                                   "model.critic.hidden = 4,8,12,16,20,24,28,32,36,40,44\n");
  EXPECT_NE(many.find(f + ":6: model.critic.hidden makes the sweep more than 10000 runs"), std::string::npos) << many;
  // The file's own structure.
  EXPECT_NE(refusal("run.seed = 1\n", "deck = " + dir_ + "/nothing.deck\n").find(f + ":1: deck = " + dir_ + "/nothing.deck: no such file"),
            std::string::npos);
  EXPECT_NE(refusal("run.seed = 1\n", "out = x\n").find(f + ": no base deck"), std::string::npos);
  EXPECT_NE(refusal("run.seed = 1\n", "deck = " + dir_ + "/base.deck\nseed = 3\n").find(f + ":2: unknown key 'seed' before [values]"),
            std::string::npos);
  EXPECT_NE(refusal("run.seed = 1\n[run]\n").find(f + ":4: unknown section '[run]'"), std::string::npos);
  // Nothing was written by any refused sweep.
  EXPECT_FALSE(path_exists(dir_ + "/out"));
}

TEST_F(Sweep, AnExistingRunDirectoryIsOnlyReusedForTheSameDeck) {
  const std::string out = dir_ + "/out";
  sweep("run.seed = 1, 2\n", out);
  make_directories(out + "/run_2/checkpoints");  // run 2 has started
  // The same sweep again (a comment changed): the same decks, accepted.
  sweep("run.seed = 1, 2   # again\n", out);
  // Other values for run 2: its checkpoints would be resumed with them. Refused, nothing written.
  const std::string before = read(out + "/decks/run_2.deck");
  std::string message;
  try {
    sweep("run.seed = 1, 3\n", out);
  } catch (const DeckError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("run 2's directory " + out + "/run_2 already exists"), std::string::npos) << message;
  EXPECT_EQ(read(out + "/decks/run_2.deck"), before);
  // Run 1 has not started: its values may change.
  EXPECT_NO_THROW(sweep("run.seed = 5, 2\n", out));
}

}  // namespace test_sweep

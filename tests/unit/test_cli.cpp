// The command line: commands, the deck argument, --set overrides, --help at both levels.
#include <gtest/gtest.h>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/cli.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_cli {

namespace {
const std::vector<CommandSpec> kSpecs = {
    {"selfcheck", "check things"},
    {"train", "train"},
    {"tokenize", "tokenize stdin", "MODEL_DIR", {{"decode", nullptr, "ids to text"},
                                                {"out", "FILE", "where to write"}}}};

CommandLine parse(std::vector<const char*> args) {
  args.insert(args.begin(), "quartet");
  return parse_command_line(static_cast<int>(args.size()), args.data(), kSpecs);
}

std::string usage_error(std::vector<const char*> args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Cli, CommandDeckAndOverrides) {
  auto cl = parse({"selfcheck", "in.deck", "--set", "placement.actor=2", "--set=run.seed=4"});
  EXPECT_EQ(cl.command, "selfcheck");
  EXPECT_EQ(cl.operand, "in.deck");
  EXPECT_EQ(cl.overrides, (std::vector<std::string>{"placement.actor=2", "run.seed=4"}));
  EXPECT_FALSE(cl.help);
}

TEST(Cli, ToolsTakeAPathAndTheirOwnOptions) {
  auto cl = parse({"tokenize", "/models/m", "--decode", "--out", "x.txt"});
  EXPECT_EQ(cl.operand, "/models/m");
  EXPECT_TRUE(cl.has("decode"));
  EXPECT_EQ(cl.options.at("out"), "x.txt");
  EXPECT_FALSE(parse({"tokenize", "/models/m"}).has("decode"));
  EXPECT_EQ(usage_error({"tokenize"}), "quartet tokenize: no MODEL_DIR given (quartet tokenize MODEL_DIR)");
  // --set belongs to deck commands, --decode to tokenize.
  EXPECT_NE(usage_error({"tokenize", "m", "--set", "a.b=1"}).find("unrecognised option '--set'"),
            std::string::npos);
  EXPECT_NE(usage_error({"train", "d.deck", "--decode"}).find("unrecognised option '--decode'"),
            std::string::npos);
  std::string help = command_help(kSpecs[2], deck_schema());
  EXPECT_NE(help.find("Usage: quartet tokenize MODEL_DIR [options]"), std::string::npos) << help;
  EXPECT_NE(help.find("--decode"), std::string::npos);
  EXPECT_EQ(help.find("Deck keys"), std::string::npos);
}

TEST(Cli, HelpAtBothLevels) {
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_EQ(parse({"--help"}).command, "");
  auto cl = parse({"train", "--help"});
  EXPECT_TRUE(cl.help);
  EXPECT_EQ(cl.command, "train");
  std::string top = top_level_help(kSpecs);
  EXPECT_NE(top.find("selfcheck   check things"), std::string::npos) << top;
  std::string sub = command_help(kSpecs[0], deck_schema());
  EXPECT_NE(sub.find("Usage: quartet selfcheck DECK [--set section.key=value ...]"), std::string::npos);
  EXPECT_NE(sub.find("  [placement]\n    mode = disjoint"), std::string::npos) << sub;  // every key
  EXPECT_NE(sub.find("  [dist]\n"), std::string::npos) << sub;
  EXPECT_NE(sub.find("    watchdog_timeout = 600 "), std::string::npos) << sub;
  EXPECT_NE(sub.find("seconds"), std::string::npos);
}

TEST(Cli, UsageErrors) {
  EXPECT_EQ(usage_error({}), "no command given (try quartet --help)");
  EXPECT_EQ(usage_error({"trian", "x.deck"}), "unknown command 'trian' (try quartet --help)");
  EXPECT_EQ(usage_error({"train"}), "quartet train: no DECK given (quartet train DECK)");
  EXPECT_NE(usage_error({"train", "x.deck", "--sett", "a.b=1"}).find("unrecognised option '--sett'"),
            std::string::npos);
  EXPECT_NE(usage_error({"train", "a.deck", "b.deck"}).find("too many positional options"),
            std::string::npos) << usage_error({"train", "a.deck", "b.deck"});
}

}  // namespace test_cli

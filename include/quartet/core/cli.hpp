#pragma once
// The command line: `quartet <command> OPERAND [options]`, where the operand is a deck for the
// commands that run a job (`--set section.key=value` overrides its keys) and a path for the
// tools (`quartet tokenize MODEL_DIR`). --help at the top level and for each command.
// The dispatcher (src/main.cpp) owns the command table.
#include <boost/program_options/options_description.hpp>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace quartet {

struct OptionSpec {
  const char* name;
  const char* value_name;  // nullptr: a switch without a value
  const char* help;
};

struct CommandSpec {
  const char* name;
  const char* summary;
  const char* operand = "DECK";           // the one positional argument
  std::vector<OptionSpec> options = {};   // beyond --help (and --set for decks)
  // Everything after the command name is another program's command line (quartet launch),
  // given as it is: the operand is its first word, CommandLine::rest the whole of it.
  bool passthrough = false;
  bool is_deck() const { return std::string(operand) == "DECK"; }
};

struct CommandLine {
  std::string command;                 // empty with top-level --help / --version
  std::string operand;                 // the deck, or the tool's path
  std::vector<std::string> overrides;  // "section.key=value"
  std::map<std::string, std::string> options;  // given options; a switch maps to ""
  std::vector<std::string> rest;       // a passthrough command's words
  bool help = false;
  bool version = false;
  bool has(const std::string& option) const { return options.count(option) > 0; }
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws UsageError (unknown command, missing operand, unknown option, stray argument).
CommandLine parse_command_line(int argc, const char* const* argv,
                               const std::vector<CommandSpec>& commands);

std::string top_level_help(const std::vector<CommandSpec>& commands);
// The command's usage and options; for deck commands also every deck key (`deck_keys`, the
// deck's schema) with its default.
std::string command_help(const CommandSpec& command, const boost::program_options::options_description& deck_keys);

}  // namespace quartet

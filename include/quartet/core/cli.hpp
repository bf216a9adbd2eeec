#pragma once
// The command line: `quartet <command> DECK [--set section.key=value ...]`, with --help at the
// top level and for each command. The dispatcher (src/main.cpp) owns the command table.
#include <stdexcept>
#include <string>
#include <vector>

namespace quartet {

struct CommandSpec {
  const char* name;
  const char* summary;
};

struct CommandLine {
  std::string command;                 // empty with top-level --help / --version
  std::string deck;
  std::vector<std::string> overrides;  // "section.key=value"
  bool help = false;
  bool version = false;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws UsageError (unknown command, missing deck, unknown option, stray argument).
CommandLine parse_command_line(int argc, const char* const* argv,
                               const std::vector<CommandSpec>& commands);

std::string top_level_help(const std::vector<CommandSpec>& commands);
// The command's usage followed by every deck key with its default and unit.
std::string command_help(const CommandSpec& command);

}  // namespace quartet

// quartet: the command dispatcher. It parses the command line, starts the runtime (deck,
// placement, devices, model groups) and hands it to the command. An error that escapes a
// command on one rank aborts the whole job, so no rank is left waiting in a collective.
#include <cstdio>
#include <exception>

#include "quartet/core/cli.hpp"
#include "quartet/core/log.hpp"
#include "quartet/dist/runtime.hpp"
#include "quartet/dist/selfcheck.hpp"

namespace {

struct Command {
  quartet::CommandSpec spec;
  int (*run)(quartet::Runtime&);
};

const Command kCommands[] = {
    {{"selfcheck", "check every collective of every model group against a serial reference, "
                   "and the exchanges between groups"},
     quartet::run_selfcheck},
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<quartet::CommandSpec> specs;
  for (const auto& c : kCommands) specs.push_back(c.spec);

  quartet::CommandLine cl;
  try {
    cl = quartet::parse_command_line(argc, argv, specs);
  } catch (const quartet::UsageError& e) {
    std::fprintf(stderr, "quartet: %s\n", e.what());
    return 2;
  }
  if (cl.version) {
    std::printf("quartet %s\n", QUARTET_VERSION);
    return 0;
  }
  const Command* command = nullptr;
  for (const auto& c : kCommands)
    if (cl.command == c.spec.name) command = &c;
  if (cl.help) {
    std::printf("%s", command ? quartet::command_help(command->spec).c_str()
                              : quartet::top_level_help(specs).c_str());
    return 0;
  }

  quartet::World world(&argc, &argv);
  int status = 2;
  try {
    auto runtime = quartet::start_runtime(world, cl.deck, cl.overrides);
    if (runtime) status = command->run(*runtime);
  } catch (const std::exception& e) {
    quartet::eprintf_rank("quartet %s: fatal: %s\n", cl.command.c_str(), e.what());
    world.abort(1);
  }
  return status;
}

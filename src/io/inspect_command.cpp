#include "quartet/io/inspect_command.hpp"

#include <cstdio>

#include "quartet/io/run_file.hpp"

namespace quartet {

int run_inspect(const CommandLine& cl) {
  std::printf("%s", describe_run_file(cl.operand).c_str());
  return 0;
}

}  // namespace quartet

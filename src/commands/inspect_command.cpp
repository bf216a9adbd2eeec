#include "quartet/commands/inspect_command.hpp"

#include <cstdio>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/io/checkpoint_summary.hpp"
#include "quartet/io/run_file.hpp"

namespace quartet {

int run_inspect(const CommandLine& cl) {
  const std::string& path = cl.operand;
  // A file is a run file (describe_run_file refuses anything else by name); a directory is a
  // checkpoint or holds them.
  if (!is_directory(path)) {
    std::printf("%s", describe_run_file(path).c_str());
    return 0;
  }
  std::string where;
  bool intact = false;
  switch (classify_checkpoint_path(path, &where)) {
    case PathKind::step:
      std::printf("%s", describe_checkpoint(where, &intact).c_str());
      break;
    case PathKind::checkpoints: {
      // A run directory: its run file first, then its checkpoints. A run file that cannot be
      // read is reported and does not hide the checkpoints.
      const std::string run_file = path + "/run.h5";
      if (where != path && is_regular_file(run_file)) {
        try {
          std::printf("%s\n", describe_run_file(run_file).c_str());
        } catch (const Error& e) {
          std::printf("%s: cannot be summarised: %s\n\n", run_file.c_str(), e.what());
        }
      }
      std::printf("%s", describe_checkpoints(where, &intact).c_str());
      break;
    }
    case PathKind::none:
      // A run directory before its first checkpoint.
      if (is_regular_file(path + "/run.h5")) {
        std::printf("%s%s: no checkpoints/ (the run has written none yet)\n", describe_run_file(path + "/run.h5").c_str(),
                    path.c_str());
        return 0;
      }
      throw Error(path + ": neither a run file nor a checkpoint: expected run.h5, a step_<N> directory, or a "
                         "checkpoints/ or run directory holding them");
  }
  std::fflush(stdout);
  if (!intact) std::fprintf(stderr, "quartet inspect: %s: the checkpoint is damaged or incomplete (see above)\n", path.c_str());
  return intact ? 0 : 1;
}

}  // namespace quartet

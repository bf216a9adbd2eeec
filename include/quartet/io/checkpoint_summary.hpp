#pragma once
// What the tools (`quartet inspect`, `quartet export`) make of a path that names checkpoints,
// and the human-readable summary `inspect` prints. Nothing here needs MPI: checkpoints are
// verified with MPI_COMM_NULL (checkpoint_dir.hpp) and model files read with the POSIX driver.
//
// A path may be
//   a step directory       <out>/checkpoints/step_<N> (or the `latest` link itself);
//   a checkpoints/ dir     holding step_<N> directories and `latest`;
//   a run directory        <out>, holding checkpoints/.
#include <cstdint>
#include <string>
#include <vector>

namespace quartet {

enum class PathKind { step, checkpoints, none };

// Which of the above `path` is; for a run directory the checkpoints/ inside it is returned in
// `resolved` (otherwise `path` without trailing slashes). `none` for anything else.
PathKind classify_checkpoint_path(const std::string& path, std::string* resolved);

struct StepEntry {
  int64_t iteration = 0;
  std::string dir;      // <checkpoints>/step_<N>
  bool complete = false;  // has manifest.json
};
// The step_<N> directories of a checkpoints/ directory (canonical names only, as step_dir
// writes them), oldest first.
std::vector<StepEntry> list_steps(const std::string& checkpoints_directory);
// The step_<N> name `latest` points at, "" when there is no such link.
std::string latest_name(const std::string& checkpoints_directory);

// The step directory a tool should act on: a step directory as given; for a checkpoints/ or
// run directory the one `latest` names, or the newest complete one when there is no `latest`
// (`how` then says which rule chose it). Throws quartet::Error naming the path and what it
// holds when none fits.
std::string resolve_step_directory(const std::string& path, std::string* how);

// `quartet inspect` of one step directory: iteration, creation time, commit, placement, each
// model's file, size, dtype, group and optimizer state, and the verification result. `intact`
// is set to whether verification found nothing wrong.
std::string describe_checkpoint(const std::string& step_directory, bool* intact);
// Of a checkpoints/ directory: every step (complete / incomplete / damaged by its sizes, which
// `latest` names), then describe_checkpoint of the latest one (or the newest complete).
// `intact`: no step is damaged and the detailed one verifies.
std::string describe_checkpoints(const std::string& checkpoints_directory, bool* intact);

}  // namespace quartet

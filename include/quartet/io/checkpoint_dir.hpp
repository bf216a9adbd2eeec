#pragma once
// The checkpoint directory and its commit protocol (llm.c's "files, then a DONE marker", made
// checkable):
//   <out>/checkpoints/step_<N>/   the files of iteration N (one HDF5 per trained model,
//                                 trainer.h5), then manifest.json, written last: every file's size
//                                 and xxHash3-64 checksums of its 64 MiB chunks. It is written to
//                                 manifest.json.tmp, fsynced and renamed, so a directory with a
//                                 manifest.json is complete and one without is not.
//   <out>/checkpoints/latest      a symlink to step_<N>, moved (symlink + rename) only after
//                                 the manifest is in place.
// Retention, after committing N: the last `keep` complete checkpoints up to N stay, plus every
// one whose iteration is a multiple of `keep_every` (0 = none); every incomplete directory goes
// (older ones are debris of crashed writes, newer ones of an earlier attempt that got further:
// this run will write those iterations again). Complete checkpoints newer than N (the run was
// resumed from an older one on purpose, or they failed verification) are left alone for the
// user. The one `latest` names is never removed. A checkpoint is removed manifest first, so one
// half removed by a crash is merely incomplete.
// Verification reads every file back and compares sizes and checksums; the chunks are spread
// over the ranks of `comm`, so a large checkpoint is checked in parallel.
// Every function here also takes MPI_COMM_NULL: this process alone, and no MPI call is made (tools
// that never call MPI_Init). Errors in a collective call are the same quartet::Error on every rank.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace quartet {

constexpr int64_t kChecksumChunkBytes = 64ll << 20;

struct ManifestFile {
  std::string name;              // relative to the step directory
  int64_t bytes = 0;
  std::vector<uint64_t> chunks;  // XXH3-64 of each chunk_bytes chunk, in order (none for 0 bytes)
};

struct Manifest {
  int64_t iteration = 0;
  std::string created;           // ISO 8601, UTC
  int64_t chunk_bytes = kChecksumChunkBytes;  // as recorded; verification uses the recorded one
  std::vector<ManifestFile> files;
  nlohmann::json info;           // the writer's description (models, placement, deck, ...)
};

std::string checkpoints_dir(const std::string& out);             // <out>/checkpoints
std::string step_dir(const std::string& out, int64_t iteration);  // <out>/checkpoints/step_<N>

// Collective over comm: rank 0 removes whatever an earlier attempt left at step_dir(out,
// iteration), complete or not (the caller decided to write N again; `latest` is removed first if
// it names it), and creates it empty; every rank returns the path once it exists.
std::string begin_checkpoint(const std::string& out, int64_t iteration, MPI_Comm comm);

// Collective over comm, after every file is closed: checksums `files` (names relative to the
// step directory; chunks spread over the ranks), then rank 0 fsyncs them, writes the manifest
// atomically, fsyncs the directory, moves `latest` and applies retention (keep >= 1,
// keep_every >= 0). Errors are quartet::Error on every rank; one before the manifest is in place
// leaves the checkpoint incomplete (no manifest). A failure to remove an old checkpoint comes
// after: the new one is then complete and `latest` names it, and the message says so.
void commit_checkpoint(const std::string& out, int64_t iteration, const std::vector<std::string>& files,
                       const nlohmann::json& info, MPI_Comm comm, int keep, int keep_every);

// manifest.json of a step directory; a missing, unreadable or malformed one is a
// quartet::Error naming the file and what is wrong (the field, for a malformed one).
Manifest read_manifest(const std::string& step_directory);

// What a reader needs of a checkpoint beyond sizes and checksums:
//   files       the files it will read: each must be listed in the manifest ("step_40/manifest.json:
//               lists no actor.h5, which <reader> needs");
//   consistent  run on rank 0 once everything else checks out: what the files say of
//               themselves against each other and the manifest (each string a problem).
//   foreign     run on rank 0 on the manifest first: "" when the checkpoint is of the kind the
//               reader reads, else why not (then named as that checkpoint's problem, before
//               the files it lacks).
struct CheckpointNeeds {
  std::string reader;  // "resuming this run", "inspect": for the messages
  std::vector<std::string> files;
  std::function<std::string(const Manifest& manifest)> foreign;
  std::function<std::vector<std::string>(const std::string& step_directory, const Manifest& manifest)> consistent;
};

// Collective over comm (or MPI_COMM_NULL: this process alone, no MPI needed): every problem of
// one checkpoint, empty when it is complete and intact, the same list in the same order on every
// rank. The manifest fixes the set of files: one in the directory that it does not list is a
// problem too ("step_40/actor.h5: in the directory, but not in the manifest"). Names are
// relative to checkpoints/:
// "step_40: no manifest.json (the write did not finish)",
// "step_40/manifest.json: malformed: files[1].bytes: expected a non-negative integer, found \"x\"",
// "step_40/actor.h5: missing (the manifest lists 2097152 bytes)",
// "step_40/actor.h5: 1048576 bytes, the manifest says 2097152 (truncated)" (or "(grown)"),
// "step_40/actor.h5: bytes 67108864..134217728 do not match their checksum (corrupt)" (or
// "... cannot be read: <reason>"), at most 3 such ranges per file, then
// "step_40/actor.h5: and 5 more chunks do not match their checksum".
std::vector<std::string> verify_checkpoint(const std::string& step_directory, MPI_Comm comm,
                                           const CheckpointNeeds& needs = {});

struct FoundCheckpoint {
  std::string dir;
  Manifest manifest;
};
// Collective over comm: the newest checkpoint under <out>/checkpoints that verifies, newest
// iteration first (the newest good one wins, wherever `latest` points). Each one skipped adds a
// warning to `warnings` (same on every rank) naming what is wrong:
// "checkpoint step_40 skipped: <problem>; <problem>", and one more when `latest` names a step
// that was skipped or does not exist. nullopt when there is none (a fresh run).
std::optional<FoundCheckpoint> find_latest_checkpoint(const std::string& out, MPI_Comm comm,
                                                      std::vector<std::string>* warnings,
                                                      const CheckpointNeeds& needs = {});

// N of a directory named step_<N> exactly as step_dir writes it (no sign, no leading zeros);
// nullopt for any other name ("latest", "step_007", "step_x").
std::optional<int64_t> parse_step_name(const std::string& name);

// The iterations of the step_<N> directories under <out>/checkpoints, complete or not, sorted.
// Only canonical names count (step_ and decimal digits without leading zeros, as step_dir
// writes them); latest, *.tmp and anything else are ignored. No checkpoints/ at all: empty.
std::vector<int64_t> list_checkpoint_steps(const std::string& out);

// The steps of list_checkpoint_steps whose write never committed: no manifest.json, the commit's
// last act (the process died while writing). Not damage: nothing in them was ever vouched for.
std::vector<int64_t> unfinished_checkpoint_steps(const std::string& out);
// Removes those steps' directories (one rank calls it), as the next commit's retention would.
void remove_unfinished_checkpoints(const std::string& out, const std::vector<int64_t>& steps);

namespace detail {
// commit_checkpoint with another checksum chunk size, recorded in the manifest: tests use small
// chunks so that files of a few KiB have many chunks.
void commit_checkpoint(const std::string& out, int64_t iteration, const std::vector<std::string>& files,
                       const nlohmann::json& info, MPI_Comm comm, int keep, int keep_every,
                       int64_t chunk_bytes);
}  // namespace detail

}  // namespace quartet

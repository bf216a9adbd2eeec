#include "quartet/io/run_file.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/file.h>
#include <torch/types.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "quartet/core/check.hpp"
#include "quartet/core/utc_time.hpp"
#include "quartet/dist/watched_mpi.hpp"
#include "quartet/core/files.hpp"
#include "quartet/io/h5.hpp"

namespace quartet {

namespace {

using h5::exists;
using h5::group;
using h5::H5;
using h5::int_attr;
using h5::link_names;
using h5::read_int_attr;
using h5::read_string_attr;
using h5::string_attr;

// An extendible float64 dataset of rows of `width` values (width 0: a 1-D dataset), NaN where
// nothing was written, so a metric that appears late keeps its rows aligned with iterations.
H5 open_series(hid_t loc, const std::string& name, hsize_t width, hid_t type) {
  if (exists(loc, name)) return {H5_CHECK(H5Dopen2(loc, name.c_str(), H5P_DEFAULT)), H5Dclose};
  const int rank = width ? 2 : 1;
  hsize_t dims[2] = {0, width}, max[2] = {H5S_UNLIMITED, width}, chunk[2] = {256, std::max<hsize_t>(width, 1)};
  H5 space{H5_CHECK(H5Screate_simple(rank, dims, max)), H5Sclose};
  H5 dcpl{H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose};
  H5_CHECK(H5Pset_chunk(dcpl.id, rank, chunk));
  if (type == H5T_IEEE_F64LE) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    H5_CHECK(H5Pset_fill_value(dcpl.id, H5T_NATIVE_DOUBLE, &nan));
  }
  return {H5_CHECK(H5Dcreate2(loc, name.c_str(), type, space.id, H5P_DEFAULT, dcpl.id, H5P_DEFAULT)), H5Dclose};
}

// Writes `values` as row `row` of a series (growing it as needed).
void write_row(hid_t set, hsize_t row, const std::vector<double>& values, bool two_d, hid_t mem_type, const void* data) {
  H5 space{H5_CHECK(H5Dget_space(set)), H5Sclose};
  hsize_t dims[2] = {0, 0};
  H5_CHECK(H5Sget_simple_extent_dims(space.id, dims, nullptr));
  if (dims[0] < row + 1) {
    dims[0] = row + 1;
    H5_CHECK(H5Dset_extent(set, dims));
  }
  H5 file_space{H5_CHECK(H5Dget_space(set)), H5Sclose};
  hsize_t start[2] = {row, 0}, count[2] = {1, two_d ? static_cast<hsize_t>(values.size()) : 1};
  H5_CHECK(H5Sselect_hyperslab(file_space.id, H5S_SELECT_SET, start, nullptr, count, nullptr));
  H5 mem{H5_CHECK(H5Screate_simple(two_d ? 2 : 1, count, nullptr)), H5Sclose};
  H5_CHECK(H5Dwrite(set, mem_type, mem.id, file_space.id, H5P_DEFAULT, data));
}

// Opens a run file serially, checking that it is one.
H5 open_serial(const std::string& path, unsigned flags) {
  hid_t f = -1;
  // HDF5 would print its error stack for a file that is not HDF5; the message below says it.
  H5E_BEGIN_TRY { f = H5Fopen(path.c_str(), flags, H5P_DEFAULT); }
  H5E_END_TRY;
  QUARTET_CHECK(f >= 0, path + ": not a readable HDF5 file (truncated, damaged or of another format)");
  H5 file{f, H5Fclose};
  QUARTET_CHECK(read_string_attr(file.id, "software") == "quartet",
                path + ": an HDF5 file, but not a quartet run file (no software = \"quartet\" attribute)");
  return file;
}

// Rows of a per-token tensor padded to `A` actions (right) and, for sequences, `P` prompt
// tokens (left): every rank's hyperslab then has the group's common shape.
torch::Tensor pad_to(const torch::Tensor& t, int64_t left, int64_t right) {
  return torch::constant_pad_nd(t, {left, right});
}

// The group of an iteration's rollouts under /rollouts: the iteration, %06lld.
std::string rollout_group_name(std::int64_t iteration) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%06lld", static_cast<long long>(iteration));
  return std::string(buf);
}

// The rollouts' numbers, collectively with parallel HDF5: every rank its own rows of
// /rollouts/<name>, each tensor padded to the group's longest prompt and answer.
void write_rollout_tensors(const std::string& path, MPI_Comm comm, const std::string& name, std::int64_t iteration,
                           const RolloutRecord& ro) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  const int64_t rows = ro.sequences.size(0), P = ro.sequences.size(1) - ro.action_mask.size(1),
                A = ro.action_mask.size(1);
  std::vector<int64_t> mine{rows, P, A}, all(static_cast<size_t>(3 * size));
  watched::allgather(mine.data(), 3, MPI_INT64_T, all.data(), comm, "the rollouts' shapes");
  int64_t total = 0, offset = 0, Pm = 0, Am = 0;
  for (int r = 0; r < size; ++r) {
    if (r == rank) offset = total;
    total += all[static_cast<size_t>(3 * r)];
    Pm = std::max(Pm, all[static_cast<size_t>(3 * r + 1)]);
    Am = std::max(Am, all[static_cast<size_t>(3 * r + 2)]);
  }
  // Parallel HDF5 from the open to the close: one watched collective.
  auto watch = watched::scope(comm, "writing the rollouts of iteration " + std::to_string(iteration) + " to " + path);
  H5 fapl{H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose};
  H5_CHECK(H5Pset_fapl_mpio(fapl.id, comm, MPI_INFO_NULL));
  H5 file{H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.id)), H5Fclose};
  H5 rollouts = group(file.id, "rollouts");
  if (exists(rollouts.id, name)) H5_CHECK(H5Ldelete(rollouts.id, name.c_str(), H5P_DEFAULT));  // a torn one
  H5 g = group(rollouts.id, name);
  H5 xfer{H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose};
  H5_CHECK(H5Pset_dxpl_mpio(xfer.id, H5FD_MPIO_COLLECTIVE));
  auto put = [&](const char* dname, torch::Tensor t, hid_t file_type, hid_t mem_type, torch::ScalarType as) {
    if (!t.defined()) return;
    t = t.detach().to(torch::kCPU).to(as).contiguous();
    std::vector<hsize_t> dims{static_cast<hsize_t>(total)};
    for (int64_t d = 1; d < t.dim(); ++d) dims.push_back(static_cast<hsize_t>(t.size(d)));
    H5 space{H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose};
    H5 set{H5_CHECK(H5Dcreate2(g.id, dname, file_type, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Dclose};
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    start[0] = static_cast<hsize_t>(offset);
    count[0] = static_cast<hsize_t>(rows);
    H5 fs{H5_CHECK(H5Dget_space(set.id)), H5Sclose};
    H5 ms{H5_CHECK(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr)), H5Sclose};
    if (rows > 0) {
      H5_CHECK(H5Sselect_hyperslab(fs.id, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
    } else {
      H5_CHECK(H5Sselect_none(fs.id));
      H5_CHECK(H5Sselect_none(ms.id));
    }
    H5_CHECK(H5Dwrite(set.id, mem_type, ms.id, fs.id, xfer.id, rows > 0 ? t.data_ptr() : nullptr));
  };
  const int64_t lp = Pm - P, ra = Am - A;
  put("sequences", pad_to(ro.sequences, lp, ra), H5T_STD_I64LE, H5T_NATIVE_INT64, torch::kLong);
  put("attention_mask", pad_to(ro.attention_mask, lp, ra), H5T_STD_I8LE, H5T_NATIVE_INT8, torch::kChar);
  put("action_mask", pad_to(ro.action_mask, 0, ra), H5T_STD_I8LE, H5T_NATIVE_INT8, torch::kChar);
  put("scores", ro.scores, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, torch::kFloat);
  for (auto [dname, t] : {std::pair<const char*, torch::Tensor>{"logprobs", ro.logprobs},
                          {"ref_logprobs", ro.ref_logprobs},
                          {"values", ro.values},
                          {"advantages", ro.advantages},
                          {"returns", ro.returns}}) {
    // A tensor the run has (on every rank alike) is stored; one it lacks is left out.
    if (t.defined()) put(dname, pad_to(t, 0, ra), H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, torch::kFloat);
  }
  int_attr(g.id, "prompt_length", Pm);
}

// The texts travel to rank 0: parallel HDF5 cannot write variable-length strings. On rank 0,
// every rank's prompts and completions in rank order; elsewhere nothing.
void gather_rollout_texts(MPI_Comm comm, const RolloutRecord& ro, std::vector<std::string>& prompts,
                          std::vector<std::string>& completions) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<std::string> strings = ro.prompts;  // this rank's prompts and completions, for rank 0
  strings.insert(strings.end(), ro.completions.begin(), ro.completions.end());
  std::string packed;
  for (const auto& s : strings) packed += s + '\0';
  int n = static_cast<int>(packed.size());
  std::vector<int> lens(static_cast<size_t>(size)), offs(static_cast<size_t>(size));
  watched::gather(&n, 1, MPI_INT, lens.data(), 0, comm, "the sizes of the rollouts' texts");
  int sum = 0;
  for (int r = 0; r < size; ++r) {
    offs[static_cast<size_t>(r)] = sum;
    sum += lens[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(rank == 0 ? sum : 0), '\0');
  watched::gatherv(packed.data(), n, MPI_CHAR, all.data(), lens.data(), offs.data(), 0, comm, "the rollouts' texts");
  if (rank != 0) return;
  for (int r = 0; r < size; ++r) {
    std::vector<std::string> parts;
    size_t at = static_cast<size_t>(offs[static_cast<size_t>(r)]);
    const size_t end = at + static_cast<size_t>(lens[static_cast<size_t>(r)]);
    while (at < end) {
      const size_t z = all.find('\0', at);
      parts.push_back(all.substr(at, z - at));
      at = z + 1;
    }
    const size_t half = parts.size() / 2;
    prompts.insert(prompts.end(), parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(half));
    completions.insert(completions.end(), parts.begin() + static_cast<std::ptrdiff_t>(half), parts.end());
  }
}

// Row `row` of every series: the iteration, its metrics, timing and memory.
void write_iteration_rows(hid_t file, hsize_t row, const IterationRecord& rec) {
  H5 metrics = group(file, "metrics");
  {
    H5 set = open_series(metrics.id, "iteration", 0, H5T_STD_I64LE);
    write_row(set.id, row, {0.0}, false, H5T_NATIVE_INT64, &rec.iteration);
  }
  for (const auto& [m, v] : rec.metrics) {
    H5 set = open_series(metrics.id, m, 0, H5T_IEEE_F64LE);
    write_row(set.id, row, {v}, false, H5T_NATIVE_DOUBLE, &v);
  }
  for (auto [gname, series] : {std::pair<const char*, const std::map<std::string, std::vector<double>>*>{
                                   "timing", &rec.timing},
                               {"memory", &rec.memory}}) {
    H5 g = group(file, gname);
    for (const auto& [phase, values] : *series) {
      H5 set = open_series(g.id, phase, static_cast<hsize_t>(values.size()), H5T_IEEE_F64LE);
      write_row(set.id, row, values, true, H5T_NATIVE_DOUBLE, values.data());
    }
  }
}

// The rows of /eval/iteration that belong to complete iterations: those up to the first whose
// iteration is past `complete` (an append that failed before raising iterations_complete may
// have left some).
hsize_t valid_eval_rows(hid_t file, std::int64_t complete) {
  if (!exists(file, "eval/iteration")) return 0;
  H5 set{H5_CHECK(H5Dopen2(file, "eval/iteration", H5P_DEFAULT)), H5Dclose};
  H5 space{H5_CHECK(H5Dget_space(set.id)), H5Sclose};
  hsize_t n = 0;
  H5_CHECK(H5Sget_simple_extent_dims(space.id, &n, nullptr));
  std::vector<std::int64_t> its(static_cast<size_t>(n));
  if (n) H5_CHECK(H5Dread(set.id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, its.data()));
  hsize_t valid = 0;
  while (valid < n && its[valid] <= complete) ++valid;
  return valid;
}

// The evaluations of an iteration as rows of /eval, after the `complete` iterations' rows. A
// metric an earlier evaluation lacked is NaN there (open_series' fill value).
void write_eval_rows(hid_t file, std::int64_t complete, const std::vector<EvalRecord>& evals) {
  if (evals.empty()) return;
  H5 g = group(file, "eval");
  hsize_t row = valid_eval_rows(file, complete);
  for (const EvalRecord& e : evals) {
    {
      H5 set = open_series(g.id, "iteration", 0, H5T_STD_I64LE);
      write_row(set.id, row, {0.0}, false, H5T_NATIVE_INT64, &e.iteration);
    }
    for (const auto& [m, v] : e.metrics) {
      H5 set = open_series(g.id, m, 0, H5T_IEEE_F64LE);
      write_row(set.id, row, {v}, false, H5T_NATIVE_DOUBLE, &v);
    }
    ++row;
  }
  // Rows a failed append left beyond these go (every series to the same length).
  for (const std::string& name : link_names(g.id)) {
    H5 set{H5_CHECK(H5Dopen2(g.id, name.c_str(), H5P_DEFAULT)), H5Dclose};
    H5 space{H5_CHECK(H5Dget_space(set.id)), H5Sclose};
    hsize_t dims = 0;
    H5_CHECK(H5Sget_simple_extent_dims(space.id, &dims, nullptr));
    if (dims != row) H5_CHECK(H5Dset_extent(set.id, &row));
  }
}

// The prompts and completions of /rollouts/<name> as UTF-8 variable-length strings.
void write_rollout_texts(hid_t file, const std::string& name, const std::vector<std::string>& prompts,
                         const std::vector<std::string>& completions) {
  H5 g{H5_CHECK(H5Gopen2(file, ("rollouts/" + name).c_str(), H5P_DEFAULT)), H5Gclose};
  H5 type{H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose};
  H5_CHECK(H5Tset_size(type.id, H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(type.id, H5T_CSET_UTF8));
  for (auto [dname, texts] : {std::pair<const char*, const std::vector<std::string>*>{"prompt", &prompts},
                              {"completion", &completions}}) {
    hsize_t n = texts->size();
    std::vector<const char*> ptrs;
    for (const auto& s : *texts) ptrs.push_back(s.c_str());
    H5 space{H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose};
    H5 set{H5_CHECK(H5Dcreate2(g.id, dname, type.id, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Dclose};
    if (n) H5_CHECK(H5Dwrite(set.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()));
  }
}

// The writer's side of the readers' protocol: an exclusive flock on <run.h5>.lock while the
// file is being changed. Readers (postprocess/quartet_run.py) take it shared, so they open the
// file only between iterations. flock works between processes of one host and on shared file
// systems that support it (Lustre mounted with -o flock, NFSv4).
class WriteLock {
 public:
  explicit WriteLock(const std::string& path) {
    const std::string lock = path + ".lock";
    fd_ = ::open(lock.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    QUARTET_CHECK(fd_ >= 0, lock + ": cannot open the run file's lock: " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      QUARTET_CHECK(errno == EINTR, lock + ": cannot lock: " + std::strerror(errno));
    }
  }
  ~WriteLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  WriteLock(const WriteLock&) = delete;
  WriteLock& operator=(const WriteLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string run_file_run_id(const std::string& path) {
  if (!path_exists(path)) return "";
  return read_string_attr(open_serial(path, H5F_ACC_RDONLY).id, "run_id");
}

RunFile::RunFile(const std::string& dir, MPI_Comm comm, const RunFileInfo& info,
                 const std::vector<double>& planned_memory)
    : path_(dir + "/run.h5"), comm_(comm), world_size_(info.world_size) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  // Rank 0 creates or checks the file alone; the others learn the outcome (and the error).
  std::string error;
  std::int64_t complete = 0;
  if (rank == 0) {
    try {
      make_directories(dir);
      WriteLock lock(path_);
      if (path_exists(path_)) {
        H5 file = open_serial(path_, H5F_ACC_RDWR);
        complete = read_int_attr(file.id, "iterations_complete", 0);
      } else {
        H5 file{H5_CHECK(H5Fcreate(path_.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT)), H5Fclose};
        string_attr(file.id, "software", "quartet");
        string_attr(file.id, "version", info.version);
        string_attr(file.id, "git_commit", info.git_commit);
        string_attr(file.id, "run_id", info.run_id);
        string_attr(file.id, "deck", info.deck);
        string_attr(file.id, "start_time", utc_iso());
        string_attr(file.id, "placement", info.placement);
        string_attr(file.id, "algorithm", info.algorithm);
        string_attr(file.id, "model_paths", info.model_paths);
        int_attr(file.id, "world_size", info.world_size);
        int_attr(file.id, "iterations_planned", info.iterations_planned);
        int_attr(file.id, "iterations_complete", 0);
        for (const char* g : {"metrics", "timing", "memory", "rollouts"}) group(file.id, g);
        hsize_t n = planned_memory.size();
        H5 space{H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose};
        H5 set{H5_CHECK(H5Dcreate2(file.id, "memory/plan", H5T_IEEE_F64LE, space.id, H5P_DEFAULT, H5P_DEFAULT,
                                   H5P_DEFAULT)),
               H5Dclose};
        if (n) H5_CHECK(H5Dwrite(set.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, planned_memory.data()));
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  watched::bcast_text(&error, 0, comm, "rank 0's verdict on run.h5");
  QUARTET_CHECK(error.empty(), "run file: " + error);
  watched::bcast(&complete, 1, MPI_INT64_T, 0, comm, "the iterations run.h5 holds");
  complete_ = complete;
}

void RunFile::append(const IterationRecord& rec, const RolloutRecord* ro) {
  if (rec.iteration <= complete_) return;  // already in the file (a resumed run)
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm_, &rank));
  MPI_CHECK(MPI_Comm_size(comm_, &size));
  const std::string name = ro ? rollout_group_name(rec.iteration) : std::string();

  // Rank 0 holds the readers off until the iteration is complete; the group waits for it.
  std::unique_ptr<WriteLock> lock;
  if (rank == 0) lock = std::make_unique<WriteLock>(path_);
  watched::barrier(comm_, "run.h5 locked for iteration " + std::to_string(rec.iteration));

  // 1. The rollouts' numbers, collectively with parallel HDF5; then their texts to rank 0.
  std::vector<std::string> prompts, completions;
  if (ro) {
    write_rollout_tensors(path_, comm_, name, rec.iteration, *ro);
    gather_rollout_texts(comm_, *ro, prompts, completions);
  }

  // 2. Rank 0 alone: metrics, timing, memory, the texts, and last iterations_complete.
  std::string error;
  if (rank == 0) {
    try {
      H5 file = open_serial(path_, H5F_ACC_RDWR);
      write_iteration_rows(file.id, static_cast<hsize_t>(complete_), rec);
      write_eval_rows(file.id, complete_, rec.evals);
      if (ro) write_rollout_texts(file.id, name, prompts, completions);
      int_attr(file.id, "iterations_complete", complete_ + 1);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  lock.reset();
  watched::bcast_text(&error, 0, comm_, "rank 0's verdict on iteration " + std::to_string(rec.iteration) + " of run.h5");
  QUARTET_CHECK(error.empty(), "run file " + path_ + ": " + error);
  ++complete_;
}

void RunFile::rewind(std::int64_t iterations) {
  if (iterations >= complete_) return;
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm_, &rank));
  std::string error;
  if (rank == 0) {
    try {
      WriteLock lock(path_);
      H5 file = open_serial(path_, H5F_ACC_RDWR);
      // iterations_complete first: if anything below fails, readers still see a consistent file.
      int_attr(file.id, "iterations_complete", iterations);
      // Every per-iteration series loses its rows past `iterations` (their first dimension).
      for (const char* gname : {"metrics", "timing", "memory"}) {
        if (!exists(file.id, gname)) continue;
        H5 g{H5_CHECK(H5Gopen2(file.id, gname, H5P_DEFAULT)), H5Gclose};
        for (const std::string& name : link_names(g.id)) {
          H5 set{H5_CHECK(H5Dopen2(g.id, name.c_str(), H5P_DEFAULT)), H5Dclose};
          H5 space{H5_CHECK(H5Dget_space(set.id)), H5Sclose};
          hsize_t dims[2] = {0, 0};
          hsize_t maxdims[2] = {0, 0};
          H5_CHECK(H5Sget_simple_extent_dims(space.id, dims, maxdims));
          // Only the extendible series are per iteration (/memory/plan, for one, is not).
          if (maxdims[0] != H5S_UNLIMITED || dims[0] <= static_cast<hsize_t>(iterations)) continue;
          dims[0] = static_cast<hsize_t>(iterations);
          H5_CHECK(H5Dset_extent(set.id, dims));
        }
      }
      // Evaluations are rows of /eval keyed by /eval/iteration.
      if (exists(file.id, "eval")) {
        hsize_t keep = valid_eval_rows(file.id, iterations);
        H5 g{H5_CHECK(H5Gopen2(file.id, "eval", H5P_DEFAULT)), H5Gclose};
        for (const std::string& name : link_names(g.id)) {
          H5 set{H5_CHECK(H5Dopen2(g.id, name.c_str(), H5P_DEFAULT)), H5Dclose};
          H5 space{H5_CHECK(H5Dget_space(set.id)), H5Sclose};
          hsize_t dims = 0;
          H5_CHECK(H5Sget_simple_extent_dims(space.id, &dims, nullptr));
          if (dims > keep) H5_CHECK(H5Dset_extent(set.id, &keep));
        }
      }
      // Rollout groups are named by iteration (%06d).
      if (exists(file.id, "rollouts")) {
        H5 g{H5_CHECK(H5Gopen2(file.id, "rollouts", H5P_DEFAULT)), H5Gclose};
        std::vector<std::string> stale;
        for (const std::string& name : link_names(g.id))
          if (std::atoll(name.c_str()) > iterations) stale.push_back(name);
        for (const auto& name : stale) H5_CHECK(H5Ldelete(g.id, name.c_str(), H5P_DEFAULT));
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  watched::bcast_text(&error, 0, comm_, "rank 0's verdict on rewinding run.h5");
  QUARTET_CHECK(error.empty(), "run file " + path_ + ": cannot rewind to iteration " + std::to_string(iterations) +
                                   ": " + error);
  complete_ = iterations;
}

namespace {

// The first `n` values of a 1-D dataset as doubles.
std::vector<double> read_doubles(hid_t loc, const std::string& name, hsize_t n) {
  H5 set{H5_CHECK(H5Dopen2(loc, name.c_str(), H5P_DEFAULT)), H5Dclose};
  H5 space{H5_CHECK(H5Dget_space(set.id)), H5Sclose};
  hsize_t len = 0;
  H5_CHECK(H5Sget_simple_extent_dims(space.id, &len, nullptr));
  std::vector<double> v(static_cast<size_t>(len));
  if (len) H5_CHECK(H5Dread(set.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()));
  v.resize(std::min<size_t>(v.size(), static_cast<size_t>(n)));
  return v;
}

// inspect's lines on /eval: the points (iterations) and each metric's first, last and best.
std::string describe_evals(hid_t file, std::int64_t complete) {
  const hsize_t rows = valid_eval_rows(file, complete);
  if (rows == 0) return "";
  H5 g{H5_CHECK(H5Gopen2(file, "eval", H5P_DEFAULT)), H5Gclose};
  const std::vector<double> its = read_doubles(g.id, "iteration", rows);
  std::ostringstream out;
  out << "  eval points: " << rows << " (iterations";
  for (size_t i = 0; i < its.size(); ++i) {
    if (its.size() > 12 && i == 6) {
      out << " ...";
      i = its.size() - 6;
    }
    out << " " << static_cast<long long>(its[i]);
  }
  out << ")\n  eval metric                 first         last          best (max)\n";
  for (const std::string& m : link_names(g.id)) {
    if (m == "iteration") continue;
    const std::vector<double> v = read_doubles(g.id, m, rows);
    if (v.empty()) continue;
    double best = -std::numeric_limits<double>::infinity();
    for (double x : v)
      if (std::isfinite(x)) best = std::max(best, x);
    char line[160];
    std::snprintf(line, sizeof line, "  %-22s %12.5g  %12.5g  %12.5g\n", m.c_str(), v.front(), v.back(), best);
    out << line;
  }
  return out.str();
}

}  // namespace

std::string describe_run_file(const std::string& path) {
  QUARTET_CHECK(path_exists(path), path + ": no such file");
  // The readers' side of WriteLock: wait until no iteration is being appended.
  int lock_fd = path_exists(path + ".lock") ? ::open((path + ".lock").c_str(), O_RDONLY | O_CLOEXEC) : -1;
  struct Unlock {
    int fd;
    ~Unlock() {
      if (fd >= 0) ::close(fd);
    }
  } unlock{lock_fd};
  if (lock_fd >= 0)
    while (::flock(lock_fd, LOCK_SH) != 0 && errno == EINTR) {
    }
  H5 file = open_serial(path, H5F_ACC_RDONLY);
  std::ostringstream out;
  const std::int64_t n = read_int_attr(file.id, "iterations_complete", 0);
  out << path << ": quartet run file\n";
  for (const char* a : {"version", "git_commit", "start_time", "algorithm", "placement"})
    out << "  " << a << ": " << read_string_attr(file.id, a) << "\n";
  out << "  world_size: " << read_int_attr(file.id, "world_size", 0) << "\n";
  out << "  iterations: " << n << " complete of " << read_int_attr(file.id, "iterations_planned", 0) << " planned\n";
  if (exists(file.id, "metrics") && n > 0) {
    out << "  metric                      last          best (max)    mean\n";
    H5 g{H5_CHECK(H5Gopen2(file.id, "metrics", H5P_DEFAULT)), H5Gclose};
    for (const char* m : {"reward_mean", "kl", "policy_loss", "value_loss", "clip_fraction", "response_length",
                          "tokens_per_s", "time_iteration"}) {
      if (!exists(g.id, m)) continue;
      H5 set{H5_CHECK(H5Dopen2(g.id, m, H5P_DEFAULT)), H5Dclose};
      H5 space{H5_CHECK(H5Dget_space(set.id)), H5Sclose};
      hsize_t len = 0;
      H5_CHECK(H5Sget_simple_extent_dims(space.id, &len, nullptr));
      std::vector<double> v(static_cast<size_t>(len));
      if (len) H5_CHECK(H5Dread(set.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()));
      v.resize(std::min<size_t>(v.size(), static_cast<size_t>(n)));
      if (v.empty()) continue;
      double best = -std::numeric_limits<double>::infinity(), sum = 0;
      for (double x : v) {
        best = std::max(best, x);
        sum += x;
      }
      char line[128];
      std::snprintf(line, sizeof line, "  %-22s %12.5g  %12.5g  %12.5g\n", m, v.back(), best, sum / v.size());
      out << line;
    }
  }
  out << describe_evals(file.id, n);
  if (exists(file.id, "rollouts")) {
    H5 g{H5_CHECK(H5Gopen2(file.id, "rollouts", H5P_DEFAULT)), H5Gclose};
    H5G_info_t gi;
    H5_CHECK(H5Gget_info(g.id, &gi));
    out << "  rollout groups: " << gi.nlinks << "\n";
  }
  return out.str();
}

}  // namespace quartet

#include "quartet/dist/world.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "quartet/core/check.hpp"
#include "quartet/core/log.hpp"
#include "quartet/dist/rank_local.hpp"
#include "quartet/dist/watched_mpi.hpp"

namespace quartet {

std::uint64_t host_hash(const std::string& hostname, const std::string& boot_id) {
  // FNV-1a: stable across processes and builds (std::hash is not promised to be).
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : hostname + "\n" + boot_id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string this_hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

std::string this_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

int local_rank_of(const std::vector<std::uint64_t>& hashes, int rank) {
  int local = 0;
  for (int r = 0; r < rank; ++r) local += hashes[r] == hashes[rank];
  return local;
}

int local_size_of(const std::vector<std::uint64_t>& hashes, int rank) {
  int n = 0;
  for (auto h : hashes) n += h == hashes[rank];
  return n;
}

World::World(int* argc, char*** argv) {
  int initialised = 0;
  MPI_CHECK(MPI_Initialized(&initialised));
  if (!initialised) {
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi_ = true;
    thread_multiple_ = provided == MPI_THREAD_MULTIPLE;
  } else {
    int provided = 0;
    MPI_CHECK(MPI_Query_thread(&provided));
    thread_multiple_ = provided == MPI_THREAD_MULTIPLE;
  }
  // Errors come back as codes so MPI_CHECK can name the call, the rank and the line.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  host_ = this_hostname();
  set_log_identity(rank_, size_, host_);
  host_hash_ = quartet::host_hash(host_, this_boot_id());
  host_hashes_.resize(size_);
  MPI_CHECK(MPI_Allgather(&host_hash_, 1, MPI_UINT64_T, host_hashes_.data(), 1, MPI_UINT64_T,
                          MPI_COMM_WORLD));
  local_rank_ = local_rank_of(host_hashes_, rank_);
  local_size_ = local_size_of(host_hashes_, rank_);
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &exchange_comm_));
  // The watchdogs' roll call runs from their own threads, which needs MPI_THREAD_MULTIPLE.
  if (thread_multiple_) MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &watchdog_comm_));
  if (!thread_multiple_ && rank_ == 0)
    eprintf_rank("warning: this MPI library does not provide MPI_THREAD_MULTIPLE; the watchdog "
                 "may fail to abort a stalled job from its own thread\n");
}

World::~World() {
  if (exchange_comm_ != MPI_COMM_NULL) MPI_Comm_free(&exchange_comm_);
  if (watchdog_comm_ != MPI_COMM_NULL) MPI_Comm_free(&watchdog_comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_mpi_ && !finalized) MPI_Finalize();
}

bool World::all_ok(bool ok) const {
  int mine = ok ? 1 : 0, all = 0;
  watched::allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD, "every rank's verdict");
  return all != 0;
}

bool World::agree(const std::function<void()>& step) const {
  return agree_collectively([&] {
    RankLocalStep local;
    step();
  });
}

bool World::agree_collectively(const std::function<void()>& step) const {
  std::string error;
  try {
    step();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  if (all_ok(error.empty())) return true;
  int rank0_failed = rank_ == 0 && !error.empty();
  watched::bcast(&rank0_failed, 1, MPI_INT, 0, MPI_COMM_WORLD, "whether rank 0 has the error to print");
  if (!error.empty() && (rank_ == 0 || !rank0_failed)) {
    if (rank_ == 0)
      std::fprintf(stderr, "quartet: error: %s\n", error.c_str());
    else
      eprintf_rank("quartet: error: %s\n", error.c_str());
    std::fflush(stderr);
  }
  return false;
}

void World::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace quartet

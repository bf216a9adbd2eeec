#include "quartet/dist/startup_deadline.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace quartet {

namespace {

// The rank as the launcher told it, before MPI can: Open MPI, PMIx, MPICH, Slurm.
std::string launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name)) return v;
  return "?";
}

std::string hostname() {
  char buf[256] = {0};
  return ::gethostname(buf, sizeof buf - 1) == 0 ? buf : "?";
}

[[noreturn]] void give_up(double seconds) {
  std::fprintf(stderr,
               "quartet: error: rank %s (host %s): MPI start-up (MPI_Init and the world's first collectives) did "
               "not finish in %g s (dist.startup_timeout): a rank of this job never started, or stopped; this "
               "rank ends so that the job ends\n",
               launcher_rank().c_str(), hostname().c_str(), seconds);
  std::fflush(stderr);
  std::_Exit(3);
}

}  // namespace

StartupDeadline::StartupDeadline(double seconds) {
  clock_ = std::thread([this, seconds] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return met_; })) give_up(seconds);
  });
}

void StartupDeadline::met() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    met_ = true;
  }
  changed_.notify_all();
  if (clock_.joinable()) clock_.join();
}

StartupDeadline::~StartupDeadline() { met(); }

}  // namespace quartet

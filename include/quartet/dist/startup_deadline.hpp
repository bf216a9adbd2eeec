#pragma once
// MPI's start-up is unwatched: MPI_Init and the world's first collectives wait for every rank,
// before any watchdog exists, and a rank that never comes (stopped, killed before MPI_Init, its
// node gone) would keep the others there for good. A StartupDeadline, made before MPI starts,
// ends this process after `seconds` unless met() is called first, saying so with the rank that
// the launcher gave it; mpirun or srun then ends the job.
#include <condition_variable>
#include <mutex>
#include <thread>

namespace quartet {

class StartupDeadline {
 public:
  explicit StartupDeadline(double seconds);
  ~StartupDeadline();  // met, if it was not
  StartupDeadline(const StartupDeadline&) = delete;
  StartupDeadline& operator=(const StartupDeadline&) = delete;
  void met();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool met_ = false;
  std::thread clock_;
};

}  // namespace quartet

#include "quartet/engine/stop_control.hpp"

#include "quartet/core/signals.hpp"
#include "quartet/dist/watched_mpi.hpp"
#include "quartet/engine/phase_clock.hpp"

namespace quartet {

int StopControl::requests_on_any_rank() const {
  int requests = stop_requests();
  watched::allreduce(MPI_IN_PLACE, &requests, 1, MPI_INT, MPI_MAX, world_.comm(), "the stop requests seen");
  return requests;
}

bool StopControl::stop_now() const { return requests_on_any_rank() >= 2; }

bool StopControl::requested() const { return requests_on_any_rank() >= 1; }

Stop StopControl::after_iteration(double iteration_seconds, double checkpoint_seconds) const {
  // [0] stop requests seen by any rank, [1] rank 0's verdict on the time limit.
  int flags[2] = {stop_requests(), 0};
  if (world_.rank() == 0 && time_limit_ > 0) {
    // Room for one more iteration and the checkpoint after it (before the first checkpoint an
    // iteration's time stands in for its write), with a 10% margin.
    const double write = checkpoint_seconds > 0 ? checkpoint_seconds : iteration_seconds;
    flags[1] = monotonic_seconds() - started_ + 1.1 * (iteration_seconds + write) > time_limit_;
  }
  watched::allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, world_.comm(), "whether to stop after this iteration");
  if (flags[0] >= 2) return Stop::now;  // a second request: no time for a checkpoint
  if (flags[0] > 0) return Stop::signal;
  if (flags[1] > 0) return Stop::time_limit;
  return Stop::none;
}

}  // namespace quartet

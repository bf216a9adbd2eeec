// A program that stalls on purpose, for the watchdog tests (tests/mpi/CMakeLists.txt):
//   watchdog_probe barrier    - the last rank never joins a barrier of the whole world (it sleeps)
//   watchdog_probe stopped    - the last rank stops itself (SIGSTOP) instead of joining an
//                               allreduce of the world (dist/watched_mpi.hpp)
//   watchdog_probe elsewhere  - the last rank sits in another watched operation while the others
//                               wait in an allreduce of the world
//   watchdog_probe exchange   - world rank 2 never sends its part of an exchange
//   watchdog_probe nccl       - (GPUs) the last rank never joins an NCCL all-reduce; the others
//                               queue it on their stream and the watchdog polls its event
// The watchdog must report the stalled operation and the rank it waits for, and abort the job
// (non-zero exit, no hang).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>

#include "quartet/core/log.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/dist/device.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/exchange.hpp"
#include "quartet/dist/watched_mpi.hpp"
#include "quartet/dist/world.hpp"

using namespace quartet;

int main(int argc, char** argv) {
  World world(&argc, &argv);
  Watchdog dog(1.0, {}, world.watchdog_comm());
  Watchdog::set_process(&dog);
  std::string mode = argc > 1 ? argv[1] : "barrier";
  const bool last = world.rank() == world.size() - 1;
  std::vector<int> ranks;
  for (int r = 0; r < world.size(); ++r) ranks.push_back(r);
  if (mode == "barrier") {
    auto coll = make_mpi_collectives("world", ranks, world.comm(), &dog);
    if (!last) coll->barrier();
  } else if (mode == "stopped" || mode == "elsewhere") {
    int x = 1;
    if (!last) {
      watched::allreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_SUM, world.comm(), "the probe's numbers");
    } else if (mode == "stopped") {
      std::raise(SIGSTOP);
    } else {
      dog.set_timeout(60);  // its own watch must not be the one that fires
      auto busy = dog.watch("a long write of the probe's own");
      sleep(30);
    }
  } else if (mode == "nccl") {
    auto device = select_device(DeviceKind::cuda, world.local_rank());
    auto coll = make_nccl_collectives("world", ranks, world.comm(), &dog);
    auto t = torch::ones({1024}, torch::TensorOptions().device(device));
    // Once together, so NCCL has connected its peers and the next enqueue cannot block:
    // the stall is then in the kernel on the GPU, seen only through its completion event.
    coll->all_reduce(t, ReduceOp::sum);
    coll->synchronize();
    if (!last) {
      coll->all_reduce(t, ReduceOp::sum);  // returns at once: the host does not wait
      std::printf("rank %d: all_reduce #2 queued, host goes on\n", world.rank());
      std::fflush(stdout);
      coll->synchronize();
    }
  } else {
    // Sources: world ranks 1 and 2; destination: world rank 0. Rank 2 never sends.
    GroupExchange ex(world, "probe", {1, 2}, {0}, 1, torch::Device(torch::kCPU), &dog);
    Batch batch = {torch::ones({2, 3})};
    if (world.rank() != 2) ex.forward(batch);
  }
  sleep(30);  // the stalled rank idles; the watchdog ends the job long before this
  printf0("watchdog_probe: the watchdog did not fire\n");
  return 0;
}

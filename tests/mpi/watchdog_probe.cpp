// A program that stalls on purpose, for the watchdog tests (tests/mpi/CMakeLists.txt):
//   watchdog_probe barrier   - the last rank never joins a barrier of the whole world
//   watchdog_probe exchange  - world rank 2 never sends its part of an exchange
//   watchdog_probe nccl      - (GPUs) the last rank never joins an NCCL all-reduce; the others
//                              queue it on their stream and the watchdog polls its event
// The watchdog must report the stalled operation and abort the job (non-zero exit, no hang).
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "quartet/core/log.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/dist/device.hpp"
#include "quartet/dist/exchange.hpp"
#include "quartet/dist/world.hpp"

using namespace quartet;

int main(int argc, char** argv) {
  World world(&argc, &argv);
  Watchdog dog(1.0);
  std::string mode = argc > 1 ? argv[1] : "barrier";
  if (mode == "barrier") {
    std::vector<int> ranks;
    for (int r = 0; r < world.size(); ++r) ranks.push_back(r);
    auto coll = make_mpi_collectives("world", ranks, world.comm(), &dog);
    if (world.rank() != world.size() - 1) coll->barrier();
  } else if (mode == "nccl") {
    auto device = select_device("cuda", world.local_rank());
    std::vector<int> ranks;
    for (int r = 0; r < world.size(); ++r) ranks.push_back(r);
    auto coll = make_nccl_collectives("world", ranks, world.comm(), &dog);
    auto t = torch::ones({1024}, torch::TensorOptions().device(device));
    // Once together, so NCCL has connected its peers and the next enqueue cannot block:
    // the stall is then in the kernel on the GPU, seen only through its completion event.
    coll->all_reduce(t, ReduceOp::sum);
    coll->synchronize();
    if (world.rank() != world.size() - 1) {
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

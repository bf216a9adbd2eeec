// Bus bandwidth of the group collectives, as nccl-tests reports it:
//   mpirun -np 2 build/bench/collectives_bench [--max-mib 1024] [--iters 20] [--dtype bf16]
// One group over the whole world, NCCL on GPUs, MPI on CPUs. algbw = bytes / time; busbw
// scales it by the traffic each link carries: 2(n-1)/n for all_reduce, (n-1)/n for all_gather
// and reduce_scatter (bytes = the full, gathered size).
#include <torch/types.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "quartet/core/log.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/dist/device.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/placement.hpp"
#include "quartet/dist/world.hpp"

using namespace quartet;

int main(int argc, char** argv) {
  World world(&argc, &argv);
  double max_mib = 1024;
  int iters = 20;
  torch::ScalarType dtype = torch::kBFloat16;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--max-mib") max_mib = std::stod(v);
    else if (k == "--iters") iters = std::stoi(v);
    else if (k == "--dtype") dtype = v == "fp32" ? torch::kFloat : torch::kBFloat16;
    else { printf0("unknown option %s\n", k.c_str()); return 2; }
  }
  auto device = select_device(DeviceKind::automatic, world.local_rank());
  std::vector<int> ranks(static_cast<size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) ranks[static_cast<size_t>(r)] = r;
  auto coll = device.is_cuda() ? make_nccl_collectives("world", ranks, world.comm(), nullptr)
                               : make_mpi_collectives("world", ranks, world.comm(), nullptr);
  const int n = world.size();
  const size_t esize = torch::elementSize(dtype);
  printf0("collectives_bench: %d ranks, %s backend, %s, %d iterations per size\n", n,
          coll->backend_name(), c10::toString(dtype), iters);
  printf0("%-15s %12s %10s %12s %12s\n", "operation", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
  for (double mib = 1.0 / 1024; mib <= max_mib + 1e-9; mib *= 4) {
    int64_t elems = static_cast<int64_t>(mib * 1024 * 1024 / esize) / n * n;
    auto opts = torch::TensorOptions().dtype(dtype).device(device);
    auto full = torch::ones({elems}, opts);
    auto shard = torch::ones({elems / n}, opts);
    struct Op { const char* name; double factor; std::function<void()> run; };
    Op ops[] = {
      {"all_reduce", 2.0 * (n - 1) / n, [&] { coll->all_reduce(full, ReduceOp::sum); }},
      {"all_gather", double(n - 1) / n, [&] { coll->all_gather(shard, full); }},
      {"reduce_scatter", double(n - 1) / n, [&] { coll->reduce_scatter(full, shard, ReduceOp::sum); }},
    };
    for (auto& op : ops) {
      for (int w = 0; w < 3; ++w) op.run();  // warm-up: NCCL connects lazily
      coll->synchronize();
      coll->barrier();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) op.run();
      coll->synchronize();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      double bytes = double(elems) * esize;
      printf0("%-15s %12.0f %10.1f %12.2f %12.2f\n", op.name, bytes, s * 1e6, bytes / s / 1e9,
              bytes / s / 1e9 * op.factor);
    }
  }
  return 0;
}

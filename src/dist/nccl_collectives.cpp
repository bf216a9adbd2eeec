// The NCCL backend: one communicator per group, its unique id broadcast over the group's MPI
// communicator (as nccl-tests does), collectives on a stream of their own. Ordering against
// the compute stream uses events, as llm.c orders its reduce-scatter: the collective waits for
// the work queued before it, and work queued after it waits for the collective. The host never
// blocks; the watchdog polls each collective's completion event instead.
#include "quartet/dist/collectives.hpp"
#include "quartet/core/check.hpp"
#include "quartet/dist/watched_mpi.hpp"

#ifdef QUARTET_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace quartet {

#ifdef QUARTET_WITH_CUDA
namespace {

ncclDataType_t nccl_type(c10::ScalarType t, const std::string& what) {
  switch (t) {
    case c10::kFloat: return ncclFloat32;
    case c10::kDouble: return ncclFloat64;
    case c10::kHalf: return ncclFloat16;
    case c10::kBFloat16: return ncclBfloat16;
    case c10::kLong: return ncclInt64;
    case c10::kInt: return ncclInt32;
    case c10::kChar: return ncclInt8;
    case c10::kByte: return ncclUint8;
    case c10::kBool: return ncclUint8;  // moved only; reductions of bool are refused below
    default: break;
  }
  fail(__FILE__, __LINE__, what + ": NCCL has no type for " + std::string(c10::toString(t)));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclAvg; }

class NcclCollectives final : public Collectives {
 public:
  NcclCollectives(std::string group, std::vector<int> world_ranks, MPI_Comm comm, int rank,
                  int size, Watchdog* watchdog)
      : Collectives(std::move(group), std::move(world_ranks), rank, size, watchdog),
        device_(torch::kCUDA, c10::cuda::current_device()),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_.index())) {
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    watched::bcast(&id, sizeof(id), MPI_BYTE, 0, comm, "the NCCL unique id of group '" + group_name() + "'");
    auto w = watch("NCCL communicator set-up on group '" + group_name() + "'");
    NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank));
  }

  ~NcclCollectives() override {
    // Pending collectives must finish before their communicator goes away.
    cudaStreamSynchronize(stream_.stream());
    ncclCommDestroy(comm_);
  }

  const char* backend_name() const override { return "nccl"; }
  torch::Device device() const override { return device_; }

  void synchronize() override {
    auto w = watch("synchronize on group '" + group_name() + "'");
    CUDA_CHECK(cudaStreamSynchronize(stream_.stream()));
  }

 protected:
  Pending do_all_gather(const torch::Tensor& in, const torch::Tensor& out,
                        const std::string& what, bool defer) override {
    return run(what, {in, out}, defer, [&](cudaStream_t s) {
      NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), count(in), nccl_type(in.scalar_type(), what),
                               comm_, s));
    });
  }

  Pending do_reduce_scatter(const torch::Tensor& in, const torch::Tensor& out, ReduceOp op,
                            const std::string& what, bool defer) override {
    check_reducible(in, what);
    return run(what, {in, out}, defer, [&](cudaStream_t s) {
      NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), count(out),
                                   nccl_type(in.scalar_type(), what), nccl_op(op), comm_, s));
    });
  }

  void do_all_reduce(const torch::Tensor& t, ReduceOp op, const std::string& what) override {
    check_reducible(t, what);
    run(what, {t}, false, [&](cudaStream_t s) {
      NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), count(t),
                               nccl_type(t.scalar_type(), what), nccl_op(op), comm_, s));
    });
  }

  void do_broadcast(const torch::Tensor& t, int root, const std::string& what) override {
    run(what, {t}, false, [&](cudaStream_t s) {
      NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), count(t),
                               nccl_type(t.scalar_type(), what), root, comm_, s));
    });
  }

  void do_barrier(const std::string& what) override {
    // NCCL has no barrier: a one-element all-reduce that the host waits for.
    auto one = torch::ones({1}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
    run(what, {one}, false, [&](cudaStream_t s) {
      NCCL_CHECK(ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32, ncclSum, comm_, s));
    });
    synchronize();
  }

 private:
  static size_t count(const torch::Tensor& t) { return static_cast<size_t>(t.numel()); }
  static void check_reducible(const torch::Tensor& t, const std::string& what) {
    QUARTET_CHECK(t.scalar_type() != torch::kBool, what + ": cannot reduce bool tensors");
  }

  // Queue one collective on the group's stream, ordered after the compute stream's work and
  // before anything the compute stream does next (defer: only once the Pending is waited for).
  template <class F>
  Pending run(const std::string& what, std::initializer_list<torch::Tensor> tensors, bool defer,
              F&& enqueue) {
    c10::cuda::CUDAGuard guard(device_);
    auto compute = c10::cuda::getCurrentCUDAStream(device_.index());
    at::cuda::CUDAEvent ready;
    ready.record(compute);
    ready.block(stream_);
    {
      // Enqueueing can itself block: NCCL connects peers lazily on first use, which waits for
      // the other ranks. A rank that never joins must be caught here too.
      auto w = watch(what + " (enqueue)");
      enqueue(stream_.stream());
    }
    // The caching allocator must not hand these blocks out again until the collective is done.
    for (const auto& t : tensors)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    auto done = std::make_shared<at::cuda::CUDAEvent>();
    done->record(stream_);
    if (watchdog()) {
      int dev = device_.index();
      watchdog()->watch_until(
          what,
          [done, dev] {
            cudaSetDevice(dev);  // the watchdog thread polls from its own thread
            return done->query();
          },
          world_ranks());
    }
    if (!defer) {
      done->block(compute);
      return {};
    }
    const int dev = device_.index();
    return Pending([done, dev] { done->block(c10::cuda::getCurrentCUDAStream(dev)); });
  }

  torch::Device device_;
  c10::cuda::CUDAStream stream_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(std::string group, std::vector<int> world_ranks,
                                                   MPI_Comm comm, Watchdog* watchdog) {
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  return std::make_unique<NcclCollectives>(std::move(group), std::move(world_ranks), comm, rank,
                                           size, watchdog);
}

#else  // !QUARTET_WITH_CUDA

std::unique_ptr<Collectives> make_nccl_collectives(std::string group, std::vector<int>, MPI_Comm,
                                                   Watchdog*) {
  fail(__FILE__, __LINE__, "group '" + group + "': the NCCL backend needs a LibTorch with CUDA; "
       "this quartet was built without it (use dist.backend = mpi)");
}

#endif

}  // namespace quartet

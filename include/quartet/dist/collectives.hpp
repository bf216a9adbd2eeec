#pragma once
// Collectives inside one model group, over torch::Tensor. Two implementations behind this one
// interface: NCCL (GPU tensors; one communicator per group, its own stream) and MPI (CPU
// tensors; CI and CPU runs). The public calls check their arguments the same way for both,
// watch the operation with the watchdog, and hand the work to the backend.
//
// Shapes: all_gather takes the same number of elements on every rank and fills a flat buffer
// of size * that many, in rank order; reduce_scatter is its reverse (input numel = size *
// output numel, rank r keeps block r). Tensors must be contiguous and on the backend's device.
#include <mpi.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "quartet/dist/watchdog.hpp"

namespace quartet {

enum class ReduceOp { sum, avg };
const char* reduce_op_name(ReduceOp op);

// A collective that the compute stream has not been made to wait for yet (NCCL): wait() orders
// the current stream after it; the host never blocks. On MPI the collective has finished when
// the call returns and wait() does nothing. Dropping an unwaited Pending is allowed: the
// caching allocator still keeps its tensors until the collective has run.
class Pending {
 public:
  Pending() = default;
  explicit Pending(std::function<void()> wait) : wait_(std::move(wait)) {}
  void wait() {
    if (!wait_) return;
    auto w = std::move(wait_);
    wait_ = nullptr;
    w();
  }
  bool pending() const { return static_cast<bool>(wait_); }

 private:
  std::function<void()> wait_;
};

class Collectives {
 public:
  virtual ~Collectives() = default;

  void all_gather(const torch::Tensor& in, const torch::Tensor& out);
  void reduce_scatter(const torch::Tensor& in, const torch::Tensor& out, ReduceOp op);
  // The same, overlapping with the compute that follows: the sharded engine prefetches the next
  // block's parameters and reduce-scatters gradients this way. Call wait() before reading `out`.
  Pending all_gather_async(const torch::Tensor& in, const torch::Tensor& out);
  Pending reduce_scatter_async(const torch::Tensor& in, const torch::Tensor& out, ReduceOp op);
  void all_reduce(const torch::Tensor& tensor, ReduceOp op);
  void broadcast(const torch::Tensor& tensor, int root);
  void barrier();
  // Waits until every collective queued so far has finished (a no-op on MPI, which blocks).
  virtual void synchronize() {}

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& group_name() const { return group_; }
  virtual const char* backend_name() const = 0;
  virtual torch::Device device() const = 0;

 protected:
  Collectives(std::string group, std::vector<int> world_ranks, int rank, int size,
              Watchdog* watchdog);
  // "all_reduce #12 (sum, bfloat16[1000]) on group 'actor' (world ranks 0-3, nccl)"
  std::string describe(const char* op, const torch::Tensor* t, const char* extra = "");
  Watchdog* watchdog() const { return watchdog_; }
  // A watch over `what` whose roll call asks the group's ranks; empty without a watchdog.
  Watchdog::Watch watch(const std::string& what) const {
    return watchdog_ ? watchdog_->watch(what, world_ranks_) : Watchdog::Watch();
  }
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // defer = false: the compute stream waits for the collective before returning Pending{}.
  virtual Pending do_all_gather(const torch::Tensor& in, const torch::Tensor& out,
                                const std::string& what, bool defer) = 0;
  virtual Pending do_reduce_scatter(const torch::Tensor& in, const torch::Tensor& out, ReduceOp op,
                                    const std::string& what, bool defer) = 0;
  virtual void do_all_reduce(const torch::Tensor& t, ReduceOp op, const std::string& what) = 0;
  virtual void do_broadcast(const torch::Tensor& t, int root, const std::string& what) = 0;
  virtual void do_barrier(const std::string& what) = 0;

 private:
  void check_tensor(const torch::Tensor& t, const char* op, const char* arg) const;
  // all_gather (gathers) and reduce_scatter: same dtype, and one block per rank on the flat side.
  void check_pair(const char* op, const torch::Tensor& in, const torch::Tensor& out,
                  bool gathers) const;
  void check_reduction(const char* op, const torch::Tensor& t, ReduceOp red) const;
  std::string group_;
  std::vector<int> world_ranks_;
  int rank_, size_;
  Watchdog* watchdog_;
  long sequence_ = 0;
};

// MPI backend over `comm` (CPU tensors). The communicator is borrowed, not freed.
std::unique_ptr<Collectives> make_mpi_collectives(std::string group, std::vector<int> world_ranks,
                                                  MPI_Comm comm, Watchdog* watchdog);
// NCCL backend: one communicator over the ranks of `comm` (its unique id is broadcast on
// `comm`), on the current CUDA device. Throws when quartet was built without CUDA.
std::unique_ptr<Collectives> make_nccl_collectives(std::string group, std::vector<int> world_ranks,
                                                   MPI_Comm comm, Watchdog* watchdog);

// A small statistics tensor summed over `group`: moved to where the group's backend works (a
// no-op when it already lives there), all-reduced, and moved back. Without a group, `stats`.
torch::Tensor summed_over(Collectives* group, torch::Tensor stats);

}  // namespace quartet

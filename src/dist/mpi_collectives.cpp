// The MPI backend: CPU tensors, blocking MPI collectives on the group's communicator. Used on
// CPU machines (CI, laptops, CPU clusters); GPUs use the NCCL backend.
#include <mpi.h>

#include <climits>

#include "quartet/core/check.hpp"
#include "quartet/dist/collectives.hpp"

namespace quartet {
namespace {

// Element types that MPI_SUM understands natively. Half types have none: they are reduced in
// float32 and rounded back once, which is also what NCCL does internally for accuracy.
MPI_Datatype native_type(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return MPI_FLOAT;
    case c10::kDouble: return MPI_DOUBLE;
    case c10::kLong: return MPI_INT64_T;
    case c10::kInt: return MPI_INT32_T;
    case c10::kChar: return MPI_INT8_T;
    case c10::kByte: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
  }
}

// Moving data only: one opaque element of the tensor's size, so any dtype travels bit-exactly.
class ElementType {
 public:
  explicit ElementType(const torch::Tensor& t) {
    MPI_CHECK(MPI_Type_contiguous(static_cast<int>(t.element_size()), MPI_BYTE, &type_));
    MPI_CHECK(MPI_Type_commit(&type_));
  }
  ~ElementType() { MPI_Type_free(&type_); }
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_;
};

int count_of(const torch::Tensor& t, const std::string& what) {
  QUARTET_CHECK(t.numel() <= INT_MAX, what + ": more than 2^31-1 elements in one MPI call");
  return static_cast<int>(t.numel());
}

class MpiCollectives final : public Collectives {
 public:
  MpiCollectives(std::string group, std::vector<int> world_ranks, MPI_Comm comm, int rank,
                 int size, Watchdog* watchdog)
      : Collectives(std::move(group), std::move(world_ranks), rank, size, watchdog), comm_(comm) {}

  const char* backend_name() const override { return "mpi"; }
  torch::Device device() const override { return torch::Device(torch::kCPU); }

 protected:
  Pending do_all_gather(const torch::Tensor& in, const torch::Tensor& out,
                        const std::string& what, bool /*defer: MPI blocks*/) override {
    auto w = watch(what);
    ElementType e(in);
    MPI_CHECK(MPI_Allgather(in.data_ptr(), count_of(in, what), e.get(), out.data_ptr(),
                            count_of(in, what), e.get(), comm_));
    return {};
  }

  Pending do_reduce_scatter(const torch::Tensor& in, const torch::Tensor& out, ReduceOp op,
                            const std::string& what, bool /*defer: MPI blocks*/) override {
    auto w = watch(what);
    if (native_type(in.scalar_type()) != MPI_DATATYPE_NULL) {
      MPI_CHECK(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), count_of(out, what),
                                         native_type(in.scalar_type()), MPI_SUM, comm_));
      if (op == ReduceOp::avg) out.div_(size());
      return {};
    }
    check_reducible(in, what);
    auto in32 = in.to(torch::kFloat);
    auto out32 = torch::empty({out.numel()}, in32.options());
    MPI_CHECK(MPI_Reduce_scatter_block(in32.data_ptr(), out32.data_ptr(), count_of(out, what),
                                       MPI_FLOAT, MPI_SUM, comm_));
    if (op == ReduceOp::avg) out32.div_(size());
    out.copy_(out32.view(out.sizes()));
    return {};
  }

  void do_all_reduce(const torch::Tensor& t, ReduceOp op, const std::string& what) override {
    auto w = watch(what);
    if (native_type(t.scalar_type()) != MPI_DATATYPE_NULL) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), count_of(t, what),
                              native_type(t.scalar_type()), MPI_SUM, comm_));
      if (op == ReduceOp::avg) t.div_(size());
      return;
    }
    check_reducible(t, what);
    auto t32 = t.to(torch::kFloat);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t32.data_ptr(), count_of(t, what), MPI_FLOAT, MPI_SUM,
                            comm_));
    if (op == ReduceOp::avg) t32.div_(size());
    t.copy_(t32);
  }

  void do_broadcast(const torch::Tensor& t, int root, const std::string& what) override {
    auto w = watch(what);
    ElementType e(t);
    MPI_CHECK(MPI_Bcast(t.data_ptr(), count_of(t, what), e.get(), root, comm_));
  }

  void do_barrier(const std::string& what) override {
    auto w = watch(what);
    MPI_CHECK(MPI_Barrier(comm_));
  }

 private:
  static void check_reducible(const torch::Tensor& t, const std::string& what) {
    QUARTET_CHECK(t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf,
                  what + ": the MPI backend cannot reduce " + c10::toString(t.scalar_type()));
  }

  MPI_Comm comm_;
};

}  // namespace

std::unique_ptr<Collectives> make_mpi_collectives(std::string group, std::vector<int> world_ranks,
                                                  MPI_Comm comm, Watchdog* watchdog) {
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  return std::make_unique<MpiCollectives>(std::move(group), std::move(world_ranks), comm, rank,
                                          size, watchdog);
}

}  // namespace quartet

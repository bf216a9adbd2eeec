#include "quartet/dist/collectives.hpp"

#include <sstream>

#include "quartet/core/check.hpp"
#include "quartet/dist/placement.hpp"

namespace quartet {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "avg"; }

Collectives::Collectives(std::string group, std::vector<int> world_ranks, int rank, int size,
                         Watchdog* watchdog)
    : group_(std::move(group)), world_ranks_(std::move(world_ranks)), rank_(rank), size_(size),
      watchdog_(watchdog) {}

std::string Collectives::describe(const char* op, const torch::Tensor* t, const char* extra) {
  std::ostringstream s;
  std::string detail = extra;
  if (t)
    detail += std::string(detail.empty() ? "" : ", ") + c10::toString(t->scalar_type()) + "[" +
              std::to_string(t->numel()) + "]";
  s << op << " #" << sequence_ << (detail.empty() ? "" : " (" + detail + ")");
  s << " on group '" << group_ << "' (world ranks " << rank_list(world_ranks_) << ", "
    << backend_name() << ")";
  return s.str();
}

void Collectives::check_tensor(const torch::Tensor& t, const char* op, const char* arg) const {
  std::string where = std::string(op) + " on group '" + group_ + "': " + arg;
  QUARTET_CHECK(t.defined(), where + " is an undefined tensor");
  QUARTET_CHECK(t.is_contiguous(), where + " must be contiguous");
  QUARTET_CHECK(t.device() == device(), where + " is on " + t.device().str() + ", but the " +
                                            backend_name() + " backend works on " +
                                            device().str());
}

void Collectives::check_pair(const char* op, const torch::Tensor& in, const torch::Tensor& out,
                             bool gathers) const {
  check_tensor(in, op, "input");
  check_tensor(out, op, "output");
  std::string where = std::string(op) + " on group '" + group_ + "': ";
  QUARTET_CHECK(in.scalar_type() == out.scalar_type(),
                where + "input is " + c10::toString(in.scalar_type()) + ", output is " +
                    c10::toString(out.scalar_type()));
  // The flat side holds one block per rank.
  const auto& flat = gathers ? out : in;
  const auto& block = gathers ? in : out;
  QUARTET_CHECK(flat.numel() == block.numel() * size_,
                where + (gathers ? "output" : "input") + " has " + std::to_string(flat.numel()) +
                    " elements, expected group size " + std::to_string(size_) + " x " +
                    (gathers ? "input " : "output ") + std::to_string(block.numel()));
}

void Collectives::check_reduction(const char* op, const torch::Tensor& t, ReduceOp red) const {
  QUARTET_CHECK(red != ReduceOp::avg || t.is_floating_point(),
                std::string(op) + " avg on group '" + group_ +
                    "' needs a floating-point tensor, not " + c10::toString(t.scalar_type()));
}

void Collectives::all_gather(const torch::Tensor& in, const torch::Tensor& out) {
  check_pair("all_gather", in, out, /*gathers=*/true);
  ++sequence_;
  do_all_gather(in, out, describe("all_gather", &in), /*defer=*/false);
}

Pending Collectives::all_gather_async(const torch::Tensor& in, const torch::Tensor& out) {
  check_pair("all_gather", in, out, /*gathers=*/true);
  ++sequence_;
  return do_all_gather(in, out, describe("all_gather", &in), /*defer=*/true);
}

void Collectives::reduce_scatter(const torch::Tensor& in, const torch::Tensor& out, ReduceOp op) {
  check_pair("reduce_scatter", in, out, /*gathers=*/false);
  check_reduction("reduce_scatter", in, op);
  ++sequence_;
  do_reduce_scatter(in, out, op, describe("reduce_scatter", &in, reduce_op_name(op)), /*defer=*/false);
}

Pending Collectives::reduce_scatter_async(const torch::Tensor& in, const torch::Tensor& out,
                                          ReduceOp op) {
  check_pair("reduce_scatter", in, out, /*gathers=*/false);
  check_reduction("reduce_scatter", in, op);
  ++sequence_;
  return do_reduce_scatter(in, out, op, describe("reduce_scatter", &in, reduce_op_name(op)),
                           /*defer=*/true);
}

void Collectives::all_reduce(const torch::Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce", "tensor");
  check_reduction("all_reduce", t, op);
  ++sequence_;
  do_all_reduce(t, op, describe("all_reduce", &t, reduce_op_name(op)));
}

void Collectives::broadcast(const torch::Tensor& t, int root) {
  check_tensor(t, "broadcast", "tensor");
  QUARTET_CHECK(root >= 0 && root < size_, "broadcast on group '" + group_ + "': root " +
                std::to_string(root) + " is not a rank of a group of " + std::to_string(size_));
  ++sequence_;
  std::string from = "root " + std::to_string(root);
  do_broadcast(t, root, describe("broadcast", &t, from.c_str()));
}

void Collectives::barrier() {
  ++sequence_;
  do_barrier(describe("barrier", nullptr));
}

torch::Tensor summed_over(Collectives* group, torch::Tensor stats) {
  if (!group) return stats;
  auto on_group = stats.to(group->device()).contiguous();
  group->all_reduce(on_group, ReduceOp::sum);
  return on_group.to(stats.device());
}

}  // namespace quartet

// Every collective against a serial reference computed locally from every rank's input, for
// fp32, bf16 and int64 and awkward sizes, on the whole world and on two uneven sub-groups.
// The same cases run on every backend this machine has: MPI always, NCCL when each rank has a
// GPU of its own (the GPU machine with 2 GPUs and np 2).
#include <gtest/gtest.h>
#include <torch/types.h>

#include "quartet/core/check.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/dist/device.hpp"
#include "quartet/dist/dist_config.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_collectives {

std::vector<std::string> backends() {
  std::vector<std::string> b = {"mpi"};
  if (cuda_device_count() >= test::world().local_size()) b.push_back("nccl");
  return b;
}

// Rank r's input: integers in [-3, 3] that depend on rank and position, exact in bf16 when
// summed over up to 8 ranks, so sums can be compared exactly.
torch::Tensor input_of(int r, int64_t n, torch::ScalarType dtype, int64_t offset = 0) {
  return torch::arange(offset, offset + n, torch::kLong).mul(r + 1).add(r).remainder(7).sub(3).to(dtype);
}

struct GroupUnderTest {
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<Collectives> coll;
};

class Collectives_ : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const World& w = test::world();
    if (GetParam() == "nccl") device_ = select_device(DeviceKind::cuda, w.local_rank());
    // The whole world, then two uneven parts [0, k) and [k, n): sizes 1+1, 3+1, 5+3.
    groups_.push_back(make("world", 0));
    int k = w.size() > 2 ? w.size() / 2 + 1 : 1;
    int color = w.rank() < k ? 1 : 2;
    groups_.push_back(make(color == 1 ? "low" : "high", color));
  }
  void TearDown() override {
    for (auto& g : groups_) {
      g.coll.reset();
      MPI_Comm_free(&g.comm);
    }
  }

  GroupUnderTest make(const std::string& name, int color) {
    GroupUnderTest g;
    int me = test::world().rank(), size = 0;
    MPI_CHECK(MPI_Comm_split(test::world().comm(), color, me, &g.comm));
    MPI_CHECK(MPI_Comm_size(g.comm, &size));
    std::vector<int> ranks(static_cast<size_t>(size));
    MPI_CHECK(MPI_Allgather(&me, 1, MPI_INT, ranks.data(), 1, MPI_INT, g.comm));
    g.coll = GetParam() == "nccl" ? make_nccl_collectives(name, ranks, g.comm, nullptr)
                                  : make_mpi_collectives(name, ranks, g.comm, nullptr);
    return g;
  }

  torch::TensorOptions opts(torch::ScalarType t) const { return torch::TensorOptions().dtype(t).device(device_); }
  torch::Tensor on_device(const torch::Tensor& t) const { return t.to(device_); }

  torch::Device device_{torch::kCPU};
  std::vector<GroupUnderTest> groups_;
};

const torch::ScalarType kTypes[] = {torch::kFloat, torch::kBFloat16, torch::kLong};
const int64_t kSizes[] = {1, 3, 1023, 65537};

TEST_P(Collectives_, AllReduceSumAndAvg) {
  for (auto& g : groups_)
    for (auto dtype : kTypes)
      for (int64_t n : kSizes) {
        Collectives& c = *g.coll;
        auto ref = torch::zeros({n}, torch::kDouble);
        for (int r = 0; r < c.size(); ++r) ref += input_of(r, n, torch::kDouble);
        auto t = on_device(input_of(c.rank(), n, dtype));
        c.all_reduce(t, ReduceOp::sum);
        EXPECT_TRUE(t.cpu().to(torch::kDouble).equal(ref))
            << c.group_name() << " " << c10::toString(dtype) << "[" << n << "]";
        if (!torch::isFloatingType(dtype)) continue;
        auto a = on_device(input_of(c.rank(), n, dtype));
        c.all_reduce(a, ReduceOp::avg);
        // bf16 rounds the quotient to 8 significant bits.
        double tol = dtype == torch::kBFloat16 ? 1.0 / 128 : 1e-6;
        EXPECT_TRUE(torch::allclose(a.cpu().to(torch::kDouble), ref / c.size(), tol, tol))
            << c.group_name() << " avg " << c10::toString(dtype) << "[" << n << "]";
      }
}

TEST_P(Collectives_, AllGatherIntoAFlatBuffer) {
  for (auto& g : groups_)
    for (auto dtype : kTypes)
      for (int64_t n : kSizes) {
        Collectives& c = *g.coll;
        // A 2-D input gathers like its flat view.
        auto in = on_device(input_of(c.rank(), n, dtype).view({n, 1}));
        auto out = torch::full({n * c.size()}, 99, opts(dtype));
        c.all_gather(in, out);
        auto got = out.cpu();
        for (int r = 0; r < c.size(); ++r)
          EXPECT_TRUE(got.slice(0, r * n, (r + 1) * n).equal(input_of(r, n, dtype)))
              << c.group_name() << " block " << r << " " << c10::toString(dtype) << "[" << n << "]";
      }
}

TEST_P(Collectives_, ReduceScatterSumAndAvg) {
  for (auto& g : groups_)
    for (auto dtype : kTypes)
      for (int64_t n : kSizes) {
        Collectives& c = *g.coll;
        const int64_t total = n * c.size();
        auto ref = torch::zeros({total}, torch::kDouble);
        for (int r = 0; r < c.size(); ++r) ref += input_of(r, total, torch::kDouble);
        auto mine_ref = ref.slice(0, c.rank() * n, (c.rank() + 1) * n);
        auto out = torch::empty({n}, opts(dtype));
        c.reduce_scatter(on_device(input_of(c.rank(), total, dtype)), out, ReduceOp::sum);
        EXPECT_TRUE(out.cpu().to(torch::kDouble).equal(mine_ref))
            << c.group_name() << " " << c10::toString(dtype) << "[" << n << "]";
        if (!torch::isFloatingType(dtype)) continue;
        c.reduce_scatter(on_device(input_of(c.rank(), total, dtype)), out, ReduceOp::avg);
        double tol = dtype == torch::kBFloat16 ? 1.0 / 128 : 1e-6;
        EXPECT_TRUE(torch::allclose(out.cpu().to(torch::kDouble), mine_ref / c.size(), tol, tol))
            << c.group_name() << " avg " << c10::toString(dtype) << "[" << n << "]";
      }
}

TEST_P(Collectives_, BroadcastFromEveryRoot) {
  for (auto& g : groups_)
    for (auto dtype : kTypes)
      for (int root = 0; root < g.coll->size(); ++root) {
        Collectives& c = *g.coll;
        auto t = on_device(input_of(c.rank(), 1023, dtype));
        c.broadcast(t, root);
        EXPECT_TRUE(t.cpu().equal(input_of(root, 1023, dtype)))
            << c.group_name() << " root " << root << " " << c10::toString(dtype);
      }
}

TEST_P(Collectives_, BarrierAndEmptyTensors) {
  for (auto& g : groups_) {
    g.coll->barrier();
    auto empty = torch::empty({0}, opts(torch::kFloat));
    g.coll->all_reduce(empty, ReduceOp::sum);
    auto out = torch::empty({0}, opts(torch::kFloat));
    g.coll->all_gather(empty, out);
    g.coll->synchronize();
  }
}

TEST_P(Collectives_, BadArgumentsAreRefusedBeforeAnyCommunication) {
  Collectives& c = *groups_[0].coll;
  auto in = torch::zeros({4}, opts(torch::kFloat));
  auto wrong = torch::zeros({4 * c.size() + 1}, opts(torch::kFloat));
  try {
    c.all_gather(in, wrong);
    ADD_FAILURE() << "a wrong output size must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_gather on group 'world': output has"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(c.reduce_scatter(wrong, in, ReduceOp::sum), Error);
  EXPECT_THROW(c.all_gather(in, torch::zeros({4 * c.size()}, opts(torch::kLong))), Error);
  auto ints = torch::zeros({4}, opts(torch::kLong));
  try {
    c.all_reduce(ints, ReduceOp::avg);
    ADD_FAILURE() << "avg of integers must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a floating-point tensor, not Long"), std::string::npos)
        << e.what();
  }
  auto strided = torch::zeros({4, 4}, opts(torch::kFloat)).t();
  EXPECT_THROW(c.all_reduce(strided, ReduceOp::sum), Error);
  EXPECT_THROW(c.broadcast(in, c.size()), Error);
  if (device_.is_cuda()) {
    EXPECT_THROW(c.all_reduce(torch::zeros({4}), ReduceOp::sum), Error);
  }
  // The group still works after refusals (nothing half-started).
  c.all_reduce(in, ReduceOp::sum);
  EXPECT_TRUE(in.cpu().equal(torch::zeros({4})));
}

INSTANTIATE_TEST_SUITE_P(Backends, Collectives_, ::testing::ValuesIn(backends()),
                         [](const auto& info) { return info.param; });

}  // namespace test_collectives

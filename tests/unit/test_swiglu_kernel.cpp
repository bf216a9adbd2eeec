// quartet's SwiGLU kernel (model/swiglu_kernel.hpp) against ATen's torch::silu(gate) * up and its
// autograd backward: the forward and the gradient of up bit for bit; the gradient of gate, whose
// float32 formula nvcc may contract into multiply-adds differently in the two builds, within
// 2^-7 (bfloat16) or 2^-23 (float32) of its magnitude: one or two units in the last place of the
// dtype (the share of identical elements is printed). In 16-byte
// vectors and element by element (a length no multiple of a vector), float32 and bfloat16.
// Needs a GPU; on a machine without one the suite is empty (the CPU path is ATen's).
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <cmath>
#include <iostream>
#include <vector>

#include "quartet/model/swiglu_kernel.hpp"

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_swiglu_kernel {

namespace {

const torch::Device kCuda(torch::kCUDA, 0);

class SwigluKernel : public ::testing::TestWithParam<torch::Dtype> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(quartet::swiglu_kernel_enabled()) << "this CUDA build has no SwiGLU kernel (no CUDA compiler?)";
    torch::manual_seed(3);
  }
};

TEST_P(SwigluKernel, MatchesAtenForwardAndBackward) {
  const auto opts = torch::TensorOptions().dtype(GetParam()).device(kCuda);
  // A unit in the last place, relative to the low end of a binade: 2^-7 for bfloat16's 8-bit
  // significand, 2^-23 for float32.
  const double ulp = GetParam() == torch::kBFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -23);
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{8, 256, 5632}, {3, 7, 37}}) {
    auto gate = (torch::randn(shape, opts) * 3).requires_grad_(true);
    auto up = torch::randn(shape, opts).requires_grad_(true);
    ASSERT_TRUE(quartet::swiglu_kernel_supports(gate, up));
    auto got = quartet::swiglu(gate, up);
    auto want = torch::silu(gate) * up;
    EXPECT_TRUE(torch::equal(got, want)) << "forward differs by " << (got - want).abs().max().item<double>();

    auto g = torch::randn_like(want);
    auto got_grads = torch::autograd::grad({got}, {gate, up}, {g});
    auto want_grads = torch::autograd::grad({want}, {gate, up}, {g});
    EXPECT_TRUE(torch::equal(got_grads[1], want_grads[1]))
        << "d_up differs by " << (got_grads[1] - want_grads[1]).abs().max().item<double>();
    auto a = got_grads[0].to(torch::kFloat64), b = want_grads[0].to(torch::kFloat64);
    const auto off = ((a - b).abs() - b.abs() * ulp).max().item<double>();
    EXPECT_LE(off, 0.0) << "d_gate differs by more than a unit in the last place";
    std::cout << "[swiglu] " << (GetParam() == torch::kBFloat16 ? "bf16" : "fp32") << " " << c10::IntArrayRef(shape)
              << ": d_gate identical in " << 100.0 * a.eq(b).to(torch::kFloat64).mean().item<double>()
              << "% of elements\n";
  }
}

TEST_P(SwigluKernel, RefusesWhatItDoesNotTake) {
  const auto opts = torch::TensorOptions().dtype(GetParam()).device(kCuda);
  auto x = torch::randn({4, 6}, opts);
  EXPECT_TRUE(quartet::swiglu_kernel_supports(x, x));
  EXPECT_FALSE(quartet::swiglu_kernel_supports(x, x.t()));  // shapes differ
  auto strided = x.t().contiguous().t();                      // x's shape, column-major
  EXPECT_FALSE(quartet::swiglu_kernel_supports(strided, strided));
  EXPECT_FALSE(quartet::swiglu_kernel_supports(x.cpu(), x.cpu()));
}

// The packed form (one [.., 2 I] product, gate then up in each row) gives the separate form's
// bits, forward and backward, with the gradient packed the same way; widths in vectors and not.
TEST_P(SwigluKernel, PackedSameBitsAsSeparate) {
  const auto opts = torch::TensorOptions().dtype(GetParam()).device(kCuda);
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{2, 64, 5632}, {3, 7, 37}}) {
    auto packed_sizes = shape;
    packed_sizes.back() *= 2;
    auto gate_up = (torch::randn(packed_sizes, opts) * 2).requires_grad_(true);
    ASSERT_TRUE(quartet::swiglu_packed_supports(gate_up));
    const int64_t I = shape.back();
    auto gate = gate_up.detach().narrow(-1, 0, I).contiguous().requires_grad_(true);
    auto up = gate_up.detach().narrow(-1, I, I).contiguous().requires_grad_(true);
    auto got = quartet::swiglu_packed(gate_up);
    auto want = quartet::swiglu(gate, up);
    EXPECT_TRUE(torch::equal(got, want));
    auto dy = torch::randn(shape, opts);
    got.backward(dy);
    want.backward(dy);
    EXPECT_TRUE(torch::equal(gate_up.grad().narrow(-1, 0, I), gate.grad()));
    EXPECT_TRUE(torch::equal(gate_up.grad().narrow(-1, I, I), up.grad()));
  }
  EXPECT_FALSE(quartet::swiglu_packed_supports(torch::randn({3, 5}, opts)));  // odd width
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SwigluKernel,
                         ::testing::ValuesIn(torch::cuda::is_available()
                                                 ? std::vector<torch::Dtype>{torch::kFloat32, torch::kBFloat16}
                                                 : std::vector<torch::Dtype>{}));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SwigluKernel);

}  // namespace

}  // namespace test_swiglu_kernel

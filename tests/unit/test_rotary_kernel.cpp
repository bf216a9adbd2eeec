// quartet's rotary kernel (model/rotary_kernel.hpp) against ATen's x * cos + rotate_half(x) * sin:
// the same bits forward and backward (the input's gradient through autograd), for the layouts a
// model hands it (a projection viewed as [B, T, H, D] and transposed; contiguous; a slice of a
// fused product, as NeoX's; rows off a 16-byte boundary, for the kernel's element-wise path),
// cos/sin per row or broadcast over the batch, float32 and bfloat16.
// Needs a GPU; on a machine without one the suite is empty (the CPU path is ATen's, covered by
// the parity tests).
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <string>
#include <vector>

#include "quartet/model/rotary.hpp"
#include "quartet/model/rotary_kernel.hpp"

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_rotary_kernel {

namespace {

const torch::Device kCuda(torch::kCUDA, 0);

// apply_rotary's ATen path, written out (the kernel switched off would do the same).
torch::Tensor aten_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t h = x.size(-1) / 2;
  auto turned = torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
  return x * cos + turned * sin;
}

class RotaryKernel : public ::testing::TestWithParam<torch::Dtype> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(quartet::rotary_kernel_enabled()) << "this CUDA build has no rotary kernel (no CUDA compiler?)";
    torch::manual_seed(7);
  }
};

TEST_P(RotaryKernel, SameBitsForwardAndBackward) {
  const auto opts = torch::TensorOptions().dtype(GetParam()).device(kCuda);
  const int64_t B = 3, T = 37, H = 4, D = 64;
  quartet::ModelConfig cfg;
  cfg.rotary_dim = D;
  cfg.rope_theta = 10000;
  // The first three are read in 16-byte vectors; "unaligned" (rows one element off a 16-byte
  // boundary) element by element.
  for (const std::string layout : {"transposed", "contiguous", "slice", "unaligned"}) {
    for (const bool broadcast : {false, true}) {
      auto positions = torch::arange(T).unsqueeze(0).repeat({broadcast ? 1 : B, 1}) + (broadcast ? 0 : 5);
      auto [cos, sin] = quartet::rotary_cos_sin(quartet::rotary_inv_freq(cfg, T + 5).to(kCuda), positions.to(kCuda),
                                                GetParam(), /*interleaved=*/false);
      torch::Tensor base;  // the leaf whose gradient is compared
      auto make = [&] {
        const int64_t width = layout == "slice" ? 3 * D : layout == "unaligned" ? D + 1 : D;
        base = (torch::randn({B, T, H, width}, opts) * 2).requires_grad_(true);
        if (layout == "transposed") return base.transpose(1, 2);
        if (layout == "contiguous") return base.transpose(1, 2).contiguous();
        if (layout == "unaligned") return base.transpose(1, 2).narrow(-1, 1, D);
        return base.transpose(1, 2).narrow(-1, D, D);
      };
      auto x = make();
      ASSERT_TRUE(quartet::rotary_kernel_supports(x, cos, sin)) << layout;
      const std::string what = layout + (broadcast ? ", broadcast" : ", per row");
      auto got = quartet::apply_rotary(x, cos, sin, /*interleaved=*/false);
      auto want = aten_rotary(x, cos, sin);
      EXPECT_TRUE(torch::equal(got, want)) << what << ": forward differs by "
                                           << (got - want).abs().max().item<double>();
      auto g = torch::randn_like(want);
      auto got_grad = torch::autograd::grad({got}, {base}, {g}, /*retain_graph=*/true)[0];
      auto want_grad = torch::autograd::grad({want}, {base}, {g})[0];
      EXPECT_TRUE(torch::equal(got_grad, want_grad))
          << what << ": gradient differs by " << (got_grad - want_grad).abs().max().item<double>();
    }
  }
}

TEST_P(RotaryKernel, RefusesWhatItDoesNotTake) {
  const auto opts = torch::TensorOptions().dtype(GetParam()).device(kCuda);
  auto x = torch::randn({2, 2, 5, 8}, opts);
  auto cs = torch::randn({2, 1, 5, 8}, opts);
  EXPECT_TRUE(quartet::rotary_kernel_supports(x, cs, cs));
  EXPECT_FALSE(quartet::rotary_kernel_supports(x, cs.narrow(-1, 0, 4), cs.narrow(-1, 0, 4)));  // partial rotary
  EXPECT_FALSE(quartet::rotary_kernel_supports(x.cpu(), cs.cpu(), cs.cpu()));
  EXPECT_FALSE(quartet::rotary_kernel_supports(x, cs.to(torch::kFloat64), cs.to(torch::kFloat64)));
  EXPECT_FALSE(quartet::rotary_kernel_supports(torch::randn({2, 2, 5, 7}, opts), cs, cs));  // odd head size
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RotaryKernel,
                         ::testing::ValuesIn(torch::cuda::is_available()
                                                 ? std::vector<torch::Dtype>{torch::kFloat32, torch::kBFloat16}
                                                 : std::vector<torch::Dtype>{}));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RotaryKernel);

}  // namespace

}  // namespace test_rotary_kernel

// quartet's residual add + RMSNorm for training (model/norm_kernel.hpp) against the same in
// float64 autograd: {x + a, RMSNorm(x + a) * w} forward, and the gradients of x, a and w
// backward, no further from float64 than ATen's own autograd (x + a, then at::rms_norm) is, give
// or take one rounding of the dtype; with both outputs used, the norm's alone (the sum's
// gradient absent) and the sum's alone. Rows of 256 and 2048 (float32: 128 and 2048), rows fewer
// than the kernel's blocks and more. Needs a GPU; on a machine without one the suite is empty.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "quartet/model/norm_kernel.hpp"

namespace {

const torch::Device kCuda(torch::kCUDA, 0);

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

class NormKernel : public ::testing::TestWithParam<torch::Dtype> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(quartet::norm_kernel_enabled()) << "this CUDA build has no norm kernel (no CUDA compiler?)";
    torch::manual_seed(5);
  }
  torch::Dtype dtype() const { return GetParam(); }
  // One rounding of the dtype, relative.
  double tolerance() const { return dtype() == torch::kFloat32 ? 2e-6 : 1.6e-2; }
};

struct Grads {
  torch::Tensor y, h, dx, da, dw;
};

// which: 0 both outputs get a gradient, 1 the norm's alone, 2 the sum's alone.
Grads run(const torch::Tensor& x0, const torch::Tensor& a0, const torch::Tensor& w0, const torch::Tensor& gy,
          const torch::Tensor& gh, int which, int path) {
  auto x = x0.detach().clone().requires_grad_(true), a = a0.detach().clone().requires_grad_(true),
       w = w0.detach().clone().requires_grad_(true);
  const double eps = 1e-5;
  torch::Tensor y, h;
  if (path == 0) {  // quartet's kernel
    std::tie(y, h) = quartet::add_rms_norm_trainable(x, a, w, eps);
  } else if (path == 1) {  // ATen, in the dtype
    y = x + a;
    h = at::rms_norm(y, {y.size(-1)}, w, eps);
  } else {  // float64
    y = x.to(torch::kDouble) + a.to(torch::kDouble);
    h = w.to(torch::kDouble) * (y * torch::rsqrt(y.pow(2).mean(-1, true) + eps));
  }
  std::vector<torch::Tensor> outs, grads;
  if (which != 2) outs.push_back(h), grads.push_back(gh.to(h.scalar_type()));
  if (which != 1) outs.push_back(y), grads.push_back(gy.to(y.scalar_type()));
  torch::autograd::backward(outs, grads);
  return {y.detach(), h.detach(), x.grad(), a.grad(), w.grad()};
}

double rel(const torch::Tensor& got, const torch::Tensor& want) {
  if (!got.defined() && !want.defined()) return 0.0;
  return max_abs(got.to(torch::kDouble) - want.to(torch::kDouble)) / max_abs(want.to(torch::kDouble));
}

TEST_P(NormKernel, MatchesFloat64AutogradAsCloselyAsAten) {
  const auto opts = torch::TensorOptions().dtype(dtype()).device(kCuda);
  const std::vector<int64_t> widths =
      dtype() == torch::kFloat32 ? std::vector<int64_t>{128, 2048} : std::vector<int64_t>{256, 2048};
  for (int64_t H : widths) {
    for (int64_t rows : {int64_t{7}, int64_t{1000}}) {
      auto x = torch::randn(rows == 7 ? std::vector<int64_t>{1, 7, H} : std::vector<int64_t>{2, 500, H}, opts) * 3;
      auto a = torch::randn(x.sizes(), opts);
      auto w = torch::rand({H}, opts) + 0.5;
      auto gy = torch::randn(x.sizes(), opts), gh = torch::randn(x.sizes(), opts);
      ASSERT_TRUE(quartet::add_rms_norm_trainable_supports(x, a, w)) << "H = " << H;
      for (int which : {0, 1, 2}) {
        const auto got = run(x, a, w, gy, gh, which, 0), aten = run(x, a, w, gy, gh, which, 1),
                   exact = run(x, a, w, gy, gh, which, 2);
        const std::string what = "H = " + std::to_string(H) + ", " + std::to_string(rows) + " rows, " +
                                 (which == 0 ? "both outputs" : which == 1 ? "the norm alone" : "the sum alone");
        EXPECT_TRUE(torch::equal(got.y, aten.y)) << what << ": the sum is not ATen's";
        EXPECT_LE(rel(got.h, exact.h), rel(aten.h, exact.h) + tolerance()) << what << ": the norm";
        EXPECT_TRUE(torch::equal(got.dx, got.da)) << what << ": x and a have one gradient";
        EXPECT_LE(rel(got.dx, exact.dx), rel(aten.dx, exact.dx) + tolerance()) << what << ": x's gradient";
        if (which == 2) {
          EXPECT_TRUE(torch::equal(got.dx, gy)) << what << ": the sum's gradient passes through";
          EXPECT_FALSE(got.dw.defined() && got.dw.abs().sum().item<double>() > 0) << what;
        } else {
          EXPECT_LE(rel(got.dw, exact.dw), rel(aten.dw, exact.dw) + tolerance()) << what << ": the weight's gradient";
        }
        std::printf("[norm kernel] %-9s %-40s x grad error %.2e (ATen %.2e), w grad %.2e (ATen %.2e)\n",
                    dtype() == torch::kFloat32 ? "float32" : "bfloat16", what.c_str(), rel(got.dx, exact.dx),
                    rel(aten.dx, exact.dx), which == 2 ? 0.0 : rel(got.dw, exact.dw),
                    which == 2 ? 0.0 : rel(aten.dw, exact.dw));
      }
    }
  }
}

TEST_P(NormKernel, RefusesWhatItDoesNotTake) {
  const auto opts = torch::TensorOptions().dtype(dtype()).device(kCuda);
  auto x = torch::randn({4, 2048}, opts), w = torch::ones({2048}, opts);
  EXPECT_TRUE(quartet::add_rms_norm_trainable_supports(x, x, w));
  auto odd = torch::randn({4, 100}, opts);
  EXPECT_FALSE(quartet::add_rms_norm_trainable_supports(odd, odd, torch::ones({100}, opts)));  // width
  auto strided = torch::randn({2048, 4}, opts).t();
  EXPECT_FALSE(quartet::add_rms_norm_trainable_supports(strided, strided, w));  // not contiguous
  EXPECT_FALSE(quartet::add_rms_norm_trainable_supports(x.cpu(), x.cpu(), w.cpu()));  // not CUDA
  EXPECT_FALSE(quartet::add_rms_norm_trainable_supports(x, x, torch::ones({2048}, opts.dtype(torch::kDouble))));
  EXPECT_THROW(quartet::add_rms_norm_trainable(odd, odd, torch::ones({100}, opts), 1e-5), std::exception);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NormKernel,
                         ::testing::ValuesIn(torch::cuda::is_available()
                                                 ? std::vector<torch::Dtype>{torch::kFloat32, torch::kBFloat16}
                                                 : std::vector<torch::Dtype>{}));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NormKernel);

}  // namespace

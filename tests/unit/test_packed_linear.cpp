// packed_linear (model/packed_linear.hpp): weights back to back in one buffer, as a packed module
// or a sharded unit keeps them, multiplied as one matrix. Against separate torch::linear calls
// and autograd: the outputs (split into parts, or joined) and the gradients of the input and of
// every weight, in float64 on the CPU (the same sums in another order: to 1e-12), and in
// bfloat16 on the GPU where there is one (to bfloat16 rounding); an unused part's missing
// gradient counts as zero; weights that do not lie back to back are refused (empty result).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <vector>

#include "quartet/model/packed_linear.hpp"

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_packed_linear {

namespace {

struct Packed {
  torch::Tensor flat;
  std::vector<torch::Tensor> weights;  // leaves, views of flat
};

Packed make_packed(const std::vector<int64_t>& rows, int64_t cols, const torch::TensorOptions& opts) {
  int64_t total = 0;
  for (int64_t r : rows) total += r * cols;
  Packed p;
  p.flat = torch::randn({total}, opts) * 0.2;
  int64_t at = 0;
  for (int64_t r : rows) {
    auto w = torch::empty({0}, opts);
    w.set_data(p.flat.narrow(0, at, r * cols).view({r, cols}));
    w.requires_grad_(true);
    p.weights.push_back(w);
    at += r * cols;
  }
  return p;
}

void check(const torch::TensorOptions& opts, double rtol, double atol) {
  for (bool split : {true, false}) {
    for (const std::vector<int64_t>& rows : std::vector<std::vector<int64_t>>{{24, 8, 8}, {37, 37}}) {
      Packed p = make_packed(rows, 16, opts);
      auto x = (torch::randn({3, 5, 16}, opts)).requires_grad_(true);
      auto out = quartet::packed_linear(x, p.weights, split);
      ASSERT_EQ(out.size(), split ? rows.size() : 1u);
      // The reference: separate products on copies of the same values.
      std::vector<torch::Tensor> ref_w;
      for (const auto& w : p.weights) ref_w.push_back(w.detach().clone().requires_grad_(true));
      auto ref_x = x.detach().clone().requires_grad_(true);
      std::vector<torch::Tensor> ref_parts;
      for (const auto& w : ref_w) ref_parts.push_back(torch::linear(ref_x, w));
      auto ref_joined = torch::cat(ref_parts, -1);
      // A loss with a different weight per output element; with split, the last part unused.
      const auto coef = torch::randn(ref_joined.sizes(), opts);
      torch::Tensor loss, ref_loss;
      if (split) {
        int64_t at = 0;
        loss = torch::zeros({}, opts);
        ref_loss = torch::zeros({}, opts);
        for (size_t k = 0; k + 1 < out.size(); ++k) {
          const auto c = coef.narrow(-1, at, rows[k]);
          EXPECT_TRUE(torch::allclose(out[k], ref_parts[k], rtol, atol));
          loss = loss + (out[k] * c).sum();
          ref_loss = ref_loss + (ref_parts[k] * c).sum();
          at += rows[k];
        }
      } else {
        EXPECT_TRUE(torch::allclose(out[0], ref_joined, rtol, atol));
        loss = (out[0] * coef).sum();
        ref_loss = (ref_joined * coef).sum();
      }
      loss.backward();
      ref_loss.backward();
      EXPECT_TRUE(torch::allclose(x.grad(), ref_x.grad(), rtol, atol))
          << (x.grad() - ref_x.grad()).abs().max().item<double>();
      for (size_t k = 0; k < rows.size(); ++k) {
        ASSERT_TRUE(p.weights[k].grad().defined()) << k;
        // The unused part's weight: no reference gradient, zeros here.
        const auto want = ref_w[k].grad().defined() ? ref_w[k].grad() : torch::zeros_like(ref_w[k]);
        EXPECT_TRUE(torch::allclose(p.weights[k].grad(), want, rtol, atol))
            << "weight " << k << ": " << (p.weights[k].grad() - want).abs().max().item<double>();
      }
    }
  }
  // Weights of their own storages are not back to back: refused.
  auto a = torch::randn({4, 16}, opts).requires_grad_(true), b = torch::randn({4, 16}, opts).requires_grad_(true);
  EXPECT_TRUE(quartet::packed_linear(torch::randn({2, 16}, opts), {a, b}, true).empty());
  // Back to back in the other order: refused too.
  Packed p = make_packed({4, 4}, 16, opts);
  EXPECT_TRUE(quartet::packed_linear(torch::randn({2, 16}, opts), {p.weights[1], p.weights[0]}, false).empty());
}

TEST(PackedLinear, MatchesSeparateProductsCpu) {
  torch::manual_seed(11);
  check(torch::TensorOptions().dtype(torch::kFloat64), 1e-12, 1e-12);
}

TEST(PackedLinear, MatchesSeparateProductsGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  torch::manual_seed(11);
  // bfloat16: the products' sums and the input gradient's three-way sum round differently.
  check(torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA, 0), 2e-2, 2e-2);
}

}  // namespace

}  // namespace test_packed_linear

// quartet's flat AdamW kernel (shard/adamw_kernel.hpp) against ATen's _fused_adamw_ followed by
// the cast into the model's bfloat16 shard, on random state over several steps: with and without
// weight decay, clipping (grad_scale), stretches that start unaligned or end mid-vector, and a
// non-finite step (found_inf) that must leave everything untouched. Needs a GPU; on a machine
// without one the suite is empty (the CPU path is ATen's, covered by test_sharded).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "quartet/shard/adamw_kernel.hpp"

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_adamw_kernel {

namespace {

const torch::Device kCuda(torch::kCUDA, 0);

struct State {
  torch::Tensor master, grad, m, v, model;
  State clone() const { return {master.clone(), grad.clone(), m.clone(), v.clone(), model.clone()}; }
};

State random_state(int64_t n) {
  auto f = torch::TensorOptions().dtype(torch::kFloat32).device(kCuda);
  State s;
  s.master = torch::randn({n}, f);
  s.grad = torch::randn({n}, f) * 0.1;
  s.m = torch::randn({n}, f) * 0.01;
  s.v = torch::rand({n}, f) * 1e-3;
  s.model = s.master.to(torch::kBFloat16);
  return s;
}

// ATen's step over [begin, begin + count): _fused_adamw_ on views of that stretch (it applies
// the decoupled decay itself), then the masters cast into the model's shard.
void reference_step(State& s, int64_t begin, int64_t count, const quartet::AdamWStep& h, const torch::Tensor& scale,
                    const torch::Tensor& found_inf) {
  auto n = [&](const torch::Tensor& t) { return t.narrow(0, begin, count); };
  auto step = torch::full({}, static_cast<double>(h.step), s.master.options());
  std::optional<torch::Tensor> gs, fi{found_inf};
  if (scale.defined()) gs = scale;
  at::_fused_adamw_({n(s.master)}, {n(s.grad)}, {n(s.m)}, {n(s.v)}, {}, {step}, h.lr, h.beta1, h.beta2, h.weight_decay,
                    h.eps, false, false, gs, fi);
  n(s.model).copy_(n(s.master));
}

void expect_close(const State& got, const State& want, const char* what) {
  // Float32 rounding of a few operations in another order (division by the clipping factor).
  EXPECT_TRUE(torch::allclose(got.master, want.master, 1e-6, 1e-7))
      << what << ": master differs by " << (got.master - want.master).abs().max().item<double>();
  // The first moment's two terms can cancel: it agrees to a few float32 units in the last place
  // of its terms (about 2e-9 here), whether or not either side's compiler fused a multiply-add.
  EXPECT_TRUE(torch::allclose(got.m, want.m, 1e-6, 1e-8))
      << what << ": exp_avg differs by " << (got.m - want.m).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(got.v, want.v, 1e-6, 1e-12)) << what;
  // The model's shard is the kernel's own master rounded to bfloat16, bit for bit.
  EXPECT_TRUE(torch::equal(got.model, got.master.to(torch::kBFloat16))) << what;
}

class AdamWKernel : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(quartet::adamw_kernel_enabled()) << "this CUDA build has no AdamW kernel (no CUDA compiler?)";
    torch::manual_seed(99);
  }
};

TEST_P(AdamWKernel, MatchesFusedAdamWAndCast) {
  const auto f = torch::TensorOptions().dtype(torch::kFloat32).device(kCuda);
  // Lengths: one element, part of a vector, vectors and a tail, about a million.
  for (int64_t len : {1, 3, 4097, (1 << 20) + 5}) {
    State got = random_state(len), want = got.clone();
    // Stretches: the whole shard; or decayed [len/3, 2 len/3) between two undecayed ones
    // (unaligned starts for the scalar path).
    std::vector<std::tuple<int64_t, int64_t, double>> stretches;
    if (GetParam() == 0 || len < 3) {
      stretches.emplace_back(0, len, 0.0);
    } else {
      const int64_t a = len / 3, b = 2 * len / 3;
      stretches = {{0, a, 0.0}, {a, b - a, 0.1}, {b, len - b, 0.0}};
    }
    const torch::Tensor scale = GetParam() == 0 ? torch::Tensor() : torch::full({}, 3.5, f);
    const torch::Tensor finite = torch::zeros({}, f);
    for (int64_t step = 1; step <= 3; ++step) {
      got.grad.normal_(0, 0.1);
      want.grad.copy_(got.grad);
      for (const auto& [begin, count, wd] : stretches) {
        const quartet::AdamWStep h{1e-3, 0.9, 0.95, 1e-8, wd, step};
        quartet::adamw_step(got.master, got.grad, got.m, got.v, got.model, begin, count, h, scale, finite);
        reference_step(want, begin, count, h, scale, finite);
      }
    }
    expect_close(got, want, ("len " + std::to_string(len)).c_str());

    // A non-finite gradient norm: the step touches nothing.
    const State before = got.clone();
    const quartet::AdamWStep h{1e-3, 0.9, 0.95, 1e-8, 0.1, 4};
    quartet::adamw_step(got.master, got.grad, got.m, got.v, got.model, 0, len, h, scale, torch::ones({}, f));
    EXPECT_TRUE(torch::equal(got.master, before.master) && torch::equal(got.m, before.m) &&
                torch::equal(got.v, before.v) && torch::equal(got.model, before.model));
  }
}

// A float32 model: the masters are its shard, updated in place with nothing else written.
TEST_P(AdamWKernel, Float32ModelInPlace) {
  State got = random_state(4099), want = got.clone();
  const quartet::AdamWStep h{2e-3, 0.9, 0.999, 1e-8, GetParam() == 0 ? 0.0 : 0.01, 1};
  quartet::adamw_step(got.master, got.grad, got.m, got.v, torch::Tensor(), 0, 4099, h, torch::Tensor(),
                      torch::Tensor());
  reference_step(want, 0, 4099, h, torch::Tensor(), torch::zeros({}, got.master.options()));
  EXPECT_TRUE(torch::allclose(got.master, want.master, 1e-6, 1e-7))
      << (got.master - want.master).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(got.m, want.m, 1e-6, 1e-8));
  EXPECT_TRUE(torch::allclose(got.v, want.v, 1e-6, 1e-12));
}

// A stretch's own gradient (adamw_step_own_gradient): bfloat16 as autograd returns it, one
// element off a 16-byte boundary for the scalar path (GetParam() == 1), gives the same bits as
// that gradient landed in a float32 shard first; no gradient gives the bits of a zero one.
TEST_P(AdamWKernel, OwnGradientSameBitsAsLanded) {
  const auto f = torch::TensorOptions().dtype(torch::kFloat32).device(kCuda);
  const int64_t len = 4099, begin = 5, count = 3001;
  State got = random_state(len), want = got.clone(), none = got.clone(), zero = got.clone();
  const torch::Tensor scale = torch::full({}, 2.5, f), finite = torch::zeros({}, f);
  for (int64_t step = 1; step <= 2; ++step) {
    const quartet::AdamWStep h{1e-3, 0.9, 0.95, 1e-8, 0.1, step};
    auto g16 = (torch::randn({count + 1}, f) * 0.1).to(torch::kBFloat16).narrow(0, GetParam(), count);
    want.grad.narrow(0, begin, count).copy_(g16);
    quartet::adamw_step_own_gradient(got.master, g16, got.m, got.v, got.model, begin, count, h, scale, finite);
    quartet::adamw_step(want.master, want.grad, want.m, want.v, want.model, begin, count, h, scale, finite);
    zero.grad.zero_();
    quartet::adamw_step_own_gradient(none.master, torch::Tensor(), none.m, none.v, none.model, begin, count, h, scale,
                                     finite);
    quartet::adamw_step(zero.master, zero.grad, zero.m, zero.v, zero.model, begin, count, h, scale, finite);
  }
  for (const auto& [a, b] : {std::pair{&got, &want}, std::pair{&none, &zero}})
    EXPECT_TRUE(torch::equal(a->master, b->master) && torch::equal(a->m, b->m) && torch::equal(a->v, b->v) &&
                torch::equal(a->model, b->model));
  // A gradient of another length is refused.
  EXPECT_THROW(quartet::adamw_step_own_gradient(got.master, got.grad, got.m, got.v, got.model, begin, count,
                                                {1e-3, 0.9, 0.95, 1e-8, 0.0, 3}, scale, finite),
               std::exception);
}

// Many stretches in few launches (adamw_step_many) give the bits of one call each: 100 stretches
// (over two launches' worth of descriptors) of 1 to 40,000 elements (several blocks' chunks),
// aligned and not, with float32, bfloat16 or no gradients and their own decay, over two steps.
TEST_P(AdamWKernel, ManyStretchesSameBitsAsOneByOne) {
  const auto f = torch::TensorOptions().dtype(torch::kFloat32).device(kCuda);
  const int64_t len = 1 << 21;
  State got = random_state(len), want = got.clone();
  const torch::Tensor scale = GetParam() == 0 ? torch::Tensor() : torch::full({}, 1.7, f);
  const torch::Tensor finite = torch::zeros({}, f);
  auto gen = at::detail::createCPUGenerator(5);
  for (int64_t step = 1; step <= 2; ++step) {
    std::vector<quartet::AdamWStretch> many;
    int64_t at = GetParam();  // 1: every stretch starts one element later
    for (int k = 0; k < 100; ++k) {
      const int64_t count = 1 + torch::randint(40000, {1}, gen).item<int64_t>();
      if (at + count > len) break;
      torch::Tensor g;
      if (k % 3 == 0) g = torch::randn({count}, f) * 0.1;
      else if (k % 3 == 1) g = (torch::randn({count}, f) * 0.1).to(torch::kBFloat16);
      many.push_back({got.master, g, got.m, got.v, got.model, at, count, k % 2 ? 0.1 : 0.0});
      at += count + (k % 5 == 0 ? 3 : 0);
    }
    ASSERT_GT(many.size(), 60u);
    const quartet::AdamWStep h{1e-3, 0.9, 0.95, 1e-8, 0.0, step};
    quartet::adamw_step_many(many, h, scale, finite);
    for (const auto& s : many) {
      quartet::AdamWStep one = h;
      one.weight_decay = s.weight_decay;
      quartet::adamw_step_own_gradient(want.master, s.grad, want.m, want.v, want.model, s.begin, s.count, one, scale,
                                       finite);
    }
  }
  auto diff = [](const torch::Tensor& a, const torch::Tensor& b) {
    return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
  };
  EXPECT_TRUE(torch::equal(got.master, want.master)) << "master differs by " << diff(got.master, want.master);
  EXPECT_TRUE(torch::equal(got.m, want.m)) << "exp_avg differs by " << diff(got.m, want.m);
  EXPECT_TRUE(torch::equal(got.v, want.v)) << "exp_avg_sq differs by " << diff(got.v, want.v);
  EXPECT_TRUE(torch::equal(got.model, want.model)) << "model differs by " << diff(got.model, want.model);
}

// A bfloat16 gradient into its float32 shard: the bits of copy_ and add_, in vectors and in the
// element-wise tail, and from a source one element off a 16-byte boundary.
TEST_P(AdamWKernel, LandGradientSameBitsAsCopyAndAdd) {
  const auto f = torch::TensorOptions().dtype(torch::kFloat32).device(kCuda);
  for (int64_t len : {1, 13, 4096, (1 << 20) + 3}) {
    auto src = (torch::randn({len + 1}, f) * 3).to(torch::kBFloat16).narrow(0, GetParam(), len);
    auto dst = torch::randn({len}, f), want = dst.clone();
    quartet::land_gradient(dst, src, /*add=*/true);
    want.add_(src);
    EXPECT_TRUE(torch::equal(dst, want)) << "add, len " << len;
    quartet::land_gradient(dst, src, /*add=*/false);
    EXPECT_TRUE(torch::equal(dst, src.to(torch::kFloat32))) << "copy, len " << len;
  }
}

// The clipping norm's sum of squares over 250 gradients (more than one launch takes) of many
// lengths, float32 and bfloat16, aligned or one element off (param 1): float64's sum of the same
// squares to float32 rounding, the same bits on a second run, infinity where one is infinite,
// and 0 for none.
TEST_P(AdamWKernel, GradSqNormManyIsTheSumOfSquares) {
  const auto f = torch::TensorOptions().dtype(torch::kFloat32).device(kCuda);
  std::vector<torch::Tensor> grads;
  double want = 0;
  for (int k = 0; k < 250; ++k) {
    const int64_t len = k % 7 == 0 ? 100000 + k : k % 3 == 0 ? 16384 * 2 + 5 : 1 + 37 * k;
    auto g = torch::randn({len + 1}, f).narrow(0, GetParam(), len);
    if (k % 2) g = g.to(torch::kBFloat16).contiguous();
    if (k % 5 == 0 && GetParam() == 1) g = g.clone();  // some aligned in either setting
    want += g.to(torch::kDouble).pow(2).sum().item<double>();
    grads.push_back(g);
  }
  grads.push_back(torch::empty({0}, f));
  const auto got = quartet::grad_sq_norm_many(grads, kCuda);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{1}));
  EXPECT_NEAR(got.item<double>(), want, 1e-5 * want);
  EXPECT_TRUE(torch::equal(got, quartet::grad_sq_norm_many(grads, kCuda))) << "not deterministic";
  grads[3] = grads[3].clone();
  grads[3][1] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(quartet::grad_sq_norm_many(grads, kCuda).item<double>()));
  EXPECT_EQ(quartet::grad_sq_norm_many({}, kCuda).item<double>(), 0.0);
}

// 0: no decay, no clipping (land_gradient: an aligned source); 1: decay in the middle stretch,
// gradients divided by 3.5 (land_gradient: an unaligned source).
INSTANTIATE_TEST_SUITE_P(Settings, AdamWKernel,
                         ::testing::ValuesIn(torch::cuda::is_available() ? std::vector<int>{0, 1}
                                                                         : std::vector<int>{}));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AdamWKernel);

}  // namespace

}  // namespace test_adamw_kernel

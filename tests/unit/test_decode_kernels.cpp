// quartet's decoding kernels (model/decode_kernels.hpp), each against what it replaces, on random
// tensors: the same bits where the kernel rounds as ATen does (SiLU x up, the residual sum), and
// within the rounding of the output dtype of a float64 reference where it computes more in
// float32 than ATen (attention, the RMSNorm); the step's bookkeeping against the rules written
// out. Needs a GPU; on a machine without one the suite
// is empty (the CPU paths are covered by test_model's parity tests).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/core/kernels_config.hpp"
#include "quartet/model/decode_kernels.hpp"

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_decode_kernels {

namespace {

const torch::Device kCuda(torch::kCUDA, 0);

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

class DecodeKernels : public ::testing::TestWithParam<torch::Dtype> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(quartet::decode_kernels_enabled()) << "this CUDA build has no decode kernels (no CUDA compiler?)";
    torch::manual_seed(1234);
  }
  torch::Dtype dtype() const { return GetParam(); }
  // float32: float32 rounding; bfloat16: a few units of its 8-bit mantissa.
  double tolerance() const { return dtype() == torch::kFloat32 ? 2e-5 : 1.6e-2; }
};

TEST_P(DecodeKernels, SiluMulSameBitsAsAten) {
  // 5632 and 8 take the 16-byte kernel, 1, 37 and 4 (in bfloat16) the scalar one.
  for (int64_t I : {1, 4, 8, 37, 5632}) {
    auto gate_up = torch::randn({5, 1, 2 * I}, torch::TensorOptions().dtype(dtype()).device(kCuda)) * 4;
    auto expected = torch::silu(gate_up.narrow(-1, 0, I)) * gate_up.narrow(-1, I, I);
    auto got = quartet::silu_mul(gate_up);
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_TRUE(torch::equal(got, expected)) << "I = " << I << ": differ by up to "
                                             << max_abs(got.to(torch::kFloat) - expected.to(torch::kFloat));
  }
}

TEST_P(DecodeKernels, AddRmsNormMatchesHFFormula) {
  const double eps = 1e-5;
  // Rows held in registers and read in 16-byte vectors (one or several per thread), and the
  // scalar kernel for widths that are no multiple of a vector, too wide, or misaligned (H < 0:
  // x one element past a 16-byte boundary).
  for (int64_t H : {16, 64, 2048, 5120, 16384, 37, 40000, -2048}) {
    const bool misaligned = H < 0;
    H = std::abs(H);
    auto opts = torch::TensorOptions().dtype(dtype()).device(kCuda);
    auto x = misaligned ? (torch::randn({7 * H + 1}, opts) * 3).narrow(0, 1, 7 * H).view({7, 1, H})
                        : torch::randn({7, 1, H}, opts) * 3;
    auto a = torch::randn({7, 1, H}, opts);
    auto w = torch::rand({H}, opts) + 0.5;
    auto [sum, normed] = quartet::add_rms_norm(x, a, w, eps);
    EXPECT_TRUE(torch::equal(sum, x + a)) << "H = " << H << ": the residual sum is not ATen's";
    // HF's LlamaRMSNorm on the (rounded) sum, in float64.
    auto s = sum.to(torch::kDouble);
    auto expected = w.to(torch::kDouble) * (s * torch::rsqrt(s.pow(2).mean(-1, true) + eps));
    const double err = max_abs(normed.to(torch::kDouble) - expected) / max_abs(expected);
    EXPECT_LE(err, tolerance()) << "H = " << H;
    // And as close to at::rms_norm as that is to the float64 formula, give or take a rounding.
    const auto aten = at::rms_norm(sum, {H}, w, eps);
    const double aten_err = max_abs(aten.to(torch::kDouble) - expected) / max_abs(expected);
    EXPECT_LE(err, aten_err + tolerance()) << "H = " << H;
  }
}

// softmax(scale q k^T + bias) v in float64, q [B, nkv * g, hd], caches [rows, nkv, L, hd].
torch::Tensor attention_reference(const torch::Tensor& q, const torch::Tensor& kc, const torch::Tensor& vc,
                                  const torch::Tensor& bias, int64_t span, double scale) {
  const int64_t B = q.size(0), nkv = kc.size(1), g = q.size(1) / nkv, hd = q.size(2);
  auto qd = q.to(torch::kDouble).view({B, nkv, g, hd});
  auto k = kc.narrow(0, 0, B).narrow(2, 0, span).to(torch::kDouble);  // [B, nkv, S, hd]
  auto v = vc.narrow(0, 0, B).narrow(2, 0, span).to(torch::kDouble);
  auto scores = torch::matmul(qd, k.transpose(2, 3)) * scale + bias.to(torch::kDouble).view({B, nkv, g, span});
  return torch::matmul(scores.softmax(-1), v).view({B, nkv * g, hd});
}

TEST_P(DecodeKernels, AttendDecodeMatchesFloat64Attention) {
  struct Case {
    int64_t B, nkv, g, hd, max_len, span;
  };
  // Bfloat16 heads of 128 with 1, 2, 4 and 8 query heads per KV head, in one split and in
  // several (few rows), spans odd and even, a span of 1. Float32 (and any other shape) is refused.
  const std::vector<Case> cases{{64, 8, 2, 128, 256, 200}, {1, 1, 8, 128, 600, 517}, {2, 4, 4, 128, 64, 64},
                                {5, 2, 1, 128, 100, 97},   {64, 8, 2, 128, 256, 1}};
  for (const auto& c : cases) {
    if (!quartet::attend_decode_supports(dtype(), c.g, c.hd)) {
      ASSERT_NE(dtype(), torch::kBFloat16);
      auto opts = torch::TensorOptions().dtype(dtype()).device(kCuda);
      EXPECT_THROW(quartet::attend_decode(torch::zeros({c.B, c.nkv * c.g, c.hd}, opts),
                                          torch::zeros({c.B, c.nkv, c.max_len, c.hd}, opts),
                                          torch::zeros({c.B, c.nkv, c.max_len, c.hd}, opts),
                                          torch::zeros({c.B * c.nkv, c.g, c.span}, opts), c.span, 1.0),
                   quartet::Error);
      continue;
    }
    for (bool bias_f32 : {false, true}) {
      if (bias_f32 && dtype() == torch::kFloat32) continue;  // float32 bias is the model's own then
      SCOPED_TRACE("B " + std::to_string(c.B) + " nkv " + std::to_string(c.nkv) + " g " + std::to_string(c.g) +
                   " hd " + std::to_string(c.hd) + " span " + std::to_string(c.span) +
                   (bias_f32 ? " float32 bias" : ""));
      auto opts = torch::TensorOptions().dtype(dtype()).device(kCuda);
      const int64_t rows = c.B + 1;  // a cache with more rows than the batch, as generation keeps
      auto kc = torch::randn({rows, c.nkv, c.max_len, c.hd}, opts), vc = torch::randn({rows, c.nkv, c.max_len, c.hd}, opts);
      auto q = torch::randn({c.B, c.nkv * c.g, c.hd}, opts) * 2;
      // Every row masks a random quarter of its slots; row 0 also everything before the last
      // slot of a 130-slot prefix (whole chunks of -inf before the first visible slot). A row
      // always sees its last slot, as in generation.
      auto visible = torch::rand({c.B, c.span}, torch::TensorOptions().device(kCuda)) > 0.25;
      if (c.span > 1) visible[0].narrow(0, 0, std::min<int64_t>(c.span - 1, 130)).fill_(false);
      visible.narrow(1, c.span - 1, 1).fill_(true);
      auto bias = torch::zeros({c.B, 1, 1, c.span}, opts.dtype(bias_f32 ? torch::kFloat32 : dtype()))
                      .masked_fill_(visible.logical_not().view({c.B, 1, 1, c.span}),
                                    -std::numeric_limits<float>::infinity())
                      .expand({c.B, c.nkv, c.g, c.span})
                      .reshape({c.B * c.nkv, c.g, c.span});
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.hd));
      auto got = quartet::attend_decode(q, kc, vc, bias, c.span, scale);
      ASSERT_EQ(got.sizes(), q.sizes());
      ASSERT_EQ(got.scalar_type(), dtype());
      auto expected = attention_reference(q, kc, vc, bias, c.span, scale);
      EXPECT_TRUE(torch::isfinite(got).all().item<bool>());
      const double err = max_abs(got.to(torch::kDouble) - expected) / max_abs(expected);
      EXPECT_LE(err, tolerance());
    }
  }
}

// A last slot (a decoding step's, read from the device when the kernel runs) with every slot
// after it masked: nothing after it is read (the cache holds NaN there, which would show), in
// one split and in several (the later splits then read nothing): the same bits as reading the
// whole span (masked slots read there add exact zeros). Bfloat16 only (the kernel's).
TEST_P(DecodeKernels, AttendDecodeStopsAtTheLastSlot) {
  auto opts = torch::TensorOptions().dtype(dtype()).device(kCuda);
  const int64_t B = 4, nkv = 8, g = 2, hd = 128, span = 256;
  if (!quartet::attend_decode_supports(dtype(), g, hd)) return;  // float32: refused (the test above)
  for (int64_t last : {0L, 100L, 129L, 200L, 255L}) {
    for (int splits : {0, 4}) {
      SCOPED_TRACE("last slot " + std::to_string(last) + ", splits " + std::to_string(splits));
      auto kc = torch::randn({B, nkv, span, hd}, opts), vc = torch::randn({B, nkv, span, hd}, opts);
      auto q = torch::randn({B, nkv * g, hd}, opts);
      auto visible = torch::rand({B, span}, torch::TensorOptions().device(kCuda)) > 0.25;
      visible.narrow(1, last, 1).fill_(true);
      if (last + 1 < span) visible.narrow(1, last + 1, span - last - 1).fill_(false);
      auto bias = torch::zeros({B, 1, 1, span}, opts)
                      .masked_fill_(visible.logical_not().view({B, 1, 1, span}),
                                    -std::numeric_limits<float>::infinity())
                      .expand({B, nkv, g, span})
                      .reshape({B * nkv, g, span});
      const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
      const auto whole = quartet::attend_decode(q, kc, vc, bias, span, scale, splits);
      const auto slot = torch::full({1}, last, torch::TensorOptions().dtype(torch::kLong).device(kCuda));
      if (last + 1 < span) {
        kc.narrow(2, last + 1, span - last - 1).fill_(std::numeric_limits<float>::quiet_NaN());
        vc.narrow(2, last + 1, span - last - 1).fill_(std::numeric_limits<float>::quiet_NaN());
      }
      const auto stopped = quartet::attend_decode(q, kc, vc, bias, span, scale, splits, slot);
      EXPECT_TRUE(torch::isfinite(stopped).all().item<bool>());
      EXPECT_TRUE(torch::equal(stopped, whole));
    }
  }
}

// The step's cache write and its attention in one kernel (attend_decode_qkv) against the two
// (qkv_to_cache, then attend_decode with the slot as its last): the same output and the same
// caches to the bit, for every group size, with the slot in the first, a middle or the last
// split, and the mask in bfloat16 and float32. In float32 the fused form is refused.
TEST_P(DecodeKernels, AttendDecodeQkvSameBitsAsTheTwoKernels) {
  auto opts = torch::TensorOptions().dtype(dtype()).device(kCuda);
  const int64_t B = 5, nkv = 2, hd = 128, L = 96;
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(kCuda);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  if (dtype() != torch::kBFloat16) {
    EXPECT_FALSE(quartet::attend_decode_qkv_supports(dtype(), 2, hd));
    EXPECT_THROW(quartet::attend_decode_qkv(torch::randn({B, 8 * hd}, opts), torch::randn({B, hd}, opts),
                                            torch::randn({B, hd}, opts), torch::full({1}, 3, long_opts),
                                            torch::zeros({B, nkv, L, hd}, opts), torch::zeros({B, nkv, L, hd}, opts),
                                            torch::zeros({B * nkv, 2, L}, opts), L, scale, 4, nkv),
                 quartet::Error);
    return;
  }
  struct Case {
    int64_t slot, span;
    int splits;
  };
  for (int64_t g : {1, 2, 4, 8}) {
    ASSERT_TRUE(quartet::attend_decode_qkv_supports(dtype(), g, hd)) << "g " << g;
    const int64_t nh = nkv * g;
    for (const Case& c : std::vector<Case>{{40, 64, 0}, {63, 64, 1}, {10, 96, 3}, {50, 96, 3}, {95, 96, 3}}) {
      for (bool f32_bias : {false, true}) {
        SCOPED_TRACE("g " + std::to_string(g) + ", slot " + std::to_string(c.slot) + ", span " +
                     std::to_string(c.span) + ", splits " + std::to_string(c.splits) + (f32_bias ? ", f32 mask" : ""));
        auto qkv = torch::randn({B, (nh + 2 * nkv) * hd}, opts);
        auto cos = torch::randn({B, hd}, opts), sin_signed = torch::randn({B, hd}, opts);
        // One more row than the batch, as a compacted batch's cache has.
        const auto k0 = torch::randn({B + 1, nkv, L, hd}, opts), v0 = torch::randn({B + 1, nkv, L, hd}, opts);
        auto visible = torch::rand({B, c.span}, torch::TensorOptions().device(kCuda)) > 0.25;
        visible.narrow(1, c.slot, 1).fill_(true);
        auto bias = torch::zeros({B, 1, 1, c.span}, opts.dtype(f32_bias ? torch::kFloat32 : dtype()))
                        .masked_fill_(visible.logical_not().view({B, 1, 1, c.span}),
                                      -std::numeric_limits<float>::infinity())
                        .expand({B, nkv, g, c.span})
                        .reshape({B * nkv, g, c.span});
        const auto slot = torch::full({1}, c.slot, long_opts);
        auto k_two = k0.clone(), v_two = v0.clone();
        auto q = torch::empty({B, nh, hd}, opts);
        quartet::qkv_to_cache(qkv, cos, sin_signed, slot, q, k_two, v_two, nh, nkv, hd);
        const auto two = quartet::attend_decode(q, k_two, v_two, bias, c.span, scale, c.splits, slot);
        auto k_one = k0.clone(), v_one = v0.clone();
        const auto one =
            quartet::attend_decode_qkv(qkv, cos, sin_signed, slot, k_one, v_one, bias, c.span, scale, nh, nkv, c.splits);
        EXPECT_TRUE(torch::equal(one, two)) << "outputs differ by up to "
                                            << max_abs(one.to(torch::kFloat) - two.to(torch::kFloat));
        EXPECT_TRUE(torch::equal(k_one, k_two)) << "key caches differ";
        EXPECT_TRUE(torch::equal(v_one, v_two)) << "value caches differ";
        EXPECT_FALSE(torch::equal(k_one, k0)) << "the step's key was not written";
      }
    }
  }
}

// The paged form (attend_paged_qkv: each row's slots through its block table, its context in
// the place of a mask) against the contiguous kernel on the same keys and values, each row's
// step key and value written at its own slot (context - 1) first and the slots from its context
// on masked: the same output and the same written slots to the bit, for every group size, with
// blocks of 16 and of 5 slots (a block's slots cross splits), an idle row (context 0: nothing
// written, zeros out) and 1, 3 or the GPU's splits. With a sliding window the paged kernel
// starts each row at the window's first slot (another order of summation): within bf16 rounding
// of the float64 attention.
TEST_P(DecodeKernels, AttendPagedQkvSameBitsAsContiguous) {
  if (dtype() != torch::kBFloat16) {
    EXPECT_FALSE(quartet::attend_paged_supports(dtype(), 2, 128));
    return;
  }
  auto opts = torch::TensorOptions().dtype(dtype()).device(kCuda);
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(kCuda);
  const int64_t B = 5, nkv = 2, hd = 128, span = 96;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const std::vector<int64_t> contexts{40, 1, 96, 0, 17};
  for (int64_t g : {1, 2, 4, 8}) {
    const int64_t nh = nkv * g;
    for (int64_t bs : {16, 5}) {
      for (int splits : {0, 1, 3}) {
        for (int64_t window : {0, 20}) {
          SCOPED_TRACE("g " + std::to_string(g) + ", block " + std::to_string(bs) + ", splits " +
                       std::to_string(splits) + ", window " + std::to_string(window));
          auto qkv = torch::randn({B, (nh + 2 * nkv) * hd}, opts);
          auto cos = torch::randn({B, hd}, opts), sin_signed = torch::randn({B, hd}, opts);
          // The contiguous reference: queries rotated and the step's key and value made by
          // qkv_to_cache (into a one-slot scratch cache), then put at each row's own slot.
          auto k_ref = torch::randn({B, nkv, span, hd}, opts), v_ref = torch::randn({B, nkv, span, hd}, opts);
          auto q = torch::empty({B, nh, hd}, opts);
          auto k_step = torch::empty({B, nkv, 1, hd}, opts), v_step = torch::empty({B, nkv, 1, hd}, opts);
          quartet::qkv_to_cache(qkv, cos, sin_signed, torch::zeros({1}, long_opts), q, k_step, v_step, nh, nkv, hd);
          // The pool: each row's blocks scattered in a shuffled order, block 0 scratch.
          const int64_t per_row = (span + bs - 1) / bs, blocks = B * per_row + 1;
          auto pool_k = torch::zeros({blocks, bs, nkv, hd}, opts), pool_v = torch::zeros({blocks, bs, nkv, hd}, opts);
          const auto order = torch::randperm(B * per_row, torch::kLong) + 1;
          auto table = torch::zeros({B, per_row}, torch::kInt);
          auto visible = torch::zeros({B, span}, torch::kBool);
          for (int64_t r = 0; r < B; ++r) {
            const int64_t n = contexts[static_cast<size_t>(r)];
            if (n > 0) {
              k_ref[r].narrow(1, n - 1, 1).copy_(k_step[r]);
              v_ref[r].narrow(1, n - 1, 1).copy_(v_step[r]);
              visible[r].narrow(0, window > 0 ? std::max<int64_t>(0, n - window) : 0,
                                window > 0 ? std::min(n, window) : n).fill_(true);
            }
            for (int64_t b = 0; b < per_row; ++b) table[r][b] = order[r * per_row + b].item<int64_t>();
          }
          // Every row's slots into its blocks (the step's slot too: the kernel writes it again).
          for (int64_t r = 0; r < B; ++r)
            for (int64_t s0 = 0; s0 < span; ++s0) {
              const int64_t blk = table[r][s0 / bs].item<int64_t>();
              pool_k[blk][s0 % bs].copy_(k_ref[r].select(1, s0));
              pool_v[blk][s0 % bs].copy_(v_ref[r].select(1, s0));
            }
          // The step's slots hold something else before the kernel writes them.
          for (int64_t r = 0; r < B; ++r) {
            const int64_t n = contexts[static_cast<size_t>(r)];
            if (n == 0) continue;
            const int64_t blk = table[r][(n - 1) / bs].item<int64_t>();
            pool_k[blk][(n - 1) % bs].fill_(7);
            pool_v[blk][(n - 1) % bs].fill_(7);
          }
          const auto context = torch::tensor(contexts, long_opts);
          const auto paged = quartet::attend_paged_qkv(qkv, cos, sin_signed, pool_k, pool_v, table.to(kCuda), context,
                                                       span, scale, nh, nkv, window, splits);
          auto bias = torch::zeros({B, 1, 1, span}, opts)
                          .masked_fill_(visible.to(kCuda).logical_not().view({B, 1, 1, span}),
                                        -std::numeric_limits<float>::infinity())
                          .expand({B, nkv, g, span})
                          .reshape({B * nkv, g, span});
          if (window == 0) {
            const auto contiguous = quartet::attend_decode(q, k_ref, v_ref, bias, span, scale, splits);
            EXPECT_TRUE(torch::equal(paged, contiguous))
                << "outputs differ by up to " << max_abs(paged.to(torch::kFloat) - contiguous.to(torch::kFloat));
          } else {
            auto ref = attention_reference(q, k_ref, v_ref, bias, span, scale);
            ref.select(0, 3).zero_();  // the idle row: zeros
            EXPECT_LE(max_abs(paged.to(torch::kDouble) - ref), tolerance());
          }
          EXPECT_EQ(max_abs(paged.select(0, 3).to(torch::kFloat)), 0.0) << "the idle row's output";
          // The written slots: each row's step key and value, and nothing in the scratch block.
          for (int64_t r = 0; r < B; ++r) {
            const int64_t n = contexts[static_cast<size_t>(r)];
            if (n == 0) continue;
            const int64_t blk = table[r][(n - 1) / bs].item<int64_t>();
            EXPECT_TRUE(torch::equal(pool_k[blk][(n - 1) % bs], k_step[r].select(1, 0))) << "row " << r << "'s key";
            EXPECT_TRUE(torch::equal(pool_v[blk][(n - 1) % bs], v_step[r].select(1, 0))) << "row " << r << "'s value";
          }
          EXPECT_EQ(max_abs(pool_k[0].to(torch::kFloat)), 0.0) << "an idle row wrote into the scratch block";
        }
      }
    }
  }
}

// The one-pass race picks the token that ATen's softmax / Exp(1) race picks on the same draws,
// over a narrowed (vocab_limit) view of the logits.
TEST_P(DecodeKernels, SampleRaceSameTokensAsSoftmaxRace) {
  auto full = torch::randn({64, 1200}, torch::TensorOptions().dtype(dtype()).device(kCuda)) * 3;
  auto logits = full.narrow(1, 0, 1000);
  for (double t : {1.0, 0.7}) {
    auto race = torch::empty({64, 1000}, torch::TensorOptions().device(kCuda)).exponential_(1.0);
    auto expected = (logits.to(torch::kFloat32) / t).softmax(-1).div(race).argmax(-1);
    auto got = quartet::sample_race(logits, race, t);
    EXPECT_TRUE(torch::equal(got, expected)) << "t = " << t << ": " << got.ne(expected).sum().item<int64_t>()
                                             << " of 64 rows differ";
  }
}

// n draws' inputs from the logits [0, 1, 2, -inf, 0.5] in `dtype`: the row, n copies of it
// [n, 5] and their Exp(1) race draws.
struct Draws {
  torch::Tensor row, logits, race;
};
Draws five_token_draws(int64_t n, torch::Dtype dtype) {
  const float inf = std::numeric_limits<float>::infinity();
  auto row = torch::tensor({0.f, 1.f, 2.f, -inf, 0.5f}).to(kCuda, dtype);
  auto logits = row.view({1, 5}).expand({n, 5}).contiguous();
  auto race = torch::empty({n, 5}, torch::TensorOptions().device(kCuda)).exponential_(1.0);
  return {row, logits, race};
}

// Drawn 200,000 times from softmax([0, 1, 2, -inf, 0.5]): each frequency within 5 standard
// deviations of its probability, and the -inf token never.
TEST_P(DecodeKernels, SampleRaceDrawsFromTheSoftmax) {
  const int64_t n = 200000;
  const auto [row, logits, race] = five_token_draws(n, dtype());
  auto counts = torch::bincount(quartet::sample_race(logits, race, 1.0), {}, 5).to(torch::kCPU, torch::kDouble);
  auto p = row.to(torch::kCPU, torch::kDouble).softmax(0);
  for (int i = 0; i < 5; ++i) {
    const double pi = p[i].item<double>(), got = counts[i].item<double>() / n;
    EXPECT_LE(std::abs(got - pi), 5 * std::sqrt(pi * (1 - pi) / n) + 1e-12) << "token " << i << ": " << got << " vs " << pi;
  }
  EXPECT_EQ(counts[3].item<double>(), 0.0);
}

// Top-p's nucleus (top_p_keys) against the sorted vocabulary in float64: the fewest most likely
// tokens whose probability reaches top_p, for peaked and flat rows, banned (-inf) tokens, a
// narrowed (vocab_limit) view and two temperatures; and the race over it (sample_race with the
// keys) picks what the race over the nucleus written out picks, on the same draws.
TEST_P(DecodeKernels, TopPKeysFindTheNucleus) {
  const int64_t B = 48, V = 1000;
  auto full = torch::randn({B, V + 200}, torch::TensorOptions().dtype(torch::kFloat32).device(kCuda));
  full.narrow(0, 0, B / 2).mul_(4.0);                 // peaked rows, and flat ones
  full.narrow(1, 7, 5).fill_(-std::numeric_limits<float>::infinity());  // banned ids
  auto logits = full.to(dtype()).narrow(1, 0, V);
  for (double t : {1.0, 0.7}) {
    for (double top_p : {0.5, 0.9, 0.95}) {
      SCOPED_TRACE("t " + std::to_string(t) + ", top_p " + std::to_string(top_p));
      const auto keys = quartet::top_p_keys(logits, t, top_p).to(torch::kCPU);
      const auto x = logits.to(torch::kCPU, torch::kDouble);
      const auto probs = (x / t).softmax(-1);
      const auto race = torch::empty({B, V}, torch::TensorOptions().device(kCuda)).exponential_(1.0);
      const auto got = quartet::sample_race(logits, race, t, keys.to(kCuda)).to(torch::kCPU);
      const auto scores = (logits.to(torch::kFloat32) / t - race.log()).to(torch::kCPU);
      for (int64_t r = 0; r < B; ++r) {
        // The reference: descending probabilities, the fewest whose sum reaches top_p.
        const auto [sorted, order] = probs[r].sort(0, /*descending=*/true);
        const auto cum = sorted.cumsum(0);
        const int64_t n = (cum < top_p).sum().item<int64_t>() + 1;
        const double least = x[r][order[n - 1].item<int64_t>()].item<double>();
        const auto kept = x[r] >= least;
        // The kernel's nucleus: the tokens whose order key reaches the row's.
        const auto as_float = logits[r].to(torch::kCPU, torch::kFloat32).contiguous();
        const uint32_t key_r = static_cast<uint32_t>(keys[r].item<int32_t>());
        auto theirs = torch::zeros({V}, torch::kBool);
        for (int64_t i = 0; i < V; ++i) {
          uint32_t u;
          const float f = as_float[i].item<float>();
          std::memcpy(&u, &f, 4);
          const uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
          theirs[i] = k >= key_r;
        }
        ASSERT_TRUE(torch::equal(theirs, kept)) << "row " << r << ": nucleus of " << theirs.sum().item<int64_t>()
                                                << " tokens, expected " << kept.sum().item<int64_t>();
        const int64_t want = scores[r].masked_fill(kept.logical_not(), -std::numeric_limits<float>::infinity()).argmax().item<int64_t>();
        EXPECT_EQ(got[r].item<int64_t>(), want) << "row " << r;
      }
    }
  }
}

// Drawn 200,000 times with top_p 0.75 from softmax([0, 1, 2, -inf, 0.5]) (probabilities .078,
// .213, .579, 0, .129): the nucleus is {2, 1} (.579 + .213 reaches .75), each drawn within 5
// standard deviations of its renormalised probability, and no other token ever.
TEST_P(DecodeKernels, TopPDrawsFromTheNucleus) {
  const int64_t n = 200000;
  const auto [row, logits, race] = five_token_draws(n, dtype());
  const auto keys = quartet::top_p_keys(logits, 1.0, 0.75);
  auto counts = torch::bincount(quartet::sample_race(logits, race, 1.0, keys), {}, 5).to(torch::kCPU, torch::kDouble);
  auto p = row.to(torch::kCPU, torch::kDouble).softmax(0);
  const double kept = p[1].item<double>() + p[2].item<double>();
  for (int i : {1, 2}) {
    const double pi = p[i].item<double>() / kept, got = counts[i].item<double>() / n;
    EXPECT_LE(std::abs(got - pi), 5 * std::sqrt(pi * (1 - pi) / n)) << "token " << i << ": " << got << " vs " << pi;
  }
  for (int i : {0, 3, 4}) EXPECT_EQ(counts[i].item<double>(), 0.0) << "token " << i << " is outside the nucleus";
}

// The masked softmax against ATen's softmax of the biased scores: masked entries exactly 0, the
// rest within rounding (the two sum in different orders), for rows of 1 to 700 slots.
TEST_P(DecodeKernels, MaskedSoftmaxMatchesAtenSoftmax) {
  auto opts = torch::TensorOptions().dtype(dtype()).device(kCuda);
  for (int64_t S : {1, 31, 256, 700}) {
    auto scores = torch::randn({6, 2, S}, opts) * 4;
    auto keep = torch::rand({6, 2, S}, opts.dtype(torch::kFloat32)) < 0.7;
    keep.select(-1, S - 1).fill_(true);  // a decoding row always sees its own slot
    auto bias = torch::zeros({6, 2, S}, opts).masked_fill_(keep.logical_not(), -std::numeric_limits<float>::infinity());
    auto got = quartet::masked_softmax(scores, bias);
    auto expected = (scores + bias).softmax(-1);
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_EQ(got.masked_select(keep.logical_not()).abs().sum().item<double>(), 0.0) << "S = " << S;
    EXPECT_LE(max_abs(got.to(torch::kDouble) - expected.to(torch::kDouble)), tolerance()) << "S = " << S;
  }
  EXPECT_THROW(quartet::masked_softmax(torch::zeros({2, 3}, opts), torch::zeros({2, 4}, opts)), std::exception);
}

// The step's bookkeeping against the same rules written out on the CPU: rows past `rows` and
// columns other than *step untouched, finished rows padded, stop ids ending live rows only.
TEST_P(DecodeKernels, AdvanceDecodeKeepsTheBooksAsWrittenOut) {
  const int64_t B = 7, N = 6, rows = 5, pad = 0;
  const auto cpu_long = torch::TensorOptions().dtype(torch::kLong);
  for (bool with_stops_and_positions : {true, false}) {
    auto next = torch::tensor({3, 4, 5, 9, 7}, cpu_long);
    auto done = torch::tensor({false, true, false, false, false, false, true});
    auto hist = torch::randint(1, 50, {B, N}, cpu_long), hist_mask = torch::randint(0, 2, {B, N}, cpu_long);
    auto lengths = torch::tensor({2, 1, 2, 2, 2, 9, 9}, cpu_long), tok = torch::randint(1, 50, {B}, cpu_long);
    auto pos = torch::arange(10, 10 + B, cpu_long), slot = torch::tensor({20}, cpu_long);
    auto step = torch::tensor({2}, cpu_long), stops = torch::tensor({3, 9}, cpu_long);
    auto d = [](const torch::Tensor& t) { return t.to(kCuda); };
    auto g_done = d(done), g_hist = d(hist), g_mask = d(hist_mask), g_len = d(lengths), g_tok = d(tok);
    auto g_pos = d(pos), g_slot = d(slot), g_step = d(step);
    quartet::advance_decode(d(next), g_done, g_hist, g_mask, g_len, g_tok,
                            with_stops_and_positions ? d(stops) : torch::Tensor(), g_step,
                            with_stops_and_positions ? g_pos : torch::Tensor(),
                            with_stops_and_positions ? g_slot : torch::Tensor(), pad);
    for (int64_t r = 0; r < rows; ++r) {
      const bool alive = !done[r].item<bool>();
      const int64_t t = alive ? next[r].item<int64_t>() : pad;
      hist[r][2] = t;
      hist_mask[r][2] = alive ? 1 : 0;
      lengths[r] += alive ? 1 : 0;
      if (with_stops_and_positions && alive && (t == 3 || t == 9)) done[r] = true;
      tok[r] = t;
      if (with_stops_and_positions) pos[r] += 1;
    }
    const std::string what = with_stops_and_positions ? "with stops and positions" : "without";
    EXPECT_TRUE(torch::equal(g_hist.cpu(), hist)) << what;
    EXPECT_TRUE(torch::equal(g_mask.cpu(), hist_mask)) << what;
    EXPECT_TRUE(torch::equal(g_len.cpu(), lengths)) << what;
    EXPECT_TRUE(torch::equal(g_done.cpu(), done)) << what << ": " << g_done.cpu() << " against " << done;
    EXPECT_TRUE(torch::equal(g_tok.cpu(), tok)) << what;
    EXPECT_TRUE(torch::equal(g_pos.cpu(), pos)) << what;
    EXPECT_EQ(g_step.item<int64_t>(), 3) << what;
    EXPECT_EQ(g_slot.item<int64_t>(), with_stops_and_positions ? 21 : 20) << what;
  }
  // Rows 0 and 3 picked stop ids while live, row 1 was already done: exactly those end.
  auto d = torch::tensor({false, true, false, false, false}).to(kCuda);
  auto buf = torch::zeros({5, 2}, torch::TensorOptions().dtype(torch::kLong).device(kCuda));
  auto v5 = torch::zeros({5}, buf.options()), step = torch::zeros({1}, buf.options());
  quartet::advance_decode(torch::tensor({3, 3, 5, 9, 7}).to(kCuda), d, buf, buf.clone(), v5, v5.clone(),
                          torch::tensor({3, 9}).to(kCuda), step, torch::Tensor(), torch::Tensor(), 0);
  EXPECT_TRUE(torch::equal(d.cpu(), torch::tensor({true, true, false, true, false})));
}

TEST_P(DecodeKernels, RefusesWhatItCannotDo) {
  auto opts = torch::TensorOptions().dtype(dtype()).device(kCuda);
  auto kc = torch::zeros({2, 1, 8, 16}, opts);
  auto bias = torch::zeros({2, 9, 8}, opts);
  EXPECT_FALSE(quartet::attend_decode_supports(torch::kBFloat16, 9, 128));
  EXPECT_FALSE(quartet::attend_decode_supports(torch::kBFloat16, 3, 128));
  EXPECT_FALSE(quartet::attend_decode_supports(torch::kBFloat16, 2, 64));
  EXPECT_FALSE(quartet::attend_decode_supports(torch::kFloat32, 2, 128));
  EXPECT_THROW(quartet::attend_decode(torch::zeros({2, 9, 16}, opts), kc, kc, bias, 8, 1.0), std::exception);
  EXPECT_THROW(quartet::attend_decode(torch::zeros({2, 1, 16}, opts), kc, kc, torch::zeros({2, 1, 7}, opts), 8, 1.0),
               std::exception);
  EXPECT_THROW(quartet::silu_mul(torch::zeros({2, 3}, opts)), std::exception);
  EXPECT_THROW(quartet::sample_race(torch::zeros({2, 3}, opts), torch::ones({2, 4}, opts.dtype(torch::kFloat32)), 1.0),
               std::exception);
  EXPECT_THROW(quartet::sample_race(torch::zeros({2, 3}, opts), torch::ones({2, 3}, opts.dtype(torch::kFloat32)), 0.0),
               std::exception);
  EXPECT_THROW(quartet::add_rms_norm(torch::zeros({2, 4}, opts), torch::zeros({2, 5}, opts), torch::ones({4}, opts), 1e-5),
               std::exception);
  auto l = torch::zeros({4}, torch::TensorOptions().dtype(torch::kLong).device(kCuda));
  auto h = torch::zeros({4, 3}, l.options());
  auto b = torch::zeros({4}, l.options().dtype(torch::kBool));
  EXPECT_THROW(quartet::advance_decode(l, b, h, h.clone(), l.clone(), l.clone(), torch::Tensor(), l, torch::Tensor(),
                                       torch::Tensor(), 0),
               std::exception);  // step must be [1]
  EXPECT_THROW(quartet::advance_decode(l, b.to(torch::kLong), h, h, l, l, torch::Tensor(), l.narrow(0, 0, 1),
                                       torch::Tensor(), torch::Tensor(), 0),
               std::exception);  // done must be bool
}

// Which decoding steps take the attention kernel: with kernels.decode_attention on, the
// register form's shapes only (bfloat16 heads of 128, 1, 2, 4 or 8 query heads per KV head) when
// the decode kernels are on; with it off, none. Host logic: runs without a GPU too.
TEST(DecodeAttentionSwitch, TakesTheKernelsShapesOnly) {
  const bool before = quartet::decode_attention_enabled();
  const bool on = quartet::decode_kernels_enabled();
  const auto bf16 = torch::kBFloat16, f32 = torch::kFloat32;
  EXPECT_EQ(before, quartet::device_kernels_built()) << "the default of kernels.decode_attention";
  if (quartet::device_kernels_built()) quartet::set_decode_attention(true);
  for (int64_t g : {1, 2, 4, 8}) EXPECT_EQ(quartet::decode_attention_uses_kernel(bf16, g, 128), on) << "g " << g;
  EXPECT_FALSE(quartet::decode_attention_uses_kernel(bf16, 3, 128));
  EXPECT_FALSE(quartet::decode_attention_uses_kernel(bf16, 9, 128));
  EXPECT_FALSE(quartet::decode_attention_uses_kernel(bf16, 2, 64));
  EXPECT_FALSE(quartet::decode_attention_uses_kernel(bf16, 2, 256));
  EXPECT_FALSE(quartet::decode_attention_uses_kernel(f32, 2, 128));
  quartet::set_decode_attention(false);
  for (int64_t g : {1, 2, 4, 8}) EXPECT_FALSE(quartet::decode_attention_uses_kernel(bf16, g, 128)) << "g " << g;
  if (!quartet::device_kernels_built()) {
    EXPECT_THROW(quartet::set_decode_attention(true), quartet::Error);  // names set_decode_attention
  }
  quartet::set_decode_attention(before);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecodeKernels,
                         ::testing::ValuesIn(torch::cuda::is_available()
                                                 ? std::vector<torch::Dtype>{torch::kFloat32, torch::kBFloat16}
                                                 : std::vector<torch::Dtype>{}),
                         [](const ::testing::TestParamInfo<torch::Dtype>& i) {
                           return std::string(i.param == torch::kFloat32 ? "fp32" : "bf16");
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DecodeKernels);

}  // namespace

}  // namespace test_decode_kernels

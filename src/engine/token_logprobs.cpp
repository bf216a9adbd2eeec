#include "quartet/engine/token_logprobs.hpp"

#include <torch/autograd.h>
#include <torch/types.h>

#include <functional>
#include <string>

#include "quartet/core/check.hpp"
#include "quartet/engine/shape_checks.hpp"

namespace quartet {

namespace {

// ---- chunked log-softmax pieces ---------------------------------------------------------------
// The logits of a policy are [B, T, V] with V ~ 1e5 in bf16; a float32 log-softmax of all of
// them would be twice their size again. Both functions below work on blocks of rows, converting
// one block at a time to float32, and are autograd Functions whose backward recomputes the
// softmax block by block instead of saving float32 intermediates (only the logits themselves,
// which exist anyway, are kept for backward).

// About 2^24 float32 elements (64 MiB) per block.
constexpr int64_t kBlockElements = int64_t(1) << 24;

// Calls fn(b0, nb, t0, nt) for blocks that tile [B, T]: whole rows of several sequences when a
// sequence is short, parts of one sequence when it is long. Blocks are narrow()s of the 3-D
// logits, so a non-contiguous view (logits[:, :-1]) is never flattened into a copy.
void for_each_block(int64_t B, int64_t T, int64_t V,
                    const std::function<void(int64_t, int64_t, int64_t, int64_t)>& fn) {
  const int64_t rows = std::max<int64_t>(1, kBlockElements / std::max<int64_t>(V, 1));
  if (T <= rows) {
    const int64_t nb_max = std::max<int64_t>(1, rows / std::max<int64_t>(T, 1));
    for (int64_t b0 = 0; b0 < B; b0 += nb_max) fn(b0, std::min(nb_max, B - b0), 0, T);
  } else {
    for (int64_t b0 = 0; b0 < B; ++b0)
      for (int64_t t0 = 0; t0 < T; t0 += rows) fn(b0, 1, t0, std::min(rows, T - t0));
  }
}

torch::Tensor block(const torch::Tensor& t, int64_t b0, int64_t nb, int64_t t0, int64_t nt) {
  return t.narrow(0, b0, nb).narrow(1, t0, nt);
}

void check_logits(const char* fn, const torch::Tensor& logits) {
  QUARTET_CHECK(logits.defined() && logits.dim() == 3 && logits.is_floating_point(),
                std::string(fn) + ": logits must be a floating-point [B, T, V] tensor, got " + shape_of(logits));
}

class TokenLogprobs : public torch::autograd::Function<TokenLogprobs> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& tokens) {
    const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
    auto out = torch::empty({B, T}, logits.options().dtype(torch::kFloat32));
    for_each_block(B, T, V, [&](int64_t b0, int64_t nb, int64_t t0, int64_t nt) {
      auto z = block(logits, b0, nb, t0, nt).to(torch::kFloat32);
      auto tok = block(tokens, b0, nb, t0, nt).unsqueeze(-1);
      block(out, b0, nb, t0, nt).copy_(z.gather(-1, tok).squeeze(-1) - z.logsumexp(-1));
    });
    ctx->save_for_backward({logits, tokens});
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& logits = saved[0];
    const auto& tokens = saved[1];
    auto g = grads[0].to(torch::kFloat32);
    const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
    auto grad = torch::empty(logits.sizes(), logits.options());
    // d logp[tok] / d z = onehot(tok) - softmax(z)
    for_each_block(B, T, V, [&](int64_t b0, int64_t nb, int64_t t0, int64_t nt) {
      auto z = block(logits, b0, nb, t0, nt).to(torch::kFloat32);
      auto gb = block(g, b0, nb, t0, nt).unsqueeze(-1);
      auto d = torch::softmax(z, -1).mul_(gb).neg_();
      d.scatter_add_(-1, block(tokens, b0, nb, t0, nt).unsqueeze(-1), gb);
      block(grad, b0, nb, t0, nt).copy_(d);
    });
    return {grad, torch::Tensor()};
  }
};

class TokenEntropy : public torch::autograd::Function<TokenEntropy> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits) {
    const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
    auto out = torch::empty({B, T}, logits.options().dtype(torch::kFloat32));
    // H = logsumexp(z) - sum_i p_i z_i
    for_each_block(B, T, V, [&](int64_t b0, int64_t nb, int64_t t0, int64_t nt) {
      auto z = block(logits, b0, nb, t0, nt).to(torch::kFloat32);
      auto p = torch::softmax(z, -1);
      block(out, b0, nb, t0, nt).copy_(z.logsumexp(-1) - (p * z).sum(-1));
    });
    ctx->save_for_backward({logits});
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto logits = ctx->get_saved_variables()[0];
    auto g = grads[0].to(torch::kFloat32);
    const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
    auto grad = torch::empty(logits.sizes(), logits.options());
    // dH / dz_j = -p_j (z_j - sum_i p_i z_i)
    for_each_block(B, T, V, [&](int64_t b0, int64_t nb, int64_t t0, int64_t nt) {
      auto z = block(logits, b0, nb, t0, nt).to(torch::kFloat32);
      auto p = torch::softmax(z, -1);
      auto ez = (p * z).sum(-1, /*keepdim=*/true);
      auto d = p * (z - ez) * block(g, b0, nb, t0, nt).unsqueeze(-1).neg();
      block(grad, b0, nb, t0, nt).copy_(d);
    });
    return {grad};
  }
};

}  // namespace

torch::Tensor token_logprobs(const torch::Tensor& logits, const torch::Tensor& tokens) {
  check_logits("token_logprobs", logits);
  QUARTET_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.size(0) == logits.size(0) &&
                    tokens.size(1) == logits.size(1),
                "token_logprobs: tokens " + shape_of(tokens) + " must be [B, T] of logits " + shape_of(logits));
  QUARTET_CHECK(!tokens.is_floating_point() && tokens.scalar_type() != torch::kBool,
                "token_logprobs: tokens must be integer ids");
  return TokenLogprobs::apply(logits, tokens.to(torch::kLong));
}

torch::Tensor token_entropy(const torch::Tensor& logits) {
  check_logits("token_entropy", logits);
  return TokenEntropy::apply(logits);
}

}  // namespace quartet

#include "quartet/model/rotary.hpp"

#include <algorithm>
#include <cmath>

#include "quartet/core/check.hpp"
#include "quartet/model/rotary_kernel.hpp"

namespace quartet {

namespace {

// 1 / base^(2i/dim) in float32, the same tensor ops transformers uses, so that the
// frequencies agree to the last bit.
torch::Tensor default_inv_freq(double base, int64_t dim) {
  auto exponent = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(dim);
  return torch::reciprocal(torch::pow(base, exponent));
}

}  // namespace

torch::Tensor rotary_inv_freq(const ModelConfig& c, int64_t seq_len) {
  const int64_t dim = c.rotary_dim;
  // An odd dim (NeoX's int(head_dim * rotary_pct)) gives ceil(dim / 2) frequencies over the
  // exponent's denominator dim, as in transformers.
  QUARTET_CHECK(dim > 0, "rotary_inv_freq: rotary_dim must be positive");
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "none") return default_inv_freq(c.rope_theta, dim);
  if (s.type == "linear") return default_inv_freq(c.rope_theta, dim) / s.factor;
  if (s.type == "dynamic") {
    // transformers keeps the plain frequencies up to max_position_embeddings and grows the
    // base beyond it: base * (factor * len / max - (factor - 1)) ^ (dim / (dim - 2)).
    const double len = static_cast<double>(std::max(seq_len, c.max_positions));
    const double max = static_cast<double>(c.max_positions);
    const double base = c.rope_theta * std::pow(s.factor * len / max - (s.factor - 1.0),
                                                static_cast<double>(dim) / static_cast<double>(dim - 2));
    return default_inv_freq(base, dim);
  }
  if (s.type == "llama3") {
    auto inv_freq = default_inv_freq(c.rope_theta, dim);
    const double old_len = static_cast<double>(s.original_max_positions);
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    // Python's scalar / tensor is reciprocal(tensor) * scalar; the same here, bit for bit.
    auto wavelen = torch::reciprocal(inv_freq) * (2 * M_PI);
    // Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
    auto scaled = torch::where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq);
    auto smooth = (torch::reciprocal(wavelen) * old_len - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
    auto medium = (wavelen < high_wavelen).logical_not() * (wavelen > low_wavelen).logical_not();
    return torch::where(medium, smoothed, scaled);
  }
  QUARTET_CHECK(false, "rope type '" + s.type + "' is not supported (none, linear, dynamic, llama3)");
  return {};
}

std::pair<torch::Tensor, torch::Tensor> rotary_cos_sin(const torch::Tensor& inv_freq,
                                                        const torch::Tensor& position_ids,
                                                        torch::ScalarType dtype, bool interleaved) {
  // [B, T, 1] * [F] is the same single product per element as transformers' matmul/einsum.
  auto freqs = position_ids.to(torch::kFloat32).unsqueeze(-1) * inv_freq;
  torch::Tensor cos, sin;
  if (interleaved) {
    cos = freqs.cos().to(dtype).repeat_interleave(2, -1);
    sin = freqs.sin().to(dtype).repeat_interleave(2, -1);
  } else {
    auto emb = torch::cat({freqs, freqs}, -1);
    cos = emb.cos().to(dtype);
    sin = emb.sin().to(dtype);
  }
  return {cos.unsqueeze(1), sin.unsqueeze(1)};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                           bool interleaved) {
  const int64_t rd = cos.size(-1);
  const int64_t d = x.size(-1);
  if (!interleaved && rd == d && rotary_kernel_supports(x, cos, sin)) return rotary_halves(x, cos, sin);
  auto rot = rd == d ? x : x.narrow(-1, 0, rd);
  torch::Tensor turned;
  if (interleaved) {
    // (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)
    auto pairs = rot.unflatten(-1, {rd / 2, 2});
    turned = torch::stack({-pairs.select(-1, 1), pairs.select(-1, 0)}, -1).flatten(-2);
  } else {
    auto x1 = rot.narrow(-1, 0, rd / 2);
    auto x2 = rot.narrow(-1, rd / 2, rd / 2);
    turned = torch::cat({-x2, x1}, -1);
  }
  auto out = rot * cos + turned * sin;
  if (rd == d) return out;
  return torch::cat({out, x.narrow(-1, rd, d - rd)}, -1);
}

}  // namespace quartet

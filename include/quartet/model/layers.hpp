#pragma once
// The layers the decoder-only transformers are made of (transformer.hpp), under the parameter
// names Hugging Face gives them: Linear, GPT-2's Conv1D, RMSNorm or LayerNorm, Embedding; and
// what the blocks share about creating and running them.
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace quartet::layers {

// How parameters are created: where, in which dtype, and whether they get a random init (a
// model about to be loaded skips it).
struct Build {
  torch::TensorOptions options;
  bool init = true;
  double std = 0.02;

  torch::Tensor normal(std::vector<int64_t> shape) const;
  torch::Tensor filled(std::vector<int64_t> shape, double value) const;
};

// nn.Linear: weight [out, in]. Without a weight it holds only a bias (GPT-J's lm_head.bias when
// the weight is tied to the embedding).
class DenseImpl : public torch::nn::Module {
 public:
  DenseImpl(int64_t in, int64_t out, bool with_bias, const Build& b, bool with_weight = true);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
};
TORCH_MODULE(Dense);

// GPT-2's Conv1D: weight stored [in, out] and applied as x @ W + b, exactly as HF does.
class Conv1DImpl : public torch::nn::Module {
 public:
  Conv1DImpl(int64_t in, int64_t out, const Build& b);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
};
TORCH_MODULE(Conv1D);

// RMSNorm (Llama: float32 statistics, weight applied after casting back) or LayerNorm.
class NormImpl : public torch::nn::Module {
 public:
  NormImpl(int64_t n, double eps, bool rms, const Build& b);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;

 private:
  double eps_;
  bool rms_;
};
TORCH_MODULE(Norm);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t n, int64_t d, int64_t padding_idx, const Build& b);
  // padding_idx only stops the gradient of the pad row, as nn.Embedding(padding_idx) does.
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;

 private:
  int64_t padding_idx_;
};
TORCH_MODULE(Embedding);

// Puts the parameters of `m` back to back in one buffer, in registration order, as a sharded
// model's flat units already hold them (shard/flat_layout.hpp). Then q/k/v and gate/up lie in
// one matrix that a decoding step multiplies once (adjacent_rows). keep_values = false skips
// the copy, for parameters about to be loaded (their pages stay untouched).
void pack_parameters(torch::nn::Module& m, bool keep_values);

// Whether a decoding step on `x` runs on quartet's own device kernels (model/decode_kernels.hpp)
// rather than ATen's.
bool decode_kernels_for(const torch::Tensor& x);

// The activation of config.json's hidden_act / activation_function.
torch::Tensor activate(const std::string& act, const torch::Tensor& x);

}  // namespace quartet::layers

#include "quartet/shard/memory_terms.hpp"

#include <algorithm>
#include <cmath>

#include "quartet/model/models_config.hpp"
#include "quartet/model/paged_cache.hpp"
#include "quartet/model/rollout_config.hpp"
#include "quartet/shard/flat_layout.hpp"
#include "quartet/shard/train_config.hpp"

namespace quartet {

// Estimates: the coefficients to calibrate against measured CUDA peaks live here, and only here.
namespace estimate {

// Tensors a block saves for backward, per token, counted in widths (SDPA memory-efficient
// attention, which keeps q, k, v, its output and a float32 log-sum-exp per head; Linear keeps
// its input; LayerNorm/RMSNorm its input, and the next Linear its output):
//   hidden      [h] in the model dtype        (norm inputs and outputs, the residual sums)
//   attn_model  [heads * head_dim], dtype     (o_proj's input: a contiguous copy of SDPA's output;
//               Qwen3's q_norm and k_norm keep their inputs too, counted as two more)
//   attn_sdpa   [heads * head_dim], attention dtype (SDPA's q, k, v, output; k and v after
//               repeat_kv; NeoX keeps its fused qkv alive besides the rotated q and k)
//   mlp         [ffn], dtype                  (SwiGLU: gate, silu(gate), up, their product;
//               GELU: input, output; gelu_new written out as HF does: + tanh, 0.5 x, 1 + tanh)
struct BlockSaves {
  double hidden, attn_model, attn_sdpa, mlp;
};

BlockSaves block_saves(const ModelConfig& c) {
  const bool gelu_new = c.activation == "gelu_new";
  const double gelu_mlp = gelu_new ? 5.0 : 2.0;
  switch (c.family) {
    case Family::llama: return {4.0, c.qk_norm ? 3.0 : 1.0, 4.0, 4.0};
    case Family::gpt2: return {4.0, 1.0, 4.0, gelu_mlp};
    case Family::gptj: return {2.0, 1.0, 4.0, gelu_mlp};            // one LayerNorm feeds both branches
    case Family::gpt_neox: return {c.parallel_residual ? 3.0 : 4.0, 1.0, 6.0, gelu_mlp};
  }
  return {4.0, 1.0, 4.0, 4.0};
}

// Gradient temporaries of backward through one block, in blocks' worth of saved activations.
constexpr double kBackwardWorkspaceBlocks = 1.0;
// A block's forward without graph (scoring, prefill): the fraction of its saved-for-backward
// bytes alive at once.
constexpr double kNoGradBlockFraction = 1.0;
// Train head (causal_lm): float32 copies of [m, T, V] besides the logits in the model dtype: the
// log-softmax kept for backward and its gradient.
constexpr double kTrainLogitsFp32Copies = 2.0;
// Score head (causal_lm): float32 copies of [r, T, V] beside the logits (the log-softmax).
constexpr double kScoreLogitsFp32Copies = 1.0;
// The root's activations kept for backward: the final norm's input and output, [h] each.
constexpr double kRootHiddenSaves = 2.0;
// Rollout tensors exchanged between groups, bytes per token: int64 ids, int64 mask, float32
// log-probs; once sent and once received.
constexpr double kExchangeBytesPerToken = 8 + 8 + 4;
constexpr double kExchangeCopies = 2.0;

// Bytes of the attention's inputs: GPT-J runs attention in float32 whatever the dtype.
int64_t attention_bytes(const ModelConfig& c, int64_t b) {
  return c.family == Family::gptj && b < 4 ? 4 : b;
}

// Bytes one block saves per token.
double block_bytes_per_token(const ModelConfig& c, int64_t b) {
  const BlockSaves s = block_saves(c);
  const double qd = static_cast<double>(c.num_heads * c.head_dim);
  const double ab = static_cast<double>(attention_bytes(c, b));
  return s.hidden * static_cast<double>(c.hidden_size * b) + s.attn_model * qd * static_cast<double>(b) +
         s.attn_sdpa * qd * ab + s.mlp * static_cast<double>(c.intermediate_size * b) +
         4.0 * static_cast<double>(c.num_heads);  // log-sum-exp
}

}  // namespace estimate

namespace memory {

namespace {

// A forward without graph through one block of batch x T new tokens attending to S slots (S = T
// without a cache).
double no_grad_block(const RoleModel& m, double batch, double T, double S) {
  const ModelConfig& c = m.spec->config;
  const double tokens = batch * T;
  return estimate::kNoGradBlockFraction * tokens * estimate::block_bytes_per_token(c, m.b) +
         batch * T * S * (1.0 + static_cast<double>(estimate::attention_bytes(c, m.b))) +  // mask + bias
         2.0 * tokens * static_cast<double>(c.hidden_size * m.b);  // the block's input and output
}

}  // namespace

std::uint64_t u64(double x) { return x <= 0 ? 0 : static_cast<std::uint64_t>(std::ceil(x)); }

int64_t dtype_bytes(torch::ScalarType t) { return t == torch::kFloat32 ? 4 : 2; }

Layout make_layout(const std::vector<int64_t>& n, int W) {
  Layout l;
  l.W = W;
  const int64_t align = kShardAlign * W;
  for (size_t u = 0; u < n.size(); ++u) {
    const int64_t p = (n[u] + align - 1) / align * align;
    l.padded.push_back(p);
    l.shard.push_back(p / W);
    l.shard_sum += p / W;
    l.padded_sum += p;
    if (u > 0) {
      l.max_block_padded = std::max(l.max_block_padded, p);
      l.max_block_shard = std::max(l.max_block_shard, p / W);
    }
  }
  return l;
}


std::vector<MemoryTerm> persistent_terms(const RoleModel& m, bool parked) {
  const Role r = m.role;
  const auto S = static_cast<double>(m.layout.shard_sum);
  const ModelSectionConfig& sec = *m.section;
  std::vector<MemoryTerm> t;
  const Where opt = sec.offload_optimizer ? Where::host : Where::device;
  t.push_back({"parameters", r, u64(S * static_cast<double>(m.b)),
               parked || sec.offload_params ? Where::host : Where::device});
  if (m.spec->trained) {
    t.push_back({"gradients", r, u64(S * 4), parked ? Where::host : Where::device});
    if (m.spec->dtype != torch::kFloat32) t.push_back({"master", r, u64(S * 4), opt});
    t.push_back({"moments", r, u64(2 * S * 4), opt});
    if (sec.offload_optimizer) t.push_back({"gradient staging", r, u64(S * 4), Where::host});
  }
  return t;
}

Shape shape_of(const Config& c) {
  // Each prompt is generated (and then scored) algorithm.samples_per_prompt times (the rollout's shape).
  const int64_t samples = c.get<RolloutConfig>().samples_per_prompt;
  const int64_t sequences = static_cast<int64_t>(c.get<RolloutConfig>().batch) * samples;
  const int64_t chunk = c.get<RolloutConfig>().micro_batch > 0 ? std::min(c.get<RolloutConfig>().micro_batch, c.get<RolloutConfig>().batch) : c.get<RolloutConfig>().batch;
  const int64_t chunk_rows = chunk * samples;
  const int64_t T = static_cast<int64_t>(c.get<RolloutConfig>().max_prompt_tokens) + c.get<RolloutConfig>().max_new_tokens;
  auto packed_rows = [T](int tokens) { return static_cast<double>(std::max<int64_t>(tokens, T)) / static_cast<double>(T); };
  const double score_rows =
      c.get<RolloutConfig>().score_tokens > 0        ? packed_rows(c.get<RolloutConfig>().score_tokens)
      : c.get<RolloutConfig>().score_micro_batch > 0 ? static_cast<double>(std::min<int64_t>(c.get<RolloutConfig>().score_micro_batch, chunk_rows))
                                        : static_cast<double>(chunk_rows);
  const double micro_batch =
      c.get<TrainConfig>().micro_batch_tokens > 0 ? packed_rows(c.get<TrainConfig>().micro_batch_tokens) : static_cast<double>(c.get<TrainConfig>().micro_batch);
  return {micro_batch, sequences, c.get<RolloutConfig>().max_prompt_tokens, T, chunk_rows, score_rows};
}

std::vector<MemoryTerm> train_terms(const RoleModel& m, const Config& cfg) {
  const ModelConfig& c = m.spec->config;
  const Layout& l = m.layout;
  const Role r = m.role;
  const auto b = static_cast<double>(m.b);
  const Shape s = shape_of(cfg);
  const double mb = s.micro_batch, T = static_cast<double>(s.T);
  const double L = static_cast<double>(c.num_layers), h = static_cast<double>(c.hidden_size);
  const double V = static_cast<double>(c.vocab_size);
  std::vector<MemoryTerm> t;
  // One rank without offload: the shards are the full parameters (nothing to gather) and the
  // gradients go straight into the gradient shard (no reduce-scatter output).
  const bool resident = l.W == 1 && !m.section->offload_params;
  // Kept from forward to backward (reshard_after_forward = false): every block at once.
  double blocks = 2.0 * static_cast<double>(l.max_block_padded);
  if (!m.section->reshard_after_forward) {
    blocks = 0;
    for (size_t u = 1; u < l.padded.size(); ++u) blocks += static_cast<double>(l.padded[u]);
  }
  double gathered = resident ? 0.0 : (static_cast<double>(l.padded[0]) + blocks) * b;
  if (m.section->offload_params) gathered += 2.0 * static_cast<double>(l.max_block_shard) * b;
  t.push_back({"gathered parameters", r, u64(gathered), Where::device});
  const double f = cfg.get<TrainConfig>().reduce_dtype == ReducePrecision::float32 && m.spec->dtype != torch::kFloat32 ? 4.0 : 0.0;
  const double rs_out = resident ? 0.0 : 4.0;
  const double grad_buffers =
      static_cast<double>(l.padded[0]) * (b + f) + static_cast<double>(l.shard[0]) * rs_out +
      2.0 * (static_cast<double>(l.max_block_padded) * (b + f) + static_cast<double>(l.max_block_shard) * rs_out);
  t.push_back({"gradient buffers", r, u64(grad_buffers), Where::device});

  const double tokens = mb * T;
  const double per_block = tokens * estimate::block_bytes_per_token(c, m.b);
  const double bias = mb * T * T * static_cast<double>(estimate::attention_bytes(c, m.b));
  const double mask = mb * T * T;  // bool
  const double logits = m.spec->head == Head::causal_lm ? tokens * V * (b + estimate::kTrainLogitsFp32Copies * 4) : 0.0;
  const double workspace = estimate::kBackwardWorkspaceBlocks * per_block;
  double acts;
  if (m.section->checkpointing) {
    // The head's logits are gone before the first block is recomputed: the peak is the larger
    // of the two moments, on top of the block inputs kept for the recomputation (measured on
    // an H200: docs/memory-plan.md). The logits term carries the head's moment; activations
    // carry what the recompute adds beyond it.
    acts = L * tokens * h * b + std::max(0.0, per_block + bias + workspace - logits);
  } else {
    acts = L * (per_block + bias) + workspace;
  }
  acts += mask + estimate::kRootHiddenSaves * tokens * h * b;
  t.push_back({"activations", r, u64(acts), Where::device});
  if (logits > 0) t.push_back({"logits", r, u64(logits), Where::device});
  return t;
}

bool graphed(const RoleModel& m, const Config& cfg, bool gpu) {
  return gpu && cfg.get<TrainConfig>().cuda_graphs && cfg.get<TrainConfig>().micro_batch_tokens == 0 && m.spec->trained && m.layout.W == 1 &&
         !m.section->offload_params;
}

std::uint64_t sum_bytes(const std::vector<MemoryTerm>& terms) {
  std::uint64_t n = 0;
  for (const auto& t : terms) n += t.bytes;
  return n;
}

std::vector<MemoryTerm> score_terms(const RoleModel& m, const Config& cfg) {
  const ModelConfig& c = m.spec->config;
  const Layout& l = m.layout;
  const Role r = m.role;
  const auto b = static_cast<double>(m.b);
  const Shape s = shape_of(cfg);
  const double rb = s.score_rows, T = static_cast<double>(s.T);
  std::vector<MemoryTerm> t;
  const double gathered = (static_cast<double>(l.padded[0]) + 2.0 * static_cast<double>(l.max_block_padded)) * b +
                          (m.section->offload_params ? 2.0 * static_cast<double>(l.max_block_shard) * b : 0.0);
  t.push_back({"gathered parameters", r, u64(gathered), Where::device});
  t.push_back({"activations", r, u64(no_grad_block(m, rb, T, T)), Where::device});
  if (m.spec->head == Head::causal_lm)
    t.push_back({"logits", r,
                 u64(rb * T * static_cast<double>(c.vocab_size) * (b + estimate::kScoreLogitsFp32Copies * 4)),
                 Where::device});
  return t;
}

std::vector<MemoryTerm> generate_terms(const RoleModel& m, const Config& cfg) {
  const ModelConfig& c = m.spec->config;
  const Role r = m.role;
  const auto b = static_cast<double>(m.b);
  const Shape s = shape_of(cfg);
  // The chunk's rows decode together; the old log-probs' pass on the cache (below) runs
  // rollout.score_micro_batch rows at a time.
  const double rb = static_cast<double>(s.chunk_rows), sb = s.score_rows;
  const double T = static_cast<double>(s.T);
  std::vector<MemoryTerm> t;
  t.push_back({"full model (hybrid engine)", r, u64(static_cast<double>(m.layout.padded_sum) * b), Where::device});
  // Paged decoding (rollout.decode_rows): decode_rows rows over a pool of blocks (and the
  // rows' prompt pass, a wave of prompts, at most as wide as the chunk's); else every row's T slots.
  const auto& ro = cfg.get<RolloutConfig>();
  const double kv_token = 2.0 * static_cast<double>(c.num_layers) * static_cast<double>(c.num_kv_heads * c.head_dim) * b;
  const double decode_rows = ro.decode_rows > 0 ? std::min(rb, static_cast<double>(ro.decode_rows)) : rb;
  const double kv_slots =
      ro.decode_rows > 0
          ? static_cast<double>(paged_pool_blocks(static_cast<int64_t>(decode_rows), s.prompt, s.T - s.prompt,
                                                  ro.kv_block, ro.kv_cache_tokens) * ro.kv_block)
          : rb * T;
  t.push_back({"kv cache", r, u64(kv_token * kv_slots), Where::device});
  // rollout.reuse_prompt_cache: the old log-probs' pass continues from the cache in this phase
  // (engine/experience.hpp score_logprobs_on_cache), with the new tokens' activations and logits,
  // where larger than the prompt's forward and a decoding step's.
  const double P = static_cast<double>(s.prompt), A = T - P, V = static_cast<double>(c.vocab_size);
  const bool on_cache = cfg.get<RolloutConfig>().reuse_prompt_cache;
  // The prompt's pass runs once per prompt, its rows shared by the prompt's samples.
  const double prompts = decode_rows / static_cast<double>(std::max(1, cfg.get<RolloutConfig>().samples_per_prompt));
  const double activations = no_grad_block(m, std::max(1.0, prompts), P, P), logits = decode_rows * V * 4;
  t.push_back({"activations", r, u64(on_cache ? std::max(activations, no_grad_block(m, sb, A, T)) : activations),
               Where::device});
  t.push_back({"logits", r,
               u64(on_cache ? std::max(logits, sb * A * V * (b + estimate::kScoreLogitsFp32Copies * 4)) : logits),
               Where::device});
  return t;
}

std::vector<MemoryTerm> comm_terms(Role first, int group, const Shape& shape) {
  std::vector<MemoryTerm> comm;
  if (group > 1) comm.push_back({"nccl buffers", first, kNcclBytes, Where::device});
  comm.push_back({"rollout exchange", first,
                  u64(static_cast<double>(shape.rollout_batch * shape.T) * estimate::kExchangeBytesPerToken *
                      estimate::kExchangeCopies),
                  Where::device});
  return comm;
}

}  // namespace memory

}  // namespace quartet

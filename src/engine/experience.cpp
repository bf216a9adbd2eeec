#include "quartet/engine/experience.hpp"

#include <torch/types.h>

#include <algorithm>
#include <functional>
#include <string>

#include "quartet/core/check.hpp"
#include "quartet/core/kernel_switch.hpp"
#include "quartet/engine/packed_rollouts.hpp"
#include "quartet/engine/token_logprobs.hpp"
#include "quartet/model/rollout_config.hpp"

namespace quartet {

int64_t max_rollout_width(const RolloutConfig& rollout) {
  return static_cast<int64_t>(rollout.max_prompt_tokens) + rollout.max_new_tokens;
}

int64_t bucketed_actions(int64_t prompt_len, int64_t actions, int64_t max_width) {
  if (max_width <= 0) return actions;
  const int64_t m = kRolloutWidthMultiple, width = (prompt_len + actions + m - 1) / m * m;
  return std::max(actions, std::min(width, max_width) - prompt_len);
}

RolloutBatch pad_actions(const RolloutBatch& b, int64_t actions, int64_t pad_id) {
  const int64_t right = actions - b.actions();
  QUARTET_CHECK(right >= 0, "pad_actions: the batch has more actions than asked for");
  if (right == 0) return b;
  return {torch::constant_pad_nd(b.sequences, {0, right}, static_cast<double>(pad_id)),
          torch::constant_pad_nd(b.attention_mask, {0, right}), torch::constant_pad_nd(b.action_mask, {0, right})};
}

int64_t concat_actions(const std::vector<RolloutBatch>& pieces, int64_t max_width) {
  int64_t P = 0, A = 0;
  for (const auto& p : pieces) {
    P = std::max(P, p.prompt_len());
    A = std::max(A, p.actions());
  }
  return bucketed_actions(P, A, max_width);
}

RolloutBatch concat_rollouts(const std::vector<RolloutBatch>& pieces, int64_t pad_id, int64_t max_width) {
  QUARTET_CHECK(!pieces.empty(), "concat_rollouts: no pieces");
  int64_t P = 0;
  for (const auto& p : pieces) P = std::max(P, p.prompt_len());
  const int64_t A = concat_actions(pieces, max_width);
  std::vector<torch::Tensor> seq, attn, act;
  for (const auto& p : pieces) {
    const int64_t left = P - p.prompt_len(), right = A - p.actions();
    seq.push_back(torch::constant_pad_nd(p.sequences, {left, right}, static_cast<double>(pad_id)));
    attn.push_back(torch::constant_pad_nd(p.attention_mask, {left, right}));
    act.push_back(torch::constant_pad_nd(p.action_mask, {0, right}));
  }
  return {torch::cat(seq), torch::cat(attn), torch::cat(act)};
}

std::vector<torch::Tensor> split_by_pieces(const torch::Tensor& values, const std::vector<RolloutBatch>& pieces) {
  std::vector<torch::Tensor> out;
  int64_t row = 0;
  for (const auto& p : pieces) {
    auto v = values.narrow(0, row, p.rows());
    if (v.dim() == 2) v = v.narrow(1, 0, p.actions());
    out.push_back(v.contiguous());
    row += p.rows();
  }
  return out;
}

int64_t group_max(Collectives& group, int64_t mine) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(group.device());
  auto in = torch::full({1}, mine, opts);
  auto all = torch::empty({group.size()}, opts);
  group.all_gather(in, all);
  return all.max().item<int64_t>();
}

RolloutBatch select_rows(const RolloutBatch& b, const torch::Tensor& index) {
  auto i = index.to(b.sequences.device());
  return {b.sequences.index_select(0, i), b.attention_mask.index_select(0, i), b.action_mask.index_select(0, i)};
}

RolloutBatch select_range(const RolloutBatch& b, int64_t begin, int64_t count) {
  return {b.sequences.narrow(0, begin, count), b.attention_mask.narrow(0, begin, count),
          b.action_mask.narrow(0, begin, count)};
}

RolloutBatch on_device(const RolloutBatch& b, torch::Device d) {
  return {b.sequences.to(d), b.attention_mask.to(d), b.action_mask.to(d)};
}

namespace {

// Runs `padded` (or, with passes.tokens, `packed` on the rows packed) on the passes of
// `batch`, the same number of times on every rank of the group, and concatenates the results
// of the real ones.
torch::Tensor micro_batched(ShardedModel& model, const RolloutBatch& cpu_or_device_batch, const ScorePasses& passes,
                            const std::function<torch::Tensor(const RolloutBatch&)>& padded,
                            const std::function<torch::Tensor(const RolloutBatch&, const std::vector<int64_t>&)>& packed) {
  torch::NoGradGuard no_grad;
  // On the device once: a blocking copy per micro-batch would wait for the device each time.
  const RolloutBatch batch = on_device(cpu_or_device_batch, model.device());
  const int64_t rows = batch.rows();
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<int64_t> lengths;
  if (passes.tokens > 0 && rows > 0) {
    lengths = row_lengths(batch);
    ranges = token_passes(lengths, passes.tokens);
  } else {
    const int64_t step = passes.rows > 0 ? passes.rows : std::max<int64_t>(rows, 1);
    for (int64_t begin = 0; begin < rows; begin += step) ranges.emplace_back(begin, std::min(rows, begin + step));
  }
  const auto mine = static_cast<int64_t>(ranges.size());
  const int64_t calls = group_max(model.group(), mine);
  std::vector<torch::Tensor> parts;
  for (int64_t k = 0; k < calls; ++k) {
    if (k < mine) {
      const auto [begin, end] = ranges[static_cast<size_t>(k)];
      const RolloutBatch mb = select_range(batch, begin, end - begin);
      parts.push_back(lengths.empty() ? padded(mb)
                                      : packed(mb, std::vector<int64_t>(lengths.begin() + begin, lengths.begin() + end)));
    } else {
      // An empty turn: one pad token through the model so the group's collectives line up.
      auto opts = torch::TensorOptions().dtype(torch::kLong).device(model.device());
      RolloutBatch dummy{torch::zeros({1, 2}, opts), torch::ones({1, 2}, opts), torch::ones({1, 1}, opts)};
      (void)padded(dummy);
    }
  }
  return parts.empty() ? torch::Tensor() : torch::cat(parts);
}

}  // namespace

PaddingLayout padding_layout(const RolloutBatch& batch) {
  // kernels.unmasked_attention = false: every batch attends with its mask (benchmarks compare the two).
  if (!kernels_in_use().unmasked_attention) return PaddingLayout::anywhere;
  if (batch.rows() == 0 || batch.attention_mask.size(1) < 2) return PaddingLayout::trailing;
  const auto real = batch.attention_mask.ne(0);
  const int64_t W = real.size(1);
  // Per row, the real tokens that follow padding: none (trailing), or one whose padding is the
  // row's start (around).
  const auto rises = real.narrow(1, 1, W - 1).logical_and(real.narrow(1, 0, W - 1).logical_not()).sum(1);
  const auto around = rises.eq(0).logical_or(rises.eq(1).logical_and(real.select(1, 0).logical_not()));
  const auto facts = torch::stack({rises.eq(0).all(), around.all()}).to(torch::kCPU);  // the read-back
  if (facts[0].item<bool>()) return PaddingLayout::trailing;
  return facts[1].item<bool>() ? PaddingLayout::around : PaddingLayout::anywhere;
}

namespace {

// Log-probs [B, A] of `actions` [B, A] under logits [B, A, V] seen through `view`.
torch::Tensor logprobs_in_view(torch::Tensor acting, torch::Tensor actions, const SamplingView& view,
                               torch::Tensor* entropy) {
  if (view.vocab_limit > 0 && view.vocab_limit < acting.size(-1)) {
    acting = acting.narrow(-1, 0, view.vocab_limit);
    // Sampled actions lie within the limit; a padding id past it (after a stop, masked) is
    // only kept in range.
    actions = actions.clamp_max(view.vocab_limit - 1);
  }
  if (view.temperature > 0 && view.temperature != 1.0) acting = acting / view.temperature;
  if (entropy) *entropy = token_entropy(acting);
  return token_logprobs(acting, actions);
}

}  // namespace

torch::Tensor action_logprobs(ShardedModel& model, const RolloutBatch& batch, const SamplingView& view,
                              torch::Tensor* entropy, PaddingLayout padding) {
  auto b = on_device(batch, model.device());
  const int64_t P = b.prompt_len(), A = b.actions();
  // Positions P-1 .. P+A-2 predict the actions; the vocabulary product runs on those alone.
  auto logits = model.forward(b.sequences, b.attention_mask, /*head_from=*/P - 1, padding);
  return logprobs_in_view(logits.narrow(1, 0, A), b.sequences.narrow(1, P, A), view, entropy);
}

torch::Tensor action_values(ShardedModel& model, const RolloutBatch& batch, PaddingLayout padding) {
  auto b = on_device(batch, model.device());
  auto values = model.forward(b.sequences, b.attention_mask, /*head_from=*/0, padding);
  return values.narrow(1, b.prompt_len() - 1, b.actions()).to(torch::kFloat32);
}

namespace {

torch::Tensor packed_logprobs(ShardedModel& model, const RolloutBatch& batch, const std::vector<int64_t>& lengths,
                              const SamplingView& view, torch::Tensor* entropy) {
  const PackedRollouts p = pack_rollouts(on_device(batch, model.device()), lengths);
  auto logits = model.forward_packed(p.seqs, p.predict_at);
  torch::Tensor per_token_entropy;
  auto logp = logprobs_in_view(logits, p.action_ids.view({1, -1}), view, entropy ? &per_token_entropy : nullptr);
  if (entropy) *entropy = unpack_actions(per_token_entropy, p);
  return unpack_actions(logp, p);
}

torch::Tensor packed_values(ShardedModel& model, const RolloutBatch& batch, const std::vector<int64_t>& lengths) {
  const PackedRollouts p = pack_rollouts(on_device(batch, model.device()), lengths);
  return unpack_actions(model.forward_packed(p.seqs, p.predict_at).to(torch::kFloat32), p);
}

}  // namespace

torch::Tensor action_logprobs_packed(ShardedModel& model, const RolloutBatch& batch, const SamplingView& view,
                                     torch::Tensor* entropy) {
  return packed_logprobs(model, batch, row_lengths(batch), view, entropy);
}

torch::Tensor action_values_packed(ShardedModel& model, const RolloutBatch& batch) {
  return packed_values(model, batch, row_lengths(batch));
}

torch::Tensor score_logprobs(ShardedModel& model, const RolloutBatch& batch, const ScorePasses& passes,
                             const SamplingView& view) {
  const PaddingLayout padding = passes.tokens > 0 ? PaddingLayout::anywhere : padding_layout(batch);  // a read-back
  return micro_batched(
      model, batch, passes, [&](const RolloutBatch& mb) { return action_logprobs(model, mb, view, nullptr, padding); },
      [&](const RolloutBatch& mb, const std::vector<int64_t>& lengths) {
        return packed_logprobs(model, mb, lengths, view, nullptr);
      });
}

torch::Tensor score_logprobs_on_cache(ShardedModel& model, const RolloutBatch& batch, const KVCache& cache,
                                      const ScorePasses& passes, const SamplingView& view) {
  torch::NoGradGuard no_grad;
  Transformer& net = model.module();
  QUARTET_CHECK(net->head() == Head::causal_lm, "score_logprobs_on_cache: the model needs the causal_lm head");
  QUARTET_CHECK(model.gathered_full(),
                "score_logprobs_on_cache: the model must be gathered whole on this rank (gather_full)");
  const RolloutBatch b = on_device(batch, model.device());
  const int64_t R = b.rows(), P = b.prompt_len(), A = b.actions();
  QUARTET_CHECK(static_cast<int64_t>(cache.k.size()) == net->config().num_layers && cache.k.size() == cache.v.size() &&
                    R > 0 && cache.k[0].defined() && cache.k[0].size(0) == R,
                "score_logprobs_on_cache: the cache was not made for this model and these " + std::to_string(R) +
                    " rows");
  QUARTET_CHECK(cache.length == P && P >= 1 && A >= 1 && P - 1 + A <= cache.max_len,
                "score_logprobs_on_cache: a cache of " + std::to_string(cache.length) + " prompt tokens with room for " +
                    std::to_string(cache.max_len) + " does not fit a batch of " + std::to_string(P) + " prompt and " +
                    std::to_string(A) + " action tokens");
  std::vector<torch::Tensor> parts;
  const int64_t step = passes.rows > 0 ? passes.rows : R;
  for (int64_t begin = 0; begin < R; begin += step) {
    const int64_t n = std::min(step, R - begin);
    // The rows' cache with the prompt's last token left out: it is fed again, so that its
    // logits, which predict the first action, come out of this pass too.
    KVCache part;
    part.max_len = cache.max_len;
    part.length = P - 1;
    for (size_t l = 0; l < cache.k.size(); ++l) {
      part.k.push_back(cache.k[l].narrow(0, begin, n));
      part.v.push_back(cache.v[l].narrow(0, begin, n));
    }
    auto seq = b.sequences.narrow(0, begin, n);
    auto mask = b.attention_mask.narrow(0, begin, n).narrow(1, 0, P - 1 + A);
    auto logits = net->head_output(net->hidden_states(seq.narrow(1, P - 1, A), mask, &part), mask);
    parts.push_back(logprobs_in_view(logits, seq.narrow(1, P, A), view, nullptr));
  }
  return torch::cat(parts);
}

torch::Tensor score_values(ShardedModel& model, const RolloutBatch& batch, const ScorePasses& passes) {
  const PaddingLayout padding = passes.tokens > 0 ? PaddingLayout::anywhere : padding_layout(batch);
  return micro_batched(
      model, batch, passes, [&](const RolloutBatch& mb) { return action_values(model, mb, padding); },
      [&](const RolloutBatch& mb, const std::vector<int64_t>& lengths) { return packed_values(model, mb, lengths); });
}

torch::Tensor score_sequences(ShardedModel& model, const RolloutBatch& batch, const ScorePasses& passes) {
  const PaddingLayout padding = passes.tokens > 0 ? PaddingLayout::anywhere : padding_layout(batch);
  return micro_batched(
      model, batch, passes,
      [&](const RolloutBatch& mb) {
        auto b = on_device(mb, model.device());
        // The head still reads the mask: a row's score is at its last real token.
        return model.forward(b.sequences, b.attention_mask, /*head_from=*/0, padding).to(torch::kFloat32);
      },
      [&](const RolloutBatch& mb, const std::vector<int64_t>& lengths) {
        const PackedRollouts p = pack_rollouts(on_device(mb, model.device()), lengths);
        QUARTET_CHECK(p.seqs.sequences() == mb.rows(), "score_sequences: a row without tokens");
        // The score at each sequence's last token, as the padded head takes it.
        return model.forward_packed(p.seqs, p.last_at).to(torch::kFloat32).view({-1});
      });
}

}  // namespace quartet

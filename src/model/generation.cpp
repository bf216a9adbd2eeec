#include "quartet/model/generation.hpp"

#include <algorithm>

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <limits>
#include <mutex>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

// The next token of every row from logits [B, V], with HF's warpers in HF's order:
// temperature, then top-k, then top-p.
torch::Tensor pick(torch::Tensor logits, const SamplingParams& p, at::Generator& gen) {
  // torch.argmax returns the first maximum, i.e. the lowest id on ties.
  if (p.vocab_limit > 0 && p.vocab_limit < logits.size(-1))
    logits = logits.narrow(-1, 0, p.vocab_limit);  // ids past the tokenizer's are never picked
  if (p.temperature == 0.0) return logits.argmax(-1);
  logits = logits.to(torch::kFloat32);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (p.temperature != 1.0) logits = logits / p.temperature;
  if (p.top_k > 0 && p.top_k < logits.size(-1)) {
    // TopKLogitsWarper: drop everything below the k-th largest (ties with it stay).
    auto kth = std::get<0>(logits.topk(p.top_k, -1)).narrow(-1, p.top_k - 1, 1);
    logits = logits.masked_fill(logits < kth, neg_inf);
  }
  if (p.top_p < 1.0) {
    // TopPLogitsWarper: sort ascending, drop the tokens whose cumulative probability stays at
    // or below 1 - top_p; the most likely token always survives.
    auto [sorted, order] = logits.sort(-1, false);
    auto cumulative = sorted.softmax(-1).cumsum(-1);
    auto remove_sorted = cumulative <= (1.0 - p.top_p);
    remove_sorted.narrow(-1, remove_sorted.size(-1) - 1, 1).fill_(false);
    auto remove = remove_sorted.scatter(-1, order, remove_sorted);
    logits = logits.masked_fill(remove, neg_inf);
  }
  auto probs = logits.softmax(-1);
  return at::multinomial(probs, 1, false, gen).squeeze(-1);
}

}  // namespace

Generation generate(Transformer& model, const torch::Tensor& prompt, const torch::Tensor& prompt_mask,
                    const SamplingParams& params) {
  QUARTET_CHECK(model->head() == Head::causal_lm, "generate: the model needs the causal_lm head");
  QUARTET_CHECK(prompt.dim() == 2 && prompt_mask.sizes() == prompt.sizes(),
                "generate: prompt and prompt_mask must both be [batch, tokens]");
  QUARTET_CHECK(params.max_new_tokens >= 0, "generate: max_new_tokens must not be negative");
  QUARTET_CHECK(params.temperature >= 0.0, "generate: temperature must not be negative");
  QUARTET_CHECK(params.top_k >= 0, "generate: top_k must not be negative");
  QUARTET_CHECK(params.top_p > 0.0 && params.top_p <= 1.0, "generate: top_p must be in (0, 1]");
  torch::NoGradGuard no_grad;

  const auto dev = prompt.device();
  const int64_t B = prompt.size(0), T = prompt.size(1), N = params.max_new_tokens;
  auto tokens = prompt.to(torch::kLong);
  auto mask = prompt_mask.to(dev).to(torch::kLong);
  Generation g;
  if (N == 0) {
    g.tokens = tokens;
    g.attention_mask = mask;
    g.new_lengths = torch::zeros({B}, tokens.options());
    return g;
  }

  // A generator of the prompt's device, seeded here, so that runs repeat without touching
  // the global RNG state.
  at::Generator gen = at::globalContext().defaultGenerator(dev).clone();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(params.seed);
  }

  auto stop_ids = torch::tensor(params.stop_ids.empty() ? std::vector<int64_t>{-1} : params.stop_ids,
                                tokens.options());
  std::vector<torch::Tensor> new_tokens, new_mask;
  auto done = torch::zeros({B}, torch::TensorOptions().dtype(torch::kBool).device(dev));
  auto lengths = torch::zeros({B}, tokens.options());

  KVCache cache = model->make_cache(B, T + N);
  auto full_mask = mask;
  auto logits = model->next_token_logits(tokens, full_mask, &cache);
  for (int64_t step = 0; step < N; ++step) {
    auto next = pick(logits, params, gen);
    // A finished row emits padding and no longer counts as a token.
    auto alive = done.logical_not();
    next = torch::where(alive, next, torch::full_like(next, params.pad_id));
    new_tokens.push_back(next);
    new_mask.push_back(alive.to(torch::kLong));
    lengths = lengths + alive.to(torch::kLong);
    if (!params.stop_ids.empty()) done = done | (alive & torch::isin(next, stop_ids));
    if (step + 1 == N) break;
    // The one host sync per step: stop early once every row has ended.
    if (!params.stop_ids.empty() && done.all().item<bool>()) break;
    full_mask = torch::cat({full_mask, new_mask.back().unsqueeze(1)}, 1);
    logits = model->next_token_logits(next.unsqueeze(1), full_mask, &cache);
  }

  g.tokens = torch::cat({tokens, torch::stack(new_tokens, 1)}, 1);
  g.attention_mask = torch::cat({mask, torch::stack(new_mask, 1)}, 1);
  g.new_lengths = lengths;
  return g;
}

std::pair<torch::Tensor, torch::Tensor> left_pad(const std::vector<std::vector<int64_t>>& seqs,
                                                 int64_t pad_id) {
  int64_t len = 1;
  for (const auto& s : seqs) len = std::max<int64_t>(len, static_cast<int64_t>(s.size()));
  const auto n = static_cast<int64_t>(seqs.size());
  auto ids = torch::full({n, len}, pad_id, torch::kLong);
  auto mask = torch::zeros({n, len}, torch::kLong);
  for (int64_t b = 0; b < n; ++b) {
    const auto& s = seqs[static_cast<size_t>(b)];
    const auto k = static_cast<int64_t>(s.size());
    if (k == 0) continue;
    ids[b].slice(0, len - k).copy_(torch::tensor(s, torch::kLong));
    mask[b].slice(0, len - k).fill_(1);
  }
  return {ids, mask};
}


}  // namespace quartet

#include "quartet/model/generation_parts.hpp"

#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <limits>
#include <mutex>

#ifdef QUARTET_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "quartet/core/check.hpp"
#include "quartet/model/decode_kernels.hpp"

namespace quartet {

namespace {

#ifdef QUARTET_WITH_CUDA
// The side stream generation runs on: one per device for the whole run. The caching allocator
// keeps freed blocks per stream, so a stream from the pool's rotation would find none of the
// last generation's blocks (cache, activations) and ask the driver for new memory each time.
c10::cuda::CUDAStream generation_stream(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(device);
  if (it == streams.end()) it = streams.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
  return it->second;
}
#endif

}  // namespace

// The next token of every row from logits [B, V], with HF's warpers in HF's order:
// temperature, then top-k, then top-p; then a draw from the remaining distribution.
torch::Tensor pick(torch::Tensor logits, const SamplingParams& p, at::Generator& gen) {
  // torch.argmax returns the first maximum, i.e. the lowest id on ties.
  if (p.vocab_limit > 0 && p.vocab_limit < logits.size(-1))
    logits = logits.narrow(-1, 0, p.vocab_limit);  // ids past the tokenizer's are never picked
  if (p.temperature == 0.0) return logits.argmax(-1);
  if (p.top_k <= 0 && logits.is_cuda() && decode_kernels_enabled() &&
      (logits.scalar_type() == torch::kFloat32 || logits.scalar_type() == torch::kBFloat16) && logits.dim() == 2 &&
      logits.stride(1) == 1) {
    // Plain sampling (PPO's) and top-p: the race below in one kernel, on the same Exp(1) draws,
    // top-p's nucleus found by a radix select instead of a sort of the vocabulary.
    auto race = torch::empty(logits.sizes(), logits.options().dtype(torch::kFloat32)).exponential_(1.0, gen);
    const auto nucleus = p.top_p < 1.0 ? top_p_keys(logits, p.temperature, p.top_p) : torch::Tensor();
    return sample_race(logits, race, p.temperature, nucleus);
  }
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
  // The exponential race: argmax_i p_i / E_i with E_i ~ Exp(1) is token i with probability
  // p_i. Unlike multinomial it needs no host-side bookkeeping, so it can sit in a CUDA graph.
  auto probs = logits.softmax(-1);
  auto race = torch::empty_like(probs).exponential_(1.0, gen);
  return probs.div_(race).argmax(-1);
}

// A generator of the prompt's device, seeded here, so that runs repeat without touching
// the global RNG state.
at::Generator seeded_generator(torch::Device dev, uint64_t seed) {
  at::Generator gen = at::globalContext().defaultGenerator(dev).clone();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  }
  return gen;
}

void check_sampling(Transformer& model, const torch::Tensor& prompt, const torch::Tensor& prompt_mask,
                    const SamplingParams& params) {
  QUARTET_CHECK(model->head() == Head::causal_lm, "generate: the model needs the causal_lm head");
  QUARTET_CHECK(prompt.dim() == 2 && prompt_mask.sizes() == prompt.sizes(),
                "generate: prompt and prompt_mask must both be [batch, tokens]");
  QUARTET_CHECK(params.max_new_tokens >= 0, "generate: max_new_tokens must not be negative");
  QUARTET_CHECK(params.min_new_tokens >= 0 && params.min_new_tokens <= params.max_new_tokens,
                "generate: min_new_tokens must be in [0, max_new_tokens]");
  QUARTET_CHECK(params.temperature >= 0.0, "generate: temperature must not be negative");
  QUARTET_CHECK(params.top_k >= 0, "generate: top_k must not be negative");
  QUARTET_CHECK(params.top_p > 0.0 && params.top_p <= 1.0, "generate: top_p must be in (0, 1]");
  QUARTET_CHECK(params.check_every > 0 && params.span_bucket > 0,
                "generate: check_every and span_bucket must be positive");
  QUARTET_CHECK(params.check_lag >= 0, "generate: check_lag must not be negative");
  const int64_t T = prompt.size(1), N = params.max_new_tokens, L = T + N;
  QUARTET_CHECK(L <= model->config().position_limit(),
                "generate: a " + std::to_string(T) + "-token prompt and " + std::to_string(N) +
                    " new tokens need " + std::to_string(L) + " positions, but the model has " +
                    std::to_string(model->config().position_limit()) + " (n_positions)");
  QUARTET_CHECK(params.decode_rows >= 0 && params.kv_block > 0 && params.kv_cache_tokens >= 0,
                "generate: decode_rows and kv_cache_tokens must not be negative, kv_block must be positive");
  QUARTET_CHECK(params.decode_rows == 0 || !params.keep_cache,
                "generate: paged decoding (decode_rows > 0) cannot hand the cache back (keep_cache)");
}

torch::Tensor banned_stop_ids(const SamplingParams& params, int64_t vocab_size, const torch::TensorOptions& long_opts) {
  if (params.min_new_tokens <= 0) return {};
  // Each id once (index_add_ would add a repeated id's -inf twice, harmlessly, but it is one
  // atomic more), and only ids the logits have.
  std::vector<int64_t> banned;
  for (int64_t id : params.stop_ids)
    if (id >= 0 && id < vocab_size && std::find(banned.begin(), banned.end(), id) == banned.end()) banned.push_back(id);
  return banned.empty() ? torch::Tensor() : torch::tensor(banned, long_opts);
}

SideStream::SideStream(torch::Device dev) : dev_(dev) {
#ifdef QUARTET_WITH_CUDA
  if (!dev.is_cuda()) return;
  auto caller = c10::cuda::getCurrentCUDAStream(dev.index());
  auto side = generation_stream(dev.index());
  at::cuda::CUDAEvent ready;
  ready.record(caller);
  ready.block(side);
  guard_ = std::make_unique<c10::cuda::CUDAStreamGuard>(side);
#endif
}

void SideStream::finish(const std::vector<torch::Tensor>& handed_back) {
#ifdef QUARTET_WITH_CUDA
  if (!guard_) return;
  auto side = c10::cuda::getCurrentCUDAStream(dev_.index());
  guard_.reset();
  auto caller = c10::cuda::getCurrentCUDAStream(dev_.index());
  for (const auto& t : handed_back)
    if (t.defined()) t.record_stream(caller);
  at::cuda::CUDAEvent finished;
  finished.record(side);
  finished.block(caller);
#else
  (void)handed_back;
#endif
}

HostCopy::HostCopy(const torch::Tensor& from)
    : host_(torch::empty(from.sizes(), from.options().device(torch::kCPU).pinned_memory(from.is_cuda()))) {
  host_.copy_(from, /*non_blocking=*/true);
#ifdef QUARTET_WITH_CUDA
  if (from.is_cuda()) landed_.record(c10::cuda::getCurrentCUDAStream(from.device().index()));
#endif
}

const torch::Tensor& HostCopy::wait() {
#ifdef QUARTET_WITH_CUDA
  if (landed_.isCreated()) landed_.synchronize();
#endif
  return host_;
}

bool StepGraphs::run(std::pair<int64_t, int64_t> key, const std::function<void()>& body, at::Generator& gen,
                     GenerationStats& stats) {
#ifdef QUARTET_WITH_CUDA
  if (use_) {
    auto it = graphs_.find(key);
    if (it != graphs_.end()) {
      it->second->replay();
      return true;
    }
    const auto t0 = std::chrono::steady_clock::now();
    body();  // the warm-up is a real step
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    graph->register_generator_state(gen);
    // Capture records without running, so the state is not advanced by it. Thread-local mode:
    // the watchdog and NCCL threads may keep querying their events meanwhile.
    graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    body();
    graph->capture_end();
    if (graphs_.empty()) pool_ = graph->pool();  // later graphs share the first one's memory pool
    graphs_.emplace(key, std::move(graph));
    stats.graphs_captured += 1;
    stats.capture_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return false;
  }
#else
  (void)gen, (void)stats, (void)key;
#endif
  body();
  return false;
}

}  // namespace quartet

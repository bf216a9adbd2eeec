#include "quartet/model/generation.hpp"

#include <algorithm>

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <deque>
#include <limits>

#include "quartet/core/check.hpp"
#include "quartet/model/decode_kernels.hpp"
#include "quartet/model/generation_parts.hpp"
#include "quartet/model/paged_generation.hpp"
#include "quartet/model/rollout_config.hpp"

namespace quartet {

namespace {

int64_t next_power_of_two(int64_t n) {
  int64_t b = 1;
  while (b < n) b *= 2;
  return b;
}

// Everything a decoding step reads and writes, allocated once for the whole batch so that a
// captured graph's addresses stay valid. Rows [0, rows) are the current batch; row r holds
// the sequence row_of[r] of the caller's batch.
struct DecodeState {
  torch::Tensor tok;        // [B] the token each row feeds next
  torch::Tensor pos;        // [B] its position (real tokens before it)
  torch::Tensor key_valid;  // [B, L] bool: cache slots the row may attend to
  torch::Tensor done;       // [B] bool: the row emitted a stop token
  torch::Tensor lengths;    // [B] tokens generated, the stop token included
  torch::Tensor hist;       // [B, N] the generated tokens (pad after the stop)
  torch::Tensor hist_mask;  // [B, N] 1 up to and including the stop token
  torch::Tensor row_of;     // [B] the caller's row
  torch::Tensor slot;       // [1] the cache slot of the token fed next (same for every row)
  torch::Tensor step;       // [1] the column of hist the next token goes to
  torch::Tensor stop_ids;   // [S]
  torch::Tensor banned_ids;  // [S'] the stop ids within the logits, masked before min_new_tokens
  KVCache cache;
  int64_t rows = 0;
};

// Sampling and bookkeeping after logits [rows, V]: where(alive, sampled, pad) into hist, the
// lengths and stops updated, the token fed next set; after a decoding step (move_positions)
// also the rows' positions and the cache slot moved on. Device operations only.
void advance(DecodeState& st, const torch::Tensor& logits, const SamplingParams& p, at::Generator& gen,
             bool move_positions) {
  const int64_t b = st.rows;
  if (st.banned_ids.defined()) {
    // min_new_tokens: -inf added to the stop ids' logits while fewer tokens than that are out
    // (a device-side condition on the step, so a captured graph serves every step).
    const double neg_inf = -std::numeric_limits<double>::infinity();
    auto penalty = torch::where(st.step < p.min_new_tokens, neg_inf, 0.0).to(logits.scalar_type());
    logits.index_add_(1, st.banned_ids, penalty.expand({b, st.banned_ids.size(0)}));
  }
  auto next = pick(logits, p, gen);
  if (st.tok.is_cuda() && decode_kernels_enabled()) {
    // All of the below in one kernel (model/decode_kernels.hpp).
    advance_decode(next.contiguous(), st.done, st.hist, st.hist_mask, st.lengths, st.tok,
                   p.stop_ids.empty() ? torch::Tensor() : st.stop_ids, st.step,
                   move_positions ? st.pos : torch::Tensor(), move_positions ? st.slot : torch::Tensor(), p.pad_id);
    return;
  }
  if (move_positions) {
    st.pos.narrow(0, 0, b).add_(1);
    st.slot.add_(1);
  }
  auto done = st.done.narrow(0, 0, b);
  auto alive = done.logical_not();
  next = torch::where(alive, next, p.pad_id);
  st.hist.narrow(0, 0, b).index_copy_(1, st.step, next.view({b, 1}));
  auto alive_long = alive.to(torch::kLong);
  st.hist_mask.narrow(0, 0, b).index_copy_(1, st.step, alive_long.view({b, 1}));
  st.lengths.narrow(0, 0, b).add_(alive_long);
  if (!p.stop_ids.empty())
    done.logical_or_(alive & (next.view({b, 1}) == st.stop_ids.view({1, -1})).any(1));
  st.tok.narrow(0, 0, b).copy_(next);
  st.step.add_(1);
}

// One decoding step: feed every row's token at the current slot, then advance. This is what a
// CUDA graph captures.
void decode_body(Transformer& model, DecodeState& st, int64_t span, const SamplingParams& p, at::Generator& gen,
                 int64_t host_length) {
  const int64_t b = st.rows;
  auto key_valid = st.key_valid.narrow(0, 0, b);
  // A row always sees the slot it writes (finished rows too, so their softmax stays finite).
  key_valid.index_fill_(1, st.slot, true);
  auto logits = model->decode_step(st.tok.narrow(0, 0, b), st.pos.narrow(0, 0, b), st.slot, key_valid, st.cache,
                                   span, host_length);
  advance(st, logits, p, gen, /*move_positions=*/true);
}

// The rows' results into the caller's order.
void flush(const DecodeState& st, torch::Tensor& tokens, torch::Tensor& mask, torch::Tensor& lengths) {
  auto rows = st.row_of.narrow(0, 0, st.rows);
  tokens.index_copy_(0, rows, st.hist.narrow(0, 0, st.rows));
  mask.index_copy_(0, rows, st.hist_mask.narrow(0, 0, st.rows));
  lengths.index_copy_(0, rows, st.lengths.narrow(0, 0, st.rows));
}

// The live rows to the front, the batch cut to `rows` (finished rows' results were flushed).
// every_row: the batch's rows are permuted, the finished ones behind the live ones, so that
// each keeps its prompt's cache slots (keep_cache; rows cut off before stay where they are);
// else only the first `rows` are written.
void compact(DecodeState& st, int64_t rows, bool every_row) {
  auto order = torch::argsort(st.done.narrow(0, 0, st.rows).to(torch::kInt), /*stable=*/true);
  auto keep = every_row ? order : order.narrow(0, 0, rows);
  const int64_t moved = keep.size(0);
  for (torch::Tensor* t : {&st.tok, &st.pos, &st.key_valid, &st.done, &st.lengths, &st.hist, &st.hist_mask,
                           &st.row_of})
    t->narrow(0, 0, moved).copy_(t->index_select(0, keep));
  for (auto* layers : {&st.cache.k, &st.cache.v})
    for (auto& t : *layers) t.narrow(0, 0, moved).copy_(t.index_select(0, keep));
  st.rows = rows;
}

// The decoder's state for a batch of B left-padded prompts of T tokens (mask [B, T]) and N new
// tokens, L = T + N slots; its int64 tensors made with long_opts.
DecodeState make_decode_state(Transformer& model, const torch::Tensor& mask, int64_t B, int64_t T, int64_t N,
                              int64_t L, const SamplingParams& params, const torch::TensorOptions& long_opts) {
  DecodeState st;
  st.rows = B;
  st.cache = model->make_cache(B, params.keep_cache ? std::max(L, params.cache_slots) : L);
  st.tok = torch::zeros({B}, long_opts);
  st.pos = mask.sum(1);  // positions count real tokens only
  st.key_valid = torch::zeros({B, L}, long_opts.dtype(torch::kBool));
  st.key_valid.narrow(1, 0, T).copy_(mask != 0);
  st.done = torch::zeros({B}, long_opts.dtype(torch::kBool));
  st.lengths = torch::zeros({B}, long_opts);
  st.hist = torch::full({B, N}, params.pad_id, long_opts);
  st.hist_mask = torch::zeros({B, N}, long_opts);
  st.row_of = torch::arange(B, long_opts);
  st.slot = torch::full({1}, T, long_opts);
  st.step = torch::zeros({1}, long_opts);
  st.stop_ids = torch::tensor(params.stop_ids.empty() ? std::vector<int64_t>{-1} : params.stop_ids, long_opts);
  st.banned_ids = banned_stop_ids(params, model->config().vocab_size, long_opts);
  return st;
}

// The generated tokens in the caller's row order ([B, N], [B, N], [B]).
struct Outputs {
  torch::Tensor tokens, mask, lengths;
};

// The host's checks: at step k (every check_every steps, once a row can have stopped: before
// min_new_tokens tokens none can) the count of live rows leaves the device without the host
// waiting; at step k + check_lag the host reads it and acts. Rows only ever finish, so the
// count bounds the rows live then: a batch cut to it keeps every live row. The steps a check
// is taken and acted on depend on k alone, so runs repeat.
struct Check {
  int64_t due = 0;  // the step it is acted on
  HostCopy live;    // the count
};

// The count of live rows, on its way to the host, to be acted on at step `due`.
Check start_check(const DecodeState& st, int64_t due) {
  return Check{due, HostCopy(st.done.narrow(0, 0, st.rows).logical_not().sum())};
}

// Acts on a check: false when no row is live (decoding stops); else the batch is cut to the
// live rows' power-of-two bucket when that is smaller.
bool act_on_check(Check c, DecodeState& st, const SamplingParams& params, Outputs& out, GenerationStats& stats) {
  const int64_t live = c.live.wait().item<int64_t>();
  stats.checks += 1;
  if (live == 0) return false;
  const int64_t rows = next_power_of_two(live);
  if (rows < st.rows) {
    flush(st, out.tokens, out.mask, out.lengths);
    compact(st, rows, params.keep_cache);
    stats.compactions += 1;
  }
  return true;
}

// Decoding steps 1 .. N-1 (the prompt's pass gave the first token), with the host's checks.
void decode_steps(Transformer& model, DecodeState& st, const SamplingParams& params, at::Generator& gen,
                  StepGraphs& graphs, int64_t T, int64_t N, int64_t L, Outputs& out, GenerationStats& stats) {
  const bool stops = !params.stop_ids.empty();
  std::deque<Check> checks;
  for (int64_t k = 1; k < N; ++k) {
    if (stops && k > params.min_new_tokens && k % params.check_every == 0)
      checks.push_back(start_check(st, k + params.check_lag));
    if (!checks.empty() && checks.front().due == k) {
      Check c = std::move(checks.front());
      checks.pop_front();
      if (!act_on_check(std::move(c), st, params, out, stats)) break;
    }
    const int64_t slot = T + k - 1;  // where this step's token goes
    const int64_t span = std::min(L, (slot + 1 + params.span_bucket - 1) / params.span_bucket * params.span_bucket);
    const bool replayed = graphs.run(
        {st.rows, span}, [&] { decode_body(model, st, span, params, gen, slot + 1); }, gen, stats);
    stats.steps += 1;
    stats.graph_replays += replayed;
    stats.row_steps += st.rows;
  }
}

// keep_cache: the cache handed back in the caller's row order, its length the prompt's.
void hand_back_cache(DecodeState& st, const GenerationStats& stats, int64_t T, Generation& g) {
  // Row r of the cache holds the caller's row row_of[r] (a permutation: compact moved every
  // row); back to the caller's order where a compaction changed it, in place, a layer at a
  // time (one layer's copy on top of the cache, not a second cache).
  if (stats.compactions > 0) {
    auto back = torch::argsort(st.row_of);
    for (auto* layers : {&st.cache.k, &st.cache.v})
      for (auto& t : *layers) t.copy_(t.index_select(0, back));
  }
  g.cache = st.cache;
  g.cache.length = T;
}

// The prompts' forward pass into slots [0, T) of `cache`; the logits [B, V] of each row's last
// token. Rows in groups of `group` identical prompts: the pass runs on each group's first row,
// into a cache of T slots, whose keys and values are then copied to every row of the group.
torch::Tensor prompt_logits(Transformer& model, const torch::Tensor& tokens, const torch::Tensor& mask, KVCache& cache,
                            int64_t group) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (group <= 1 || B % group != 0) return model->next_token_logits(tokens, mask, &cache);
  const auto first = torch::arange(0, B, group, tokens.options());
  KVCache once = model->make_cache(B / group, T);
  const auto logits = model->next_token_logits(tokens.index_select(0, first), mask.index_select(0, first), &once);
  // Each group's rows as one dimension, the pass's rows broadcast over it: one copy, no temporary.
  auto spread = [&](torch::Tensor& to, const torch::Tensor& from) {
    auto groups = to.narrow(2, 0, T).unflatten(0, {B / group, group});
    groups.copy_(from.unsqueeze(1).expand_as(groups));
  };
  for (size_t l = 0; l < cache.k.size(); ++l) {
    spread(cache.k[l], once.k[l]);
    spread(cache.v[l], once.v[l]);
  }
  cache.length = once.length;
  return logits.repeat_interleave(group, 0);
}

}  // namespace

SamplingParams sampling_params(const RolloutConfig& rollout) {
  SamplingParams sp;
  sp.temperature = rollout.temperature;
  sp.top_k = rollout.top_k;
  sp.top_p = rollout.top_p;
  sp.max_new_tokens = rollout.max_new_tokens;
  sp.min_new_tokens = rollout.min_new_tokens;
  sp.decode_rows = rollout.decode_rows;
  sp.kv_block = rollout.kv_block;
  sp.kv_cache_tokens = rollout.kv_cache_tokens;
  return sp;
}

Generation generate(Transformer& model, const torch::Tensor& prompt, const torch::Tensor& prompt_mask,
                    const SamplingParams& params) {
  check_sampling(model, prompt, prompt_mask, params);
  if (params.decode_rows > 0 && prompt.size(0) > 0 && params.max_new_tokens > 0)
    return generate_paged(model, prompt, prompt_mask, params);
  torch::NoGradGuard no_grad;

  const auto dev = prompt.device();
  const int64_t B = prompt.size(0), T = prompt.size(1), N = params.max_new_tokens, L = T + N;
  auto tokens = prompt.to(torch::kLong);
  auto mask = prompt_mask.to(dev).to(torch::kLong);
  Generation g;
  if (N == 0 || B == 0) {
    g.tokens = tokens;
    g.attention_mask = mask;
    g.new_lengths = torch::zeros({B}, tokens.options());
    return g;
  }

  SideStream side(dev);
  StepGraphs graphs(params.cuda_graphs && dev.is_cuda() && !model->decode_needs_host_length(L));

  at::Generator gen = seeded_generator(dev, params.seed);
  const auto long_opts = tokens.options();
  DecodeState st = make_decode_state(model, mask, B, T, N, L, params, long_opts);
  Outputs out{torch::full({B, N}, params.pad_id, long_opts), torch::zeros({B, N}, long_opts),
              torch::zeros({B}, long_opts)};

  // The prompt in one pass (slots [0, T)), then its first token.
  advance(st, prompt_logits(model, tokens, mask, st.cache, params.prompt_group), params, gen, /*move_positions=*/false);
  GenerationStats& stats = g.stats;
  decode_steps(model, st, params, gen, graphs, T, N, L, out, stats);
  flush(st, out.tokens, out.mask, out.lengths);
  st.cache.length = L;
  if (params.keep_cache) hand_back_cache(st, stats, T, g);

  // Without stop tokens every row ran N steps; with them, the columns after the longest
  // sequence are padding only and are cut, as if decoding had stopped there.
  int64_t width = N;
  if (!params.stop_ids.empty()) width = std::max<int64_t>(1, out.lengths.max().item<int64_t>());
  g.tokens = torch::cat({tokens, out.tokens.narrow(1, 0, width)}, 1);
  g.attention_mask = torch::cat({mask, out.mask.narrow(1, 0, width)}, 1);
  g.new_lengths = out.lengths;
  // The cache was made on the side stream and is read next on the caller's.
  std::vector<torch::Tensor> handed_back(g.cache.k.begin(), g.cache.k.end());
  handed_back.insert(handed_back.end(), g.cache.v.begin(), g.cache.v.end());
  side.finish(handed_back);
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

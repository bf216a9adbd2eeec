#include "quartet/model/paged_generation.hpp"

#include <torch/types.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/model/generation_parts.hpp"
#include "quartet/model/paged_cache.hpp"

namespace quartet {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Everything a paged step reads and writes on the device, allocated once so that a captured
// graph's addresses stay valid. Rows are decoding rows; "sequences" are the caller's rows.
struct PagedState {
  PagedKV cache;               // the pool, the rows' block tables and contexts
  torch::Tensor tok, pos;      // [R] the token each row feeds next, and its position
  torch::Tensor made;          // [R] the new tokens of the row's sequence so far
  torch::Tensor seq;           // [R] the sequence it holds (S, the dump row, when free)
  torch::Tensor tokens, mask;  // [S + 1, N] new tokens by sequence; row S takes idle rows' writes
  torch::Tensor lengths;       // [S + 1]
  torch::Tensor stop_ids;      // [stops], undefined for none
  torch::Tensor banned_ids;    // min_new_tokens' stop ids (banned_stop_ids)
};

// A step's tokens next [R] into their sequences; rows whose sequence ends (a stop token, or N new
// tokens) go idle (context 0). Device operations only.
void record(PagedState& st, const torch::Tensor& next) {
  const int64_t N = st.tokens.size(1), dump = st.tokens.size(0) - 1;
  auto& context = st.cache.context;
  const auto live = context > 0;
  const auto live_long = live.to(torch::kLong);
  const auto row = torch::where(live, st.seq, dump);
  const auto at = row * N + st.made.clamp_max(N - 1);
  st.tokens.view({-1}).index_copy_(0, at, next);
  st.mask.view({-1}).index_copy_(0, at, live_long);
  st.made.add_(live_long);
  st.lengths.index_copy_(0, row, st.made);
  auto ends = st.made >= N;
  if (st.stop_ids.defined()) ends = ends | (next.view({-1, 1}) == st.stop_ids.view({1, -1})).any(1);
  const auto goes_on = live & ends.logical_not();
  st.tok.copy_(torch::where(live, next, st.tok));
  st.pos.add_(goes_on.to(torch::kLong));
  context.copy_(torch::where(goes_on, context + 1, 0));
}

// One decoding step of every row: what a CUDA graph captures.
void paged_step(Transformer& model, PagedState& st, int64_t span, const SamplingParams& p, at::Generator& gen) {
  auto logits = model->decode_step_paged(st.tok, st.pos, st.cache, span);
  if (st.banned_ids.defined()) {
    // min_new_tokens, row by row: -inf on the stop ids while the row has fewer new tokens.
    const int64_t R = st.tok.size(0);
    const double neg_inf = -std::numeric_limits<double>::infinity();
    auto penalty = torch::where(st.made < p.min_new_tokens, neg_inf, 0.0).to(logits.scalar_type());
    logits.index_add_(1, st.banned_ids, penalty.view({R, 1}).expand({R, st.banned_ids.size(0)}));
  }
  record(st, pick(logits, p, gen).contiguous());
}

// Host values as a device tensor of `dtype`, through pinned memory on CUDA so that the copy
// queues behind the device's work instead of draining it.
template <typename T>
torch::Tensor upload(const std::vector<T>& values, std::vector<int64_t> shape, torch::ScalarType dtype,
                     torch::Device dev) {
  auto host = torch::empty(shape, torch::TensorOptions().dtype(dtype).pinned_memory(dev.is_cuda()));
  std::copy(values.begin(), values.end(), host.data_ptr<T>());
  return dev.is_cuda() ? host.to(dev, /*non_blocking=*/true) : host;
}

// A prompt in the pool: its blocks hold slots [0, length - 1) of its `length` tokens (the last
// is fed again by each of its rows' first step), held by the prompt while any of its sequences
// waits.
struct ResidentPrompt {
  std::vector<int32_t> blocks;
};

// A decoding row as the host sees it.
struct Row {
  int64_t seq = -1;    // -1: free
  int64_t start = 0;   // the step that feeds its prompt's last token (its first)
  std::vector<int32_t> blocks;
  bool used = false;   // has held a sequence before (admitting into it again is a refill)
};

// The host's side of continuous batching: which sequence each row holds, which blocks it has,
// what waits; and the device writes that keep the PagedState in step with it.
class Scheduler {
 public:
  Scheduler(Transformer& model, const torch::Tensor& tokens, const torch::Tensor& mask, int64_t group,
            const SamplingParams& p, PagedState& st, BlockPool& pool, GenerationStats& stats)
      : model_(model), tokens_(tokens), group_(group), N_(p.max_new_tokens), pad_(p.pad_id),
        span_bucket_(p.span_bucket), st_(st), pool_(pool), stats_(stats) {
    const auto lengths = mask.sum(1).to(torch::kCPU).contiguous();
    const auto last = tokens.select(1, tokens.size(1) - 1).to(torch::kCPU).contiguous();
    for (int64_t s = 0; s < tokens.size(0); ++s) {
      lengths_.push_back(lengths.data_ptr<int64_t>()[s]);
      last_.push_back(last.data_ptr<int64_t>()[s]);
      QUARTET_CHECK(lengths_.back() >= 1, "generate: paged decoding needs a prompt token in every row (row " +
                                              std::to_string(s) + " has none)");
      queue_.push_back(s);
      queued_[s / group_] += 1;
    }
    rows_.resize(static_cast<size_t>(st.tok.size(0)));
    block_size_ = st.cache.block_size;
    max_slots_ = st.cache.table.size(1) * block_size_;
  }

  // Before step k runs: retire the rows whose sequence ended (contexts read back at step `seen`;
  // none given at the first act), give every live row its blocks for the steps before `until`,
  // admit waiting sequences into free rows, and queue the device writes.
  void act(int64_t k, int64_t until, const std::vector<int64_t>* context, int64_t seen) {
    if (context) retire(*context, seen);
    grow(until);
    admit(k, until);
    write_rows();
    for (int32_t b : deferred_) pool_.release(b);  // after the copies that read them are queued
    deferred_.clear();
    stats_.peak_blocks = std::max(stats_.peak_blocks, pool_.blocks() - 1 - pool_.free_blocks());
  }

  bool finished() const { return queue_.empty() && live_rows() == 0; }

  int64_t live_rows() const {
    return std::count_if(rows_.begin(), rows_.end(), [](const Row& r) { return r.seq >= 0; });
  }

  // A bound on every row's context at step k, in span_bucket multiples.
  int64_t span_at(int64_t k) const {
    int64_t most = 1;
    for (const Row& r : rows_)
      if (r.seq >= 0) most = std::max(most, std::min(prompt_length(r) + k - r.start, prompt_length(r) + N_ - 1));
    return std::min(max_slots_, ceil_div(most, span_bucket_) * span_bucket_);
  }

 private:
  int64_t prompt_length(const Row& r) const { return lengths_[static_cast<size_t>(r.seq)]; }

  // Blocks row r needs for the steps before `until` (the slot a step j writes is
  // length - 1 + j - start, and no sequence writes past length + N - 2).
  int64_t blocks_until(const Row& r, int64_t until) const {
    const int64_t n = prompt_length(r);
    const int64_t last_slot = std::min(n - 2 + until - r.start, n + N_ - 2);
    return std::min(last_slot / block_size_ + 1, max_slots_ / block_size_);
  }

  void retire(const std::vector<int64_t>& context, int64_t seen) {
    for (size_t r = 0; r < rows_.size(); ++r)
      if (rows_[r].seq >= 0 && rows_[r].start <= seen && context[r] == 0) free_row(r);
  }

  void free_row(size_t r) {
    for (int32_t b : rows_[r].blocks) pool_.release(b);
    rows_[r].seq = -1;
    rows_[r].blocks.clear();
    changed_.insert(r);
  }

  // Every live row's blocks through `until`; the youngest rows go back to the queue while the
  // pool cannot give them all.
  void grow(int64_t until) {
    for (;;) {
      int64_t missing = 0;
      for (const Row& r : rows_)
        if (r.seq >= 0) missing += std::max<int64_t>(0, blocks_until(r, until) - static_cast<int64_t>(r.blocks.size()));
      if (missing <= pool_.free_blocks()) break;
      preempt_youngest();
    }
    for (size_t r = 0; r < rows_.size(); ++r) {
      Row& row = rows_[r];
      if (row.seq < 0) continue;
      const int64_t want = blocks_until(row, until);
      if (static_cast<int64_t>(row.blocks.size()) < want) changed_tables_.insert(r);
      while (static_cast<int64_t>(row.blocks.size()) < want) row.blocks.push_back(pool_.take());
    }
  }

  void preempt_youngest() {
    size_t young = rows_.size();
    for (size_t r = 0; r < rows_.size(); ++r)
      if (rows_[r].seq >= 0 && (young == rows_.size() || rows_[r].start >= rows_[young].start)) young = r;
    QUARTET_CHECK(young < rows_.size(), "generate: the KV pool cannot hold one sequence (kv_cache_tokens too small)");
    const int64_t s = rows_[young].seq;
    free_row(young);
    queue_.push_front(s);
    queued_[s / group_] += 1;
    restarted_.push_back(s);
    stats_.preemptions += 1;
  }

  // Waiting sequences into free rows, in order, while the pool has their blocks.
  void admit(int64_t k, int64_t until) {
    std::vector<std::pair<int64_t, std::vector<int32_t>>> prefill;  // prompts that enter the pool now, their blocks
    for (size_t r = 0; r < rows_.size() && !queue_.empty(); ++r) {
      if (rows_[r].seq >= 0) continue;
      const int64_t s = queue_.front(), p = s / group_, n = lengths_[static_cast<size_t>(s)];
      const bool resident = prompts_.count(p) > 0;
      const int64_t shared = (n - 1) / block_size_;
      Row row;
      row.seq = s;
      row.start = k;
      const int64_t need = blocks_until(row, until) - shared + (resident ? 0 : ceil_div(n - 1, block_size_));
      if (need > pool_.free_blocks()) {
        QUARTET_CHECK(live_rows() > 0, "generate: the KV pool (" + std::to_string(pool_.blocks() - 1) +
                                           " blocks) cannot hold sequence " + std::to_string(s));
        break;
      }
      if (!resident) {
        ResidentPrompt& pr = prompts_[p];
        for (int64_t b = 0; b < ceil_div(n - 1, block_size_); ++b) pr.blocks.push_back(pool_.take());
        if (n > 1) prefill.emplace_back(p, pr.blocks);
      }
      const ResidentPrompt& pr = prompts_[p];
      for (int64_t b = 0; b < shared; ++b) {
        pool_.hold(pr.blocks[static_cast<size_t>(b)]);
        row.blocks.push_back(pr.blocks[static_cast<size_t>(b)]);
      }
      if ((n - 1) % block_size_ != 0) {  // the prompt's last block, partly filled: the row's own copy
        row.blocks.push_back(pool_.take());
        copies_.emplace_back(pr.blocks[static_cast<size_t>(shared)], row.blocks.back());
      }
      while (static_cast<int64_t>(row.blocks.size()) < blocks_until(row, until)) row.blocks.push_back(pool_.take());
      queue_.pop_front();
      if (--queued_[p] == 0) {  // no sequence of the prompt waits: its own hold goes
        deferred_.insert(deferred_.end(), pr.blocks.begin(), pr.blocks.end());
        prompts_.erase(p);
      }
      if (rows_[r].used) stats_.refills += 1;
      row.used = true;
      rows_[r] = std::move(row);
      changed_.insert(r);
    }
    run_prefill(prefill);
    copy_blocks();
  }

  // The prompts' forward pass, packed (no padding, each prompt attending within itself),
  // writing their keys and values straight into their blocks. Slots 0 .. n - 2 of a prompt of
  // n tokens: its rows' first step feeds token n - 1. Packed from the host's lengths, not by
  // pack_rows, whose count of the mask waits for the device in the middle of decoding.
  void run_prefill(const std::vector<std::pair<int64_t, std::vector<int32_t>>>& prompts) {
    if (prompts.empty()) return;
    const auto dev = tokens_.device();
    const int64_t T = tokens_.size(1);
    std::vector<int64_t> at, positions, slots, lengths;  // at: flat indices into the [S, T] prompts
    std::vector<int32_t> cu{0};
    for (const auto& [p, blocks] : prompts) {
      const int64_t s = p * group_, n = lengths_[static_cast<size_t>(s)];
      for (int64_t j = 0; j + 1 < n; ++j) {
        at.push_back(s * T + T - n + j);
        positions.push_back(j);
        slots.push_back(static_cast<int64_t>(blocks[static_cast<size_t>(j / block_size_)]) * block_size_ +
                        j % block_size_);
      }
      lengths.push_back(n - 1);
      cu.push_back(cu.back() + static_cast<int32_t>(n - 1));
    }
    const auto N = static_cast<int64_t>(at.size());
    PackedSequences packed;
    packed.ids = tokens_.reshape({-1}).index_select(0, upload(at, {N}, torch::kLong, dev)).view({1, N});
    packed.positions = upload(positions, {1, N}, torch::kLong, dev);
    packed.cu_seqlens = upload(cu, {static_cast<int64_t>(cu.size())}, torch::kInt, dev);
    packed.lengths = lengths;
    packed.max_len = *std::max_element(lengths.begin(), lengths.end());
    model_->fill_paged(packed, st_.cache, upload(slots, {N}, torch::kLong, dev));
  }

  // Each admitted row's copy of its prompt's partly filled last block.
  void copy_blocks() {
    if (copies_.empty()) return;
    std::vector<int64_t> from, to;
    for (auto [a, b] : copies_) from.push_back(a), to.push_back(b);
    const auto dev = tokens_.device();
    const auto n = static_cast<int64_t>(copies_.size());
    const auto src = upload(from, {n}, torch::kLong, dev), dst = upload(to, {n}, torch::kLong, dev);
    for (size_t l = 0; l < st_.cache.k.size(); ++l)
      for (auto* pool : {&st_.cache.k[l], &st_.cache.v[l]}) pool->index_copy_(0, dst, pool->index_select(0, src));
    copies_.clear();
  }

  // The changed rows' state and tables, and the restarted sequences' cleared outputs.
  void write_rows() {
    const auto dev = tokens_.device();
    const int64_t S = tokens_.size(0), width = st_.cache.table.size(1);
    for (size_t r : changed_) changed_tables_.insert(r);
    if (!changed_.empty()) {
      std::vector<int64_t> idx, values;  // values: tok, pos, context, made, seq for each row
      for (size_t r : changed_) {
        const Row& row = rows_[r];
        const bool held = row.seq >= 0;
        idx.push_back(static_cast<int64_t>(r));
        const int64_t n = held ? prompt_length(row) : 0;
        for (int64_t v : {held ? last_[static_cast<size_t>(row.seq)] : 0, held ? n - 1 : 0, n, int64_t{0},
                          held ? row.seq : S})
          values.push_back(v);
      }
      const auto m = static_cast<int64_t>(idx.size());
      const auto at = upload(idx, {m}, torch::kLong, dev);
      const auto v = upload(values, {m, 5}, torch::kLong, dev);
      torch::Tensor* fields[] = {&st_.tok, &st_.pos, &st_.cache.context, &st_.made, &st_.seq};
      for (int64_t f = 0; f < 5; ++f) fields[f]->index_copy_(0, at, v.select(1, f));
    }
    if (!changed_tables_.empty()) {
      std::vector<int64_t> idx;
      std::vector<int32_t> table;
      for (size_t r : changed_tables_) {
        idx.push_back(static_cast<int64_t>(r));
        auto blocks = rows_[r].blocks;
        blocks.resize(static_cast<size_t>(width), 0);
        table.insert(table.end(), blocks.begin(), blocks.end());
      }
      const auto m = static_cast<int64_t>(idx.size());
      st_.cache.table.index_copy_(0, upload(idx, {m}, torch::kLong, dev), upload(table, {m, width}, torch::kInt, dev));
    }
    if (!restarted_.empty()) {
      const auto at = upload(restarted_, {static_cast<int64_t>(restarted_.size())}, torch::kLong, dev);
      st_.tokens.index_fill_(0, at, pad_);
      st_.mask.index_fill_(0, at, 0);
      st_.lengths.index_fill_(0, at, 0);
    }
    changed_.clear();
    changed_tables_.clear();
    restarted_.clear();
  }

  Transformer& model_;
  torch::Tensor tokens_;  // [S, T] the left-padded prompts
  int64_t group_, N_, pad_, span_bucket_;
  PagedState& st_;
  BlockPool& pool_;
  GenerationStats& stats_;
  int64_t block_size_ = 0, max_slots_ = 0;
  std::vector<int64_t> lengths_, last_;  // each sequence's prompt tokens, and its last one
  std::vector<Row> rows_;
  std::deque<int64_t> queue_;            // waiting sequences
  std::map<int64_t, int64_t> queued_;    // waiting sequences of each prompt
  std::map<int64_t, ResidentPrompt> prompts_;
  std::set<size_t> changed_, changed_tables_;  // rows whose state (and table), or table, changed
  std::vector<int64_t> restarted_;             // preempted sequences, their outputs to clear
  std::vector<std::pair<int64_t, int64_t>> copies_;  // (prompt block, row block)
  std::vector<int32_t> deferred_;                     // prompt holds released after this act
};

PagedState make_paged_state(Transformer& model, int64_t rows, int64_t max_blocks, int64_t blocks, int64_t block_size,
                            int64_t S, const SamplingParams& p, const torch::TensorOptions& long_opts) {
  PagedState st;
  st.cache = model->make_paged_cache(rows, max_blocks, blocks, block_size);
  st.tok = torch::zeros({rows}, long_opts);
  st.pos = torch::zeros({rows}, long_opts);
  st.made = torch::zeros({rows}, long_opts);
  st.seq = torch::full({rows}, S, long_opts);
  st.tokens = torch::full({S + 1, p.max_new_tokens}, p.pad_id, long_opts);
  st.mask = torch::zeros({S + 1, p.max_new_tokens}, long_opts);
  st.lengths = torch::zeros({S + 1}, long_opts);
  if (!p.stop_ids.empty()) st.stop_ids = torch::tensor(p.stop_ids, long_opts);
  st.banned_ids = banned_stop_ids(p, model->config().vocab_size, long_opts);
  return st;
}

// Which rows are live (their contexts), on its way to the host: taken at step `issued`, acted on
// at step `due`.
struct ContextCheck {
  int64_t issued = 0, due = 0;
  HostCopy context;
};

}  // namespace

Generation generate_paged(Transformer& model, const torch::Tensor& prompt, const torch::Tensor& prompt_mask,
                          const SamplingParams& params) {
  torch::NoGradGuard no_grad;
  const auto dev = prompt.device();
  const int64_t S = prompt.size(0), T = prompt.size(1), N = params.max_new_tokens;
  const auto tokens = prompt.to(torch::kLong);
  const auto mask = prompt_mask.to(dev).to(torch::kLong);
  const int64_t group = params.prompt_group > 1 && S % params.prompt_group == 0 ? params.prompt_group : 1;
  const int64_t R = std::min(params.decode_rows, S), bs = params.kv_block;
  // A row writes at most slots 0 .. T + N - 2; a lone sequence always fits the pool (so
  // preemption always ends).
  const int64_t max_blocks = paged_row_blocks(T, N, bs);
  const int64_t blocks = paged_pool_blocks(R, T, N, bs, params.kv_cache_tokens);

  SideStream side(dev);
  StepGraphs graphs(params.cuda_graphs && dev.is_cuda());
  at::Generator gen = seeded_generator(dev, params.seed);
  PagedState st = make_paged_state(model, R, max_blocks, blocks, bs, S, params, tokens.options());
  BlockPool pool(blocks);
  Generation g;
  GenerationStats& stats = g.stats;
  stats.pool_blocks = blocks - 1;
  Scheduler sched(model, tokens, mask, group, params, st, pool, stats);

  // Acts come every check_every steps, each check_lag steps (at least 1) after its check.
  const int64_t every = params.check_every, lag = std::max<int64_t>(1, params.check_lag);
  sched.act(0, every + lag + 1, nullptr, -1);
  std::deque<ContextCheck> checks;
  // Each sequence takes at most N + 1 steps a try; preemption restarts are bounded by the pool.
  const int64_t step_limit = (S + 1) * (N + 1) * 4 + 1000;
  for (int64_t k = 0;; ++k) {
    if (!checks.empty() && checks.front().due <= k) {
      ContextCheck c = std::move(checks.front());
      checks.pop_front();
      const torch::Tensor& seen = c.context.wait();
      const std::vector<int64_t> context(seen.data_ptr<int64_t>(), seen.data_ptr<int64_t>() + seen.numel());
      stats.checks += 1;
      sched.act(k, k + every + 1, &context, c.issued);
      if (sched.finished()) break;
    }
    if (k > 0 && k % every == 0) checks.push_back(ContextCheck{k, k + lag, HostCopy(st.cache.context)});
    QUARTET_CHECK(k < step_limit, "generate: paged decoding made no progress in " + std::to_string(k) + " steps");
    const int64_t span = sched.span_at(k);
    stats.graph_replays += graphs.run({R, span}, [&] { paged_step(model, st, span, params, gen); }, gen, stats);
    stats.steps += 1;
    stats.row_steps += sched.live_rows();
  }

  // With stop tokens the columns after the longest sequence are padding only and are cut.
  const auto lengths = st.lengths.narrow(0, 0, S);
  int64_t width = N;
  if (!params.stop_ids.empty()) width = std::max<int64_t>(1, lengths.max().item<int64_t>());
  g.tokens = torch::cat({tokens, st.tokens.narrow(0, 0, S).narrow(1, 0, width)}, 1);
  g.attention_mask = torch::cat({mask, st.mask.narrow(0, 0, S).narrow(1, 0, width)}, 1);
  g.new_lengths = lengths.clone();
  side.finish();
  return g;
}

}  // namespace quartet

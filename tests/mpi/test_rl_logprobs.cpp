// The actions' log-probs describe the distribution generation sampled them from
// (engine/experience.hpp SamplingView): only the tokenizer's ids (the first vocab_limit logits) and
// the logits divided by the temperature. Checked on a small random causal LM against
// log_softmax written out here, against the model's own distribution (which a narrower
// vocabulary can only make more likely), and through the micro-batched scoring path; and on
// Hugging Face's tiny reference models of every family (fixture: tests/parity/make_models.py),
// every form of the log-probs against HF's own.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/engine/experience.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/model/model_config.hpp"
#include "quartet/model/safetensors.hpp"
#include "quartet/shard/sharded_model.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_rl_logprobs {

constexpr int64_t kVocab = 53, kLimit = 40, kB = 3, kP = 4, kA = 5;

ModelConfig tiny_llama() {
  ModelConfig m;
  m.model_type = "llama";
  m.vocab_size = kVocab;
  m.hidden_size = 24;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.intermediate_size = 37;
  m.max_positions = 64;
  m.activation = "silu";
  m.complete("test config");
  return m;
}

// kB rows of kP prompt and kA action tokens below kLimit; row 2 stopped after 2 actions and is
// padded with id 50 (past the limit, as a model's pad id may be), masked out.
RolloutBatch rollouts() {
  auto gen = at::detail::createCPUGenerator(5);
  RolloutBatch b;
  b.sequences = torch::randint(1, kLimit, {kB, kP + kA}, gen, torch::kLong);
  b.attention_mask = torch::ones({kB, kP + kA}, torch::kLong);
  b.action_mask = torch::ones({kB, kA}, torch::kLong);
  b.sequences[2].narrow(0, kP + 2, kA - 2).fill_(50);
  b.attention_mask[2].narrow(0, kP + 2, kA - 2).fill_(0);
  b.action_mask[2].narrow(0, 2, kA - 2).fill_(0);
  return b;
}

class RlLogprobs : public ::testing::Test {
 protected:
  void SetUp() override {
    group_ = make_mpi_collectives("rl_logprobs", {test::world().rank()}, MPI_COMM_SELF, nullptr);
    model_ = std::make_unique<ShardedModel>(tiny_llama(), Head::causal_lm, *group_, ShardOptions{},
                                            source_random(tiny_llama(), 3, torch::kCPU));
  }
  std::unique_ptr<Collectives> group_;
  std::unique_ptr<ShardedModel> model_;
};

TEST_F(RlLogprobs, OverTheTokenizersIdsAtTheTemperature) {
  torch::NoGradGuard no_grad;
  const RolloutBatch b = rollouts();
  const SamplingView view{kLimit, 0.7};
  torch::Tensor entropy;
  const auto got = action_logprobs(*model_, b, view, &entropy);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{kB, kA}));

  const auto logits = model_->forward(b.sequences, b.attention_mask).narrow(1, kP - 1, kA).to(torch::kDouble);
  const auto scaled = logits.narrow(-1, 0, kLimit) / 0.7;
  const auto logp_all = torch::log_softmax(scaled, -1);
  const auto actions = b.sequences.narrow(1, kP, kA).clamp_max(kLimit - 1);
  const auto expected = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1);
  const auto mask = b.action_mask.to(torch::kBool);
  EXPECT_TRUE(torch::allclose(got.to(torch::kDouble).masked_select(mask), expected.masked_select(mask), 1e-5, 1e-6))
      << got << "\n" << expected;
  EXPECT_TRUE(torch::isfinite(got).all().item<bool>()) << "a padding id past the limit must not break the gather";
  const auto expected_entropy = -(logp_all.exp() * logp_all).sum(-1);
  EXPECT_TRUE(torch::allclose(entropy.to(torch::kDouble), expected_entropy, 1e-5, 1e-6));

  // At temperature 1 the narrower vocabulary only moves probability onto the kept ids: every
  // action is strictly more likely than under the model's whole distribution.
  const auto narrow = action_logprobs(*model_, b, SamplingView{kLimit, 1.0});
  const auto whole = action_logprobs(*model_, b, SamplingView{});
  EXPECT_TRUE((narrow.masked_select(mask) > whole.masked_select(mask)).all().item<bool>());
  const auto whole_expected = torch::log_softmax(logits, -1)
                                  .gather(-1, b.sequences.narrow(1, kP, kA).unsqueeze(-1))
                                  .squeeze(-1);
  EXPECT_TRUE(torch::allclose(whole.to(torch::kDouble).masked_select(mask), whole_expected.masked_select(mask), 1e-5,
                              1e-6));

  // The scoring path (micro-batches of 2 rows) gives the same.
  const auto scored = score_logprobs(*model_, b, 2, view);
  EXPECT_TRUE(torch::allclose(scored.masked_select(mask), got.masked_select(mask), 1e-5, 1e-6));
}

// Attention without a mask where no padding comes between real tokens: rows that stopped
// early (trailing), and left-padded prompts too (around, by the shift): the same log-probs and
// values of the real actions as with the mask. A hole in a row makes the batch need its mask.
TEST_F(RlLogprobs, WithoutAMaskWherePaddingAllowsIt) {
  torch::NoGradGuard no_grad;
  const RolloutBatch b = rollouts();
  RolloutBatch left = b;  // rows 0 and 2 left-padded (row 2 also stopped early)
  left.attention_mask = b.attention_mask.clone();
  left.attention_mask[0].narrow(0, 0, 2).fill_(0);
  left.attention_mask[2][0] = 0;
  RolloutBatch hole = b;
  hole.attention_mask = b.attention_mask.clone();
  hole.attention_mask[0][kP + 1] = 0;  // a masked token between real ones
  RolloutBatch hole_left = left;  // padding first, then a hole
  hole_left.attention_mask = left.attention_mask.clone();
  hole_left.attention_mask[0][kP + 1] = 0;
  EXPECT_EQ(padding_layout(b), PaddingLayout::trailing);
  EXPECT_EQ(padding_layout(left), PaddingLayout::around);
  EXPECT_EQ(padding_layout(hole), PaddingLayout::anywhere);
  EXPECT_EQ(padding_layout(hole_left), PaddingLayout::anywhere);
  EXPECT_EQ(padding_layout(select_rows(left, torch::tensor({1}))), PaddingLayout::trailing);
  EXPECT_EQ(padding_layout(RolloutBatch{}), PaddingLayout::trailing);

  const SamplingView view{kLimit, 0.7};
  const auto mask = b.action_mask.to(torch::kBool);
  for (const auto& [batch, layout] : {std::pair{b, PaddingLayout::trailing}, std::pair{left, PaddingLayout::around}}) {
    SCOPED_TRACE(layout == PaddingLayout::trailing ? "trailing" : "around");
    const auto masked = action_logprobs(*model_, batch, view, nullptr, PaddingLayout::anywhere);
    const auto causal = action_logprobs(*model_, batch, view, nullptr, layout);
    EXPECT_TRUE(torch::allclose(causal.masked_select(mask), masked.masked_select(mask), 1e-5, 1e-6));
    const auto values_masked = action_values(*model_, batch), values_causal = action_values(*model_, batch, layout);
    EXPECT_TRUE(torch::allclose(values_causal.index({mask}), values_masked.index({mask}), 1e-5, 1e-6));
    // The scoring path finds the layout itself.
    EXPECT_TRUE(torch::allclose(score_logprobs(*model_, batch, 2, view).masked_select(mask), masked.masked_select(mask),
                                1e-5, 1e-6));
  }
  // Run as if its padding trailed (no shift), the left-padded batch gives other log-probs: the
  // comparisons above would see a missing or wrong shift.
  const auto unshifted = action_logprobs(*model_, left, view, nullptr, PaddingLayout::trailing);
  const auto masked = action_logprobs(*model_, left, view);
  EXPECT_FALSE(torch::allclose(unshifted.masked_select(mask), masked.masked_select(mask), 1e-3, 1e-3));
}

// The head on the later positions only (what action_logprobs asks for): the same logits as the
// full forward's there; a first position outside the sequence, or a sequence head, refused.
TEST_F(RlLogprobs, HeadOnTheLaterPositionsOnly) {
  torch::NoGradGuard no_grad;
  const RolloutBatch b = rollouts();
  const int64_t T = kP + kA;
  const auto full = model_->forward(b.sequences, b.attention_mask);
  const auto later = model_->forward(b.sequences, b.attention_mask, kP - 1);
  ASSERT_EQ(later.sizes(), (std::vector<int64_t>{kB, T - kP + 1, full.size(-1)}));
  EXPECT_TRUE(torch::allclose(later, full.narrow(1, kP - 1, T - kP + 1), 1e-5, 1e-6));
  EXPECT_THROW(model_->forward(b.sequences, b.attention_mask, T), quartet::Error);
  EXPECT_THROW(model_->forward(b.sequences, b.attention_mask, -1), quartet::Error);
  ShardOptions frozen;
  frozen.trainable = false;
  ShardedModel reward(tiny_llama(), Head::sequence_reward, *group_, frozen,
                      source_random(tiny_llama(), 4, torch::kCPU));
  EXPECT_THROW(reward.forward(b.sequences, b.attention_mask, 1), quartet::Error);
}

// The old log-probs on generation's cache (the prompt not run again) against the full pass,
// on rollouts as the trainer makes them: left-padded prompts, rows that stop early (and so a
// batch cut to its live rows, which must keep the finished rows' prompts), actions padded to
// a wider bucket; in micro-batches and whole.
TEST_F(RlLogprobs, OnGenerationsCacheAsTheFullPass) {
  torch::NoGradGuard no_grad;
  const int64_t B = 8, P = 6, N = 10, wider = 3;
  auto gen = at::detail::createCPUGenerator(11);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t r = 0; r < B; ++r) {
    auto ids = torch::randint(1, kLimit, {P - r % 3}, gen, torch::kLong);  // 6, 5 or 4 tokens
    prompts.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
  }
  auto [prompt, prompt_mask] = left_pad(prompts, /*pad_id=*/0);
  SamplingParams sp;
  sp.max_new_tokens = N;
  sp.stop_ids = {3, 7, 11, 19, 23, 29};  // likely enough under a random model to stop rows early
  sp.vocab_limit = kLimit;
  sp.check_every = 1;
  sp.check_lag = 0;
  sp.seed = 4;
  sp.keep_cache = true;
  sp.cache_slots = P + N + wider;
  model_->gather_full();
  Generation g = generate(model_->module(), prompt, prompt_mask, sp);
  ASSERT_GT(g.stats.compactions, 0) << "the rows should stop at different steps (pick other stop ids or seed)";
  ASSERT_EQ(g.cache.length, P);
  ASSERT_EQ(g.cache.max_len, P + N + wider);
  const int64_t generated = g.tokens.size(1) - P;
  RolloutBatch b{g.tokens, g.attention_mask, g.attention_mask.narrow(1, P, generated).contiguous()};
  b = pad_actions(b, N + wider, /*pad_id=*/0);  // bucket padding past what generation made
  const SamplingView view{kLimit, 0.7};
  const auto full = score_logprobs(*model_, b, 3, view);
  const auto mask = b.action_mask.to(torch::kBool);
  for (int64_t micro : {int64_t{3}, int64_t{0}}) {
    KVCache cache = g.cache;  // the pass overwrites the slots after the prompt: a fresh copy each time
    for (auto* layers : {&cache.k, &cache.v})
      for (auto& t : *layers) t = t.clone();
    const auto got = score_logprobs_on_cache(*model_, b, cache, micro, view);
    ASSERT_EQ(got.sizes(), full.sizes());
    EXPECT_TRUE(torch::allclose(got.masked_select(mask), full.masked_select(mask), 1e-5, 1e-6))
        << "micro-batch " << micro << "\n" << got << "\n" << full;
  }
  // A cache of other rows, one whose prompt length is not the batch's, or one without room for
  // the batch's width is refused.
  EXPECT_THROW(score_logprobs_on_cache(*model_, select_rows(b, torch::arange(2)), g.cache, 0, view), quartet::Error);
  KVCache shorter = g.cache;
  shorter.length = P - 1;
  EXPECT_THROW(score_logprobs_on_cache(*model_, b, shorter, 0, view), quartet::Error);
  EXPECT_THROW(score_logprobs_on_cache(*model_, pad_actions(b, N + wider + 2, 0), g.cache, 0, view), quartet::Error);
  model_->release_full();
  // The model must be whole on the rank.
  EXPECT_THROW(score_logprobs_on_cache(*model_, b, g.cache, 0, view), quartet::Error);
}

// ---------------------------------------------------------------------------------------------
// Packed passes (engine/packed_rollouts.hpp: rows back to back without padding, each attending
// within itself) give the padded passes' critic values and reward scores: left-padded rows of
// unequal prompts and answers, one row with no answer, in passes of several token budgets
// (one row whose tokens exceed it runs alone), with every layer sliding over a window shorter
// than the rows, or not at all.
TEST_F(RlLogprobs, PackedValuesAndScoresEqualPadded) {
  auto gen = at::detail::createCPUGenerator(23);
  const int64_t B = 5, P = 6, A = 7;
  RolloutBatch b{torch::randint(1, kLimit, {B, P + A}, gen, torch::kLong), torch::ones({B, P + A}, torch::kLong),
                 torch::ones({B, A}, torch::kLong)};
  const int64_t lead[B] = {0, 3, 1, 5, 2}, answer[B] = {7, 2, 4, 0, 5};
  for (int64_t r = 0; r < B; ++r) {
    b.attention_mask[r].narrow(0, 0, lead[r]).zero_();
    b.sequences[r].narrow(0, 0, lead[r]).fill_(0);
    b.attention_mask[r].narrow(0, P + answer[r], A - answer[r]).zero_();
    b.action_mask[r].narrow(0, answer[r], A - answer[r]).zero_();
  }
  const auto real = b.action_mask.to(torch::kBool);
  for (int64_t window : {0, 3}) {
    ModelConfig cfg = tiny_llama();
    if (window > 0) {
      cfg.model_type = "mistral";
      cfg.sliding_window = window;
      cfg.sliding_layers.assign(static_cast<size_t>(cfg.num_layers), true);
    }
    ShardedModel critic(cfg, Head::token_value, *group_, ShardOptions{}, source_random(cfg, 8, torch::kCPU));
    ShardedModel reward(cfg, Head::sequence_reward, *group_, ShardOptions{}, source_random(cfg, 9, torch::kCPU));
    const auto values = score_values(critic, b, 2), scores = score_sequences(reward, b, 2);
    for (int64_t budget : {8, 20, 100}) {
      SCOPED_TRACE("window " + std::to_string(window) + ", " + std::to_string(budget) + " tokens a pass");
      const auto packed_values = score_values(critic, b, ScorePasses{0, budget});
      EXPECT_TRUE(torch::allclose(packed_values.masked_select(real), values.masked_select(real), 1e-5, 1e-6));
      EXPECT_TRUE(packed_values.masked_select(real.logical_not()).eq(0).all().item<bool>());
      EXPECT_TRUE(torch::allclose(score_sequences(reward, b, ScorePasses{0, budget}), scores, 1e-5, 1e-6))
          << score_sequences(reward, b, ScorePasses{0, budget}) << scores;
    }
    // The window matters here: without it the values differ.
    if (window > 0) {
      ModelConfig full = tiny_llama();
      ShardedModel plain(full, Head::token_value, *group_, ShardOptions{}, source_random(full, 8, torch::kCPU));
      EXPECT_FALSE(torch::allclose(score_values(plain, b, ScorePasses{0, 20}).masked_select(real),
                                   values.masked_select(real), 1e-3, 1e-4));
    }
  }
}

// Against Hugging Face: the tiny causal LMs of tests/parity/make_models.py (every family, with
// Mistral's, Qwen2's and Qwen3's sliding windows shorter than the sequences, Qwen3's q/k norms,
// Llama 3.1's rope scaling), each directory's greedy generation (gen_prompt, gen_tokens) and
// HF's logits over it (gen_logits).
// ---------------------------------------------------------------------------------------------

// The causal LM reference directories under $QUARTET_PARITY_DIR/models.
std::vector<std::string> causal_references() {
  std::vector<std::string> out;
  const char* base = std::getenv("QUARTET_PARITY_DIR");
  if (!base || !*base) return out;
  const std::string root = std::string(base) + "/models", suffix = "_causal_lm";
  if (DIR* d = ::opendir(root.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
        out.push_back(root + "/" + n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// max |a - b| <= 1e-4 max |b| (fp32 against fp32, as tests/unit/test_model.cpp).
::testing::AssertionResult close_to_hf(const torch::Tensor& a, const torch::Tensor& b) {
  const auto x = a.detach().to(torch::kDouble), y = b.to(torch::kDouble);
  const double err = (x - y).abs().max().item<double>(), scale = y.abs().max().item<double>();
  if (a.sizes() == b.sizes() && err <= 1e-4 * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max|quartet - HF| " << err << " > 1e-4 x max|HF| " << scale << "\n"
                                       << x << "\n" << y;
}

// The rollout as the trainer has it: HF's greedy tokens after the left-padded prompt, row 1
// stopped after 5 actions (padding after it), every row padded to a wider bucket; the log-probs
// of the real actions from the update's forward (grad, activation checkpointing, attention
// without a mask: PaddingLayout::around), from the same with the mask, from the scoring path
// (micro-batches, no grad), from generation's cache (the prompt not run again) and from the
// packed forms (rows back to back without padding, engine/packed_rollouts.hpp: scoring in passes
// of a token budget, and the update's forward with grad) equal HF's (log_softmax of its logits
// over the same tokens); and backward reaches every unit, through the packed pass too.
TEST(RlLogprobsHF, TrainingAndScoringFormsMatchHF) {
  const auto dirs = causal_references();
  ASSERT_GE(dirs.size(), 15u) << "the models fixture (tests/parity/make_models.py) wrote too few causal LMs under "
                                 "$QUARTET_PARITY_DIR/models";
  auto group = make_mpi_collectives("rl_logprobs_hf", {test::world().rank()}, MPI_COMM_SELF, nullptr);
  for (const auto& dir : dirs) {
    SCOPED_TRACE(dir);
    const ModelConfig cfg = ModelConfig::from_json_file(dir + "/config.json");
    ShardOptions so;
    so.checkpointing = true;
    ShardedModel model(cfg, Head::causal_lm, *group, so,
                       source_from_checkpoint(std::make_shared<SafetensorsCheckpoint>(dir), cfg, Head::causal_lm));
    SafetensorsFile ref(dir + "/reference.safetensors");
    const auto prompt = ref.get("gen_prompt"), prompt_mask = ref.get("gen_prompt_mask"), tokens = ref.get("gen_tokens");
    const int64_t B = prompt.size(0), P = prompt.size(1), A = tokens.size(1), stop = 5, wider = 3;
    const int64_t pad = cfg.pad_token_id.value_or(0);
    const auto hf = torch::log_softmax(ref.get("gen_logits").narrow(1, P - 1, A).to(torch::kDouble), -1)
                        .gather(-1, tokens.unsqueeze(-1))
                        .squeeze(-1);
    RolloutBatch b{torch::cat({prompt, tokens}, 1), torch::cat({prompt_mask, torch::ones_like(tokens)}, 1),
                   torch::ones_like(tokens)};
    b.sequences[1].narrow(0, P + stop, A - stop).fill_(pad);
    b.attention_mask[1].narrow(0, P + stop, A - stop).zero_();
    b.action_mask[1].narrow(0, stop, A - stop).zero_();
    b = pad_actions(b, A + wider, pad);
    ASSERT_EQ(padding_layout(b), PaddingLayout::around);
    const auto real = b.action_mask.narrow(1, 0, A).to(torch::kBool);
    auto matches = [&](const torch::Tensor& got) { return close_to_hf(got.narrow(1, 0, A).masked_select(real), hf.masked_select(real)); };
    const SamplingView view{0, 1.0};
    {
      torch::NoGradGuard no_grad;
      EXPECT_TRUE(matches(score_logprobs(model, b, 2, view))) << "scoring (micro-batches of 2)";
      model.gather_full();
      KVCache cache = model.module()->make_cache(B, P + A + wider);
      (void)model.module()->next_token_logits(prompt, prompt_mask, &cache);
      EXPECT_TRUE(matches(score_logprobs_on_cache(model, b, cache, 0, view))) << "scoring on generation's cache";
      model.release_full();
      // A budget of about one and a half rows: passes of one and of two rows.
      const int64_t budget = b.attention_mask.sum().item<int64_t>() * 3 / (2 * B);
      EXPECT_TRUE(matches(score_logprobs(model, b, ScorePasses{0, budget}, view))) << "packed scoring, " << budget << " tokens a pass";
    }
    {
      const auto packed = action_logprobs_packed(model, b, view);
      EXPECT_TRUE(matches(packed.detach())) << "the update's packed forward";
      EXPECT_TRUE(packed.masked_select(b.action_mask.logical_not()).eq(0).all().item<bool>()) << "zero where no action is";
      model.backward(-(packed * b.action_mask.to(packed.scalar_type())).sum());
      const auto& grads = model.grad_shards();
      for (size_t u = 0; u < grads.size(); ++u) {
        const double norm = grads[u].norm().item<double>();
        EXPECT_TRUE(std::isfinite(norm) && norm > 0) << "packed: unit " << u << ": gradient norm " << norm;
      }
      model.zero_grad();
    }
    EXPECT_TRUE(matches(action_logprobs(model, b, view, nullptr, PaddingLayout::anywhere).detach())) << "with the mask";
    const auto logp = action_logprobs(model, b, view, nullptr, PaddingLayout::around);
    EXPECT_TRUE(matches(logp)) << "the update's forward";
    model.backward(-(logp * b.action_mask.to(logp.scalar_type())).sum());
    const auto& grads = model.grad_shards();
    for (size_t u = 0; u < grads.size(); ++u) {
      const double norm = grads[u].norm().item<double>();
      EXPECT_TRUE(std::isfinite(norm) && norm > 0) << "unit " << u << ": gradient norm " << norm;
    }
  }
}

// Top-k, top-p and min_new_tokens shape what generation samples from, but neither the old
// log-probs (taken at sampling time by a separate no-grad pass) nor the new ones (the update's
// pass with grad, over the same rows and padding layout) see them: both are of the
// temperature-scaled distribution over the tokenizer's ids, as verl and OpenRLHF take them. So
// before any update the ratio is exactly 1, and both equal log_softmax(logits / T) written out
// here. The sampler's truncated distribution
// gives other numbers (checked, so that a side that used it would fail the equality).
TEST_F(RlLogprobs, OldAndNewAreOfTheTemperatureScaledFullDistribution) {
  const int64_t B = 6, P = 4, N = 8;
  const double T = 0.7;
  auto gen = at::detail::createCPUGenerator(17);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t r = 0; r < B; ++r) {
    auto ids = torch::randint(1, kLimit, {P - r % 2}, gen, torch::kLong);
    prompts.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
  }
  auto [prompt, prompt_mask] = left_pad(prompts, /*pad_id=*/0);
  SamplingParams sp;
  sp.temperature = T;
  sp.top_k = 6;
  sp.top_p = 0.8;
  sp.min_new_tokens = 3;
  sp.max_new_tokens = N;
  sp.stop_ids = {3, 7, 11};
  sp.vocab_limit = kLimit;
  sp.seed = 9;
  model_->gather_full();
  Generation g = generate(model_->module(), prompt, prompt_mask, sp);
  model_->release_full();
  const int64_t A = g.tokens.size(1) - P;
  RolloutBatch b{g.tokens, g.attention_mask, g.attention_mask.narrow(1, P, A).contiguous()};
  const SamplingView view{kLimit, T};
  const auto mask = b.action_mask.to(torch::kBool);

  const auto old_logp = score_logprobs(*model_, b, B, view);  // as RolloutGenerator takes them

  const auto new_logp = action_logprobs(*model_, b, view, nullptr, padding_layout(b));  // as the update does, with grad
  ASSERT_TRUE(new_logp.requires_grad());
  EXPECT_TRUE(torch::equal(old_logp.masked_select(mask), new_logp.detach().masked_select(mask)))
      << "the ratio before any update must be exactly 1\n" << old_logp << "\n" << new_logp;

  torch::NoGradGuard no_grad;
  const auto logits = model_->forward(b.sequences, b.attention_mask).narrow(1, P - 1, A).to(torch::kDouble);
  const auto scaled = logits.narrow(-1, 0, kLimit) / T;
  const auto actions = b.sequences.narrow(1, P, A).clamp_max(kLimit - 1).unsqueeze(-1);
  const auto full = torch::log_softmax(scaled, -1).gather(-1, actions).squeeze(-1);
  EXPECT_TRUE(torch::allclose(old_logp.to(torch::kDouble).masked_select(mask), full.masked_select(mask), 1e-5, 1e-6));
  // The sampler's distribution: the stop ids out for the first 3 actions (min_new_tokens), then
  // HF's warpers: the top 6; of those, renormalised, the likeliest whose likelier ones hold less
  // than 0.8; then renormalised. Every sampled token lies inside it, and its log-prob there is
  // higher.
  const double inf = std::numeric_limits<double>::infinity();
  auto shaped = scaled.clone();
  for (int64_t id : sp.stop_ids) shaped.narrow(1, 0, 3).select(-1, id).fill_(-inf);
  const auto probs = torch::softmax(scaled, -1);
  const auto kth = std::get<0>(shaped.topk(6, -1)).narrow(-1, 5, 1);
  const auto in_k = shaped.ge(kth);
  const auto pk = torch::softmax(shaped.masked_fill(in_k.logical_not(), -inf), -1);
  const auto [sorted, order] = pk.sort(-1, /*descending=*/true);
  const auto before = sorted.cumsum(-1) - sorted;  // the mass of the likelier tokens
  const auto in_p = torch::zeros_like(in_k).scatter(-1, order, before.lt(0.8));
  const auto inside = in_k & in_p;
  const auto kept_mass = (probs * inside.to(torch::kDouble)).sum(-1);
  const auto truncated = full - kept_mass.log();
  EXPECT_TRUE(inside.gather(-1, actions).squeeze(-1).masked_select(mask).all().item<bool>());

  EXPECT_GT((truncated - full).masked_select(mask).max().item<double>(), 1e-2)
      << "top-k and top-p should have cut some mass here (pick another seed)";
  // min_new_tokens: no stop id among the first 3 actions of any row.
  const auto first = b.sequences.narrow(1, P, 3);
  for (int64_t id : sp.stop_ids) EXPECT_FALSE(first.eq(id).any().item<bool>());
}

// Rollout widths in steps of kRolloutWidthMultiple (so a run meets few distinct shapes), never
// past the deck's widest rollout, never narrower than the actions.
TEST(RolloutWidth, BucketsToMultiplesWithinTheDecksWidest) {
  const int64_t m = kRolloutWidthMultiple;
  EXPECT_EQ(bucketed_actions(128, 20, 256), 3 * m - 128);   // 148 -> 192
  EXPECT_EQ(bucketed_actions(128, 128, 256), 128);          // already a multiple
  EXPECT_EQ(bucketed_actions(100, 100, 228), 128);          // 256 is past 228: up to 228
  EXPECT_EQ(bucketed_actions(7, 5, 0), 5);                  // no cap: no bucketing
  EXPECT_EQ(bucketed_actions(300, 10, 256), 10);            // never fewer than the actions
}

// Padding adds masked columns only: the log-probs and the scores of the real actions do not
// move, and concat_rollouts pads its joined batch to the bucket.
TEST_F(RlLogprobs, PaddedActionsLeaveTheRealActionsAlone) {
  torch::NoGradGuard no_grad;
  const RolloutBatch b = rollouts();
  const RolloutBatch wide = pad_actions(b, kA + 6, /*pad_id=*/0);
  ASSERT_EQ(wide.actions(), kA + 6);
  ASSERT_EQ(wide.prompt_len(), kP);
  EXPECT_TRUE(wide.sequences.narrow(1, 0, kP + kA).equal(b.sequences));
  EXPECT_EQ(wide.action_mask.narrow(1, kA, 6).sum().item<int64_t>(), 0);
  EXPECT_EQ(wide.attention_mask.narrow(1, kP + kA, 6).sum().item<int64_t>(), 0);
  const SamplingView view{kLimit, 1.0};
  const auto narrow_logp = score_logprobs(*model_, b, 2, view);
  const auto wide_logp = score_logprobs(*model_, wide, 2, view);
  const auto mask = b.action_mask.to(torch::kBool);
  EXPECT_TRUE(torch::allclose(wide_logp.narrow(1, 0, kA).masked_select(mask), narrow_logp.masked_select(mask), 1e-5,
                              1e-6))
      << wide_logp << "\n" << narrow_logp;
  EXPECT_THROW(pad_actions(b, kA - 1, 0), quartet::Error);

  const RolloutBatch joined = concat_rollouts({b, wide}, 0, /*max_width=*/kP + 60);
  EXPECT_EQ(joined.prompt_len() + joined.actions(), kRolloutWidthMultiple);
  EXPECT_EQ(joined.rows(), 2 * kB);
  EXPECT_EQ(concat_actions({b, wide}, kP + 60), joined.actions());
  EXPECT_EQ(concat_rollouts({b, b}, 0).actions(), kA);  // max_width 0: as wide as the widest piece
}

}  // namespace test_rl_logprobs

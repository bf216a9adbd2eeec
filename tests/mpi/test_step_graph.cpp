// Training micro-batches as CUDA graphs (shard/step_graph.hpp) change nothing but how the work
// is launched. The policy and value updates of one-rank bf16 models on a GPU (each family, two
// recomputing their blocks in backward), with train.cuda_graphs on and off from the same weights
// and rollouts, over several phases (new rollouts each time, so a replay must read the phase's
// inputs, not the captured ones; a new width, so the graph must be captured again), give the
// same weights bit for bit and the same statistics, with quartet's AdamW kernel (which reads
// the gradients where autograd left them) and with ATen's (which reads the float32 shards).
// The updates attend without a mask (experience.hpp padding_layout): by a shift where prompts
// are left-padded, directly in the phase whose prompts are all of one length, a host-side
// choice that the graphs must be captured again for. Without a GPU the graphs do not apply,
// which is checked too.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/config.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/dist/device.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/model/model_config.hpp"
#include "quartet/rl/updates.hpp"
#include "quartet/shard/adamw_kernel.hpp"
#include "quartet/shard/sharded_adamw.hpp"
#include "quartet/shard/step_graph.hpp"
#include "quartet/shard/train_config.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_step_graph {

namespace {

constexpr int64_t kVocab = 96, kRows = 16, kPrompt = 12;

// A model of each family the engine trains; one recomputes its blocks in backward.
struct Family {
  const char* model_type;
  bool tied, checkpointing;
};

ModelConfig small_model(const Family& f) {
  ModelConfig m;
  m.model_type = f.model_type;
  m.vocab_size = kVocab;
  m.hidden_size = 128;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = std::string(f.model_type) == "llama" ? 2 : 4;
  m.intermediate_size = 256;
  m.max_positions = 128;
  m.tie_word_embeddings = f.tied;
  m.activation = std::string(f.model_type) == "llama" ? "silu" : "gelu_new";
  m.complete("test config");
  return m;
}

const Family kLlama{"llama", false, false};

// Minibatches of 4 rows, in micro-batches of `micro`.
Config update_config(bool graphs, int micro = 4) {
  const std::string text =
      "[algorithm]\nminibatch = 4\nepochs = 2\n"
      "entropy_coef = 0.01\n"  // one more statistic through the graph
      "[model.actor]\nlr = 1e-3\n[model.critic]\nlr = 1e-3\n";
  return load_config(Deck("step_graph.deck", text,
                          {std::string("train.cuda_graphs=") + (graphs ? "true" : "false"),
                           "train.micro_batch=" + std::to_string(micro)},
                          deck_schema()));
}

// A phase's inputs, drawn from `seed`: kRows rollouts of `actions` tokens after the prompt,
// some stopped early (masked), some prompts left-padded unless not `left_padding`, with old
// log-probs, advantages and returns.
struct Phase {
  RolloutBatch batch;
  torch::Tensor old_logp, advantages, old_values, returns;
};

Phase phase(uint64_t seed, int64_t actions, torch::Device dev, bool left_padding = true) {
  auto gen = at::detail::createCPUGenerator(seed);
  const int64_t T = kPrompt + actions;
  Phase p;
  p.batch.sequences = torch::randint(1, kVocab, {kRows, T}, gen, torch::kLong);
  p.batch.attention_mask = torch::ones({kRows, T}, torch::kLong);
  p.batch.action_mask = torch::ones({kRows, actions}, torch::kLong);
  for (int64_t r = 0; r < kRows; r += 3) {  // every third row stops after r % actions + 1 actions
    const int64_t keep = r % actions + 1;
    p.batch.attention_mask[r].narrow(0, kPrompt + keep, actions - keep).fill_(0);
    p.batch.action_mask[r].narrow(0, keep, actions - keep).fill_(0);
  }
  if (left_padding)
    for (int64_t r = 1; r < kRows; r += 4) p.batch.attention_mask[r].narrow(0, 0, r % 5).fill_(0);
  p.old_logp = -torch::rand({kRows, actions}, gen) * 5;
  p.advantages = torch::randn({kRows, actions}, gen);
  p.old_values = torch::randn({kRows, actions}, gen);
  p.returns = torch::randn({kRows, actions}, gen);
  p.batch = on_device(p.batch, dev);
  p.old_logp = p.old_logp.to(dev);
  p.advantages = p.advantages.to(dev);
  p.old_values = p.old_values.to(dev);
  p.returns = p.returns.to(dev);
  return p;
}

struct Trained {
  std::vector<torch::Tensor> actor, critic;  // parameter shards after the phases, on the CPU
  std::vector<UpdateStats> policy, value;
  int captures = 0, replays = 0;
};

std::unique_ptr<RoleModel> role_model(Collectives& group, const Family& f, Head head, uint64_t seed, const Config& c,
                                      double lr, torch::Dtype dtype = torch::kBFloat16) {
  auto rm = std::make_unique<RoleModel>();
  ShardOptions so;
  so.dtype = dtype;
  so.checkpointing = f.checkpointing;
  rm->model = std::make_unique<ShardedModel>(small_model(f), head, group, so,
                                             source_random(small_model(f), seed, group.device()));
  AdamWOptions ao;
  ao.lr = lr;
  ao.beta2 = c.get<TrainConfig>().adam_beta2;
  ao.max_grad_norm = c.get<TrainConfig>().max_grad_norm;
  rm->optimizer = std::make_unique<ShardedAdamW>(*rm->model, ao);
  return rm;
}

// The phases: widths 20, 20 without left padding (no shift: a new graph), 28 (a new graph), 20
// (the first width again: a new graph too).
Trained train(Collectives& group, bool graphs, const Family& f = kLlama, int micro = 4) {
  const Config c = update_config(graphs, micro);
  auto actor = role_model(group, f, Head::causal_lm, 11, c, c.get<ModelsConfig>().actor.lr);
  auto critic = role_model(group, f, Head::token_value, 12, c, c.get<ModelsConfig>().critic.lr);
  Trained out;
  int64_t actor_step = 0, critic_step = 0;
  const std::vector<int64_t> widths{20, 20, 28, 20};
  for (size_t k = 0; k < widths.size(); ++k) {
    const Phase p = phase(100 + k, widths[k] - kPrompt, group.device(), /*left_padding=*/k != 1);
    PolicyTargets tg;
    tg.batch = p.batch;
    tg.old_logp = p.old_logp;
    tg.advantages = p.advantages;
    tg.view = SamplingView{kVocab - 6, 0.9};
    out.policy.push_back(update_policy(*actor, tg, c, &actor_step, 64, 5 + k));
    out.value.push_back(update_critic(*critic, p.batch, p.old_values, p.returns, c, &critic_step, 64, 9 + k));
  }
  for (const auto& s : actor->model->current_shards()) out.actor.push_back(s.to(torch::kCPU));
  for (const auto& s : critic->model->current_shards()) out.critic.push_back(s.to(torch::kCPU));
  for (auto* rm : {actor.get(), critic.get()})
    if (rm->step_graph) {
      out.captures += rm->step_graph->captures();
      out.replays += rm->step_graph->replays();
    }
  return out;
}

void expect_same_stats(const UpdateStats& a, const UpdateStats& b, const std::string& what) {
  EXPECT_EQ(a.loss, b.loss) << what;
  EXPECT_EQ(a.clip_fraction, b.clip_fraction) << what;
  EXPECT_EQ(a.approx_kl, b.approx_kl) << what;
  EXPECT_EQ(a.entropy, b.entropy) << what;
  EXPECT_EQ(a.grad_norm, b.grad_norm) << what;
  EXPECT_EQ(a.steps, b.steps) << what;
}

void expect_same_training(const Trained& eager, const Trained& graphed) {
  for (size_t k = 0; k < eager.policy.size(); ++k) {
    expect_same_stats(eager.policy[k], graphed.policy[k], "policy update, phase " + std::to_string(k));
    expect_same_stats(eager.value[k], graphed.value[k], "value update, phase " + std::to_string(k));
  }
  EXPECT_GT(eager.policy.back().entropy, 0.0);
  ASSERT_EQ(eager.actor.size(), graphed.actor.size());
  for (size_t u = 0; u < eager.actor.size(); ++u)
    EXPECT_TRUE(torch::equal(eager.actor[u], graphed.actor[u])) << "actor unit " << u;
  for (size_t u = 0; u < eager.critic.size(); ++u)
    EXPECT_TRUE(torch::equal(eager.critic[u], graphed.critic[u])) << "critic unit " << u;
}

class StepGraphGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() < 1) GTEST_SKIP() << "no GPU: the graphs apply on GPUs only (NotOnTheCpu checks that)";
    select_device(DeviceKind::cuda, test::world().local_rank());
    group_ = make_nccl_collectives("step_graph", {test::world().rank()}, MPI_COMM_SELF, nullptr);
  }
  void TearDown() override { set_adamw_kernel(adamw_kernel_was_); }
  std::unique_ptr<Collectives> group_;
  const bool adamw_kernel_was_ = adamw_kernel_enabled();
};

class StepGraphFamilies : public StepGraphGpu, public ::testing::WithParamInterface<Family> {};

TEST_P(StepGraphFamilies, GraphedUpdatesEqualEagerOnesBitForBit) {
  const Family& f = GetParam();
  const Trained eager = train(*group_, false, f);
  const Trained graphed = train(*group_, true, f);
  EXPECT_EQ(eager.captures + eager.replays, 0);
  // Per model: every phase starts a graph (an eager micro-batch, then a capture); 4 phases x 2
  // epochs x 4 minibatches = 32 steps, of which 4 warm-ups and 28 replays.
  EXPECT_EQ(graphed.captures, 2 * 4);
  EXPECT_EQ(graphed.replays, 2 * 28);
  expect_same_training(eager, graphed);
  // And the updates did move the weights (a graph that never ran would leave them).
  const Config c = update_config(false);
  auto fresh = role_model(*group_, f, Head::causal_lm, 11, c, c.get<ModelsConfig>().actor.lr);
  bool moved = false;
  for (size_t u = 0; u < eager.actor.size(); ++u)
    moved = moved || !torch::equal(fresh->model->current_shards()[u].to(torch::kCPU), graphed.actor[u]);
  EXPECT_TRUE(moved);
}

INSTANTIATE_TEST_SUITE_P(Models, StepGraphFamilies,
                         ::testing::Values(Family{"llama", false, false}, Family{"llama", false, true},
                                           Family{"gpt2", true, false}, Family{"gpt_neox", false, true},
                                           Family{"gptj", false, false}),
                         [](const auto& info) {
                           return std::string(info.param.model_type) + (info.param.tied ? "_tied" : "") +
                                  (info.param.checkpointing ? "_checkpointed" : "");
                         });

// Two micro-batches a step: the first writes the gradients, the second adds to them (float32
// shards from then on), each its own graph.
TEST_F(StepGraphGpu, GraphedMicroBatchesAccumulateAsEagerOnes) {
  const Trained eager = train(*group_, false, kLlama, 2);
  const Trained graphed = train(*group_, true, kLlama, 2);
  // Per model: the first phase warms both kinds up twice (the second time with the gradients
  // in the float32 shards), each later phase once: 8 captures, and of 4 x 8 steps x 2
  // micro-batches, 54 replays.
  EXPECT_EQ(graphed.captures, 2 * 8);
  EXPECT_EQ(graphed.replays, 2 * 54);
  expect_same_training(eager, graphed);
}

// ATen's AdamW reads the float32 gradient shards, so the gradients stop being kept as autograd
// returned them after the first step: the graph captured before that is dropped, and the next
// one writes the shards.
TEST_F(StepGraphGpu, GraphedUpdatesWriteTheFloat32ShardsForAtensAdamW) {
  set_adamw_kernel(false);
  const Trained eager = train(*group_, false);
  const Trained graphed = train(*group_, true);
  // Per model: the first phase warms up twice (the second time in the shards' mode), each
  // later phase once: 5 eager steps, 4 captures, 27 replays.
  EXPECT_EQ(graphed.captures, 2 * 4);
  EXPECT_EQ(graphed.replays, 2 * 27);
  expect_same_training(eager, graphed);
}

// On the GPU, attention without a mask (cuDNN's causal kernel), where padding only trails and
// where prompts are left-padded (the shift): the real actions' log-probs in bf16 as far from
// float32's (with the mask) as the masked bf16 ones are, give or take bf16's rounding.
TEST_F(StepGraphGpu, WithoutAMaskFollowsTheMaskInBf16) {
  const Config c = update_config(false);
  auto half = role_model(*group_, kLlama, Head::causal_lm, 11, c, c.get<ModelsConfig>().actor.lr);
  auto exact = role_model(*group_, kLlama, Head::causal_lm, 11, c, c.get<ModelsConfig>().actor.lr, torch::kFloat32);
  for (bool left_padding : {false, true}) {
    const Phase p = phase(7, 16, group_->device(), left_padding);
    const PaddingLayout layout = padding_layout(p.batch);
    ASSERT_EQ(layout, left_padding ? PaddingLayout::around : PaddingLayout::trailing);
    torch::NoGradGuard no_grad;
    const SamplingView view{kVocab - 6, 0.9};
    const auto real = p.batch.action_mask.to(torch::kBool);
    auto logp = [&](RoleModel& m, PaddingLayout l) {
      return action_logprobs(*m.model, p.batch, view, nullptr, l).masked_select(real).to(torch::kCPU, torch::kDouble);
    };
    const auto reference = logp(*exact, PaddingLayout::anywhere);
    auto error = [&](const torch::Tensor& t) { return (t - reference).abs().max().item<double>(); };
    const double masked = error(logp(*half, PaddingLayout::anywhere)), unmasked = error(logp(*half, layout));
    const double exact_unmasked = error(logp(*exact, layout));
    std::printf("[no mask, %s] max |log-prob error| against float32 with the mask: bf16 masked %.3e, bf16 "
                "without %.3e, float32 without %.3e\n", left_padding ? "around" : "trailing", masked, unmasked,
                exact_unmasked);
    EXPECT_LE(exact_unmasked, 1e-4);
    EXPECT_LE(unmasked, std::max(2 * masked, 2e-2));
  }
}

TEST(StepGraph, NotOnTheCpu) {
  auto group = make_mpi_collectives("step_graph_cpu", {test::world().rank()}, MPI_COMM_SELF, nullptr);
  const Config c = update_config(true);
  auto actor = role_model(*group, kLlama, Head::causal_lm, 11, c, c.get<ModelsConfig>().actor.lr);
  EXPECT_FALSE(actor->model->graphable());
  EXPECT_FALSE(StepGraph::applies(*actor->model));
  // The update runs eagerly there, and makes no graph.
  const Phase p = phase(1, 8, torch::kCPU);
  PolicyTargets tg;
  tg.batch = p.batch;
  tg.old_logp = p.old_logp;
  tg.advantages = p.advantages;
  int64_t step = 0;
  const UpdateStats s = update_policy(*actor, tg, c, &step, 8, 3);
  EXPECT_EQ(s.steps, 8);
  EXPECT_EQ(actor->step_graph, nullptr);
}

}  // namespace

}  // namespace test_step_graph

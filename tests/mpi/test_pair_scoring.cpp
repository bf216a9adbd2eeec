// The per-sequence quantities of the pairwise stages on the sharded engine (tune/pair_scoring.hpp),
// sharded over every rank of the test: a reward model's scores of the chosen and the rejected
// side and a policy's (or reference's) summed and averaged response log-probs, in their
// training forms (grad) and scoring forms (micro-batches, no grad), against Hugging Face on the
// tiny models of tests/parity/make_models.py (fixture `pairs`: tests/parity/make_pair_references.py
// runs each sequence alone, unpadded, through transformers). And a reward model that trains: a
// fresh score head on a causal LM's weights, backward reaching the score head with the
// gradient worked out here from the hidden states, the Bradley–Terry loss falling.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "quartet/dist/collectives.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/model/model_config.hpp"
#include "quartet/model/safetensors.hpp"
#include "quartet/shard/sharded_adamw.hpp"
#include "quartet/shard/sharded_model.hpp"
#include "quartet/tune/pair_losses.hpp"
#include "quartet/tune/pair_scoring.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_pair_scoring {

std::string parity_dir() {
  const char* base = std::getenv("QUARTET_PARITY_DIR");
  return base && *base ? base : "";
}

// The pair references' model names ("llama_sequence_reward", ...) ending in `suffix`.
std::vector<std::string> references(const std::string& suffix) {
  std::vector<std::string> out;
  const std::string root = parity_dir() + "/pairs", ext = ".safetensors";
  if (DIR* d = ::opendir(root.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() <= ext.size() || n.compare(n.size() - ext.size(), ext.size(), ext) != 0) continue;
      n.resize(n.size() - ext.size());
      if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) out.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<PreferencePair> read_pairs() {
  SafetensorsFile f(parity_dir() + "/pairs/pairs.safetensors");
  std::map<std::string, std::vector<std::vector<int64_t>>> sides;
  for (const char* side : {"prompt", "chosen", "rejected"}) {
    const auto ids = f.get(std::string(side) + "_ids"), lengths = f.get(std::string(side) + "_lengths");
    int64_t at = 0;
    for (int64_t i = 0; i < lengths.size(0); ++i) {
      const int64_t n = lengths[i].item<int64_t>();
      const auto part = ids.narrow(0, at, n).contiguous();
      sides[side].emplace_back(part.data_ptr<int64_t>(), part.data_ptr<int64_t>() + n);
      at += n;
    }
  }
  const auto margin = f.get("margin");
  std::vector<PreferencePair> out;
  for (size_t i = 0; i < sides["prompt"].size(); ++i)
    out.push_back({static_cast<int64_t>(i), sides["prompt"][i], sides["chosen"][i], sides["rejected"][i],
                   margin[static_cast<int64_t>(i)].item<double>()});
  return out;
}

// max |a - b| <= 1e-4 max |b| (fp32 against fp32, as tests/unit/test_model.cpp).
::testing::AssertionResult close_to_hf(const torch::Tensor& a, const torch::Tensor& b) {
  const auto x = a.detach().to(torch::kCPU).to(torch::kDouble), y = b.to(torch::kDouble);
  const double err = (x - y).abs().max().item<double>(), scale = y.abs().max().item<double>();
  if (a.sizes() == b.sizes() && err <= 1e-4 * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max|quartet - HF| " << err << " > 1e-4 x max|HF| " << scale << "\n"
                                       << x << "\n" << y;
}

class PairScoring : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(parity_dir().empty()) << "QUARTET_PARITY_DIR is not set (ctest sets it)";
    std::vector<int> ranks;
    for (int r = 0; r < test::world().size(); ++r) ranks.push_back(r);
    group_ = make_mpi_collectives("pair_scoring", ranks, test::world().comm(), nullptr);
    pairs_ = read_pairs();
  }
  std::string model_dir(const std::string& name) const { return parity_dir() + "/models/" + name; }
  std::unique_ptr<ShardedModel> load(const std::string& name, Head head, bool trainable) {
    const std::string dir = model_dir(name);
    const ModelConfig cfg = ModelConfig::from_json_file(dir + "/config.json");
    ShardOptions so;
    so.trainable = trainable;
    so.checkpointing = trainable;
    return std::make_unique<ShardedModel>(cfg, head, *group_, so,
                                          source_from_checkpoint(std::make_shared<SafetensorsCheckpoint>(dir), cfg, head));
  }
  std::unique_ptr<Collectives> group_;
  std::vector<PreferencePair> pairs_;
};

// Every reward model of the fixture: the scores of both sides equal HF's, frozen (scoring in
// micro-batches of 3 rows, which cut across the chosen/rejected boundary) and trainable (one
// forward with grad; backward reaches every unit).
TEST_F(PairScoring, RewardScoresMatchHF) {
  const auto names = references("_sequence_reward");
  ASSERT_GE(names.size(), 6u) << "the pairs fixture wrote too few reward models under " << parity_dir() << "/pairs";
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    SafetensorsFile ref(parity_dir() + "/pairs/" + name + ".safetensors");
    const auto hf_c = ref.get("chosen_score"), hf_r = ref.get("rejected_score");
    auto frozen = load(name, Head::sequence_reward, false);
    const int64_t pad = frozen->config().pad_token_id.value_or(0);
    const PairBatch batch = make_pair_batch(pairs_, pad);
    {
      torch::NoGradGuard no_grad;
      const PairValues s = score_pairs(*frozen, batch, 3);
      EXPECT_TRUE(close_to_hf(s.chosen, hf_c)) << "scoring, chosen";
      EXPECT_TRUE(close_to_hf(s.rejected, hf_r)) << "scoring, rejected";
    }
    auto model = load(name, Head::sequence_reward, true);
    model->zero_grad();
    const PairValues s = pair_scores(*model, make_pair_batch(pairs_, pad, /*max_width=*/64));
    EXPECT_TRUE(s.chosen.requires_grad());
    EXPECT_TRUE(close_to_hf(s.chosen, hf_c)) << "training form, chosen (bucketed width)";
    EXPECT_TRUE(close_to_hf(s.rejected, hf_r)) << "training form, rejected";
    model->backward(bradley_terry_loss(s.chosen, s.rejected, batch.margin).loss);
    const auto& grads = model->grad_shards();
    std::vector<torch::Tensor> sums;
    for (const auto& g : grads) sums.push_back(g.abs().sum());
    auto norms = torch::stack(sums).to(torch::kFloat32).contiguous();
    MPI_Allreduce(MPI_IN_PLACE, norms.data_ptr<float>(), static_cast<int>(norms.numel()), MPI_FLOAT, MPI_SUM,
                  test::world().comm());
    EXPECT_TRUE(norms.gt(0).all().item<bool>()) << "a unit without gradient: " << norms;
  }
}

// Every causal LM of the fixture: each side's summed (DPO) and averaged (IPO) response
// log-probs equal HF's, as a frozen reference scores them and as a policy trains on them.
TEST_F(PairScoring, SequenceLogprobsMatchHF) {
  const auto names = references("_causal_lm");
  ASSERT_GE(names.size(), 10u) << "the pairs fixture wrote too few causal LMs under " << parity_dir() << "/pairs";
  const SamplingView view{0, 1.0};
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    SafetensorsFile ref(parity_dir() + "/pairs/" + name + ".safetensors");
    auto reference = load(name, Head::causal_lm, false);
    const int64_t pad = reference->config().pad_token_id.value_or(0);
    const PairBatch batch = make_pair_batch(pairs_, pad);
    {
      torch::NoGradGuard no_grad;
      const PairValues sum = score_pair_logps(*reference, batch, 3, view, PreferenceLossKind::sigmoid);
      EXPECT_TRUE(close_to_hf(sum.chosen, ref.get("chosen_logp_sum"))) << "reference, chosen sums";
      EXPECT_TRUE(close_to_hf(sum.rejected, ref.get("rejected_logp_sum"))) << "reference, rejected sums";
      const PairValues mean = score_pair_logps(*reference, batch, 4, view, PreferenceLossKind::ipo);
      EXPECT_TRUE(close_to_hf(mean.chosen, ref.get("chosen_logp_mean"))) << "reference, chosen means";
      EXPECT_TRUE(close_to_hf(mean.rejected, ref.get("rejected_logp_mean"))) << "reference, rejected means";
    }
    auto policy = load(name, Head::causal_lm, true);
    policy->zero_grad();
    const PairValues lp = pair_logps(*policy, make_pair_batch(pairs_, pad, 64), view, PreferenceLossKind::sigmoid);
    EXPECT_TRUE(lp.chosen.requires_grad());
    EXPECT_TRUE(close_to_hf(lp.chosen, ref.get("chosen_logp_sum"))) << "policy, chosen sums (bucketed width)";
    EXPECT_TRUE(close_to_hf(lp.rejected, ref.get("rejected_logp_sum"))) << "policy, rejected sums";
    const PairLoss loss = dpo_loss({lp.chosen, lp.rejected, ref.get("chosen_logp_sum"), ref.get("rejected_logp_sum")}, {});
    // Policy = reference: h = 0 for every pair, so the loss is log 2 and the rewards are 0.
    EXPECT_NEAR(loss.loss.item<double>(), std::log(2.0), 1e-4);
    policy->backward(loss.loss);
  }
  // The heads are checked: a causal LM does not score, a reward model has no log-probs.
  auto lm = load(names.front(), Head::causal_lm, false);
  EXPECT_NE(test::error_of([&] { score_pairs(*lm, make_pair_batch(pairs_, 0), 2); }).find("sequence_reward head"),
            std::string::npos);
}

// A reward model started from a causal LM (the source `quartet rm` gives a trained reward
// role, engine/role_models.hpp): its base weights are the checkpoint's, its score head
// the fresh source's (the checkpoint has none). Trained on the pairs by the Bradley–Terry loss:
// the score head's gradient is sum_i dl/dr_i h_i over both sides (h_i the final hidden state at
// row i's last real token, dl/dr_c = -σ(-d)/N, dl/dr_r = σ(-d)/N, d = r_c - r_r - m), and a few
// AdamW steps drive the loss down and the pairwise accuracy to 1.
TEST_F(PairScoring, RewardModelTrainsFromACausalLM) {
  const std::string dir = model_dir("llama_causal_lm");
  const ModelConfig cfg = ModelConfig::from_json_file(dir + "/config.json");
  auto ckpt = std::make_shared<SafetensorsCheckpoint>(dir);
  WeightMap map;
  ShardOptions so;
  so.checkpointing = true;
  const ParamSource fresh = source_random(cfg, 5, torch::kCPU);
  // A reward model being trained starts its score head fresh, as a critic does its value head; a
  // frozen one must bring its own.
  EXPECT_EQ(head_source_of(Role::reward, /*trained=*/true), HeadSource::fresh_if_missing);
  EXPECT_EQ(head_source_of(Role::reward, /*trained=*/false), HeadSource::checkpoint);
  EXPECT_EQ(head_source_of(Role::critic, /*trained=*/true), HeadSource::fresh_if_missing);
  EXPECT_EQ(head_source_of(Role::actor, /*trained=*/true), HeadSource::checkpoint);
  ShardedModel rm(cfg, Head::sequence_reward, *group_, so,
                  source_from_checkpoint(ckpt, cfg, Head::sequence_reward, head_source_of(Role::reward, true), fresh,
                                         &map));
  EXPECT_EQ(map.fresh, std::vector<std::string>{"score.weight"});
  EXPECT_NE(map.note().find("score.weight"), std::string::npos) << map.note();
  for (const auto& [name, t] : rm.full_state()) {
    const torch::Tensor want = name == "score.weight" ? fresh(name, t.sizes().vec(), 0, t.numel()).view(t.sizes())
                                                      : ckpt->get(name);
    EXPECT_TRUE(torch::equal(t, want.to(t.dtype()))) << name;
  }

  const int64_t pad = cfg.pad_token_id.value_or(0);
  const PairBatch batch = make_pair_batch(pairs_, pad);
  const RolloutBatch both = both_sides(batch);
  torch::Tensor last;  // [2N, hidden]: each row's final hidden state at its last real token
  {
    torch::NoGradGuard no_grad;
    rm.gather_full();
    const auto h = rm.module()->hidden_states(both.sequences, both.attention_mask);
    const auto idx = both.action_mask.sum(1) + both.prompt_len() - 1;
    last = h.gather(1, idx.view({-1, 1, 1}).expand({-1, 1, h.size(2)})).squeeze(1).to(torch::kDouble);
    rm.release_full();
  }
  rm.zero_grad();
  const PairValues s = pair_scores(rm, batch);
  const PairLoss first = bradley_terry_loss(s.chosen, s.rejected, batch.margin);
  rm.backward(first.loss);

  const auto [hc, hr] = split_sides(last);
  const auto d = (s.chosen - s.rejected).detach().to(torch::kDouble) - batch.margin.to(torch::kDouble);
  const auto coef = torch::sigmoid(-d) / static_cast<double>(batch.rows());
  const auto expected = (-coef.unsqueeze(1) * hc + coef.unsqueeze(1) * hr).sum(0);  // [hidden]
  // The score head lies in the root unit; this rank holds elements [r * shard, (r + 1) * shard).
  const UnitLayout& root = rm.layout()[0];
  auto flat = torch::zeros({root.padded}, torch::kFloat32);
  flat.narrow(0, group_->rank() * root.shard, root.shard).copy_(rm.grad_shards()[0]);
  MPI_Allreduce(MPI_IN_PLACE, flat.data_ptr<float>(), static_cast<int>(root.padded), MPI_FLOAT, MPI_SUM,
                test::world().comm());
  const auto score = std::find_if(root.params.begin(), root.params.end(), [](const FlatParam& p) { return p.name == "score.weight"; });
  ASSERT_NE(score, root.params.end());
  const auto got = flat.narrow(0, score->offset, score->numel).to(torch::kDouble);
  EXPECT_GT(got.abs().max().item<double>(), 0.0);
  EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-6)) << got << "\n" << expected;

  AdamWOptions ao;
  ao.lr = 1e-2;
  ShardedAdamW opt(rm, ao);
  opt.step();
  PairLoss last_loss = first;
  for (int step = 0; step < 30; ++step) {
    rm.zero_grad();
    const PairValues v = pair_scores(rm, batch);
    last_loss = bradley_terry_loss(v.chosen, v.rejected, batch.margin);
    rm.backward(last_loss.loss);
    opt.step();
  }
  EXPECT_LT(last_loss.loss.item<double>(), 0.5 * first.loss.item<double>());
  EXPECT_EQ(last_loss.metrics.accuracy.item<double>(), 1.0);
}

}  // namespace test_pair_scoring

#include "quartet/tune/rm.hpp"

#include <torch/types.h>

#include <cmath>
#include <memory>

#include "quartet/core/check.hpp"
#include "quartet/core/signals.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/engine/sampling_setup.hpp"
#include "quartet/io/prompt_identity.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/shard/train_config.hpp"
#include "quartet/tune/pair_losses.hpp"
#include "quartet/tune/pair_scoring.hpp"
#include "quartet/tune/pair_stage.hpp"
#include "quartet/tune/rm_config.hpp"
#include "quartet/tune/rm_eval.hpp"
#include "quartet/tune/stage.hpp"
#include "quartet/tune/stage_deck.hpp"
#include "quartet/tune/stage_plan.hpp"

namespace quartet {

namespace {

const PreparedFileKind kRmPairs{"pairs", "reward model", "prepare_pairs.py"};

TokenizerIdentity reward_identity(const Config& config) {
  const ModelSpec reward = resolve_model(config, Role::reward);
  return reward.random ? builtin_tokenizer_identity() : model_dir_identity(reward.dir);
}

class RmObjective : public StageObjective {
 public:
  RmObjective(const Config& cfg, const Tokenizer& tokenizer, int group_rank, int group_size, MPI_Comm world)
      : cfg_(cfg), pad_id_(pad_id_of(tokenizer)) {
    const TokenizerIdentity identity = reward_identity(cfg);
    train_ = std::make_unique<PairFiles>(cfg.get<RmConfig>().data, "rm.data", cfg, tokenizer, cfg.get<RmConfig>().stage.max_tokens, identity, kRmPairs);
    if (cfg.get<RmConfig>().stage.heldout.empty()) return;
    const PairFiles heldout({cfg.get<RmConfig>().stage.heldout}, "rm.heldout", cfg, tokenizer, cfg.get<RmConfig>().stage.max_tokens, identity, kRmPairs,
                            cfg.get<RmConfig>().stage.eval_count, "rm.eval_count");
    std::vector<PreferencePair> share;
    for (int64_t i : share_of_rows(heldout.size(), group_rank, group_size)) share.push_back(heldout.get(i));
    evaluator_ = std::make_unique<RmEvaluator>(cfg, std::move(share), pad_id_, world);
  }

  std::string name() const override { return "rm"; }
  Role trained_role() const override { return Role::reward; }
  int64_t train_rows() const override { return train_->size(); }
  std::vector<std::string> statistics() const override {
    return {"accuracy", "chosen_reward", "rejected_reward", "reward_margin"};
  }

  std::vector<StageMicroBatch> micro_batches(const std::vector<int64_t>& rows, torch::Device device) override {
    std::vector<PreferencePair> pairs;
    pairs.reserve(rows.size());
    for (int64_t i : rows) pairs.push_back(train_->get(i));
    return pair_micro_batches(pairs, cfg_.get<TrainConfig>().micro_batch, pad_id_, device);
  }

  StageLoss loss(RoleModel& model, const StageMicroBatch& mb) override {
    const PairBatch batch = pair_batch_of(mb);
    const PairValues s = pair_scores(*model.model, batch);
    const PairLoss l = bradley_terry_loss(s.chosen, s.rejected, cfg_.get<RmConfig>().margin ? batch.margin : torch::Tensor());
    const PairMetrics& m = l.metrics;
    return {l.per_pair.sum(),
            {m.margins.gt(0).to(torch::kFloat64).sum(), m.chosen.sum(), m.rejected.sum(), m.margins.sum()}};
  }

  bool evaluates() const override { return evaluator_ != nullptr; }
  StageEval evaluate(RoleModels& models, int64_t done) override {
    return evaluator_->evaluate(models.get(Role::reward), done);
  }

 private:
  const Config& cfg_;
  int64_t pad_id_;
  std::unique_ptr<PairFiles> train_;
  std::unique_ptr<RmEvaluator> evaluator_;
};

}  // namespace

int64_t rm_steps(const RmConfig& rm, int64_t pairs, int ranks) {
  if (rm.stage.steps > 0) return rm.stage.steps;
  const double per_step = static_cast<double>(rm.stage.batch) * ranks;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(rm.stage.epochs * static_cast<double>(pairs) / per_step - 1e-9)));
}

void check_rm_deck(const Config& cfg, const Placement& placement) {
  const Deck& deck = cfg.deck;
  check_stage_deck_keys(cfg, "rm", cfg.get<RmConfig>().enabled(), "the preference pairs");
  for (Role role : {Role::actor, Role::critic, Role::reference})
    if (placement.has(role))
      deck.fail(std::string("placement.") + role_name(role),
                std::string("places the ") + role_name(role) + " on ranks, but quartet rm trains the reward model "
                "alone on every rank of the job: set placement." + role_name(role) +
                " = 0 (and placement.reward = the job's ranks)");
  if (!placement.has(Role::reward))
    deck.fail("placement.reward", "gives the reward model no ranks: quartet rm trains it on every rank of the job");
  if (!cfg.get<ModelsConfig>().reward.kind.is_model())
    deck.fail("model.reward.kind", "is '" + cfg.get<ModelsConfig>().reward.kind.text + "', but quartet rm trains a reward model: model (the "
                                   "default), with model.reward.path");
  const ModelSpec reward = resolve_model(cfg, Role::reward);
  if (widest_pair_batch(cfg) > reward.config.position_limit())
    deck.fail("rm.max_tokens", "is " + std::to_string(cfg.get<RmConfig>().stage.max_tokens) + ": a batch of pairs is as wide as its "
              "longest prompt plus its longest response, up to " + std::to_string(widest_pair_batch(cfg)) +
              " tokens, but the reward model (" + cfg.get<ModelsConfig>().reward.path + ") has " +
              std::to_string(reward.config.position_limit()) + " positions");
}

int run_rm(Runtime& rt) {
  const Config& cfg = rt.config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<RmObjective> objective;
  StageSchedule schedule;
  const bool ok = rt.world.agree([&] {
    check_rm_deck(cfg, rt.placement);
    tokenizer = run_tokenizer(cfg);  // the reward model's own
    // The model takes the tokenizer's ids, and its weights load (headers only; a causal LM's
    // score head starts fresh), as train checks its models.
    check_models_fit_run(stage_plan_config(cfg), rt.placement, *tokenizer);
    const Group& group = rt.groups->of(Role::reward);
    objective = std::make_unique<RmObjective>(cfg, *tokenizer, group.rank, group.size(), rt.world.comm());
    schedule.steps = rm_steps(cfg.get<RmConfig>(), objective->train_rows(), group.size());
    schedule.batch = cfg.get<RmConfig>().stage.batch;
    schedule.eval_every = cfg.get<RmConfig>().stage.eval_every;
    schedule.eval_at_start = cfg.get<RmConfig>().stage.eval_at_start;
    schedule.eval_at_end = cfg.get<RmConfig>().stage.eval_at_end;
    schedule.log_every = cfg.get<RmConfig>().stage.log_every;
  });
  if (!ok) return kExitUsage;
  return run_stage(rt, *objective, schedule);
}

}  // namespace quartet

#include "quartet/tune/sft.hpp"

#include <torch/types.h>

#include <cmath>
#include <memory>

#include "quartet/core/check.hpp"
#include "quartet/core/signals.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/engine/sampling_setup.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/shard/train_config.hpp"
#include "quartet/tune/sft_batches.hpp"
#include "quartet/tune/sft_config.hpp"
#include "quartet/tune/sft_dataset.hpp"
#include "quartet/tune/sft_eval.hpp"
#include "quartet/tune/stage.hpp"
#include "quartet/tune/stage_deck.hpp"
#include "quartet/tune/stage_plan.hpp"

namespace quartet {

namespace {

// The held-out exact match's generation: greedy, stopping, padding and limited as train's.
SamplingParams sft_sampling(const Config& cfg, const Tokenizer& tokenizer) {
  const SamplingSetup setup = sampling_setup(cfg, tokenizer, resolve_model(cfg, Role::actor));
  SamplingParams p;
  p.temperature = 0;
  p.stop_ids = setup.stop_ids;
  p.pad_id = setup.pad_id;
  p.vocab_limit = setup.vocab_limit;
  return p;
}

class SftObjective : public StageObjective {
 public:
  SftObjective(const Config& cfg, std::unique_ptr<Tokenizer> tokenizer, int group_rank, int group_size, MPI_Comm world)
      : cfg_(cfg), tokenizer_(std::move(tokenizer)), sampling_(sft_sampling(cfg, *tokenizer_)) {
    const TokenizerIdentity actor = actor_identity(cfg);
    train_ = std::make_unique<SftDataset>(cfg.get<SftConfig>().data, "sft.data", cfg, *tokenizer_, actor);
    if (cfg.get<SftConfig>().stage.heldout.empty()) return;
    heldout_ = std::make_unique<SftDataset>(std::vector<std::string>{cfg.get<SftConfig>().stage.heldout}, "sft.heldout", cfg, *tokenizer_,
                                            actor, cfg.get<SftConfig>().stage.eval_count);
    std::vector<const SftExample*> share;
    for (int64_t i = group_rank; group_rank >= 0 && i < heldout_->size(); i += group_size) share.push_back(&heldout_->get(i));
    const Tokenizer* tok = tokenizer_.get();
    evaluator_ = std::make_unique<SftEvaluator>(
        cfg, std::move(share), sampling_,
        [tok](const std::vector<int64_t>& ids) { return tok->decode(ids, /*skip_special_tokens=*/true); }, world);
  }

  std::string name() const override { return "sft"; }
  int64_t train_rows() const override { return train_->size(); }
  std::vector<std::string> statistics() const override { return {"accuracy"}; }

  std::vector<StageMicroBatch> micro_batches(const std::vector<int64_t>& rows, torch::Device device) override {
    std::vector<const SftExample*> examples;
    for (int64_t i : rows) examples.push_back(&train_->get(i));
    std::vector<StageMicroBatch> out;
    for (SftMicroBatch& mb : bucket_examples(examples, cfg_.get<TrainConfig>().micro_batch, cfg_.get<SftConfig>().micro_batch_tokens,
                                             sampling_.pad_id, device))
      out.push_back({{mb.ids, mb.attention, mb.targets}, static_cast<double>(mb.target_tokens), mb.tokens});
    return out;
  }

  StageLoss loss(RoleModel& model, const StageMicroBatch& mb) override {
    SftMicroBatch b;
    b.ids = mb.tensors[0];
    b.attention = mb.tensors[1];
    b.targets = mb.tensors[2];
    const SftLoss l = sft_loss(*model.model, b);
    return {l.nll_sum, {l.correct}};
  }

  bool evaluates() const override { return evaluator_ != nullptr; }
  StageEval evaluate(RoleModels& models, int64_t done) override {
    return evaluator_->evaluate(models.get(Role::actor), done);
  }

 private:
  const Config& cfg_;
  std::unique_ptr<Tokenizer> tokenizer_;
  SamplingParams sampling_;
  std::unique_ptr<SftDataset> train_, heldout_;
  std::unique_ptr<SftEvaluator> evaluator_;
};

}  // namespace

int64_t sft_steps(const SftConfig& sft, int64_t rows, int ranks) {
  if (sft.stage.steps > 0) return sft.stage.steps;
  const double per_step = static_cast<double>(sft.stage.batch) * ranks;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(sft.stage.epochs * static_cast<double>(rows) / per_step - 1e-9)));
}

void check_sft_deck(const Config& cfg, const Placement& placement) {
  const Deck& deck = cfg.deck;
  check_stage_deck_keys(cfg, "sft", cfg.get<SftConfig>().enabled(), "the demonstrations");
  for (Role role : {Role::critic, Role::reference, Role::reward})
    if (placement.has(role))
      deck.fail(std::string("placement.") + role_name(role),
                std::string("places the ") + role_name(role) + " on ranks, but quartet sft trains the actor alone "
                "on every rank of the job: set placement." + role_name(role) + " = 0 (and placement.actor = the job's ranks)");
  const ModelSpec actor = resolve_model(cfg, Role::actor);
  if (cfg.get<SftConfig>().stage.max_tokens > actor.config.position_limit())
    deck.fail("sft.max_tokens", "is " + std::to_string(cfg.get<SftConfig>().stage.max_tokens) + ", but the actor (" + cfg.get<ModelsConfig>().actor.path +
                                    ") has " + std::to_string(actor.config.position_limit()) + " positions");
}

int run_sft(Runtime& rt) {
  const Config& cfg = rt.config;
  std::unique_ptr<SftObjective> objective;
  StageSchedule schedule;
  const bool ok = rt.world.agree([&] {
    check_sft_deck(cfg, rt.placement);
    std::unique_ptr<Tokenizer> tokenizer = run_tokenizer(cfg);
    // The actor takes the tokenizer's ids, and its weights load (headers only), as train checks them.
    check_models_fit_run(stage_plan_config(cfg), rt.placement, *tokenizer);
    const Group& actors = rt.groups->of(Role::actor);
    objective = std::make_unique<SftObjective>(cfg, std::move(tokenizer), actors.rank, actors.size(), rt.world.comm());
    schedule.steps = sft_steps(cfg.get<SftConfig>(), objective->train_rows(), actors.size());
    schedule.batch = cfg.get<SftConfig>().stage.batch;
    schedule.eval_every = cfg.get<SftConfig>().stage.eval_every;
    schedule.eval_at_start = cfg.get<SftConfig>().stage.eval_at_start;
    schedule.eval_at_end = cfg.get<SftConfig>().stage.eval_at_end;
    schedule.log_every = cfg.get<SftConfig>().stage.log_every;
  });
  if (!ok) return kExitUsage;
  return run_stage(rt, *objective, schedule);
}

}  // namespace quartet

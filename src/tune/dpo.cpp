#include "quartet/tune/dpo.hpp"

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "quartet/core/check.hpp"
#include "quartet/core/log.hpp"
#include "quartet/core/signals.hpp"
#include "quartet/core/units.hpp"
#include "quartet/engine/phase_clock.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/engine/sampling_setup.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/shard/train_config.hpp"
#include "quartet/tune/dpo_config.hpp"
#include "quartet/tune/dpo_eval.hpp"
#include "quartet/tune/dpo_reference.hpp"
#include "quartet/tune/pair_scoring.hpp"
#include "quartet/tune/sft_dataset.hpp"
#include "quartet/tune/stage.hpp"
#include "quartet/tune/stage_deck.hpp"
#include "quartet/tune/stage_plan.hpp"

namespace quartet {

namespace {

// A pairs file read whole and checked; its faults name the deck key as well as the file's line.
std::unique_ptr<PairDataset> read_pairs(const Config& cfg, const std::string& key, const std::string& path,
                                        const Tokenizer& tokenizer, const TokenizerIdentity& actor) {
  try {
    return std::make_unique<PairDataset>(path, tokenizer, cfg.get<DpoConfig>().stage.max_tokens, &actor,
                                         PreparedFileKind{"pairs", "actor", "prepare_pairs.py"});
  } catch (const Error& e) {
    cfg.deck.fail(key, "names '" + path + "': " + e.what());
  }
}

PairScoring dpo_scoring(const Config& cfg, const Tokenizer& tokenizer) {
  PairScoring s;
  s.pairs_per_pass = cfg.get<TrainConfig>().micro_batch;
  s.pad_id = pad_id_of(tokenizer);
  s.max_width = cfg.get<DpoConfig>().stage.max_tokens;
  // train's view of the distribution at temperature 1: the tokenizer's ids (docs/preference.md)
  s.view = SamplingView{tokenizer.vocab_size(), 1.0};
  s.kind = cfg.get<DpoConfig>().loss == "ipo" ? PreferenceLossKind::ipo : PreferenceLossKind::sigmoid;
  return s;
}

class DpoObjective : public StageObjective {
 public:
  DpoObjective(const Config& cfg, const Tokenizer& tokenizer, MPI_Comm world)
      : cfg_(cfg), scoring_(dpo_scoring(cfg, tokenizer)), world_(world) {
    options_.kind = scoring_.kind;
    options_.beta = cfg.get<DpoConfig>().beta;
    options_.label_smoothing = cfg.get<DpoConfig>().label_smoothing;
    const TokenizerIdentity actor = actor_identity(cfg);
    train_ = read_pairs(cfg, "dpo.data", cfg.get<DpoConfig>().data, tokenizer, actor);
    if (!cfg.get<DpoConfig>().stage.heldout.empty()) heldout_ = read_pairs(cfg, "dpo.heldout", cfg.get<DpoConfig>().stage.heldout, tokenizer, actor);
  }

  std::string name() const override { return "dpo"; }
  int64_t train_rows() const override { return train_->size(); }
  std::vector<std::string> statistics() const override { return dpo_statistic_names(); }

  // The reference's numbers of every pair, then the reference is released: the steps never run it.
  void prepare(RoleModels& models) override {
    const double start = monotonic_seconds();
    ref_train_ = reference_logps(models.get(Role::reference), *train_, train_->size(), scoring_, world_);
    if (heldout_) {
      const int64_t n = heldout_count();
      evaluator_ = std::make_unique<DpoEvaluator>(
          *heldout_, n, reference_logps(models.get(Role::reference), *heldout_, n, scoring_, world_), scoring_,
          options_, world_);
    }
    models.roles[static_cast<int>(Role::reference)].reset();
    std::string what = std::to_string(train_->size()) + " training";
    if (heldout_) what += " and " + std::to_string(heldout_count()) + " held-out";
    printf0("dpo: the reference scored %s pairs in %s; it is released\n", what.c_str(),
            duration_text(monotonic_seconds() - start).c_str());
  }

  std::vector<StageMicroBatch> micro_batches(const std::vector<int64_t>& rows, torch::Device device) override {
    std::vector<StageMicroBatch> out;
    const size_t per = static_cast<size_t>(scoring_.pairs_per_pass);
    for (size_t begin = 0; begin < rows.size(); begin += per) {
      const std::vector<int64_t> part(rows.begin() + static_cast<std::ptrdiff_t>(begin),
                                      rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), begin + per)));
      out.push_back(pair_micro_batch(*train_, part, scoring_.pad_id, scoring_.max_width, ref_train_, device));
    }
    return out;
  }

  StageLoss loss(RoleModel& model, const StageMicroBatch& mb) override {
    const PairValues policy = pair_logps(*model.model, dpo_batch_of(mb), scoring_.view, scoring_.kind);
    const auto [ref_chosen, ref_rejected] = reference_of(mb);
    const PairLogps logps{policy.chosen, policy.rejected, ref_chosen, ref_rejected};
    const PairLoss l = dpo_loss(logps, options_);
    return {l.per_pair.sum(), dpo_statistic_sums(l, logps)};
  }

  // The held-out pairs evaluated: the first dpo.eval_count (0 = all).
  int64_t heldout_count() const {
    return cfg_.get<DpoConfig>().stage.eval_count > 0 ? std::min<int64_t>(cfg_.get<DpoConfig>().stage.eval_count, heldout_->size()) : heldout_->size();
  }

  bool evaluates() const override { return heldout_ != nullptr; }
  StageEval evaluate(RoleModels& models, int64_t done) override {
    return evaluator_->evaluate(models.get(Role::actor), done);
  }

 private:
  const Config& cfg_;
  PairScoring scoring_;
  DpoOptions options_;
  MPI_Comm world_;
  std::unique_ptr<PairDataset> train_, heldout_;
  ReferenceLogps ref_train_;
  std::unique_ptr<DpoEvaluator> evaluator_;
};

}  // namespace

int64_t dpo_steps(const DpoConfig& dpo, int64_t pairs, int ranks) {
  if (dpo.stage.steps > 0) return dpo.stage.steps;
  const double per_step = static_cast<double>(dpo.stage.batch) * ranks;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(dpo.stage.epochs * static_cast<double>(pairs) / per_step - 1e-9)));
}

void check_dpo_deck(const Config& cfg, const Placement& placement) {
  const Deck& deck = cfg.deck;
  check_stage_deck_keys(cfg, "dpo", cfg.get<DpoConfig>().enabled(), "the preference pairs");
  for (Role role : {Role::critic, Role::reward})
    if (placement.has(role))
      deck.fail(std::string("placement.") + role_name(role),
                std::string("places the ") + role_name(role) + " on ranks, but quartet dpo trains the actor against a "
                "frozen reference alone: set placement." + role_name(role) + " = 0");
  if (!placement.has(Role::reference))
    deck.fail("placement.reference", "places no reference, but quartet dpo needs the frozen reference policy (by "
                                     "default the actor's starting weights, model.reference.path): give it ranks of "
                                     "its own (placement.reference = 1) or use placement.mode = colocated");
  for (Role role : {Role::actor, Role::reference}) {
    const ModelSpec spec = resolve_model(cfg, role);
    if (cfg.get<DpoConfig>().stage.max_tokens > spec.config.position_limit())
      deck.fail("dpo.max_tokens", "is " + std::to_string(cfg.get<DpoConfig>().stage.max_tokens) + ", but the " + role_name(role) + " (" +
                                      model_section(cfg, role).path + ") has " +
                                      std::to_string(spec.config.position_limit()) + " positions");
  }
}

int run_dpo(Runtime& rt) {
  const Config& cfg = rt.config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<DpoObjective> objective;
  StageSchedule schedule;
  const bool ok = rt.world.agree([&] {
    check_dpo_deck(cfg, rt.placement);
    tokenizer = run_tokenizer(cfg);
    // Both models take the tokenizer's ids, and their weights load (headers only), as train checks them.
    check_models_fit_run(stage_plan_config(cfg), rt.placement, *tokenizer);
    objective = std::make_unique<DpoObjective>(cfg, *tokenizer, rt.world.comm());
    schedule.steps = dpo_steps(cfg.get<DpoConfig>(), objective->train_rows(), rt.groups->of(Role::actor).size());
    schedule.batch = cfg.get<DpoConfig>().stage.batch;
    schedule.eval_every = cfg.get<DpoConfig>().stage.eval_every;
    schedule.eval_at_start = cfg.get<DpoConfig>().stage.eval_at_start;
    schedule.eval_at_end = cfg.get<DpoConfig>().stage.eval_at_end;
    schedule.log_every = cfg.get<DpoConfig>().stage.log_every;
  });
  if (!ok) return kExitUsage;
  return run_stage(rt, *objective, schedule);
}

}  // namespace quartet

#include "quartet/rl/trainer.hpp"

#include <torch/types.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "quartet/core/build_info.hpp"
#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/log.hpp"
#include "quartet/core/profile.hpp"
#include "quartet/core/signals.hpp"
#include "quartet/core/units.hpp"
#include "quartet/dist/placement_config.hpp"
#include "quartet/dist/watched_mpi.hpp"
#include "quartet/engine/checkpoint_config.hpp"
#include "quartet/engine/phase_clock.hpp"
#include "quartet/engine/running_moments.hpp"
#include "quartet/engine/sampling_setup.hpp"
#include "quartet/engine/stop_control.hpp"
#include "quartet/engine/training_checkpoint.hpp"
#include "quartet/io/run_file.hpp"
#include "quartet/model/models_config.hpp"
#include "quartet/rl/algorithm.hpp"
#include "quartet/rl/algorithm_config.hpp"
#include "quartet/rl/dynamic_sampling.hpp"
#include "quartet/rl/eval_config.hpp"
#include "quartet/rl/evaluator.hpp"
#include "quartet/rl/iteration_metrics.hpp"
#include "quartet/rl/iteration_record.hpp"
#include "quartet/rl/model_parking.hpp"
#include "quartet/rl/output_config.hpp"
#include "quartet/rl/overlong.hpp"
#include "quartet/rl/rewards/reward_config.hpp"
#include "quartet/rl/rewards/reward_retokenizer.hpp"
#include "quartet/rl/rewards/reward_samples.hpp"
#include "quartet/rl/rewards/reward_terms.hpp"
#include "quartet/rl/rollout_generator.hpp"
#include "quartet/rl/scoring.hpp"
#include "quartet/rl/train_checks.hpp"
#include "quartet/shard/memory_plan.hpp"

namespace quartet {

namespace {

class Trainer {
 public:
  explicit Trainer(Runtime& rt)
      : rt_(rt), cfg_(rt.config), al_(cfg_.get<AlgorithmConfig>()), spec_(algorithm_spec(al_.algorithm)),
        started_(monotonic_seconds()), stop_(rt.world, cfg_.get<RunConfig>().time_limit, started_),
        clock_(rt.device, rt.world.rank(), cfg_.get<ProfileConfig>(), cfg_.get<RunConfig>().out + "/profile") {}

  int run() {
    if (!refuse_or_plan()) return kExitUsage;
    const int first = build();
    if (stop_.requested()) {
      printf0("train: a stop request came during start-up: exit %d before iteration %d, with nothing new to "
              "checkpoint\n", kExitResubmit, first + 1);
      return kExitResubmit;
    }
    if (first >= cfg_.get<RunConfig>().iterations) {
      printf0("train: the checkpoint is at iteration %d of %d: nothing left to do (raise run.iterations to go on)\n",
              first, cfg_.get<RunConfig>().iterations);
      return kExitDone;
    }
    const double loop_start = monotonic_seconds();
    for (int index = first; index < cfg_.get<RunConfig>().iterations; ++index) {
      Iteration it;
      it.index = index;
      IterationMetrics metrics;
      metrics.name_reward_terms(rewards_->logged_names());
      std::vector<EvalMetrics> evals;  // the evaluations taken in this iteration
      clock_.begin_iteration(index);
      if (index == 0 && evaluator_->due(0)) {
        evals.push_back(evaluate(0));
        printf0("%s\n", evals.back().log_line(cfg_.get<RunConfig>().iterations).c_str());
        clock_.start();
      }
      sample(it, metrics);
      if (stop_.stop_now()) return stopped_between_phases();
      estimate_advantages(it, metrics);
      if (stop_.stop_now()) return stopped_between_phases();
      update(it, metrics);
      if (evaluator_->due(index + 1)) evals.push_back(evaluate(index + 1));
      record(it, metrics, evals, (monotonic_seconds() - loop_start) / (index + 1 - first));
      if (const std::optional<int> exit = checkpoint_or_stop(it, metrics.iteration_seconds)) return *exit;
    }
    report_memory();
    printf0("train: done in %s\n", duration_text(monotonic_seconds() - loop_start).c_str());
    return kExitDone;
  }

 private:
  RoleModel* model(Role r) const { return models_.get(r); }
  bool colocated() const { return rt_.placement.mode == PlacementMode::colocated; }

  bool refuse_or_plan();
  void read_prompts();
  int build();
  void open_run_file(const TrainerState& state);
  void make_phases();

  void sample(Iteration& it, IterationMetrics& metrics);
  // sample's generation and scoring, with dynamic sampling's further rounds.
  void sample_rounds(Iteration& it, IterationMetrics& metrics);
  void generate(Iteration& it);
  void score(Iteration& it);
  void mark_overlong(Iteration& it);
  bool another_round(bool mine);
  void estimate_advantages(Iteration& it, IterationMetrics& metrics);
  void update(Iteration& it, IterationMetrics& metrics);
  EvalMetrics evaluate(int done);
  std::vector<double> eval_rewards(const EvalRows& rows);
  void record(const Iteration& it, IterationMetrics& metrics, const std::vector<EvalMetrics>& evals,
              double seconds_per_iteration);
  std::optional<int> checkpoint_or_stop(const Iteration& it, double iteration_seconds);

  int stopped_between_phases() const;
  void write_checkpoint(int64_t iterations_done, const std::string& why);
  void report_memory();
  std::vector<std::string> decode_completions(const RolloutBatch& b) const;
  // What generation samples from (engine/experience.hpp): the actor's and the reference's
  // log-probs are taken over it, so that the ratio and the KL compare like with like.
  SamplingView sampling_view() const {
    return {tokenizer_->vocab_size(), cfg_.get<RolloutConfig>().temperature > 0 ? cfg_.get<RolloutConfig>().temperature : 1.0};
  }

  Runtime& rt_;
  const Config& cfg_;
  const AlgorithmConfig& al_;
  const AlgorithmSpec& spec_;
  double started_;  // the time limit counts from here
  StopControl stop_;
  PhaseClock clock_;
  std::optional<std::string> resume_;  // the checkpoint to continue from
  bool park_idle_ = false;             // colocated: the memory plan's placement.park decision

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<RewardTerms> rewards_;  // the text rewards and the terms' weights
  std::unique_ptr<RewardTerms> eval_reward_;  // eval.reward's, when it is not the run's own
  SamplingParams sampling_;  // the run's: stop ids, pad id, vocabulary limit
  RoleModels models_;
  std::unique_ptr<ModelParking> parking_;
  std::unique_ptr<PromptDataset> dataset_;   // actor ranks
  std::unique_ptr<PromptSampler> sampler_;   // actor ranks
  std::unique_ptr<RunFile> run_file_;        // actor ranks
  std::unique_ptr<Scoring> scoring_;
  RewardReading reward_reading_;                     // how the reward model reads the rollouts
  std::unique_ptr<RewardRetokenizer> retokenizer_;   // actor ranks, where it reads them as text
  std::unique_ptr<RolloutGenerator> generator_;  // actor ranks
  std::vector<DatasetPrompt> eval_prompts_;      // actor ranks: their share of eval.prompts
  std::unique_ptr<Evaluator> evaluator_;         // every rank
  ScorePasses score_passes_ = 1;

  KlController kl_;
  RunningMoments moments_;
  int64_t actor_step_ = 0, actor_total_ = 0, critic_step_ = 0, critic_total_ = 0;
  double checkpoint_seconds_ = 0;    // the last checkpoint's write time, for the time limit
  double train_seconds_before_ = 0;  // loop time of earlier sessions (resumed runs)
  std::string run_id_;
};

// Everything that can be refused, before any model is built: the deck, the models against the
// tokenizer and the sequences, the prompts file against the actor, the memory plan (each rank on
// its own, then a verdict), the checkpoint to resume from (collectively), the user's reward code.
bool Trainer::refuse_or_plan() {
  const bool checked = rt_.world.agree([&] {
    check_train_deck(cfg_, rt_.placement);
    rewards_ = std::make_unique<RewardTerms>(cfg_);
    if (const auto& eval = cfg_.get<EvalConfig>().reward) eval_reward_ = std::make_unique<RewardTerms>(cfg_, *eval, "eval.reward");
    tokenizer_ = run_tokenizer(cfg_);
    check_models_fit_run(cfg_, rt_.placement, *tokenizer_);
    check_prompts_fit_actor(cfg_);
    if (rt_.placement.has(Role::reward)) reward_reading_ = reward_reading(cfg_, *tokenizer_);
    read_prompts();
    // The plan first: a deck that cannot fit stops here, before any GPU memory is touched.
    auto plan = make_memory_plan(cfg_, rt_.world.size(), rt_.world.local_size());
    check_plan(plan);
    park_idle_ = plan.park_idle;
  });
  if (!checked || !rt_.world.agree_collectively([&] { resume_ = choose_resume_checkpoint(rt_); })) return false;
  // Last, once the deck is known to run: the user's program starts (or the endpoint is
  // reached) on each actor rank, and one that does not answer stops every rank here.
  return rt_.world.agree([&] {
    if (dataset_) rewards_->start_user_code(cfg_.get<RewardCallConfig>());
    if (dataset_ && eval_reward_) eval_reward_->start_user_code(cfg_.get<RewardCallConfig>());
  });
}

// The actor ranks read the prompts (and their share of eval.prompts); a bad row stops every rank
// before any model is built.
void Trainer::read_prompts() {
  const auto& actor_ranks = rt_.placement.ranks_of(Role::actor);
  const auto me = std::find(actor_ranks.begin(), actor_ranks.end(), rt_.world.rank());
  if (me == actor_ranks.end()) return;
  const RolloutConfig& rollout = cfg_.get<RolloutConfig>();
  dataset_ = std::make_unique<PromptDataset>(rollout.prompts, rollout.prompt_field, tokenizer_.get(), rollout.max_prompt_tokens);
  const EvalConfig& eval = cfg_.get<EvalConfig>();
  if (!eval.enabled()) return;
  const PromptDataset held_out(eval.prompts, eval.prompt_field, tokenizer_.get(), rollout.max_prompt_tokens);
  eval_prompts_ = eval_share(cfg_, held_out, static_cast<int>(me - actor_ranks.begin()), static_cast<int>(actor_ranks.size()));
}

// The models (from the checkpoint when resuming), the loop's state, the run file and the
// phases; returns the first iteration to run.
int Trainer::build() {
  sampling_ = rollout_sampling(cfg_, sampling_setup(cfg_, *tokenizer_, resolve_model(cfg_, Role::actor)));
  kl_.adaptive = al_.kl_controller == KlControl::adaptive;
  kl_.coef = al_.kl_coef;
  kl_.target = al_.kl_target;
  kl_.horizon = al_.kl_horizon;
  printf0("train: %s, %s placement (%s), %d iterations\n", name_of(al_.algorithm), name_of(rt_.placement.mode),
          rt_.placement.describe().c_str(), cfg_.get<RunConfig>().iterations);
  if (!reward_reading_.note.empty()) printf0("train: %s\n", reward_reading_.note.c_str());
  // A chunk larger than the batch is the batch: said, not refused, since decks set micro_batch
  // for their batch and a smaller rollout.batch given on the command line keeps it.
  const RolloutConfig& rollout = cfg_.get<RolloutConfig>();
  if (rollout.micro_batch > rollout.batch)
    printf0("train: rollout.micro_batch %d is more than rollout.batch %d: each generation is one chunk of %d prompts\n",
            rollout.micro_batch, rollout.batch, rollout.batch);
  models_ = build_role_models(cfg_, *rt_.groups, rt_.device, resume_.value_or(""));
  TrainerState state;
  if (resume_) {
    state = load_trainer_state(rt_, *resume_);
    actor_step_ = state.actor_step;
    critic_step_ = state.critic_step;
    // critic_total is not restored: it is recomputed for this run's run.iterations, which a
    // resumed job may have raised.
    kl_.coef = state.kl_coef;
    moments_ = state.moments;
    train_seconds_before_ = state.train_seconds;
    printf0("train: resuming from %s: %lld of %d iterations done\n", resume_->c_str(),
            static_cast<long long>(state.iteration), cfg_.get<RunConfig>().iterations);
  } else {
    state.run_id = new_run_id(rt_.world);
  }
  run_id_ = state.run_id;
  // Again, now that MPI, CUDA and NCCL are up: one of them may have taken the signals over.
  if (install_stop_handlers())
    eprintf_rank("train: warning: a library had replaced the SIGUSR1/SIGTERM handler; quartet's is back\n");
  if (model(Role::actor)) open_run_file(state);
  make_phases();
  return static_cast<int>(state.iteration);
}

// The actor group writes the run file (rollouts collectively, numbers by its first rank) and
// draws the prompts.
void Trainer::open_run_file(const TrainerState& state) {
  RoleModel& actor = *model(Role::actor);
  RunFileInfo info;
  info.run_id = run_id_;
  info.version = QUARTET_VERSION;
  info.git_commit = git_commit();
  info.deck = cfg_.deck.resolved();
  info.placement = rt_.placement.describe();
  info.algorithm = name_of(al_.algorithm);
  info.world_size = rt_.world.size();
  info.iterations_planned = cfg_.get<RunConfig>().iterations;
  for (Role role : kAllRoles) {
    const ModelSectionConfig& m = model_section(cfg_, role);
    if (has_model(cfg_, role) && !m.path.empty() && m.path.rfind("random:", 0) != 0)
      info.model_paths += std::string(role_name(role)) + " = " + m.source + " -> " + m.path + "\n";
  }
  // Starting afresh, a run.h5 already in run.out belongs to an earlier run: it is kept as
  // run.h5.prev rather than mixed with this one. A resumed run appends to its own.
  if (!resume_ && actor.group->rank() == 0 && path_exists(cfg_.get<RunConfig>().out + "/run.h5")) {
    const std::string from = cfg_.get<RunConfig>().out + "/run.h5", to = move_aside(from, ".prev");
    printf0("train: an earlier %s was moved to %s\n", from.c_str(), to.c_str());
  }
  watched::barrier(actor.comm, "run.h5 moved aside");
  auto plan = make_memory_plan(cfg_, rt_.world.size(), rt_.world.local_size());
  std::vector<double> planned;
  for (const auto& rp : plan.ranks) planned.push_back(static_cast<double>(rp.peak));
  run_file_ = std::make_unique<RunFile>(cfg_.get<RunConfig>().out, actor.comm, info, planned);
  sampler_ = std::make_unique<PromptSampler>(dataset_->size(), cfg_.get<RunConfig>().seed, actor.group->rank(), actor.group->size());
  if (resume_) {
    sampler_->set_cursor(state.cursor);
    // Iterations the file holds beyond the checkpoint (written before the stop, after the
    // checkpoint) are dropped: this run writes them again.
    run_file_->rewind(state.iteration);
  }
}

void Trainer::make_phases() {
  const ChunkLayout layout(cfg_.get<RolloutConfig>());
  // Sequences per scoring pass: rollout.score_micro_batch, else a whole chunk's (what the memory
  // plan counts). Wider passes keep the device busy: at 8 sequences of 256 tokens an 886M
  // model's forward spends a sixth of its time waiting for the host's launches.
  score_passes_.rows = cfg_.get<RolloutConfig>().score_micro_batch > 0
                           ? cfg_.get<RolloutConfig>().score_micro_batch
                           : static_cast<int64_t>(layout.prompts_per_chunk) * al_.samples_per_prompt;
  score_passes_.tokens = cfg_.get<RolloutConfig>().score_tokens;  // packed passes where set
  parking_ = std::make_unique<ModelParking>(models_, colocated() && park_idle_);
  ScoringSetup setup;
  setup.chunks = layout.chunks;
  setup.passes = score_passes_;
  setup.pad_id = sampling_.pad_id;
  setup.max_width = max_rollout_width(cfg_.get<RolloutConfig>());
  setup.view = sampling_view();
  setup.decode = [this](const RolloutBatch& b) { return decode_completions(b); };
  setup.reward_pad_id = sampling_.pad_id;
  if (reward_reading_.retokenize()) {
    setup.reward_pad_id = reward_reading_.pad_id();
    if (model(Role::actor)) {
      retokenizer_ = std::make_unique<RewardRetokenizer>(cfg_, reward_reading_);
      setup.reward_input = [this](const RolloutBatch&, const std::vector<std::string>& completions, const RowPrompts& p) {
        return retokenizer_->batch(completions, p.texts, p.records);
      };
    }
  }
  scoring_ = make_scoring(rt_, models_, *parking_, std::move(setup));
  if (RoleModel* actor = model(Role::actor)) {
    generator_ = std::make_unique<RolloutGenerator>(cfg_, *actor, *dataset_, *sampler_, sampling_, rt_.world.rank());
    const int64_t rows = static_cast<int64_t>(cfg_.get<RolloutConfig>().batch) * al_.samples_per_prompt;
    actor_total_ = cfg_.get<RunConfig>().iterations * steps_per_iteration(cfg_, rows);
  }
  evaluator_ = std::make_unique<Evaluator>(
      cfg_, model(Role::actor), std::move(eval_prompts_), sampling_,
      [this](const RolloutBatch& b) { return decode_completions(b); },
      [this](const EvalRows& rows) { return eval_rewards(rows); }, rt_.world.rank(), rt_.world.comm());
}

// ---- the phases ---------------------------------------------------------------------------------

// Generation and scoring: one round, or with algorithm.dynamic_sampling as many as it takes to
// keep rollout.batch informative prompt groups on every actor rank (rl/dynamic_sampling.hpp).
void Trainer::sample(Iteration& it, IterationMetrics& metrics) {
  metrics.show_dual_clip = al_.clip_ratio_c > 0;
  metrics.show_overlong = al_.overlong_filter || al_.overlong_buffer > 0;
  metrics.show_dynamic_sampling = al_.dynamic_sampling;
  // Generation proper over every round (dynamic sampling) of this iteration.
  const double decode_seconds = generator_ ? generator_->decode_seconds() : 0;
  const int64_t decode_steps = generator_ ? generator_->decode_steps() : 0;
  sample_rounds(it, metrics);
  if (generator_) {
    metrics.decode_seconds = generator_->decode_seconds() - decode_seconds;
    metrics.decode_steps = static_cast<double>(generator_->decode_steps() - decode_steps);
  }
}

void Trainer::sample_rounds(Iteration& it, IterationMetrics& metrics) {
  generate(it);
  score(it);
  mark_overlong(it);
  if (!al_.dynamic_sampling) return;
  RoleModel* actor = model(Role::actor);
  std::optional<DynamicBatch> kept;
  if (actor) kept.emplace(al_.samples_per_prompt, cfg_.get<RolloutConfig>().batch, sampling_.pad_id, max_rollout_width(cfg_.get<RolloutConfig>()));
  int rounds = 1;
  for (;; ++rounds) {
    const bool full = !actor || kept->add(std::move(it));
    if (!another_round(!full) || rounds >= al_.dynamic_sampling_max_rounds) break;
    Iteration next;
    next.index = it.index;
    next.round = rounds;
    clock_.start();
    generate(next);
    score(next);
    mark_overlong(next);
    it = std::move(next);
  }
  if (!actor) return;
  it = kept->take();
  metrics.groups_drawn += static_cast<double>(kept->groups_drawn());
  metrics.groups_dropped += static_cast<double>(kept->groups_dropped());
  metrics.groups_filled += static_cast<double>(kept->groups_filled());
  metrics.drawn_score_sum += kept->drawn_score_sum();
  metrics.drawn_count += static_cast<double>(kept->drawn_samples());
  if (actor->group->rank() == 0) metrics.sampling_rounds += rounds;
}

// Whether any rank wants another generation round (collective over the world: every scoring
// group takes part in every round).
bool Trainer::another_round(bool mine) {
  int any = mine ? 1 : 0;
  watched::allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, rt_.world.comm(), "dynamic sampling: another round?");
  return any != 0;
}

// Actor ranks: which rows ran out of room (algorithm.overlong_filter), and DAPO's soft overlong
// penalty on the scores (algorithm.overlong_buffer), before dynamic sampling judges them.
void Trainer::mark_overlong(Iteration& it) {
  if (!model(Role::actor) || !(al_.overlong_filter || al_.overlong_buffer > 0)) return;
  it.truncated = truncated_rows(it.batch, sampling_.stop_ids, cfg_.get<RolloutConfig>().max_new_tokens).to(torch::kCPU);
  if (al_.overlong_buffer > 0) {
    auto lengths = it.batch.action_mask.ne(0).sum(1).to(torch::kCPU);
    it.overlong_penalty = overlong_penalty(lengths, cfg_.get<RolloutConfig>().max_new_tokens, al_.overlong_buffer,
                                           al_.overlong_penalty_factor);
    it.scores = it.scores.to(torch::kCPU, torch::kFloat32) + it.overlong_penalty;
  }
}

void Trainer::generate(Iteration& it) {
  if (generator_) {
    parking_->keep_only({Role::actor});
    generator_->generate(it, *scoring_, sampling_view(), score_passes_);
  }
  clock_.end(kGenerate);
}

void Trainer::score(Iteration& it) {
  clock_.start();
  scoring_->score(it, clock_);
  if (model(Role::actor)) rewards_->score(it);
  clock_.end(kScore);
}

// Actor ranks: the scores shaped (normalised, clipped), the KL to the reference, the
// algorithm's advantages; the KL controller's step; the returns to the critic.
void Trainer::estimate_advantages(Iteration& it, IterationMetrics& metrics) {
  clock_.start();
  if (RoleModel* actor = model(Role::actor)) {
    Collectives* group = actor->group;
    const auto dev = actor->model->device();
    auto mask = it.batch.action_mask.to(dev).to(torch::kFloat32);
    it.scores = it.scores.to(dev).to(torch::kFloat32);
    auto shaped = it.scores;
    if (al_.normalize_rewards) {
      moments_.update(shaped, group);
      shaped = moments_.normalise(shaped);
    }
    if (al_.reward_clip > 0) shaped = shaped.clamp(-al_.reward_clip, al_.reward_clip);
    if (it.ref_logp.defined()) {
      it.ref_logp = it.ref_logp.to(dev);
      it.kl = kl_estimate(it.old_logp.to(dev), it.ref_logp, mask, al_.kl_estimator);
    }
    metrics.add_rollouts(it.scores, mask, it.kl);
    if (it.truncated.defined()) metrics.truncated += it.truncated.sum().item<double>();
    if (it.overlong_penalty.defined()) metrics.overlong_penalty += it.overlong_penalty.sum().item<double>();
    if (it.reward_terms.defined()) metrics.add_reward_terms(it.reward_terms);
    AdvantageInputs in{shaped, it.kl, it.values, mask, kl_.coef, group};
    AdvantagesReturns ar = spec_.advantages(in, al_);
    it.advantages = ar.advantages;
    it.returns = ar.returns;
    // The controller sees the mean per-sequence KL of the whole actor group.
    auto stats = torch::tensor({metrics.kl_sum, metrics.score_count},
                               torch::TensorOptions().dtype(torch::kFloat64).device(group->device()));
    group->all_reduce(stats, ReduceOp::sum);
    if (it.ref_logp.defined()) kl_.update(stats[0].item<double>() / stats[1].item<double>(), stats[1].item<double>());
  }
  scoring_->send_returns(it);
  clock_.end(kAdvantages);
}

// The actor's and the critic's updates, concurrently on their own groups (disjoint).
void Trainer::update(Iteration& it, IterationMetrics& metrics) {
  clock_.start();
  const uint64_t shuffle_seed = cfg_.get<RunConfig>().seed * 31u + static_cast<uint64_t>(it.index);
  if (RoleModel* actor = model(Role::actor)) {
    parking_->keep_only({Role::actor});
    PolicyTargets targets{it.batch,        it.old_logp, it.advantages, spec_.kl == KlUse::loss ? it.ref_logp : torch::Tensor(),
                          sampling_view(), torch::Tensor()};
    if (al_.overlong_filter) {
      // Truncated rows count nothing in the loss: their loss mask is empty.
      auto finished = it.truncated.logical_not().to(it.batch.action_mask.device()).unsqueeze(1);
      targets.loss_mask = it.batch.action_mask * finished.to(it.batch.action_mask.scalar_type());
    }
    it.policy = update_policy(*actor, targets, cfg_, &actor_step_, actor_total_, shuffle_seed);
    if (actor->group->rank() == 0) metrics.add_policy(it.policy, kl_.coef);
  }
  if (RoleModel* critic = model(Role::critic)) {
    parking_->keep_only({Role::critic});
    if (critic_total_ == 0)
      critic_total_ = cfg_.get<RunConfig>().iterations * steps_per_iteration(cfg_, group_max(*critic->group, it.critic_batch.rows()));
    it.value = update_critic(*critic, it.critic_batch, it.critic_values, it.returns, cfg_, &critic_step_, critic_total_,
                             shuffle_seed + 7);
    if (critic->group->rank() == 0) metrics.add_value(it.value);
  }
  clock_.end(kTrain);
}

// The policy on the held-out prompts ([eval]), every rank at once, as its own phase.
EvalMetrics Trainer::evaluate(int done) {
  clock_.start();
  if (model(Role::actor)) parking_->keep_only({Role::actor});
  EvalMetrics m = evaluator_->evaluate(done);
  clock_.end(kEval);
  return m;
}

// The evaluation's rows scored as training's are (the reward model on its ranks, every rank
// taking part, then the run's reward terms on the actor ranks), or by eval.reward alone.
std::vector<double> Trainer::eval_rewards(const EvalRows& rows) {
  const bool by_reward_model = !eval_reward_ && uses_reward_model(cfg_);
  const torch::Tensor model_scores = by_reward_model ? scoring_->reward_scores(rows.batch, rows.completions, {rows.prompts, rows.records})
                                                     : torch::Tensor();
  if (!model(Role::actor)) return {};
  const RewardRows view{rows.prompts, rows.completions, rows.answers, rows.records, rows.indices};
  RewardTerms& grader = eval_reward_ ? *eval_reward_ : *rewards_;
  const torch::Tensor total = grader.totals(reward_samples(view, cfg_.get<EvalConfig>().prompt_field), model_scores).total;
  if (!total.defined()) return {};
  const auto scores = total.to(torch::kCPU).to(torch::kDouble).contiguous();
  return {scores.data_ptr<double>(), scores.data_ptr<double>() + scores.numel()};
}

// The world's metrics: the log line (and the evaluations' after it), run.h5, now and then a sample.
void Trainer::record(const Iteration& it, IterationMetrics& metrics, const std::vector<EvalMetrics>& evals,
                     double seconds_per_iteration) {
  metrics.phase_seconds = clock_.all_seconds();
  metrics.iteration_seconds = clock_.iteration_seconds();
  metrics.reduce(rt_.world.comm());
  const double eta = seconds_per_iteration * (cfg_.get<RunConfig>().iterations - it.index - 1);
  const int done = it.index + 1, iterations = cfg_.get<RunConfig>().iterations;
  if (done % cfg_.get<OutputConfig>().log_every == 0 || done == iterations)
    printf0("%s\n", metrics.log_line(done, iterations, spec_, eta).c_str());
  for (const EvalMetrics& e : evals)
    if (e.iteration > 0) printf0("%s\n", e.log_line(cfg_.get<RunConfig>().iterations).c_str());
  record_iteration(run_file_.get(), rt_.world, it, metrics, clock_, spec_, cfg_.get<OutputConfig>().rollouts_every, evals);
  // A sample, so that the log shows what the policy writes (the actor's first rank holds it).
  const int every = cfg_.get<OutputConfig>().sample_every;
  RoleModel* actor = model(Role::actor);
  if (every > 0 && (it.index + 1) % every == 0 && actor && actor->group->rank() == 0 && it.batch.rows() > 0) {
    std::printf("  sample: %s -> \"%s\" (score %.2f)\n", it.prompts[0].c_str(), it.completions[0].c_str(),
                it.scores[0].item<double>());
    std::fflush(stdout);
  }
}

// A checkpoint every checkpoint.every iterations and at the end; on a stop request or near the
// time limit, a checkpoint and exit 75; on a second request, exit 76 at once.
std::optional<int> Trainer::checkpoint_or_stop(const Iteration& it, double iteration_seconds) {
  const int done = it.index + 1;
  const bool last = done == cfg_.get<RunConfig>().iterations;
  const Stop stop = last ? Stop::none : stop_.after_iteration(iteration_seconds, checkpoint_seconds_);
  if (stop == Stop::now) {
    printf0("train: a second stop request: stopping after iteration %d without a new checkpoint (exit %d); the run "
            "continues from the previous checkpoint when resubmitted\n", done, kExitStopped);
    return kExitStopped;
  }
  if (stop != Stop::none) {
    const std::string why = stop == Stop::signal
                                ? std::string(first_stop_signal()[0] ? first_stop_signal() : "a signal") + " on some rank"
                                : "time limit";
    printf0("train: stopping after iteration %d of %d (%s)\n", done, cfg_.get<RunConfig>().iterations, why.c_str());
    write_checkpoint(done, why);
    printf0("train: exit %d: checkpointed; resubmit the job to continue from iteration %d\n", kExitResubmit, done);
    return kExitResubmit;
  }
  const int every = cfg_.get<CheckpointConfig>().every;
  if ((every > 0 && done % every == 0) || (last && cfg_.get<CheckpointConfig>().at_end))
    write_checkpoint(done, last ? "end of the run" : "every");
  return std::nullopt;
}

// ---- helpers ------------------------------------------------------------------------------------

int Trainer::stopped_between_phases() const {
  printf0("train: a second stop request: stopping now, without a new checkpoint (exit %d); the run continues from "
          "the previous checkpoint when resubmitted\n", kExitStopped);
  return kExitStopped;
}

void Trainer::write_checkpoint(int64_t iterations_done, const std::string& why) {
  TrainerState st;
  st.iteration = iterations_done;
  st.actor_step = actor_step_;
  st.critic_step = critic_step_;
  st.critic_total = critic_total_;
  if (sampler_) st.cursor = sampler_->cursor();
  st.kl_coef = kl_.coef;
  st.moments = moments_;
  st.train_seconds = train_seconds_before_ + (monotonic_seconds() - started_);
  st.run_id = run_id_;
  CheckpointWrite w = save_training_checkpoint(rt_, models_, st, {"train", {Role::actor, Role::critic}, name_of(al_.algorithm)});
  checkpoint_seconds_ = w.seconds;
  printf0("train: checkpoint %s (%s): %.2f GB in %.1fs (%.2f GB/s; files %.1fs, checksums + fsync + manifest %.1fs)\n",
          w.dir.c_str(), why.c_str(), static_cast<double>(w.bytes) / 1e9, w.seconds,
          static_cast<double>(w.bytes) / 1e9 / std::max(1e-9, w.seconds), w.write_seconds, w.seconds - w.write_seconds);
}

// Every rank's measured peak per phase against its plan, printed by rank 0.
void Trainer::report_memory() {
  const World& world = rt_.world;
  if (!rt_.device.is_cuda()) {
    printf0("train: peak device memory per phase is measured on GPUs only (this run is on the CPU)\n");
    return;
  }
  auto plan = make_memory_plan(cfg_, world.size(), world.local_size());
  constexpr double kGiB = 1ull << 30;
  std::vector<double> mine;
  for (double bytes : clock_.peak_bytes()) mine.push_back(bytes / kGiB);
  double planned = 0;
  for (const auto& role : plan.ranks[static_cast<size_t>(world.rank())].roles)
    planned = std::max(planned, static_cast<double>(role.peak) / kGiB);
  mine.push_back(planned);
  std::vector<double> all(static_cast<size_t>(world.size()) * mine.size());
  watched::gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), 0, world.comm(),
                  "every rank's peak memory");
  printf0("train: peak device memory per phase (GiB, caching allocator) against the plan's peak\n");
  printf0("  %-5s %-30s %9s %9s %11s %9s %9s %9s\n", "rank", "roles", "generate", "score", "advantages", "train", "eval",
          "plan");
  for (int r = 0; r < world.size(); ++r) {
    std::string roles;
    for (Role role : rt_.placement.roles_of(r)) roles += std::string(roles.empty() ? "" : "+") + role_name(role);
    const double* v = all.data() + static_cast<size_t>(r) * mine.size();
    printf0("  %-5d %-30s %9.2f %9.2f %11.2f %9.2f %9.2f %9.2f\n", r, roles.c_str(), v[kGenerate], v[kScore],
            v[kAdvantages], v[kTrain], v[kEval], v[kPhases]);
  }
}

// The generated text of every row (up to its stop token), decoded in one pass on the CPU.
std::vector<std::string> Trainer::decode_completions(const RolloutBatch& b) const {
  auto actions = b.sequences.narrow(1, b.prompt_len(), b.actions()).to(torch::kCPU).contiguous();
  auto mask = b.action_mask.to(torch::kCPU).to(torch::kLong).contiguous();
  auto ids_of = actions.accessor<int64_t, 2>();
  auto mask_of = mask.accessor<int64_t, 2>();
  std::vector<std::string> out;
  for (int64_t r = 0; r < b.rows(); ++r) {
    std::vector<int64_t> ids;
    for (int64_t t = 0; t < b.actions(); ++t)
      if (mask_of[r][t]) ids.push_back(ids_of[r][t]);
    out.push_back(tokenizer_->decode(ids, /*skip_special_tokens=*/true));
  }
  return out;
}

}  // namespace

int train(Runtime& runtime) {
  Trainer trainer(runtime);
  return trainer.run();
}

}  // namespace quartet

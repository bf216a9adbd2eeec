#include "quartet/core/build_info.hpp"
#include "quartet/rl/trainer.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/log.hpp"
#include "quartet/core/profile.hpp"
#include "quartet/core/signals.hpp"
#include "quartet/dist/device_memory.hpp"
#include "quartet/dist/exchange.hpp"
#include "quartet/dist/watched_mpi.hpp"
#include "quartet/io/run_file.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/rl/advantages.hpp"
#include "quartet/rl/experience.hpp"
#include "quartet/rl/prompt_dataset.hpp"
#include "quartet/rl/role_models.hpp"
#include "quartet/rl/rule_rewards.hpp"
#include "quartet/rl/training_checkpoint.hpp"
#include "quartet/rl/updates.hpp"
#include "quartet/shard/memory_plan.hpp"

namespace quartet {

namespace {

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string duration_text(double s) {
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

// The metrics of one iteration, summed over the world: each slot is filled by the ranks that
// own it (already divided by their count where it is a mean), zero elsewhere.
enum Slot {
  kScoreSum, kScoreSqSum, kScoreCount, kScoreMin, kScoreMax, kKlSum, kLengthSum, kPolicyLoss, kClip, kApproxKl,
  kEntropy, kKlLoss, kValueLoss, kValueClip, kActorNorm, kCriticNorm, kKlCoef, kLr, kSlots
};
enum Phase { kGenerate, kScore, kAdvantages, kTrain, kPhases };
const char* const kPhaseNames[] = {"generate", "score", "advantages", "train"};

// One exchange per scoring group and generation chunk, so that chunk c can be in flight while
// chunk c - 1 is being scored (each exchange holds one outstanding batch).
struct Exchanges {
  std::vector<std::unique_ptr<GroupExchange>> reference, reward, critic, returns;
};

// [r_c, A_c] parts as one [sum r_c, A] tensor, right-padded with zeros.
torch::Tensor cat_actions(const std::vector<torch::Tensor>& parts, int64_t A) {
  std::vector<torch::Tensor> padded;
  for (const auto& p : parts) {
    namespace F = torch::nn::functional;
    padded.push_back(F::pad(p, F::PadFuncOptions({0, A - p.size(1)})));
  }
  return torch::cat(padded);
}

class Trainer {
 public:
  Trainer(Runtime& rt) : rt_(rt), cfg_(rt.config), al_(cfg_.algorithm), started_(seconds()) {}
  int run();

 private:
  bool in(Role r) const {
    return rt_.groups->has(r) && rt_.groups->of(r).member();
  }
  bool colocated() const { return rt_.placement.mode == "colocated"; }
  // Colocated: only the models of the phase stay on the device.
  void activate(std::initializer_list<Role> roles);

  // cache non-null: generation's KV cache comes back in it (SamplingParams::keep_cache), with
  // room for the widest rollout.
  RolloutBatch generate_rollouts(int iteration, int chunk, int count, std::vector<std::string>* prompts,
                                 std::vector<std::string>* answers, KVCache* cache = nullptr);
  torch::Tensor rule_scores(const std::vector<std::string>& prompts, const std::vector<std::string>& completions);

  Runtime& rt_;
  const Config& cfg_;
  const AlgorithmConfig& al_;
  RoleModels models_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<RuleReward> rule_;
  std::unique_ptr<PromptDataset> dataset_;
  std::unique_ptr<PromptSampler> sampler_;
  std::vector<int64_t> stop_ids_;
  int64_t pad_id_ = 0;
  KlController kl_;
  RunningMoments moments_;
  std::unique_ptr<RunFile> run_file_;  // actor ranks
  // The generated text of every row (up to its stop token), decoded in one pass on the CPU.
  std::vector<std::string> decode_completions(const RolloutBatch& b) const;
  // What generation samples from (rl/experience.hpp): the actor's and the reference's
  // log-probs are taken over it, so that the ratio and the KL compare like with like.
  SamplingView sampling_view() const {
    return {tokenizer_->vocab_size(), cfg_.rollout.temperature > 0 ? cfg_.rollout.temperature : 1.0};
  }
  // The widest rollout the deck allows, the cap of the width buckets (rl/experience.hpp).
  int64_t max_rollout_width() const {
    return static_cast<int64_t>(cfg_.rollout.max_prompt_tokens) + cfg_.rollout.max_new_tokens;
  }
  std::vector<double> peak_gib_ = std::vector<double>(kPhases, 0.0);  // this rank's peak per phase
  // Marks the end of `phase`: its time and the device's peak since the last mark.
  double end_phase(Phase phase, double start);
  // profile.iteration (core/profile.hpp): the iteration whose phases are profiled.
  int profile_iteration_ = cfg_.profile.iteration;
  bool park_idle_ = false;  // colocated: the memory plan's placement.park decision
  KernelProfile profile_{cfg_.profile.host};
  void report_memory();

  // Stopping (core/signals.hpp). Collective over the world, at a safe point: true when any
  // rank has had a second stop request, which ends the run here without a new checkpoint.
  bool stop_now();
  // Collective, at the end of an iteration: whether to stop after checkpointing, because a
  // signal came or the next iteration and a checkpoint might not fit in run.time_limit.
  enum class Stop { none, signal, time_limit, now };
  Stop stop_after_iteration(double iteration_seconds);
  void write_checkpoint(int64_t iterations_done, const char* why);
  double started_;           // when train began (the time limit counts from here)
  double checkpoint_seconds_ = 0;  // the last checkpoint's write time, for the time limit
  double train_seconds_before_ = 0;  // loop time of earlier sessions (resumed runs)
  int64_t actor_step_ = 0, critic_step_ = 0, critic_total_ = 0;
  std::string run_id_;
};

bool Trainer::stop_now() {
  int requests = stop_requests();
  watched::allreduce(MPI_IN_PLACE, &requests, 1, MPI_INT, MPI_MAX, rt_.world.comm(), "the stop requests seen");
  if (requests < 2) return false;
  printf0("train: a second stop request: stopping now, without a new checkpoint (exit %d); the run continues from "
          "the previous checkpoint when resubmitted\n", kExitStopped);
  return true;
}

Trainer::Stop Trainer::stop_after_iteration(double iteration_seconds) {
  // [0] stop requests seen by any rank, [1] rank 0's verdict on the time limit.
  int flags[2] = {stop_requests(), 0};
  if (rt_.world.rank() == 0 && cfg_.run.time_limit > 0) {
    // Room for one more iteration and the checkpoint after it (the first checkpoint's time is
    // not known yet: an iteration's time stands in for it), with a 10% margin.
    const double write = checkpoint_seconds_ > 0 ? checkpoint_seconds_ : iteration_seconds;
    const double needed = 1.1 * (iteration_seconds + write);
    flags[1] = seconds() - started_ + needed > cfg_.run.time_limit;
  }
  watched::allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, rt_.world.comm(), "whether to stop after this iteration");
  if (flags[0] >= 2) return Stop::now;  // a second request: no time for a checkpoint
  if (flags[0] > 0) return Stop::signal;
  if (flags[1] > 0) return Stop::time_limit;
  return Stop::none;
}

void Trainer::write_checkpoint(int64_t iterations_done, const char* why) {
  TrainerState st;
  st.iteration = iterations_done;
  st.actor_step = actor_step_;
  st.critic_step = critic_step_;
  st.critic_total = critic_total_;
  if (sampler_) st.cursor = sampler_->cursor();
  st.kl_coef = kl_.coef;
  st.moments = moments_;
  st.train_seconds = train_seconds_before_ + (seconds() - started_);
  st.run_id = run_id_;
  CheckpointWrite w = save_training_checkpoint(rt_, models_, st);
  checkpoint_seconds_ = w.seconds;
  printf0("train: checkpoint %s (%s): %.2f GB in %.1fs (%.2f GB/s; files %.1fs, checksums + fsync + manifest %.1fs)\n",
          w.dir.c_str(), why, static_cast<double>(w.bytes) / 1e9, w.seconds,
          static_cast<double>(w.bytes) / 1e9 / std::max(1e-9, w.seconds), w.write_seconds, w.seconds - w.write_seconds);
}

double Trainer::end_phase(Phase phase, double start) {
  if (rt_.device.is_cuda()) {
    synchronize_device(rt_.device);
    peak_gib_[phase] = std::max(peak_gib_[phase], static_cast<double>(device_memory(rt_.device).peak_allocated) /
                                                      static_cast<double>(1ull << 30));
    reset_peak_memory(rt_.device);
  }
  const double elapsed = seconds() - start;
  if (profile_.running()) {
    static const char* names[] = {"generate", "score", "advantages", "train"};
    const std::string dir = cfg_.run.out + "/profile";
    make_directories(dir);
    const std::string tag = names[phase] + std::string(" (rank ") + std::to_string(rt_.world.rank()) + ")";
    const std::string text = profile_.stop(tag, dir + "/" + names[phase] + "_rank" + std::to_string(rt_.world.rank()) + ".json");
    std::printf("%s", text.c_str());
    std::fflush(stdout);
    if (phase != kTrain) profile_.start();
  }
  return elapsed;
}

// Every rank's measured peak per phase against its plan, printed by rank 0.
void Trainer::report_memory() {
  const World& world = rt_.world;
  if (!rt_.device.is_cuda()) {
    printf0("train: peak device memory per phase is measured on GPUs only (this run is on the CPU)\n");
    return;
  }
  auto plan = make_memory_plan(cfg_, world.size(), world.local_size());
  std::vector<double> mine = peak_gib_;
  double planned = 0;
  for (const auto& role : plan.ranks[static_cast<size_t>(world.rank())].roles)
    planned = std::max(planned, static_cast<double>(role.peak) / static_cast<double>(1ull << 30));
  mine.push_back(planned);
  std::vector<double> all(static_cast<size_t>(world.size()) * mine.size());
  watched::gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), 0, world.comm(),
                  "every rank's peak memory");
  printf0("train: peak device memory per phase (GiB, caching allocator) against the plan's peak\n");
  printf0("  %-5s %-30s %9s %9s %11s %9s %9s\n", "rank", "roles", "generate", "score", "advantages", "train", "plan");
  for (int r = 0; r < world.size(); ++r) {
    std::string roles;
    for (Role role : rt_.placement.roles_of(r)) roles += std::string(roles.empty() ? "" : "+") + role_name(role);
    const double* v = all.data() + static_cast<size_t>(r) * mine.size();
    printf0("  %-5d %-30s %9.2f %9.2f %11.2f %9.2f %9.2f\n", r, roles.c_str(), v[0], v[1], v[2], v[3], v[4]);
  }
}

void Trainer::activate(std::initializer_list<Role> roles) {
  if (!colocated() || !park_idle_) return;
  for (Role r : kAllRoles) {
    RoleModel* m = models_.get(r);
    if (!m) continue;
    const bool wanted = std::find(roles.begin(), roles.end(), r) != roles.end();
    if (wanted) m->model->unpark();
    else m->model->park();
  }
}

RolloutBatch Trainer::generate_rollouts(int iteration, int chunk, int count, std::vector<std::string>* prompts,
                                        std::vector<std::string>* answers, KVCache* cache) {
  RoleModel& actor = *models_.get(Role::actor);
  std::vector<std::vector<int64_t>> ids;
  for (int64_t index : sampler_->next(count)) {
    DatasetPrompt p = dataset_->get(index);
    for (int k = 0; k < al_.samples_per_prompt; ++k) {
      ids.push_back(p.ids);
      prompts->push_back(p.text);
      answers->push_back(p.answer);
    }
  }
  auto [prompt, prompt_mask] = left_pad(ids, pad_id_);
  const auto dev = actor.model->device();
  SamplingParams sp;
  sp.temperature = cfg_.rollout.temperature;
  sp.top_k = cfg_.rollout.top_k;
  sp.top_p = cfg_.rollout.top_p;
  sp.max_new_tokens = cfg_.rollout.max_new_tokens;
  sp.min_new_tokens = cfg_.rollout.min_new_tokens;
  sp.stop_ids = stop_ids_;
  sp.pad_id = pad_id_;
  sp.vocab_limit = tokenizer_->vocab_size();
  sp.seed = cfg_.run.seed * 1000003u + static_cast<uint64_t>(iteration) * 4099u + static_cast<uint64_t>(chunk) * 131u +
            static_cast<uint64_t>(rt_.world.rank());
  sp.keep_cache = cache != nullptr;
  sp.cache_slots = max_rollout_width();
  Generation g = generate(actor.model->module(), prompt.to(dev), prompt_mask.to(dev), sp);
  const int64_t P = prompt.size(1);
  if (cache) *cache = std::move(g.cache);
  RolloutBatch b{g.tokens, g.attention_mask, g.attention_mask.narrow(1, P, g.tokens.size(1) - P).contiguous()};
  return pad_actions(b, bucketed_actions(P, b.actions(), max_rollout_width()), pad_id_);
}

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

torch::Tensor Trainer::rule_scores(const std::vector<std::string>& prompts, const std::vector<std::string>& completions) {
  std::vector<float> scores;
  for (size_t r = 0; r < completions.size(); ++r)
    scores.push_back(static_cast<float>(rule_->score(prompts[r], completions[r])));
  return torch::tensor(scores, torch::kFloat32);
}

int Trainer::run() {
  const World& world = rt_.world;
  const int iterations = cfg_.run.iterations;
  const bool critic_free = al_.name != "ppo";
  std::optional<std::string> resume;  // the checkpoint to continue from
  // Everything that can be refused is refused on every rank alike, before any model is built.
  bool ok = world.agree([&] {
    if (!rt_.placement.has(Role::actor)) cfg_.deck.fail("placement.actor", "must give the actor at least one rank");
    if (cfg_.rollout.prompts.empty()) cfg_.deck.fail("rollout.prompts", "is not set: train needs a prompts file");
    if (!critic_free && !rt_.placement.has(Role::critic))
      cfg_.deck.fail("placement.critic", "is 0, but algorithm.name = ppo needs a critic (or use grpo | rloo | reinforce++)");
    if (critic_free && rt_.placement.has(Role::critic) && rt_.placement.mode == "disjoint")
      cfg_.deck.fail("placement.critic", "gives the critic ranks, but " + al_.name + " has no critic: set it to 0");
    const bool rule = cfg_.reward.kind.rfind("rule:", 0) == 0;
    if (rule) {
      rule_ = make_rule_reward(cfg_.reward.kind.substr(5));
      if (rt_.placement.has(Role::reward) && rt_.placement.mode == "disjoint")
        cfg_.deck.fail("placement.reward", "gives the reward ranks, but model.reward.kind is " + cfg_.reward.kind +
                                               " (scored on the actor ranks): set it to 0");
    } else {
      if (cfg_.reward.path.empty()) cfg_.deck.fail("model.reward.path", "is not set and model.reward.kind is model");
      if (!rt_.placement.has(Role::reward)) cfg_.deck.fail("placement.reward", "is 0, but a reward model needs ranks");
    }
    if (!rt_.placement.has(Role::reference) && al_.kl_coef > 0)
      cfg_.deck.fail("placement.reference", "is 0, but algorithm.kl_coef > 0 needs the reference model");
    // A minibatch is drawn from one actor rank's sequences of an iteration: a larger one is
    // not what the deck asks for (it would silently be the whole batch).
    const int64_t rows = int64_t(cfg_.rollout.batch) * al_.samples_per_prompt;
    if (al_.minibatch > rows)
      cfg_.deck.fail("algorithm.minibatch", "is " + std::to_string(al_.minibatch) + ", more than the " +
                                                std::to_string(rows) + " sequences an actor rank has each iteration "
                                                "(rollout.batch " + std::to_string(cfg_.rollout.batch) +
                                                " x algorithm.samples_per_prompt " +
                                                std::to_string(al_.samples_per_prompt) + ")");
    tokenizer_ = run_tokenizer(cfg_);
    check_models_fit_run(cfg_, rt_.placement, *tokenizer_);
    // The plan first: a deck that cannot fit stops here, before any GPU memory is touched.
    auto plan = make_memory_plan(cfg_, world.size(), world.local_size());
    check_plan(plan);
    park_idle_ = plan.park_idle;
    resume = choose_resume_checkpoint(rt_);
  });
  if (!ok) return 2;

  pad_id_ = tokenizer_->pad_id.value_or(tokenizer_->eos_id.value_or(0));
  if (tokenizer_->eos_id) stop_ids_.push_back(*tokenizer_->eos_id);
  for (const auto& s : cfg_.rollout.stop) {
    auto id = tokenizer_->token_to_id(s);
    QUARTET_CHECK(id.has_value(), "rollout.stop: '" + s + "' is not a token of the tokenizer");
    stop_ids_.push_back(*id);
  }
  kl_.adaptive = al_.kl_controller == "adaptive";
  kl_.coef = al_.kl_coef;
  kl_.target = al_.kl_target;
  kl_.horizon = al_.kl_horizon;

  printf0("train: %s, %s placement (%s), %d iterations\n", al_.name.c_str(), rt_.placement.mode.c_str(),
          rt_.placement.describe().c_str(), iterations);
  models_ = build_role_models(cfg_, *rt_.groups, rt_.device, resume.value_or(""));
  TrainerState state;
  if (resume) {
    state = load_trainer_state(rt_, *resume);
    actor_step_ = state.actor_step;
    critic_step_ = state.critic_step;
    // critic_total is not restored: it is recomputed for this run's run.iterations, which a
    // resumed job may have raised.
    kl_.coef = state.kl_coef;
    moments_ = state.moments;
    train_seconds_before_ = state.train_seconds;
    printf0("train: resuming from %s: %lld of %d iterations done\n", resume->c_str(),
            static_cast<long long>(state.iteration), iterations);
  } else {
    state.run_id = new_run_id(world);
  }
  run_id_ = state.run_id;
  const int first_iteration = static_cast<int>(state.iteration);
  // Again, now that MPI, CUDA and NCCL are up: one of them may have taken the signals over.
  if (install_stop_handlers())
    eprintf_rank("train: warning: a library had replaced the SIGUSR1/SIGTERM handler; quartet's is back\n");
  RoleModel* actor = models_.get(Role::actor);
  RoleModel* critic = models_.get(Role::critic);
  RoleModel* reference = models_.get(Role::reference);
  RoleModel* reward = models_.get(Role::reward);
  if (actor) {
    // The run file: written by the actor group (rollouts collectively, numbers by its rank 0).
    RunFileInfo info;
    info.version = QUARTET_VERSION;
    info.git_commit = git_commit();
    info.deck = cfg_.deck.resolved();
    info.placement = rt_.placement.describe();
    info.algorithm = al_.name;
    info.world_size = world.size();
    info.iterations_planned = iterations;
    // Starting afresh, a run.h5 already in run.out belongs to an earlier run: it is kept as
    // run.h5.prev rather than mixed with this one. A resumed run appends to its own.
    if (!resume && actor->group->rank() == 0 && path_exists(cfg_.run.out + "/run.h5")) {
      const std::string from = cfg_.run.out + "/run.h5", to = move_aside(from, ".prev");
      printf0("train: an earlier %s was moved to %s\n", from.c_str(), to.c_str());
    }
    watched::barrier(rt_.groups->of(Role::actor).comm, "run.h5 moved aside");
    auto plan = make_memory_plan(cfg_, world.size(), world.local_size());
    std::vector<double> planned;
    for (const auto& rp : plan.ranks) planned.push_back(static_cast<double>(rp.peak));
    run_file_ = std::make_unique<RunFile>(cfg_.run.out, rt_.groups->of(Role::actor).comm, info, planned);
    dataset_ = std::make_unique<PromptDataset>(cfg_.rollout.prompts, cfg_.rollout.prompt_field, tokenizer_.get(),
                                               cfg_.rollout.max_prompt_tokens);
    sampler_ = std::make_unique<PromptSampler>(dataset_->size(), cfg_.run.seed, actor->group->rank(),
                                               actor->group->size());
    if (resume) sampler_->set_cursor(state.cursor);
    // Iterations the file holds beyond the checkpoint (written before the stop, after the
    // checkpoint) are dropped: this run writes them again.
    if (resume) run_file_->rewind(state.iteration);
  }
  if (first_iteration >= iterations) {
    printf0("train: the checkpoint is at iteration %d of %d: nothing left to do (raise run.iterations to go on)\n",
            first_iteration, iterations);
    return kExitDone;
  }

  // Generation in chunks of rollout.micro_batch prompts: each chunk goes to the scoring groups
  // as soon as it is generated, and is scored while the next one is generated.
  const int chunk_prompts = cfg_.rollout.micro_batch > 0 ? std::min(cfg_.rollout.micro_batch, cfg_.rollout.batch)
                                                        : cfg_.rollout.batch;
  const int chunks = (cfg_.rollout.batch + chunk_prompts - 1) / chunk_prompts;
  auto chunk_size = [&](int c) { return std::min(chunk_prompts, cfg_.rollout.batch - c * chunk_prompts); };
  // Sequences per scoring pass: rollout.score_micro_batch, else a whole chunk's (what the memory
  // plan counts). Wider passes keep the device busy: at 8 sequences of 256 tokens an 886M
  // model's forward spends a sixth of its time waiting for the host's launches.
  const int64_t score_mb = cfg_.rollout.score_micro_batch > 0
                               ? cfg_.rollout.score_micro_batch
                               : static_cast<int64_t>(chunk_prompts) * al_.samples_per_prompt;
  Exchanges ex;
  if (!colocated()) {
    const auto& actors = rt_.placement.ranks_of(Role::actor);
    auto make = [&](Role r, const std::string& name, int kind, std::vector<std::unique_ptr<GroupExchange>>* out) {
      if (!rt_.placement.has(r) || !has_model(cfg_, r)) return;
      for (int c = 0; c < chunks; ++c)
        out->push_back(std::make_unique<GroupExchange>(world, name + " (chunk " + std::to_string(c) + ")", actors,
                                                       rt_.placement.ranks_of(r), 16 + 4 * c + kind, rt_.device,
                                                       rt_.watchdog.get()));
    };
    make(Role::reference, "rollouts to reference", 0, &ex.reference);
    make(Role::reward, "rollouts to reward", 1, &ex.reward);
    make(Role::critic, "rollouts to critic", 2, &ex.critic);
    make(Role::critic, "returns to critic", 3, &ex.returns);
  }

  const int64_t rows_per_actor = static_cast<int64_t>(cfg_.rollout.batch) * al_.samples_per_prompt;
  const int64_t actor_total = iterations * steps_per_iteration(cfg_, rows_per_actor);
  int64_t& actor_step = actor_step_;
  int64_t& critic_step = critic_step_;
  int64_t& critic_total = critic_total_;
  const double start = seconds();
  for (int it = first_iteration; it < iterations; ++it) {
    std::vector<double> slots(kSlots, 0.0), phase(kPhases, 0.0);
    // The iteration's wall time. The phases overlap across ranks (disjoint scoring ranks score
    // while the actor's next chunk generates), so their sum is not the iteration's time.
    const double iteration_start = seconds();
    if (rt_.device.is_cuda()) reset_peak_memory(rt_.device);
    if (it + 1 == profile_iteration_) {
      synchronize_device(rt_.device);
      profile_.start();
    }
    double t = seconds();
    // ---- generate (and, disjoint, hand each chunk to the scoring groups) ----
    RolloutBatch batch;
    std::vector<std::string> prompts, answers;
    torch::Tensor old_logp;
    std::vector<RolloutBatch> chunk_batches;
    auto as_rollouts = [](const std::vector<Batch>& pieces) {
      std::vector<RolloutBatch> out;
      for (const auto& p : pieces) out.push_back({p[0], p[1], p[2]});
      return out;
    };
    if (actor) {
      activate({Role::actor});
      std::vector<torch::Tensor> old_parts;
      actor->model->gather_full();  // hybrid engine: the full weights once per iteration
      // rollout.reuse_prompt_cache: the old log-probs continue from generation's cache (the
      // prompt is not run again).
      const bool on_cache = cfg_.rollout.reuse_prompt_cache;
      for (int c = 0; c < chunks; ++c) {
        KVCache cache;
        RolloutBatch b = generate_rollouts(it, c, chunk_size(c), &prompts, &answers, on_cache ? &cache : nullptr);
        // The scoring groups get the chunk first, so that they score while the actor takes
        // its old log-probs; one copy to the host serves all three sends.
        if (!ex.reference.empty() || !ex.reward.empty() || !ex.critic.empty()) {
          const Batch host{b.sequences.cpu(), b.attention_mask.cpu(), b.action_mask.cpu()};
          for (auto* group : {&ex.reference, &ex.reward, &ex.critic})
            if (!group->empty()) (*group)[static_cast<size_t>(c)]->forward(host);
        }
        old_parts.push_back(on_cache ? score_logprobs_on_cache(*actor->model, b, cache, score_mb, sampling_view())
                                     : score_logprobs(*actor->model, b, score_mb, sampling_view()));
        chunk_batches.push_back(b);
      }
      actor->model->release_full();
      batch = concat_rollouts(chunk_batches, pad_id_, max_rollout_width());
      old_logp = cat_actions(old_parts, batch.actions());
    }
    phase[kGenerate] = end_phase(kGenerate, t);
    t = seconds();

    // ---- score ----
    torch::Tensor ref_logp, scores, values;
    // Decoded once, for the rule reward, the run file and the log's sample.
    std::vector<std::string> completions;
    std::vector<RolloutBatch> critic_pieces;
    torch::Tensor critic_old_values;
    if (colocated()) {
      if (reference) {
        activate({Role::reference});
        ref_logp = score_logprobs(*reference->model, batch, score_mb, sampling_view());
      }
      if (reward) {
        activate({Role::reward});
        scores = score_sequences(*reward->model, batch, score_mb);
      }
      if (critic) {
        activate({Role::critic});
        values = score_values(*critic->model, batch, score_mb);
      }
    } else {
      // A scoring rank takes the chunks as they come, answers each without waiting for the
      // actor to collect the answer, and moves on to the next. Its wait for the first chunk is
      // the actor's generation, and counts as such, not as scoring.
      bool waited = actor != nullptr;
      auto serve = [&](std::vector<std::unique_ptr<GroupExchange>>& exs, RoleModel* m, int kind) {
        std::vector<torch::Tensor> outs;
        for (auto& e : exs) {
          auto pieces = as_rollouts(e->forward({}));
          if (!waited) {
            const double now = seconds();
            phase[kGenerate] += now - t;
            t = now;
            waited = true;
          }
          auto joined = concat_rollouts(pieces, pad_id_, max_rollout_width());
          torch::Tensor out = kind == 0   ? score_logprobs(*m->model, joined, score_mb, sampling_view())
                              : kind == 1 ? score_sequences(*m->model, joined, score_mb)
                                          : score_values(*m->model, joined, score_mb);
          std::vector<Batch> results;
          for (auto& part : split_by_pieces(out, pieces)) results.push_back({part});
          e->backward_posted(results);
          if (kind == 2) {
            critic_pieces.insert(critic_pieces.end(), pieces.begin(), pieces.end());
            for (auto& part : split_by_pieces(out, pieces)) outs.push_back(part);
          }
        }
        for (auto& e : exs) e->finish_sends();
        if (kind == 2) critic_old_values = cat_actions(outs, concat_actions(critic_pieces, max_rollout_width()));
      };
      if (reference && !ex.reference.empty()) serve(ex.reference, reference, 0);
      if (reward && !ex.reward.empty()) serve(ex.reward, reward, 1);
      if (critic && !ex.critic.empty()) serve(ex.critic, critic, 2);
      if (actor) {
        completions = decode_completions(batch);  // while the scoring groups work
        auto collect = [&](std::vector<std::unique_ptr<GroupExchange>>& exs, bool per_token) {
          std::vector<torch::Tensor> parts;
          for (auto& e : exs) parts.push_back(e->backward({})[0]);
          return per_token ? cat_actions(parts, batch.actions()) : torch::cat(parts);
        };
        if (!ex.reference.empty()) ref_logp = collect(ex.reference, true);
        if (!ex.reward.empty()) scores = collect(ex.reward, false);
        if (!ex.critic.empty()) values = collect(ex.critic, true);
      }
    }
    if (actor && colocated()) completions = decode_completions(batch);
    if (actor && rule_) scores = rule_scores(prompts, completions);
    phase[kScore] = end_phase(kScore, t);
    if (stop_now()) return kExitStopped;
    t = seconds();

    // ---- advantages (actor ranks) ----
    torch::Tensor advantages, returns;
    if (actor) {
      Collectives* group = actor->group;
      const auto dev = actor->model->device();
      auto mask = batch.action_mask.to(dev).to(torch::kFloat32);
      scores = scores.to(dev).to(torch::kFloat32);
      // Statistics of the raw scores, for the log.
      slots[kScoreSum] = scores.sum().item<double>();
      slots[kScoreSqSum] = scores.pow(2).sum().item<double>();
      slots[kScoreCount] = static_cast<double>(scores.numel());
      slots[kScoreMin] = scores.min().item<double>();
      slots[kScoreMax] = scores.max().item<double>();
      slots[kLengthSum] = mask.sum().item<double>();
      auto shaped = scores;
      if (al_.normalize_rewards) {
        moments_.update(shaped, group);
        shaped = moments_.normalise(shaped);
      }
      if (al_.reward_clip > 0) shaped = shaped.clamp(-al_.reward_clip, al_.reward_clip);
      torch::Tensor kl;
      if (ref_logp.defined()) {
        ref_logp = ref_logp.to(dev);
        kl = kl_estimate(old_logp.to(dev), ref_logp, mask, kl_estimator_from_name(al_.kl_estimator));
        slots[kKlSum] = kl.sum().item<double>();
      }
      const int n = al_.samples_per_prompt;
      if (al_.name == "ppo") {
        values = values.to(dev).to(torch::kFloat32);
        auto rewards = token_rewards(shaped, kl, mask, kl_.coef);
        auto ar = gae(rewards, values, mask, al_.gamma, al_.lambda);
        advantages = al_.whiten_advantages ? masked_whiten(ar.advantages, mask, group) : ar.advantages;
        returns = ar.returns;
      } else if (al_.name == "reinforce++") {
        auto rewards = token_rewards(shaped, kl, mask, kl_.coef);
        auto g = discounted_returns(rewards, mask, al_.gamma);
        advantages = masked_whiten(g, mask, group);
      } else if (al_.name == "grpo") {
        advantages = grpo_advantages(shaped, mask, n);
      } else {  // rloo: sequence reward minus the KL penalty, leave-one-out baseline
        auto seq = kl.defined() ? shaped - kl_.coef * kl.sum(1) : shaped;
        advantages = rloo_advantages(seq, mask, n);
      }
      // The controller sees the mean per-sequence KL of the whole actor group.
      auto stats = torch::tensor({slots[kKlSum], slots[kScoreCount]},
                                 torch::TensorOptions().dtype(torch::kFloat64).device(group->device()));
      group->all_reduce(stats, ReduceOp::sum);
      if (ref_logp.defined()) kl_.update(stats[0].item<double>() / stats[1].item<double>(), stats[1].item<double>());
    }
    if (!ex.returns.empty()) {
      if (actor) {
        // Chunk by chunk, so the critic's rows line up with the rollouts it holds.
        int64_t row = 0;
        for (int c = 0; c < chunks; ++c) {
          const RolloutBatch& cb = chunk_batches[static_cast<size_t>(c)];
          ex.returns[static_cast<size_t>(c)]->forward(
              {returns.narrow(0, row, cb.rows()).narrow(1, 0, cb.actions()).contiguous()});
          row += cb.rows();
        }
      }
      if (critic) {
        std::vector<torch::Tensor> parts;
        for (auto& e : ex.returns)
          for (auto& p : e->forward({})) parts.push_back(p[0]);
        returns = cat_actions(parts, concat_actions(critic_pieces, max_rollout_width()));
      }
    }
    phase[kAdvantages] = end_phase(kAdvantages, t);
    if (stop_now()) return kExitStopped;
    t = seconds();

    // ---- train ----
    UpdateStats ps, vs;
    const uint64_t shuffle_seed = cfg_.run.seed * 31u + static_cast<uint64_t>(it);
    if (actor) {
      activate({Role::actor});
      PolicyTargets tg{batch, old_logp, advantages, al_.name == "grpo" ? ref_logp : torch::Tensor(), sampling_view()};
      ps = update_policy(*actor, tg, cfg_, &actor_step, actor_total, shuffle_seed);
    }
    if (critic) {
      activate({Role::critic});
      RolloutBatch cb = colocated() ? batch : concat_rollouts(critic_pieces, pad_id_, max_rollout_width());
      torch::Tensor old_v = colocated() ? values : critic_old_values;
      if (critic_total == 0) critic_total = iterations * steps_per_iteration(cfg_, group_max(*critic->group, cb.rows()));
      vs = update_critic(*critic, cb, old_v, returns, cfg_, &critic_step, critic_total, shuffle_seed + 7);
    }
    phase[kTrain] = end_phase(kTrain, t);

    // ---- metrics ----
    if (actor && actor->group->rank() == 0) {
      slots[kPolicyLoss] = ps.loss;
      slots[kClip] = ps.clip_fraction;
      slots[kApproxKl] = ps.approx_kl;
      slots[kEntropy] = ps.entropy;
      slots[kKlLoss] = ps.kl_loss;
      slots[kActorNorm] = ps.grad_norm;
      slots[kKlCoef] = kl_.coef;
      slots[kLr] = ps.lr;
    }
    if (critic && critic->group->rank() == 0) {
      slots[kValueLoss] = vs.loss;
      slots[kValueClip] = vs.clip_fraction;
      slots[kCriticNorm] = vs.grad_norm;
    }
    if (!actor) slots[kScoreMin] = slots[kScoreMax] = 0;
    std::vector<double> sums(kSlots), times(kPhases);
    std::vector<double> mins{actor ? slots[kScoreMin] : 1e300}, maxs{actor ? slots[kScoreMax] : -1e300};
    watched::allreduce(slots.data(), sums.data(), kSlots, MPI_DOUBLE, MPI_SUM, world.comm(), "the iteration's metrics");
    watched::allreduce(MPI_IN_PLACE, mins.data(), 1, MPI_DOUBLE, MPI_MIN, world.comm(), "the lowest score");
    watched::allreduce(MPI_IN_PLACE, maxs.data(), 1, MPI_DOUBLE, MPI_MAX, world.comm(), "the highest score");
    watched::allreduce(phase.data(), times.data(), kPhases, MPI_DOUBLE, MPI_MAX, world.comm(), "the phases' times");
    double iter_time = seconds() - iteration_start;
    watched::allreduce(MPI_IN_PLACE, &iter_time, 1, MPI_DOUBLE, MPI_MAX, world.comm(), "the iteration's time");
    const double n = std::max(1.0, sums[kScoreCount]);
    const double mean = sums[kScoreSum] / n;
    const double sd = std::sqrt(std::max(0.0, sums[kScoreSqSum] / n - mean * mean));
    const double elapsed = seconds() - start;
    const double eta = elapsed / (it + 1 - first_iteration) * (iterations - it - 1);
    std::string line;
    char buf[512];
    std::snprintf(buf, sizeof buf, "iter %*d/%d | reward %.3f ±%.3f [%.2f, %.2f] | kl %.4f (coef %.3f) | policy %+.4f clip %.3f",
                  static_cast<int>(std::to_string(iterations).size()), it + 1, iterations, mean, sd, mins[0], maxs[0],
                  sums[kKlSum] / n, sums[kKlCoef], sums[kPolicyLoss], sums[kClip]);
    line += buf;
    if (!critic_free) {
      std::snprintf(buf, sizeof buf, " | value %.4f", sums[kValueLoss]);
      line += buf;
    }
    std::snprintf(buf, sizeof buf, " | len %.1f | %.0f tok/s | gen %.2fs score %.2fs adv %.2fs train %.2fs iter %.2fs | ETA %s",
                  sums[kLengthSum] / n, sums[kLengthSum] / std::max(1e-9, iter_time), times[kGenerate], times[kScore],
                  times[kAdvantages], times[kTrain], iter_time, duration_text(eta).c_str());
    line += buf;
    printf0("%s\n", line.c_str());

    // The run file: every rank's phase times and peaks, then the actor group appends.
    std::vector<double> mine(phase);
    for (int p = 0; p < kPhases; ++p) mine.push_back(peak_gib_[static_cast<size_t>(p)] * static_cast<double>(1ull << 30));
    std::vector<double> per_rank(static_cast<size_t>(world.size()) * mine.size());
    watched::allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, per_rank.data(), world.comm(),
                       "every rank's phase times and peaks");
    if (run_file_) {
      IterationRecord rec;
      rec.iteration = it + 1;
      rec.metrics = {{"reward_mean", mean}, {"reward_std", sd}, {"reward_min", mins[0]}, {"reward_max", maxs[0]},
                     {"kl", sums[kKlSum] / n}, {"kl_coef", sums[kKlCoef]}, {"policy_loss", sums[kPolicyLoss]},
                     {"clip_fraction", sums[kClip]}, {"approx_kl", sums[kApproxKl]}, {"entropy", sums[kEntropy]},
                     {"response_length", sums[kLengthSum] / n}, {"tokens_per_s", sums[kLengthSum] / std::max(1e-9, iter_time)},
                     {"lr", sums[kLr]}, {"grad_norm_actor", sums[kActorNorm]}, {"time_generate", times[kGenerate]},
                     {"time_score", times[kScore]}, {"time_advantages", times[kAdvantages]},
                     {"time_train", times[kTrain]}, {"time_iteration", iter_time}};
      if (!critic_free)
        for (auto kv : {std::pair<const char*, double>{"value_loss", sums[kValueLoss]},
                        {"value_clip_fraction", sums[kValueClip]}, {"grad_norm_critic", sums[kCriticNorm]}})
          rec.metrics[kv.first] = kv.second;
      if (al_.name == "grpo") rec.metrics["kl_loss"] = sums[kKlLoss];
      for (int p = 0; p < kPhases; ++p) {
        auto& tv = rec.timing[kPhaseNames[p]];
        auto& mv = rec.memory[kPhaseNames[p]];
        for (int r = 0; r < world.size(); ++r) {
          tv.push_back(per_rank[static_cast<size_t>(r) * mine.size() + static_cast<size_t>(p)]);
          mv.push_back(per_rank[static_cast<size_t>(r) * mine.size() + kPhases + static_cast<size_t>(p)]);
        }
      }
      RolloutRecord ro;
      const int every_n = cfg_.output.rollouts_every;
      const bool store = every_n > 0 && ((it + 1) % every_n == 0 || it == 0);
      if (store) {
        ro.iteration = it + 1;
        ro.sequences = batch.sequences;
        ro.attention_mask = batch.attention_mask;
        ro.action_mask = batch.action_mask;
        ro.scores = scores;
        ro.logprobs = old_logp;
        ro.ref_logprobs = ref_logp;
        ro.values = values;
        ro.advantages = advantages;
        ro.returns = returns;
        ro.prompts = prompts;
        ro.completions = completions;
      }
      run_file_->append(rec, store ? &ro : nullptr);
    }
    // A sample, so the log shows what the policy writes (the actor's first rank holds it).
    const int every = cfg_.output.sample_every;
    if (every > 0 && (it + 1) % every == 0 && actor && actor->group->rank() == 0 && batch.rows() > 0) {
      std::printf("  sample: %s -> \"%s\" (score %.2f)\n", prompts[0].c_str(), completions[0].c_str(),
                  scores[0].item<double>());
      std::fflush(stdout);
    }

    // ---- checkpoint, and stop when asked to or out of time ----
    const bool last = it + 1 == iterations;
    const Stop stop = last ? Stop::none : stop_after_iteration(iter_time);
    const int checkpoint_every = cfg_.checkpoint.every;
    if (stop == Stop::now) {
      printf0("train: a second stop request: stopping after iteration %d without a new checkpoint (exit %d); the run "
              "continues from the previous checkpoint when resubmitted\n", it + 1, kExitStopped);
      return kExitStopped;
    }
    if (stop != Stop::none) {
      const bool signal = stop == Stop::signal;
      const std::string why = signal ? std::string(first_stop_signal()[0] ? first_stop_signal() : "a signal") + " on some rank"
                                     : "time limit";
      printf0("train: stopping after iteration %d of %d (%s)\n", it + 1, iterations, why.c_str());
      write_checkpoint(it + 1, why.c_str());
      printf0("train: exit %d: checkpointed; resubmit the job to continue from iteration %d\n", kExitResubmit, it + 1);
      return kExitResubmit;
    }
    if ((checkpoint_every > 0 && (it + 1) % checkpoint_every == 0) || (last && cfg_.checkpoint.at_end))
      write_checkpoint(it + 1, last ? "end of the run" : "every");
  }
  report_memory();
  printf0("train: done in %s\n", duration_text(seconds() - start).c_str());
  return 0;
}

}  // namespace

int train(Runtime& runtime) {
  Trainer trainer(runtime);
  return trainer.run();
}

}  // namespace quartet

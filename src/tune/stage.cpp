#include "quartet/tune/stage.hpp"

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "quartet/core/build_info.hpp"
#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/core/log.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/core/signals.hpp"
#include "quartet/core/units.hpp"
#include "quartet/dist/watched_mpi.hpp"
#include "quartet/engine/checkpoint_config.hpp"
#include "quartet/engine/experience.hpp"
#include "quartet/engine/lr_schedule.hpp"
#include "quartet/engine/phase_clock.hpp"
#include "quartet/engine/prompt_sampler.hpp"
#include "quartet/engine/stop_control.hpp"
#include "quartet/engine/training_checkpoint.hpp"
#include "quartet/io/run_file.hpp"
#include "quartet/model/models_config.hpp"
#include "quartet/shard/memory_plan.hpp"
#include "quartet/shard/train_config.hpp"
#include "quartet/tune/stage_clock.hpp"
#include "quartet/tune/stage_metrics.hpp"
#include "quartet/tune/stage_plan.hpp"

namespace quartet {

namespace {

enum Part : size_t { kBatch, kForwardBackward, kOptimizer, kEval };

class Stage {
 public:
  Stage(Runtime& rt, StageObjective& objective, const StageSchedule& schedule)
      : rt_(rt), cfg_(rt.config), obj_(objective), sch_(schedule), ckpt_{objective.name(), {objective.trained_role()}, {}},
        name_(objective.name()), started_(monotonic_seconds()), stop_(rt.world, cfg_.get<RunConfig>().time_limit, started_),
        clock_(rt.device, {"batch", "forward_backward", "optimizer", "eval"}) {}

  int run() {
    if (!refuse_or_plan()) return kExitUsage;
    const int64_t first = build();
    if (stop_.requested()) {
      printf0("%s: a stop request came during start-up: exit %d before step %lld, with nothing new to checkpoint\n",
              name_.c_str(), kExitResubmit, static_cast<long long>(first + 1));
      return kExitResubmit;
    }
    if (first >= sch_.steps) {
      printf0("%s: the checkpoint is at step %lld of %lld: nothing left to do (raise the steps to go on)\n",
              name_.c_str(), static_cast<long long>(first), static_cast<long long>(sch_.steps));
      return kExitDone;
    }
    obj_.prepare(models_);
    const double loop_start = monotonic_seconds();
    for (int64_t step = first; step < sch_.steps; ++step) {
      clock_.begin_step();
      std::vector<StageEval> evals;
      if (step == 0 && due(0)) {
        evals.push_back(evaluate(0));
        clock_.start();  // the batch's time starts after the evaluation
      }
      const std::vector<int64_t> rows = next_batch();
      StageStepMetrics metrics(obj_.statistics());
      forward_backward(rows, metrics);
      if (stop_.stop_now()) return stopped_mid_step();
      optimizer_step(step, metrics);
      if (due(step + 1)) evals.push_back(evaluate(step + 1));
      record(step, metrics, evals, (monotonic_seconds() - loop_start) / static_cast<double>(step + 1 - first));
      if (const std::optional<int> exit = checkpoint_or_stop(step + 1, metrics.step_seconds)) return *exit;
    }
    printf0("%s: done in %s\n", name_.c_str(), duration_text(monotonic_seconds() - loop_start).c_str());
    return kExitDone;
  }

 private:
  RoleModel* trained() const { return models_.get(obj_.trained_role()); }
  bool due(int64_t done) const {
    if (!obj_.evaluates()) return false;
    if (done == 0) return sch_.eval_at_start;
    return (sch_.eval_every > 0 && done % sch_.eval_every == 0) || (done == sch_.steps && sch_.eval_at_end);
  }

  bool refuse_or_plan();
  int64_t build();
  void open_run_file(const TrainerState& state);
  std::vector<int64_t> next_batch();
  void forward_backward(const std::vector<int64_t>& rows, StageStepMetrics& metrics);
  void optimizer_step(int64_t step, StageStepMetrics& metrics);
  StageEval evaluate(int64_t done);
  void record(int64_t step, StageStepMetrics& metrics, const std::vector<StageEval>& evals, double seconds_per_step);
  std::optional<int> checkpoint_or_stop(int64_t done, double step_seconds);
  void write_checkpoint(int64_t done, const std::string& why);
  int stopped_mid_step() const;

  Runtime& rt_;
  const Config& cfg_;
  StageObjective& obj_;
  StageSchedule sch_;
  CheckpointStage ckpt_;
  std::string name_;
  double started_;
  StopControl stop_;
  StageClock clock_;
  std::optional<std::string> resume_;
  RoleModels models_;
  std::unique_ptr<PromptSampler> sampler_;  // the trained group's ranks
  std::unique_ptr<RunFile> run_file_;       // the trained group's ranks
  double checkpoint_seconds_ = 0, seconds_before_ = 0;
  std::string run_id_;
};

// The memory plan (each rank on its own, then a verdict) and the checkpoint to resume from
// (collectively), before any model is built.
bool Stage::refuse_or_plan() {
  return rt_.world.agree([&] {
    QUARTET_CHECK(sch_.steps >= 1, name_ + ": the run has no steps");
    check_plan(make_memory_plan(stage_plan_config(cfg_), rt_.world.size(), rt_.world.local_size()));
  }) && rt_.world.agree_collectively([&] { resume_ = choose_resume_checkpoint(rt_, ckpt_); });
}

// The models (from the checkpoint when resuming), the loop's state and the run file; returns
// the first step to run.
int64_t Stage::build() {
  printf0("%s: %s, %lld steps of %d rows per rank\n", name_.c_str(), rt_.placement.describe().c_str(),
          static_cast<long long>(sch_.steps), sch_.batch);
  models_ = build_role_models(cfg_, *rt_.groups, rt_.device, resume_.value_or(""));
  TrainerState state;
  if (resume_) {
    state = load_trainer_state(rt_, *resume_, ckpt_);
    seconds_before_ = state.train_seconds;
    printf0("%s: resuming from %s: %lld of %lld steps done\n", name_.c_str(), resume_->c_str(),
            static_cast<long long>(state.iteration), static_cast<long long>(sch_.steps));
  } else {
    state.run_id = new_run_id(rt_.world);
  }
  run_id_ = state.run_id;
  if (install_stop_handlers())
    eprintf_rank("%s: warning: a library had replaced the SIGUSR1/SIGTERM handler; quartet's is back\n", name_.c_str());
  if (trained()) open_run_file(state);
  return state.iteration;
}

// The trained group writes the run file (its first rank the numbers) and draws the rows.
void Stage::open_run_file(const TrainerState& state) {
  RoleModel& model = *trained();
  RunFileInfo info;
  info.run_id = run_id_;
  info.version = QUARTET_VERSION;
  info.git_commit = git_commit();
  info.deck = cfg_.deck.resolved();
  info.placement = rt_.placement.describe();
  info.algorithm = name_;
  info.world_size = rt_.world.size();
  info.iterations_planned = sch_.steps;
  const ModelSectionConfig& m = model_section(cfg_, obj_.trained_role());
  if (!m.path.empty() && m.path.rfind("random:", 0) != 0)
    info.model_paths = std::string(role_name(obj_.trained_role())) + " = " + m.source + " -> " + m.path + "\n";
  // Starting afresh, a run.h5 already in run.out is an earlier run's: kept as run.h5.prev.
  if (!resume_ && model.group->rank() == 0 && path_exists(cfg_.get<RunConfig>().out + "/run.h5")) {
    const std::string from = cfg_.get<RunConfig>().out + "/run.h5", to = move_aside(from, ".prev");
    printf0("%s: an earlier %s was moved to %s\n", name_.c_str(), from.c_str(), to.c_str());
  }
  watched::barrier(model.comm, "run.h5 moved aside");
  std::vector<double> planned;
  for (const auto& rp : make_memory_plan(stage_plan_config(cfg_), rt_.world.size(), rt_.world.local_size()).ranks)
    planned.push_back(static_cast<double>(rp.peak));
  run_file_ = std::make_unique<RunFile>(cfg_.get<RunConfig>().out, model.comm, info, planned);
  sampler_ = std::make_unique<PromptSampler>(obj_.train_rows(), cfg_.get<RunConfig>().seed, model.group->rank(), model.group->size());
  if (resume_) {
    sampler_->set_cursor(state.cursor);
    run_file_->rewind(state.iteration);  // steps written after the checkpoint are written again
  }
}

std::vector<int64_t> Stage::next_batch() { return sampler_ ? sampler_->next(sch_.batch) : std::vector<int64_t>{}; }

// The step's micro-batches through the model, each one's loss scaled so that the group's
// averaged gradient is that of the step's loss (the sum over every rank's units / their count).
void Stage::forward_backward(const std::vector<int64_t>& rows, StageStepMetrics& metrics) {
  RoleModel* tm = trained();
  if (!tm) {
    clock_.end(kBatch);
    return;
  }
  ShardedModel& model = *tm->model;
  const std::vector<StageMicroBatch> mbs = obj_.micro_batches(rows, model.device());
  clock_.end(kBatch);
  clock_.start();
  Collectives& group = model.group();
  double units = 0;
  for (const StageMicroBatch& mb : mbs) {
    units += mb.units;
    metrics.tokens += static_cast<double>(mb.tokens);
  }
  metrics.units = units;
  auto total = torch::tensor({units}, torch::TensorOptions().dtype(torch::kFloat64).device(group.device()));
  group.all_reduce(total, ReduceOp::sum);
  const double scale = static_cast<double>(group.size()) / std::max(1.0, total.item<double>());
  const int64_t mine = static_cast<int64_t>(mbs.size()), calls = group_max(group, mine);
  std::vector<torch::Tensor> sums;  // loss, then the statistics: summed on the device, read back once
  model.zero_grad();
  for (int64_t k = 0; k < calls; ++k) {
    if (k >= mine) {  // an empty turn: one pad token, its output times zero
      auto opts = torch::TensorOptions().dtype(torch::kLong).device(model.device());
      model.backward(model.forward(torch::zeros({1, 2}, opts), torch::ones({1, 2}, opts)).sum() * 0.0);
      continue;
    }
    StageLoss l = obj_.loss(*tm, mbs[static_cast<size_t>(k)]);
    model.backward(l.loss_sum * scale);
    std::vector<torch::Tensor> now{l.loss_sum.detach().to(torch::kFloat64)};
    for (const torch::Tensor& s : l.stat_sums) now.push_back(s.detach().to(torch::kFloat64));
    if (sums.empty()) sums = now;
    else for (size_t i = 0; i < sums.size(); ++i) sums[i] = sums[i] + now[i];
  }
  if (!sums.empty()) {
    const auto host = torch::stack(sums).to(torch::kCPU);
    metrics.loss_sum = host[0].item<double>();
    for (size_t i = 0; i < metrics.stat_sums.size() && i + 1 < sums.size(); ++i)
      metrics.stat_sums[i] = host[static_cast<int64_t>(i) + 1].item<double>();
  }
  clock_.end(kForwardBackward);
}

void Stage::optimizer_step(int64_t step, StageStepMetrics& metrics) {
  clock_.start();
  if (RoleModel* tm = trained()) {
    const TrainConfig& t = cfg_.get<TrainConfig>();
    metrics.lr = learning_rate(static_cast<int>(step), static_cast<int>(sch_.steps), t.warmup,
                               model_section(cfg_, obj_.trained_role()).lr, t.schedule, t.min_lr_ratio);
    metrics.grad_norm = tm->optimizer->step_async(metrics.lr).item<double>();
    // A non-finite norm skipped the step (the weights are as they were); the run stops, naming it.
    QUARTET_CHECK(std::isfinite(metrics.grad_norm),
                  name_ + ": the gradient norm of '" + tm->model->group().group_name() + "' is " +
                      std::to_string(metrics.grad_norm) + " at step " + std::to_string(step + 1) +
                      ": the loss diverged (that step was skipped)");
  }
  clock_.end(kOptimizer);
}

StageEval Stage::evaluate(int64_t done) {
  clock_.start();
  StageEval e = obj_.evaluate(models_, done);
  e.done = done;
  clock_.end(kEval);
  if (done == 0) printf0("%s\n", e.log_line.c_str());
  return e;
}

// The world's numbers: the log line (and the evaluations' after it), a row of run.h5.
void Stage::record(int64_t step, StageStepMetrics& metrics, const std::vector<StageEval>& evals,
                   double seconds_per_step) {
  metrics.step_seconds = clock_.step_seconds();
  metrics.train_seconds = metrics.step_seconds - clock_.seconds()[kEval];
  metrics.reduce(rt_.world.comm());
  const int64_t done = step + 1;
  if (done % sch_.log_every == 0 || done == sch_.steps || step == 0)
    printf0("%s\n", metrics.log_line(done, sch_.steps, seconds_per_step * static_cast<double>(sch_.steps - done)).c_str());
  for (const StageEval& e : evals)
    if (e.done > 0) printf0("%s\n", e.log_line.c_str());
  // Every rank's part times, then its peaks.
  std::vector<double> mine = clock_.seconds();
  mine.insert(mine.end(), clock_.peak_bytes().begin(), clock_.peak_bytes().end());
  const size_t P = clock_.parts().size();
  std::vector<double> all(static_cast<size_t>(rt_.world.size()) * mine.size());
  watched::allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), rt_.world.comm(),
                     "every rank's step times and peaks");
  if (!run_file_) return;
  IterationRecord rec;
  rec.iteration = done;
  rec.metrics = metrics.named();
  for (size_t p = 0; p < P; ++p)
    for (int r = 0; r < rt_.world.size(); ++r) {
      rec.timing[clock_.parts()[p]].push_back(all[static_cast<size_t>(r) * mine.size() + p]);
      rec.memory[clock_.parts()[p]].push_back(all[static_cast<size_t>(r) * mine.size() + P + p]);
    }
  for (const StageEval& e : evals) rec.evals.push_back({e.done, e.metrics});
  run_file_->append(rec, nullptr);
}

// A checkpoint every checkpoint.every steps and at the end; on a stop request or near the
// time limit a checkpoint and exit 75; on a second request exit 76 at once.
std::optional<int> Stage::checkpoint_or_stop(int64_t done, double step_seconds) {
  const bool last = done == sch_.steps;
  const Stop stop = last ? Stop::none : stop_.after_iteration(step_seconds, checkpoint_seconds_);
  if (stop == Stop::now) {
    printf0("%s: a second stop request: stopping after step %lld without a new checkpoint (exit %d); the run "
            "continues from the previous checkpoint when resubmitted\n", name_.c_str(), static_cast<long long>(done),
            kExitStopped);
    return kExitStopped;
  }
  if (stop != Stop::none) {
    const std::string why = stop == Stop::signal
                                ? std::string(first_stop_signal()[0] ? first_stop_signal() : "a signal") + " on some rank"
                                : "time limit";
    printf0("%s: stopping after step %lld of %lld (%s)\n", name_.c_str(), static_cast<long long>(done),
            static_cast<long long>(sch_.steps), why.c_str());
    write_checkpoint(done, why);
    printf0("%s: exit %d: checkpointed; resubmit the job to continue from step %lld\n", name_.c_str(), kExitResubmit,
            static_cast<long long>(done));
    return kExitResubmit;
  }
  const int every = cfg_.get<CheckpointConfig>().every;
  if ((every > 0 && done % every == 0) || (last && cfg_.get<CheckpointConfig>().at_end))
    write_checkpoint(done, last ? "end of the run" : "every");
  return std::nullopt;
}

void Stage::write_checkpoint(int64_t done, const std::string& why) {
  TrainerState st;
  st.iteration = done;
  st.actor_step = done;  // the schedule's position: one optimizer step a step
  if (sampler_) st.cursor = sampler_->cursor();
  st.train_seconds = seconds_before_ + (monotonic_seconds() - started_);
  st.run_id = run_id_;
  const CheckpointWrite w = save_training_checkpoint(rt_, models_, st, ckpt_);
  checkpoint_seconds_ = w.seconds;
  printf0("%s: checkpoint %s (%s): %.2f GB in %.1fs\n", name_.c_str(), w.dir.c_str(), why.c_str(),
          static_cast<double>(w.bytes) / 1e9, w.seconds);
}

int Stage::stopped_mid_step() const {
  printf0("%s: a second stop request: stopping now, without a new checkpoint (exit %d); the run continues from "
          "the previous checkpoint when resubmitted\n", name_.c_str(), kExitStopped);
  return kExitStopped;
}

}  // namespace

int run_stage(Runtime& runtime, StageObjective& objective, const StageSchedule& schedule) {
  Stage stage(runtime, objective, schedule);
  return stage.run();
}

}  // namespace quartet

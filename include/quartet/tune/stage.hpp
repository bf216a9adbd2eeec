#pragma once
// The engine of the supervised stages (`quartet sft`; rm and dpo are objectives on it too): one
// trained model, sharded over its group as train's actor is, on train's Runtime, deck, run file,
// checkpoints, stop requests and memory plan. Once the models are built, the objective's
// prepare() (dpo: the frozen reference scores every pair once). A step, on every rank:
//   next batch      the trained group's ranks draw their rows (stage_schedule.batch each) from
//                   seeded epochs of the training set (engine/prompt_sampler.hpp: the
//                   ranks see disjoint rows, every row once an epoch; the cursor is checkpointed)
//   forward + loss  the objective cuts its rows into micro-batches and gives each one's loss,
//   backward        summed over its units (sft: target tokens); the step's loss is the sum over
//                   every micro-batch of every rank divided by the step's units, so micro-batching
//                   and the rank count change how it is computed, not what. Ranks with fewer
//                   micro-batches run empty ones (the sharded model's collectives line up).
//   optimizer step  AdamW at the schedule's learning rate ([train] warmup, schedule,
//                   min_lr_ratio; the trained role's lr), gradients clipped to train.max_grad_norm
//   evaluation      the objective's held-out numbers every eval_every steps, after the last and
//                   (eval_at_start) before the first: an `eval` line, /eval in run.h5
//   record          the log line every log_every steps; every step a row of run.h5's /metrics
//                   (tune/stage_metrics.hpp), /timing and /memory (batch, forward_backward,
//                   optimizer, eval)
//   checkpoint      checkpoint.every steps and at the end; on SIGUSR1/SIGTERM or near
//   or stop         run.time_limit a checkpoint and exit 75, on a second request exit 76
//                   (engine/stop_control.hpp); checkpoint.resume = auto continues from the newest
//                   intact one, bitwise as if never stopped. The checkpoint is train's
//                   (engine/training_checkpoint.hpp): <role>.h5 of the trained role, trainer.h5 with
//                   the step count and the data cursor, the manifest naming the stage.
// The run file and the checkpoints count steps where train counts iterations.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "quartet/dist/runtime.hpp"
#include "quartet/engine/role_models.hpp"

namespace quartet {

// One micro-batch as the objective cut it: its tensors (the objective's own layout), the units
// its loss is a sum over (target tokens, pairs) and the tokens it runs through the model.
struct StageMicroBatch {
  std::vector<torch::Tensor> tensors;
  double units = 0;
  int64_t tokens = 0;
};

// A micro-batch's loss summed over its units (with the graph, for backward) and the objective's
// statistics summed over them (detached), 0-dim tensors on the model's device.
struct StageLoss {
  torch::Tensor loss_sum;
  std::vector<torch::Tensor> stat_sums;
};

// One held-out evaluation: the world's numbers (the same on every rank; /eval/<name>) and the
// log's line (rank 0 prints it), e.g. "eval  step 50 | loss 0.8123 | token_accuracy 0.731".
struct StageEval {
  int64_t done = 0;  // steps done when taken (the engine sets it)
  std::map<std::string, double> metrics;
  std::string log_line;
};

class StageObjective {
 public:
  virtual ~StageObjective() = default;
  // The command, for messages, run.h5's algorithm attribute and the checkpoint's stage.
  virtual std::string name() const = 0;
  virtual Role trained_role() const { return Role::actor; }
  // Rows of the training set (the sampler draws indices below it).
  virtual int64_t train_rows() const = 0;
  // Once the models are built (afresh or from the checkpoint), before the first step: work done
  // with every model of the run that the steps then read (dpo: the frozen reference scores every
  // pair). Every rank at once (collective over the world); it may release a model it no longer
  // needs. It must give the same result every time, so that a resumed run stays bitwise.
  virtual void prepare(RoleModels& models) { (void)models; }
  // The per-step statistics (means over the units) after the loss, e.g. {"accuracy"}.
  virtual std::vector<std::string> statistics() const { return {}; }
  // This rank's rows of one step as micro-batches, on `device`.
  virtual std::vector<StageMicroBatch> micro_batches(const std::vector<int64_t>& rows, torch::Device device) = 0;
  virtual StageLoss loss(RoleModel& model, const StageMicroBatch& mb) = 0;
  virtual bool evaluates() const { return false; }
  // Every rank at once (collective over the world); `done`: steps done.
  virtual StageEval evaluate(RoleModels& models, int64_t done) = 0;
};

struct StageSchedule {
  int64_t steps = 1;        // optimizer steps of the run
  int batch = 8;            // rows per step and rank of the trained group
  int eval_every = 0;       // 0 = only at the end
  bool eval_at_start = false, eval_at_end = true;
  int log_every = 1;
};

// The whole run; the exit status (0; kExitResubmit / kExitStopped when stopped early;
// kExitUsage when refused before any model was built). The objective must already have read
// its data (and refused what it refuses).
int run_stage(Runtime& runtime, StageObjective& objective, const StageSchedule& schedule);

}  // namespace quartet

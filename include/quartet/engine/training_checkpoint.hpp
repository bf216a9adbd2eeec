#pragma once
// The checkpoints of `quartet train` (DESIGN.md, io/checkpoint_dir.hpp):
//   step_<N>/actor.h5, critic.h5   each trained model, written collectively by its group
//                                  (io/sharded_h5.hpp): weights, float32 master weights and
//                                  AdamW moments at global shapes and offsets, step count;
//   step_<N>/trainer.h5            the loop's state (world rank 0): iterations done, optimizer
//                                  step counters of the learning-rate schedules, the prompt
//                                  cursor, the KL controller, the reward normaliser, and every
//                                  rank's random generator states;
//   step_<N>/manifest.json         last: sizes and checksums, plus what the checkpoint holds.
// The frozen models (reference, reward) are not saved: they are rebuilt from the deck, as they
// were at the start. Resuming needs the same deck (other rank counts are fine: the trained
// models reshard on load); the models' shapes are checked against it tensor by tensor.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "quartet/dist/runtime.hpp"
#include "quartet/engine/prompt_sampler.hpp"
#include "quartet/engine/role_models.hpp"
#include "quartet/engine/running_moments.hpp"

namespace quartet {

struct TrainerState {
  int64_t iteration = 0;  // iterations complete
  int64_t actor_step = 0, critic_step = 0, critic_total = 0;  // learning-rate schedule positions
  PromptCursor cursor;
  double kl_coef = 0;
  RunningMoments moments;
  double train_seconds = 0;  // time spent in the loop before this checkpoint (all sessions)
  // Names the run: made at its fresh start, carried by every file of every checkpoint it writes,
  // so that a file from another run (or an older checkpoint of one written before it had an id:
  // "") is told apart. The same on every rank.
  std::string run_id;
};

// The command that writes a checkpoint or resumes from one (train, sft, ...): its name, which the
// manifest records as info.stage (a checkpoint without one is train's), and the roles it trains,
// whose model files the checkpoint holds. The loop's state is kept by the first trained role's
// first rank. A checkpoint of one stage is not resumed by another.
struct CheckpointStage {
  std::string name = "train";
  std::vector<Role> trained = {Role::actor, Role::critic};
  std::string algorithm;  // the manifest's info.algorithm: train's algorithm ("" = the stage's name)
};

// Collective over the world: a new run's id (random, from rank 0).
std::string new_run_id(const World& world);

struct CheckpointWrite {
  std::string dir;
  double seconds = 0;  // from the first file to the manifest, as the slowest rank saw it
  double write_seconds = 0;  // of which writing the files (the rest: checksums, fsync, manifest)
  int64_t bytes = 0;   // all files
};

// Collective over the world. `state` must be complete on the actor group's first rank (cursor,
// KL, normaliser, actor_step) and the critic group's first rank (critic steps); other ranks'
// copies are not read. Writes step_<iteration>, commits it, moves `latest`, prunes.
CheckpointWrite save_training_checkpoint(Runtime& rt, const RoleModels& models, const TrainerState& state,
                                         const CheckpointStage& stage = {});

// Collective over the world: where to continue from, following checkpoint.resume (auto: the
// newest intact checkpoint under run.out, the skipped ones named in warnings, and none intact
// refused unless checkpoint.on_damaged = start_over; a directory: that one, refused if damaged;
// never: refused if run.out already holds checkpoints). Intact means: sizes and checksums as
// the manifest says, every file resuming needs listed in it (trainer.h5 and each trained
// model's file), and the files of one step and one run (their iteration, run id and optimizer
// step counts agree with trainer.h5 and the manifest). Rank 0 prints what it decided. nullopt:
// a fresh start.
std::optional<std::string> choose_resume_checkpoint(Runtime& rt, const CheckpointStage& stage = {});

// Collective over the world: the state in <dir>/trainer.h5, the same on every rank. This rank's
// random generator states are restored when the world has the size it had when saved
// (otherwise the run's seeds restart them, and rank 0 says so).
TrainerState load_trainer_state(Runtime& rt, const std::string& dir, const CheckpointStage& stage = {});

}  // namespace quartet

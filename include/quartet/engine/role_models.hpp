#pragma once
// The models of one rank, built from the deck: for every role placed on this rank, its
// ShardedModel over the role's group (weights from the Hugging Face directory, read slice by
// slice, or random and seeded), the optimizer of a trained role, and the tokenizer. A random
// reference starts from the actor's random weights (same seed), as a reference must.
#include <array>
#include <memory>

#include "quartet/core/config.hpp"
#include "quartet/dist/groups.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"
#include "quartet/shard/sharded_adamw.hpp"
#include "quartet/shard/sharded_model.hpp"
#include "quartet/shard/step_graph.hpp"

namespace quartet {

struct RoleModel {
  ModelSpec spec;
  std::unique_ptr<ShardedModel> model;
  std::unique_ptr<ShardedAdamW> optimizer;  // trained roles only
  // A one-rank GPU model's training micro-batch as a CUDA graph (train.cuda_graphs), made by its
  // first update; declared after the model, so it goes first.
  std::unique_ptr<StepGraph> step_graph;
  Collectives* group = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;  // the same group as an MPI communicator (checkpoint files)
};

struct RoleModels {
  std::array<std::unique_ptr<RoleModel>, kNumRoles> roles;  // null where this rank holds no such model
  RoleModel* get(Role r) const { return roles[static_cast<int>(r)].get(); }
};

// Collective over each role's group. `seed` = run.seed. With `resume_dir` (a checkpoint's
// step_<N> directory) the trained roles take their weights, optimizer state and step count from
// <resume_dir>/<role>.h5, each rank reading only its slices, whatever the group size was when
// it was written; the frozen roles are built from the deck as always.
RoleModels build_role_models(const Config& config, const ModelGroups& groups, torch::Device device,
                             const std::string& resume_dir = "");

// Where a role's head comes from when its model is loaded from a Hugging Face directory: a
// critic's value head, and the score head of a reward model being trained (`quartet rm`, which
// may start from a causal LM or an SFT checkpoint), start fresh when the checkpoint lacks them
// (model/weight_map.hpp); a frozen reward model must bring its own, and the actor and reference
// theirs.
HeadSource head_source_of(Role role, bool trained);

// The tokenizer of the run: the actor's model directory's (an rm deck's: the reward model's), or
// the built-in character one for a random model.
std::unique_ptr<Tokenizer> run_tokenizer(const Config& config);
// Every model the run builds (a role with ranks and a model) can be loaded (its weights by
// model/weight_map.hpp's rules, headers only), takes the run's token ids and its sequences
// (rollout.max_prompt_tokens + rollout.max_new_tokens positions); a DeckError naming
// model.<role>.path otherwise.
void check_models_fit_run(const Config& config, const Placement& placement, const Tokenizer& tokenizer);

}  // namespace quartet

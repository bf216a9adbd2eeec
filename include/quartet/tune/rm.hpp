#pragma once
// `quartet rm DECK`: reward-model training on preference pairs ([rm]; docs/rm.md), on the engine
// of tune/stage.hpp. The reward model ([model.reward]: random:<family>, a Hugging Face
// directory or an SFT export, whose score head then starts fresh) is sharded over every rank of
// the job (placement.reward = the job's ranks, no other role) and reads its own tokenizer's ids.
// Each step every rank draws rm.batch pairs, runs both sides of train.micro_batch of them at a
// time through the model, and the loss is the Bradley–Terry loss -log σ(r_c - r_r - m) (m: the
// row's margin with rm.margin, else 0) averaged over the step's pairs on every rank. Per step
// run.h5 records, besides the loss, the means over the step's pairs of
//   accuracy         chosen scored strictly above rejected
//   chosen_reward    r_c
//   rejected_reward  r_r
//   reward_margin    r_c - r_r
// and the held-out pairs are measured every rm.eval_every steps (tune/rm_eval.hpp). The
// checkpoint holds reward.h5: `quartet export` writes it as a ...ForSequenceClassification
// directory, which `quartet train` takes as model.reward.path.
#include <cstdint>

#include "quartet/dist/runtime.hpp"
#include "quartet/tune/rm_config.hpp"

namespace quartet {

// The run; exit status as train's (0, 75, 76; 2 for a deck or data refused before any model).
int run_rm(Runtime& runtime);

// The steps of a run over `pairs` pairs on `ranks` ranks: rm.steps, else
// ceil(rm.epochs x pairs / (rm.batch x ranks)).
int64_t rm_steps(const RmConfig& rm, int64_t pairs, int ranks);

// The deck's refusals that need no data: rm.data set and no sft.data; the reward model alone on
// every rank; a model, not a rule or the user's code, as the reward; the run's length in rm's
// keys, not in run.iterations (away from its default); a batch of pairs within the reward
// model's positions. A DeckError names the key and its line.
void check_rm_deck(const Config& config, const Placement& placement);

}  // namespace quartet

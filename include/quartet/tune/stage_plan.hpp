#pragma once
// The memory plan of a stage's deck (shard/memory_plan.hpp plans train's phases): the deck as
// the planner reads it, with the stage's shapes in train's keys. An sft deck (sft.data set) is
// planned as an actor alone whose
//   train phase     micro-batches of train.micro_batch sequences of sft.max_tokens tokens, or
//                   sft.micro_batch_tokens / sft.max_tokens of them (rounded up): as many tokens
//   generate phase  the held-out exact match, sft.batch prompts at a time, sft.max_tokens long
// A dpo deck (dpo.data set) is planned as the actor trained and the reference frozen (on ranks of
// its own, or colocated), each pass holding both sides of train.micro_batch pairs: 2 x
// train.micro_batch sequences of dpo.max_tokens tokens (the reference's pass as scoring; it is
// released after scoring every pair, which the plan does not count on).
// An rm deck (rm.data set) as a trained reward model alone (model_spec.hpp is_trained) whose
//   train phase     micro-batches of train.micro_batch pairs: both sides in one forward, 2 x
//                   train.micro_batch sequences as wide as the longest prompt plus the longest
//                   response, at most 2 x (rm.max_tokens - 1) tokens (tune/pair_dataset.hpp's layout)
//   score phase     the held-out pairs, train.micro_batch of them (both sides) a forward
// Any other deck is train's and is planned as it is.
#include "quartet/core/config.hpp"

namespace quartet {

bool is_sft_deck(const Config& config);
bool is_dpo_deck(const Config& config);
bool is_rm_deck(const Config& config);

// The widest batch of pairs of an rm deck: the longest prompt plus the longest response, each
// side at most rm.max_tokens long.
int64_t widest_pair_batch(const Config& config);

Config stage_plan_config(const Config& config);

}  // namespace quartet

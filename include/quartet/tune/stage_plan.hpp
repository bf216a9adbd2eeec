#pragma once
// The memory plan of a stage's deck (shard/memory_plan.hpp plans train's phases): the deck as
// the planner reads it, with the stage's shapes in train's keys. An sft deck (sft.data set) is
// planned as an actor alone whose
//   train phase     micro-batches of train.micro_batch sequences of sft.max_tokens tokens, or
//                   sft.micro_batch_tokens / sft.max_tokens of them (rounded up): as many tokens
//   generate phase  the held-out exact match, sft.batch prompts at a time, sft.max_tokens long
// Any other deck is train's and is planned as it is.
#include "quartet/core/config.hpp"

namespace quartet {

bool is_sft_deck(const Config& config);

Config stage_plan_config(const Config& config);

}  // namespace quartet

#pragma once
// What every stage command (sft, rm, dpo) refuses of its deck before anything else, naming the
// key: its own data key unset, another stage's section set (core/config.hpp
// refuse_other_stages), quartet train's packing keys set (train.micro_batch_tokens,
// rollout.score_tokens), and run.iterations away from its default (a stage counts steps; a
// resolved deck spells the default out, and is fine).
#include <string>

#include "quartet/core/config.hpp"

namespace quartet {

// `command`: "sft", "rm" or "dpo"; `data_set`: whether <command>.data is given; `data_what`: what
// that key names, for the message ("the demonstrations", "the preference pairs").
void check_stage_deck_keys(const Config& config, const std::string& command, bool data_set,
                           const std::string& data_what);

}  // namespace quartet

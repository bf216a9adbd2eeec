#include "quartet/engine/checkpoint_config.hpp"

#include "quartet/core/files.hpp"

namespace quartet {

namespace {

using C = CheckpointConfig;

constexpr Choice<OnDamaged> kOnDamaged[] = {{"refuse", OnDamaged::refuse}, {"start_over", OnDamaged::start_over}};

const Check<std::string> kResume = [](const std::string& r) {
  return r == "auto" || r == "never" || is_directory(r) ? ""
         : "is '" + r + "': expected auto, never, or an existing step_<N> directory";
};

}  // namespace

const char* name_of(OnDamaged value) { return choice_name(value, kOnDamaged); }

const Section<CheckpointConfig>& checkpoint_section() {
  static const Section<C> section("checkpoint", "Checkpoints", {
      key("every", &C::every, at_least(0), "write a checkpoint every N iterations (0 = only at the end and when stopped by a signal or the time limit)"),
      key("keep", &C::keep, at_least(1, "(the checkpoint to resume from)"), "complete checkpoints kept: the newest N (>= 1)"),
      key("keep_every", &C::keep_every, at_least(0), "also keep every checkpoint whose iteration is a multiple of N (0 = none)"),
      key("at_end", &C::at_end, "write a checkpoint after the last iteration"),
      key("resume", &C::resume, kResume, "auto (continue from the newest complete checkpoint in run.out, if any) | never | a step_<N> directory"),
      choice("on_damaged", &C::on_damaged, kOnDamaged, "resume = auto, and run.out holds checkpoints but none is intact: refuse (exit 2, naming each and its fault; nothing is touched) | start_over (move them to checkpoints.damaged-<time>/, run.h5 aside, start at iteration 0)"),
  });
  return section;
}

}  // namespace quartet

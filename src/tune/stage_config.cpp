#include "quartet/tune/stage_config.hpp"

#include <algorithm>
#include <cmath>

namespace quartet {

int64_t StageKeys::steps_for(int64_t rows, int ranks) const {
  if (steps > 0) return steps;
  const double per_step = static_cast<double>(batch) * ranks;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(epochs * static_cast<double>(rows) / per_step - 1e-9)));
}

std::vector<KeyRow<StageKeys>> stage_rows(const StageKeysHelp& help) {
  using K = StageKeys;
  const Check<double> epochs = [](const double& e) { return e > 0 && std::isfinite(e) ? "" : "must be a number > 0"; };
  return {
      key("heldout", &K::heldout, readable_file_or_empty("names"), help.heldout),
      key("epochs", &K::epochs, epochs, help.epochs),
      key("steps", &K::steps, at_least(0), help.steps),
      key("batch", &K::batch, at_least(1), help.batch),
      key("max_tokens", &K::max_tokens, at_least(2, "(a prompt token and a response token)"), help.max_tokens),
      key("eval_every", &K::eval_every, at_least(0), "held-out evaluation every N steps (>= 0; 0 = only at the end)"),
      key("eval_at_start", &K::eval_at_start, "also evaluate before the first step"),
      key("eval_at_end", &K::eval_at_end, "evaluate after the last step"),
      key("eval_count", &K::eval_count, at_least(0), help.eval_count),
      key("log_every", &K::log_every, at_least(1), "a log line every N steps (>= 1; run.h5 records every step)"),
  };
}

void check_stage_keys(const Deck& deck, const std::string& name, const StageKeys& keys,
                      const std::vector<std::pair<std::string, bool>>& also_changed) {
  const StageKeys d;
  if (keys.heldout.empty()) {
    std::vector<std::pair<std::string, bool>> changed = {
        {"eval_every", keys.eval_every != d.eval_every}, {"eval_at_start", keys.eval_at_start != d.eval_at_start},
        {"eval_at_end", keys.eval_at_end != d.eval_at_end}, {"eval_count", keys.eval_count != d.eval_count}};
    changed.insert(changed.end(), also_changed.begin(), also_changed.end());
    const std::string what = name == "sft" ? "the held-out file" : "the held-out pairs";
    for (const auto& [key, differs] : changed)
      if (differs) deck.fail(name + "." + key, "is set, but " + name + ".heldout is not: name " + what + " to evaluate on");
    return;
  }
  if (keys.eval_every == 0 && !keys.eval_at_end && !keys.eval_at_start)
    deck.fail(name + ".eval_at_end", "is false, and " + name + ".eval_every is 0 and " + name +
                                         ".eval_at_start false: the run would never evaluate on " + name + ".heldout");
}

}  // namespace quartet

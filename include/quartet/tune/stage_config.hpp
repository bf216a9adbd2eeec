#pragma once
// The keys every supervised stage has ([sft], [rm], [dpo]): its held-out file, how long it runs,
// its batch and longest row, and when it evaluates and logs; each stage's section holds them
// under its own name (sft.epochs, rm.epochs, dpo.epochs).
#include <cstdint>
#include <string>
#include <vector>

#include "quartet/core/settings.hpp"

namespace quartet {

struct StageKeys {
  std::string heldout;       // held-out file ("" = no evaluation)
  double epochs = 1;         // passes over the data, when steps is 0
  int steps = 0;             // optimizer steps of the run (0 = from epochs)
  int batch = 8;             // rows (sft) or pairs (rm, dpo) per optimizer step and rank of the trained group
  int max_tokens = 256;      // longest row or side of a pair (prompt and response); a longer one is refused
  int eval_every = 0;        // held-out evaluation every N steps (0 = only at the end)
  bool eval_at_start = false;  // ... and before the first step
  bool eval_at_end = true;     // ... and after the last
  int eval_count = 0;          // the first N held-out rows or pairs (0 = all)
  int log_every = 1;           // a log line every N steps (run.h5 has every step)

  // The run's optimizer steps: `steps`, else enough for `epochs` passes over `rows` rows when
  // each step takes batch rows from each of `ranks` ranks.
  int64_t steps_for(int64_t rows, int ranks) const;
};

// What each stage's help says of its keys.
struct StageKeysHelp {
  std::string heldout, epochs, steps, batch, max_tokens, eval_count;
};

std::vector<KeyRow<StageKeys>> stage_rows(const StageKeysHelp& help);

// The keys together, for stage `name` ("sft.*"): a held-out key set without sft.heldout is
// refused (set away from its default, it means evaluation was wanted; defaults spelled out, as a
// resolved deck spells them, are fine), as is a held-out file never evaluated. `also_changed`:
// the stage's other held-out keys, with whether each differs from its default.
void check_stage_keys(const Deck& deck, const std::string& name, const StageKeys& keys,
                      const std::vector<std::pair<std::string, bool>>& also_changed = {});

}  // namespace quartet

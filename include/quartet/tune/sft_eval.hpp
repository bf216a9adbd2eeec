#pragma once
// The held-out measurement of `quartet sft` (sft.heldout; docs/sft.md), every rank at once. Each
// rank of the actor group takes its share of the held-out rows (group rank r of R: rows r, r + R,
// ...), and measures
//   loss            teacher-forced, the summed negative log-likelihood of the rows' targets over
//                   their number (the training loss on data it does not learn from)
//   token_accuracy  the targets the model's argmax predicts, over their number
//   exact_match     (sft.exact_match) the rows whose greedy completion of the prompt equals the
//                   response token for token, up to and including its first stop token (the
//                   tokenizer's EOS, the model's eos_token_id, rollout.stop), over the rows
// The first two run bucketed micro-batches as training does (forwards without a graph); the
// third generates with the actor's gathered weights, sft.batch prompts at a time, each pass
// as long as its longest response. Summed over the world. Greedy decoding makes a resumed run
// evaluate as the uninterrupted one did.
#include <functional>
#include <string>
#include <vector>

#include "quartet/engine/role_models.hpp"
#include "quartet/model/generation.hpp"
#include "quartet/tune/sft_dataset.hpp"
#include "quartet/tune/stage.hpp"

namespace quartet {

class SftEvaluator {
 public:
  // `share`: this rank's held-out rows (they must outlive the evaluator); `sampling`: stop ids,
  // pad id and vocabulary limit of the run; `decode`: text of token ids (the sample line).
  SftEvaluator(const Config& config, std::vector<const SftExample*> share, SamplingParams sampling,
               std::function<std::string(const std::vector<int64_t>&)> decode, MPI_Comm world);
  // Every rank at once; `actor` is null off the actor group.
  StageEval evaluate(RoleModel* actor, int64_t done);

 private:
  // Sums over this rank's rows: nll, correct targets, targets.
  std::array<double, 3> teacher_forced(RoleModel& actor);
  // Rows whose greedy completion is the response; the first row's completion for the log.
  double exact_matches(RoleModel& actor, std::string* first_completion);

  const Config& config_;
  std::vector<const SftExample*> share_;
  SamplingParams sampling_;
  std::function<std::string(const std::vector<int64_t>&)> decode_;
  MPI_Comm world_;
};

// A response's tokens as the exact match compares them: ids[prompt_length, ...) up to and
// including the first of `stop_ids`.
std::vector<int64_t> expected_completion(const SftExample& example, const std::vector<int64_t>& stop_ids);

}  // namespace quartet

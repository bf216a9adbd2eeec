#pragma once
// A rank-local step: work each rank does on its own (reading a file, checking the deck) inside
// World::agree. One rank may throw out of it while the others go on, so a collective begun in
// it would wait for a rank that has already left for the verdict: a hang where an error was
// due. Every collective asks first (check_not_rank_local), and one begun inside such a step
// ends the job at once, named: a programming error, found by the first test that takes it.
#include <string>

namespace quartet {

class RankLocalStep {
 public:
  RankLocalStep();
  ~RankLocalStep();
  RankLocalStep(const RankLocalStep&) = delete;
  RankLocalStep& operator=(const RankLocalStep&) = delete;
  static bool active();  // on the calling thread
};

// Ends the job (MPI_Abort), naming `collective`, when the calling thread is in a rank-local step.
void check_not_rank_local(const std::string& collective);

}  // namespace quartet

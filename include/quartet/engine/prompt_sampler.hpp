#pragma once
// The order in which a run draws the rows of its dataset (the prompts of train, the examples and
// pairs of sft, rm and dpo), and the cursor a checkpoint keeps to continue it.
//
// Order: each epoch is a permutation of all rows drawn from the run seed and the epoch
// number (mt19937_64 and a written-out Fisher-Yates shuffle: the same on every platform);
// actor rank r of R takes positions r, r + R, r + 2R, ... of it, so the ranks see
// disjoint rows and, together, every row once per epoch. Positions run on from one epoch
// into the next as a single stream: when N is not a multiple of R, the last draw of an epoch
// takes the first positions of the next one (whose rank-to-position assignment is therefore
// shifted), so no row is dropped and every rank draws the same count. The cursor
// (epoch, position) is all a resumed run needs to continue exactly where it stopped.
#include <cstdint>
#include <vector>

namespace quartet {

struct PromptCursor {
  int64_t epoch = 0;
  int64_t position = 0;  // next position in the epoch's permutation (over all ranks)
};

class PromptSampler {
 public:
  PromptSampler(int64_t dataset_size, uint64_t seed, int rank, int ranks);
  // The next `count` row indices for this rank (wrapping into new epochs); advances the
  // cursor by count * ranks positions. Every rank must call it with the same counts.
  std::vector<int64_t> next(int count);
  PromptCursor cursor() const { return cursor_; }
  void set_cursor(const PromptCursor& c) { cursor_ = c; }

 private:
  std::vector<int64_t> permutation(int64_t epoch) const;
  int64_t size_;
  uint64_t seed_;
  int rank_, ranks_;
  PromptCursor cursor_;
};

}  // namespace quartet

#include "quartet/engine/prompt_sampler.hpp"

#include <numeric>
#include <random>
#include <string>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

// splitmix64's finaliser: spreads (seed, epoch) over the whole 64-bit seed space, so that
// neighbouring seeds or epochs give unrelated generators.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, bound) by rejection, written out: std::uniform_int_distribution's algorithm is
// implementation-defined, and a resumed run may continue on another machine or compiler.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound: the biased bottom values
  for (;;) {
    const uint64_t x = rng();
    if (x >= threshold) return x % bound;
  }
}

}  // namespace

PromptSampler::PromptSampler(int64_t dataset_size, uint64_t seed, int rank, int ranks)
    : size_(dataset_size), seed_(seed), rank_(rank), ranks_(ranks) {
  QUARTET_CHECK(dataset_size > 0, "PromptSampler: the dataset holds no rows");
  QUARTET_CHECK(ranks > 0 && rank >= 0 && rank < ranks,
                "PromptSampler: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
}

std::vector<int64_t> PromptSampler::permutation(int64_t epoch) const {
  std::vector<int64_t> p(static_cast<size_t>(size_));
  std::iota(p.begin(), p.end(), int64_t{0});
  std::mt19937_64 rng(mix64(seed_ ^ mix64(static_cast<uint64_t>(epoch))));
  // Fisher–Yates, from the back: every permutation equally likely, the same on every platform.
  for (int64_t i = size_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

std::vector<int64_t> PromptSampler::next(int count) {
  QUARTET_CHECK(count >= 0, "PromptSampler::next: count " + std::to_string(count) + " is negative");
  QUARTET_CHECK(cursor_.epoch >= 0 && cursor_.position >= 0 && cursor_.position < size_,
                "PromptSampler: cursor (epoch " + std::to_string(cursor_.epoch) + ", position " +
                    std::to_string(cursor_.position) + ") does not fit a dataset of " +
                    std::to_string(size_) + " rows");
  // Positions run on through the epochs as one stream: position size_ of epoch e is position 0
  // of epoch e + 1. A draw of count * ranks positions may therefore straddle an epoch (or
  // several, when the dataset is smaller than ranks), and no prompt is ever dropped.
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  int64_t epoch = cursor_.epoch, position = cursor_.position + rank_;
  int64_t perm_epoch = -1;
  std::vector<int64_t> perm;
  for (int k = 0; k < count; ++k) {
    epoch += position / size_;
    position %= size_;
    if (perm_epoch != epoch) perm = permutation(perm_epoch = epoch);
    out.push_back(perm[static_cast<size_t>(position)]);
    position += ranks_;
  }
  // Every rank advances alike, whatever its own offset.
  const int64_t end = cursor_.position + static_cast<int64_t>(count) * ranks_;
  cursor_.epoch += end / size_;
  cursor_.position = end % size_;
  return out;
}

}  // namespace quartet

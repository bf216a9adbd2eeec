#include "quartet/model/paged_cache.hpp"

#include <algorithm>
#include <string>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int64_t paged_row_blocks(int64_t prompt, int64_t new_tokens, int64_t block_size) {
  return ceil_div(prompt + new_tokens - 1, block_size);
}

int64_t paged_pool_blocks(int64_t rows, int64_t prompt, int64_t new_tokens, int64_t block_size, int64_t tokens) {
  const int64_t wanted = tokens > 0 ? tokens : rows * (prompt + new_tokens);
  return std::max(ceil_div(wanted, block_size), 2 * paged_row_blocks(prompt, new_tokens, block_size) + 1) + 1;
}

BlockPool::BlockPool(int64_t blocks) : holders_(static_cast<size_t>(blocks), 0) {
  QUARTET_CHECK(blocks >= 2, "BlockPool: a pool needs the scratch block and one more");
  // Handed out from the lowest id up (the back of the list first).
  for (int64_t b = blocks - 1; b >= 1; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockPool::take() {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  holders_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockPool::hold(int32_t block) {
  QUARTET_CHECK(block > 0 && holders_[static_cast<size_t>(block)] > 0,
                "BlockPool: block " + std::to_string(block) + " is not in use");
  holders_[static_cast<size_t>(block)] += 1;
}

void BlockPool::release(int32_t block) {
  QUARTET_CHECK(block > 0 && holders_[static_cast<size_t>(block)] > 0,
                "BlockPool: block " + std::to_string(block) + " released more often than held");
  if (--holders_[static_cast<size_t>(block)] == 0) free_.push_back(block);
}

}  // namespace quartet

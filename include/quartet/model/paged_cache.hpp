#pragma once
// A paged KV cache, as vLLM's PagedAttention keeps one: every layer's keys and values in a pool
// of fixed-size blocks of slots, and each decoding row's sequence as a table of the pool blocks
// that hold its slots 0, 1, 2, ... in order. Memory follows the tokens a row has, not the longest
// row; rows of one prompt share the blocks of the prompt (model/paged_generation.cpp); a finished
// row's blocks go back to the pool for the next sequence. Block 0 is scratch: idle rows (table
// rows of zeros) write there and nothing reads it.
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace quartet {

struct PagedKV {
  std::vector<torch::Tensor> k, v;  // per layer [blocks, block_size, kv_heads, head_dim]
  int64_t block_size = 0;
  // [rows, max_blocks] int32: the pool block of each of a row's logical blocks (slot s of the
  // row lies in block table[r][s / block_size] at s % block_size).
  torch::Tensor table;
  // [rows] int64: the slots a row attends to this step; the step's token goes to slot
  // context - 1, at position context - 1. 0: the row is idle (no sequence, or finished).
  torch::Tensor context;
};

// The blocks of one row whose prompt has up to `prompt` tokens and which makes up to new_tokens:
// it writes slots 0 .. prompt + new_tokens - 2 (the last new token is never fed back).
int64_t paged_row_blocks(int64_t prompt, int64_t new_tokens, int64_t block_size);

// The pool's blocks (the scratch block included) for `rows` decoding rows of prompts up to
// `prompt` tokens and `new_tokens` new ones, in blocks of block_size: `tokens` slots (0: rows
// whole sequences), and never fewer than one whole sequence and its prompt's blocks need, so
// that a lone sequence always fits.
int64_t paged_pool_blocks(int64_t rows, int64_t prompt, int64_t new_tokens, int64_t block_size, int64_t tokens);

// Which pool blocks are free, and how many holders each used block has (the rows of a prompt
// share its blocks). Host side only; block 0 is never handed out.
class BlockPool {
 public:
  explicit BlockPool(int64_t blocks);  // blocks in the pool, scratch included
  int64_t blocks() const { return static_cast<int64_t>(holders_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  // A free block with one holder; -1 when none is free.
  int32_t take();
  void hold(int32_t block);     // one holder more
  void release(int32_t block);  // one holder less; free at none

 private:
  std::vector<int32_t> free_;
  std::vector<int32_t> holders_;
};

}  // namespace quartet

#pragma once
// generate() with continuous batching over a paged KV cache (SamplingParams::decode_rows > 0),
// as vLLM and SGLang decode:
// - decode_rows rows decode at once; the caller's sequences wait in order and a row whose
//   sequence ended takes the next one, so the batch stays full while lengths differ;
// - keys and values live in a pool of blocks (model/paged_cache.hpp): a row holds the blocks of
//   its tokens so far, allocated as it grows and returned when it ends, so memory follows the
//   tokens in flight, not rows x the longest sequence;
// - a prompt runs its forward pass once, when its first sequence is admitted, and its group's
//   rows share its blocks (each row copies only the prompt's last, partly filled block); the
//   prompts admitted together run one packed pass (Transformer::fill_paged) that writes their
//   keys and values into their blocks: no padding, and no attention shape to plan per wave;
// - when the pool cannot hold every row's next tokens, the youngest rows are stopped and put
//   back in the queue (they restart from their prompt, as vLLM's recompute preemption).
// Every step has static shapes (decode_rows rows; the span of the longest row, in span_bucket
// multiples, as the CUDA graph's key): a row's first step feeds its prompt's last token again,
// so admitting a sequence is a write of the row's state, not a pass of its own. The host never
// waits on the device except at the checks (every check_every steps, read check_lag steps
// later: which rows ended), where it retires, grows, admits and uploads rows.
//
// Greedy tokens are those of the contiguous decoder up to rounding; sampled ones draw from the
// same distribution with other random numbers (each step draws for decode_rows rows).
#include <torch/types.h>

#include "quartet/model/generation.hpp"

namespace quartet {

Generation generate_paged(Transformer& model, const torch::Tensor& prompt, const torch::Tensor& prompt_mask,
                          const SamplingParams& params);

}  // namespace quartet

// A decoding step's bookkeeping after its picks (model/decode_kernels.hpp advance_decode), in
// one kernel. Plain CUDA.
#include <cuda_runtime.h>

#include <cstdint>

#include "launch.hpp"

namespace quartet {
namespace kernels {
namespace {

// A decoding step's bookkeeping after its picks, rows [0, rows) in one block: a live row keeps
// its pick (a finished one gets pad), which goes to column *step of hist with mask 1 (0 when
// finished), counts in lengths, feeds the next step and ends the row if it is a stop id; then
// *step (and *slot, pos[r] where given) move on by one. What the ATen path does in a dozen
// kernels; one block, because every row reads *step before it is advanced.
__global__ void advance_decode_kernel(const int64_t* __restrict__ next, bool* __restrict__ done,
                                      int64_t* __restrict__ hist, int64_t* __restrict__ hist_mask, int64_t hist_ld,
                                      int64_t* __restrict__ lengths, int64_t* __restrict__ tok,
                                      const int64_t* __restrict__ stop_ids, int n_stop, int64_t* step, int64_t* pos,
                                      int64_t* slot, int64_t pad, int rows) {
  const int64_t col = *step;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const bool alive = !done[r];
    const int64_t t = alive ? next[r] : pad;
    hist[r * hist_ld + col] = t;
    hist_mask[r * hist_ld + col] = alive ? 1 : 0;
    lengths[r] += alive ? 1 : 0;
    bool stop = false;
    for (int s = 0; s < n_stop; ++s) stop = stop || t == stop_ids[s];
    if (alive && stop) done[r] = true;
    tok[r] = t;
    if (pos) pos[r] += 1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    *step = col + 1;
    if (slot) *slot += 1;
  }
}

}  // namespace

cudaError_t launch_advance_decode(const int64_t* next, bool* done, int64_t* hist, int64_t* hist_mask, int64_t hist_ld,
                                  int64_t* lengths, int64_t* tok, const int64_t* stop_ids, int n_stop, int64_t* step,
                                  int64_t* pos, int64_t* slot, int64_t pad, int rows, cudaStream_t stream) {
  advance_decode_kernel<<<1, 256, 0, stream>>>(next, done, hist, hist_mask, hist_ld, lengths, tok, stop_ids, n_stop,
                                               step, pos, slot, pad, rows);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace quartet

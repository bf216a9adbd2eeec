#pragma once
// A decoding step's matrix products on quartet's own kernel
// (src/model/decode_product.cu): out [M, N] = x [M, K] w [N, K]^T for M <= 64
// rows in bfloat16, summed in float32 and rounded once, as cuBLAS does. At a
// decoding batch's 64 rows a product streams the weight once; the kernel copies
// whole tiles with Hopper's tensor memory accelerator into a ring of shared-memory
// stages, multiplies them with wgmma, splits K over a thread-block cluster and
// sums the parts in shared memory, in one launch. The bits are the same on every
// call for one shape and GPU (a fixed order of sums, no atomics), but not
// cuBLAS's: a product may differ from at::linear's by a rounding of the output.
//
// Built with the decode kernels (CMake found a CUDA compiler) for sm_90a; used on
// a GPU of compute capability 9.0 (H100, H200) unless QUARTET_DECODE_PRODUCT=0 is
// set (or set_decode_product(false)), and only where decode_kernels_enabled() too.
#include <torch/types.h>

namespace quartet {

bool decode_product_enabled();  // compiled in and not switched off
void set_decode_product(bool on);

// x [.., K] (rows of unit stride, contiguous over its leading dimensions, M =
// x.numel() / K rows) and w [N, K] (unit stride along K): both bfloat16 on one
// CUDA device of compute capability 9.0, 1 <= M <= 64, K a multiple of 8, both
// 16-byte aligned; and out, where defined, as decode_product takes it. The
// switch is not asked: callers check decode_product_enabled().
bool decode_product_supports(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& out = {});

// x w^T as [.., N] (x's leading dimensions); into out where defined (bfloat16
// [M, N] with unit stride along N and a row stride that keeps rows 16-byte
// aligned; nothing else of it is written). splits > 0 forces that many K slices
// (at most 8; for benchmarks and tests), 0 lets the kernel choose for the GPU.
// Refuses what decode_product_supports refuses (quartet::Error).
torch::Tensor decode_product(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& out = {},
                             int splits = 0);

// The K slices the kernel chooses for an N x K product on the current GPU.
int decode_product_splits(int64_t N, int64_t K);

// Launches of the kernel by this process so far (host-side count, captures
// included): for tests that check which path a model took.
int64_t decode_product_launches();

}  // namespace quartet

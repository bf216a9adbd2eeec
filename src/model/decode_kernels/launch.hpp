// The launches of the decoding step's kernels (one operation a file in this folder), as
// model/decode_kernels.cpp calls them after checking the tensors: raw pointers, the CUDA
// stream, an error code back. Plain C++ and the CUDA runtime, no LibTorch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace quartet {
namespace kernels {

// qkv_to_cache.cu
cudaError_t launch_qkv_to_cache(bool bf16, const void* qkv, const void* cos, const void* sin_signed,
                                const int64_t* slot, void* q_out, void* k_cache, void* v_cache, int B, int nh, int nkv,
                                int hd, int64_t cache_row, int64_t cache_head, bool rotate, cudaStream_t stream);

// add_rms_norm.cu
cudaError_t launch_add_rms_norm(bool bf16, const void* x, const void* a, const void* w, void* sum, void* normed, int R,
                                int H, float eps, cudaStream_t stream);

// silu_mul.cu
cudaError_t launch_silu_mul(bool bf16, const void* gate_up, void* out, int64_t R, int64_t I, cudaStream_t stream);

// attend_decode.cu: bfloat16 heads of 128 with g of 1, 2, 4 or 8, 16-byte aligned (else
// cudaErrorInvalidValue; the caller checks first).
bool attend_in_registers(bool bf16, int g, int hd);
// The floats of the splits' partial results (0: one split, no buffer).
int attend_partial_floats(int B, int nkv, int g, int span, int max_splits);
cudaError_t launch_attend_decode(bool bias_f32, const void* q, const void* k, const void* v, const void* bias,
                                 int64_t bias_s0, int64_t bias_s1, void* out, float* partial, int B, int nkv, int g,
                                 int span, int64_t cache_row, int64_t cache_head, float scale, int max_splits,
                                 const int64_t* last_slot, cudaStream_t stream);
cudaError_t launch_attend_qkv(bool bias_f32, const void* qkv, const void* cos, const void* sin_signed,
                              const int64_t* slot, void* k, void* v, const void* bias, int64_t bias_s0,
                              int64_t bias_s1, void* out, float* partial, int B, int nh, int nkv, int span,
                              int64_t cache_row, int64_t cache_head, float scale, int max_splits,
                              cudaStream_t stream);

// attend_decode.cu, over a paged cache (model/paged_cache.hpp): pools [blocks, block_size, nkv,
// 128], table [B, table_ld] int32, context [B] int64, window 0 or the sliding window.
cudaError_t launch_attend_paged_qkv(const void* qkv, const void* cos, const void* sin_signed, void* k_pool,
                                    void* v_pool, const int32_t* table, int64_t table_ld, int block_size,
                                    const int64_t* context, int window, void* out, float* partial, int B, int nh,
                                    int nkv, int span, float scale, int max_splits, cudaStream_t stream);

// sample_race.cu
cudaError_t launch_sample_race(bool bf16, const void* logits, int64_t ld, const float* race, int B, int V, float t,
                               const uint32_t* min_key, int64_t* out, cudaStream_t stream);

// top_p_keys.cu
cudaError_t launch_top_p_keys(bool bf16, const void* logits, int64_t ld, int B, int V, float t, double top_p,
                              uint32_t* keys, cudaStream_t stream);

// advance_decode.cu
cudaError_t launch_advance_decode(const int64_t* next, bool* done, int64_t* hist, int64_t* hist_mask, int64_t hist_ld,
                                  int64_t* lengths, int64_t* tok, const int64_t* stop_ids, int n_stop, int64_t* step,
                                  int64_t* pos, int64_t* slot, int64_t pad, int rows, cudaStream_t stream);

// masked_softmax.cu
cudaError_t launch_masked_softmax(bool bf16, const void* scores, const void* bias, void* out, int R, int S,
                                  cudaStream_t stream);

}  // namespace kernels
}  // namespace quartet

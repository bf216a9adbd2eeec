#!/usr/bin/env bash
# The decoding products on quartet's kernel (model/decode_product.hpp) in one device call, from
# the repo root with .gpu carried:  bash bench/gpu_decode_product.sh   (logs in $OUT)
# Builds; runs the kernel's tests (decode_kernels_np1) and the decode-step tests of every tiny
# model (model_np1: GpuKernels, GpuGraphs, against HF's references); times each decode-shaped
# product (gemm_bench: ATen, cuBLASLt's candidates, the kernel at each split count); the
# generation benchmark with QUARTET_DECODE_PRODUCT=0 and 1; then the reference PPO iteration
# with the kernel off and on, alternating (AB_ROUNDS, default 2), while BUDGET seconds (default
# 540) allow. SKIP_TESTS=1 skips the tests.
set -uo pipefail
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); export OUT
S=$(date +%s); t(){ echo "[$(( $(date +%s)-S ))s] $*"; }
left(){ [ $(( $(date +%s)-S )) -lt "${BUDGET:-540}" ]; }
source .gpu/env.sh > "$OUT/env.log" 2>&1
nvidia-smi -L | tee -a "$OUT/env.log"
{ cmake -S . -B build-gpu $QUARTET_CMAKE_ARGS -DQUARTET_PYTHON="$(command -v python3)" &&
  cmake --build build-gpu -j "$(nproc)" --target quartet generate_bench gemm_bench test_decode_kernels test_model; } \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
t built
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  (cd build-gpu && ctest -V --timeout 300 -R "decode_kernels_np1|parity_models_reference|model_np1") > "$OUT/ctest.log" 2>&1
  grep -E "tests passed|tests failed" "$OUT/ctest.log"
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] Splits/DecodeProduct" | sed "s/^/DecodeProduct cases passed: /"
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] Models/GpuKernels" | sed "s/^/GpuKernels cases passed: /"
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] Models/GpuGraphs" | sed "s/^/GpuGraphs cases passed: /"
  grep -E "FAILED|Failure|rror" "$OUT/ctest.log" | head -20
  t tests
fi
export OMP_NUM_THREADS=4
build-gpu/bench/gemm_bench --rows 64,32 > "$OUT/gemm_bench.log" 2>&1; echo "gemm_bench exit $?"
cut -d'|' -f2-6,12-16 "$OUT/gemm_bench.log"
t gemm_bench
for p in 0 1; do
  QUARTET_DECODE_PRODUCT=$p build-gpu/bench/generate_bench --config inputs/models/llama-886m/config.json \
    > "$OUT/generate_bench_p$p.log" 2>&1
  echo "generate_bench QUARTET_DECODE_PRODUCT=$p exit $?"; head -14 "$OUT/generate_bench_p$p.log"
  t "generate_bench $p"
done
for r in $(seq "${AB_ROUNDS:-2}"); do
  for p in 0 1; do
    left || { t "budget spent: PPO round $r, product $p not run"; continue; }
    QUARTET_DECODE_PRODUCT=$p TAG=p$p-$r PPO_GPUS=1 ITERATIONS=${ITERATIONS:-5} PROFILE=none \
      bash bench/gpu_ppo_iteration.sh > "$OUT/ppo_ab_p$p-$r.txt" 2>&1
    echo "== QUARTET_DECODE_PRODUCT=$p, round $r"; grep -E "^iter|^ *[0-9]+ |colocated-1" "$OUT/ppo_ab_p$p-$r.txt" | tail -8
  done
done
t done

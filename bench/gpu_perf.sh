#!/usr/bin/env bash
# The performance issue's measurements in one device call, from the repo root with .gpu
# carried:  bash bench/gpu_perf.sh        (logs in $OUT, or ./gpu-logs)
# SKIP_TESTS=1, SKIP_GEN=1, SKIP_TRAIN_BENCH=1 and PPO_GPUS="1 2" split it over calls;
# PROFILE=N profiles PPO iteration N (default 3), PROFILE=none none. KERNELS_AB=1 first runs the
# 1-GPU iteration with quartet's training kernels off (--set kernels.adamw=false kernels.rotary=false
# kernels.swiglu=false).
# Builds, runs the GPU tests (models against HF in bf16, CUDA graphs against eager, bf16 training
# gradients against fp32; graphed training steps against eager ones; each of quartet's kernels
# against ATen; sharded training on NCCL, whose np2 case needs two GPUs; `quartet generate` end
# to end against HF), the generation benchmark, the reference PPO iteration (1 GPU with a kernel
# profile of iteration 3; 2 GPUs colocated and disjoint where present) and the training benchmark.
set -uo pipefail
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); export OUT
S=$(date +%s); t(){ echo "[$(( $(date +%s)-S ))s] $*"; }
# shellcheck source=/dev/null  # made by the GPU session set-up, not in the tree
source .gpu/env.sh > "$OUT/env.log" 2>&1
nvidia-smi -L | tee -a "$OUT/env.log"
{ cmake -S . -B build-gpu $QUARTET_CMAKE_ARGS -DQUARTET_PYTHON="$(command -v python3)" &&
  cmake --build build-gpu -j "$(nproc)" --target quartet generate_bench train_bench quartet_tests; } > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; exit 1; }
t built
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  # -V: every test's output in the log, so that the GPU-only cases can be counted there.
  # sharded_np2 and generate_matches_hf put two NCCL ranks on two GPUs: on one, only the rest.
  two_gpu="|sharded_np2$|generate_matches_hf"
  [ "$(nvidia-smi -L | wc -l)" -ge 2 ] || { two_gpu=""; echo "one GPU: sharded_np2 and generate_matches_hf not run"; }
  (cd build-gpu && ctest -V --timeout 300 -R "parity_models_reference|model_np1|decode_kernels_np1|adamw_kernel_np1|rotary_kernel_np1|swiglu_kernel_np1|rl_logprobs_np1|step_graph_np1|sharded_np1$|parity_generate_reference$two_gpu") > "$OUT/ctest.log" 2>&1
  grep -E "tests passed|tests failed" "$OUT/ctest.log"
  # (gtest colours its output even into the log: strip the escapes before counting.)
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] Models/GpuGraphs" | sed "s/^/GPU graph-vs-eager generation tests passed: /"
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] Models/GpuKernels" | sed "s/^/GPU decode-step kernels-vs-ATen tests passed: /"
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] Models/GpuTraining" | sed "s/^/GPU bf16-training-gradient tests passed: /"
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] Dtypes/DecodeKernels" | sed "s/^/GPU kernel unit tests passed: /"
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] (Settings/AdamWKernel|Dtypes/RotaryKernel|Dtypes/SwigluKernel)" |
    sed "s/^/GPU training-kernel tests passed: /"
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] (StepGraphGpu|Models/StepGraphFamilies)\." |
    sed "s/^/GPU training-graph-vs-eager tests passed: /"
  grep -E "FAILED|Failure" "$OUT/ctest.log" | head -20
  t tests
fi
export OMP_NUM_THREADS=4
if [ "${SKIP_GEN:-0}" != 1 ]; then
  build-gpu/bench/generate_bench --config inputs/models/llama-886m/config.json --profile 1 > "$OUT/generate_bench.log" 2>&1
  echo "generate_bench exit $?"; head -14 "$OUT/generate_bench.log"
  t generate_bench
fi
if [ "${KERNELS_AB:-0}" = 1 ]; then
  SET="${SET:-} kernels.adamw=false kernels.rotary=false kernels.swiglu=false" TAG=aten PPO_GPUS=1 PROFILE=none \
    bash bench/gpu_ppo_iteration.sh
  t "1 GPU, kernels off"
fi
PROFILE=${PROFILE:-3} bash bench/gpu_ppo_iteration.sh
for f in "$OUT"/ppo_*.log; do
  grep -E "^profile|^  \|" "$f" > "${f%.log}.profile.txt"
  head -70 "${f%.log}.profile.txt"
done
if [ "${SKIP_TRAIN_BENCH:-0}" != 1 ]; then
  gpus=$(nvidia-smi -L | wc -l)
  mpirun --oversubscribe --bind-to none -np "$gpus" build-gpu/bench/train_bench --micro-batch 8 --seq 512 --accum 2 \
    --steps 6 --warmup 2 > "$OUT/train_bench.log" 2>&1
  echo "train_bench exit $?"; tail -12 "$OUT/train_bench.log"
  t train_bench
fi

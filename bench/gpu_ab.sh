#!/usr/bin/env bash
# A kernel switched off and on, in one device call, from the repo root with .gpu carried:
#   AB_KEY=kernels.decode_fused_qkv bash bench/gpu_ab.sh        (logs in $OUT)
# AB_KEY: a [kernels] deck key (`quartet train --help` lists them). Builds (TARGETS: the test
# executables, default quartet_tests); runs TESTS (a ctest -R pattern, default:
# the decode kernels' and the models' GPU tests against HF's references); the generation
# benchmark with the key false and true; then the reference PPO iteration (1 GPU) with it off
# and on, alternating AB_ROUNDS times (default 2), while BUDGET seconds (default 480) allow.
set -uo pipefail
: "${AB_KEY:?name the switch: AB_KEY=kernels.KEY}"
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); export OUT
S=$(date +%s); t(){ echo "[$(( $(date +%s)-S ))s] $*"; }
left(){ [ $(( $(date +%s)-S )) -lt "${BUDGET:-480}" ]; }
# shellcheck source=/dev/null  # made by the GPU session set-up, not in the tree
source .gpu/env.sh > "$OUT/env.log" 2>&1
nvidia-smi -L | tee -a "$OUT/env.log"
{ cmake -S . -B build-gpu $QUARTET_CMAKE_ARGS -DQUARTET_PYTHON="$(command -v python3)" &&
  cmake --build build-gpu -j "$(nproc)" --target quartet generate_bench ${TARGETS:-quartet_tests}; } \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
t built
(cd build-gpu && ctest -V --timeout 300 -R "${TESTS:-decode_kernels_np1|parity_models_reference|model_np1}") \
  > "$OUT/ctest.log" 2>&1
grep -E "tests passed|tests failed" "$OUT/ctest.log"
sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] Dtypes/DecodeKernels" | sed "s/^/DecodeKernels cases passed: /"
sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -cE "OK \] Models/Gpu(Kernels|Graphs)" | sed "s/^/GpuKernels and GpuGraphs cases passed: /"
sed 's/\x1b\[[0-9;]*m//g' "$OUT/ctest.log" | grep -E "FAILED|Failure" | head -20
t tests
export OMP_NUM_THREADS=4
for v in false true; do
  build-gpu/bench/generate_bench --config inputs/models/llama-886m/config.json --set "$AB_KEY=$v" \
    > "$OUT/generate_bench_$v.log" 2>&1
  echo "generate_bench $AB_KEY=$v exit $?"; sed -n '3,12p' "$OUT/generate_bench_$v.log"
done
t generate_bench
for r in $(seq "${AB_ROUNDS:-2}"); do
  for v in false true; do
    left || { t "budget spent: PPO round $r, $AB_KEY=$v not run"; continue; }
    SET="${SET:-} $AB_KEY=$v" TAG="ab$v-$r" PPO_GPUS=1 ITERATIONS="${ITERATIONS:-5}" PROFILE=none \
      bash bench/gpu_ppo_iteration.sh > "$OUT/ppo_ab$v-$r.txt" 2>&1
    echo "== $AB_KEY=$v, round $r"; grep -E "^iter [2-9]" "$OUT/ppo_ab$v-$r.txt" | sed 's/.*tok\/s | //'
  done
done
t "done"

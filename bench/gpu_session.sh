#!/usr/bin/env bash
# One device session on the GPU machine (build + tests + benchmark in one call), from the repo
# root, with .gpu carried. Make .gpu here first, with the Debian packages the GPU image lacks
# beyond prepare.sh's own list (xxHash for checksums, ICU for NFC, GoogleTest for ctest):
#   QUARTET_GPU_EXTRA_DEBS="libxxhash-dev libxxhash0 libicu-dev libicu72 libgtest-dev libgmock-dev" \
#     ../shared/gpu/prepare.sh
# (env.sh unpacks once per machine: on a warm one, rm /opt/deps/.unpacked there to unpack again.)
#   bash bench/gpu_session.sh [tests|bench|all]     logs land in $OUT (or ./gpu-logs)
# "tests" builds and runs ctest, the selfchecks and the collectives benchmark; "bench" runs the
# training benchmarks on the build a previous call left (a warm machine keeps build-gpu).
set -uo pipefail
PHASE=${1:-all}
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"
# shellcheck source=/dev/null  # made by the GPU session set-up, not in the tree
source .gpu/env.sh > "$OUT/env.log" 2>&1; cat "$OUT/env.log"
MPI="mpirun --oversubscribe --bind-to none"
export OMP_NUM_THREADS=1
if [ "$PHASE" = bench ]; then
  [ -x build-gpu/bench/train_bench ] || cmake --build build-gpu -j "$(nproc)" > "$OUT/build.log" 2>&1
  {
    echo "== train_bench: 886M Llama, bf16, sharded over 2 GPUs vs unsharded per GPU"
    $MPI -np 2 build-gpu/bench/train_bench --micro-batch 8 --seq 512 --accum 2 --steps 6 --warmup 2
    echo "== the same with activation checkpointing"
    $MPI -np 2 build-gpu/bench/train_bench --micro-batch 8 --seq 512 --accum 2 --steps 6 --warmup 2 --checkpointing 1
    echo "== larger micro-batch, checkpointing"
    $MPI -np 2 build-gpu/bench/train_bench --micro-batch 16 --seq 512 --accum 1 --steps 6 --warmup 2 --checkpointing 1
  } > "$OUT/train_bench.log" 2>&1
  cat "$OUT/train_bench.log"
  exit 0
fi
nvidia-smi -L | tee -a "$OUT/env.log"
{ cmake -S . -B build-gpu $QUARTET_CMAKE_ARGS -DQUARTET_PYTHON="$(command -v python3)" &&
  cmake --build build-gpu -j "$(nproc)"; } > "$OUT/build.log" 2>&1
rc=$?; tail -5 "$OUT/build.log"; grep -E "warning|error" "$OUT/build.log" | head -20
[ $rc -eq 0 ] || { echo "build failed"; exit 1; }
(cd build-gpu && ctest -j 6 --output-on-failure --timeout 300) > "$OUT/ctest.log" 2>&1
tail -40 "$OUT/ctest.log"
grep -cE "OK \] Backends/Collectives_.*nccl" build-gpu/Testing/Temporary/LastTest.log | sed "s/^/NCCL collective tests passed: /"; grep -cE "OK \] Models/GpuBf16" build-gpu/Testing/Temporary/LastTest.log | sed "s/^/GPU bf16 model parity tests passed: /"
grep -cE "OK \] Cases/Sharded.*nccl" build-gpu/Testing/Temporary/LastTest.log | sed "s/^/sharded engine tests passed on NCCL: /"
grep -E "\[bf16\]" build-gpu/Testing/Temporary/LastTest.log | head -30
grep -A30 "gpu_gptj6b_matches_hf" build-gpu/Testing/Temporary/LastTest.log | grep -iE "error|max|time|pass|fail|tolerance" | head -20
{
  echo "== selfcheck: 2 ranks, 2 GPUs, colocated (one NCCL group of 2)"
  $MPI -np 2 build-gpu/quartet selfcheck inputs/selfcheck.deck --set placement.mode=colocated \
    --set placement.actor=2 --set placement.critic=2 --set placement.reference=2 --set placement.reward=2
  echo "exit $?"
  echo "== selfcheck: 4 ranks on 2 GPUs, disjoint 2/2 (ranks of different groups share GPUs)"
  $MPI -np 4 build-gpu/quartet selfcheck inputs/selfcheck.deck --set placement.actor=2 \
    --set placement.critic=2 --set placement.reference=0 --set placement.reward=0
  echo "exit $?"
  echo "== refused: colocated on 4 ranks puts two ranks of one group on one GPU"
  $MPI -np 4 build-gpu/quartet selfcheck inputs/selfcheck.deck --set placement.mode=colocated \
    --set placement.actor=4 --set placement.critic=0 --set placement.reference=0 --set placement.reward=0
  echo "exit $?"
  echo "== generate on 2 GPUs in bf16 (the tiny reference Llama of the parity tests)"
  P=build-gpu/parity/generate
  $MPI -np 2 build-gpu/quartet generate tests/decks/generate.deck --set dist.device=auto --set dist.backend=auto \
    --set model.actor.path=$P/model \
    --set rollout.prompts=$P/prompts.jsonl --set model.actor.dtype=bfloat16 --set run.out=/tmp/gen-bf16
  echo "exit $?"
  echo "== watchdog: the last rank never joins an NCCL all-reduce (must abort with a report)"
  timeout 120 $MPI -np 2 build-gpu/tests/mpi/watchdog_probe nccl
  echo "exit $?"
} > "$OUT/selfcheck.log" 2>&1
grep -E "^==|selfcheck|exit|error|nccl|watchdog" "$OUT/selfcheck.log" | head -40
$MPI -np 2 build-gpu/bench/collectives_bench --max-mib 1024 --iters 20 --dtype bf16 > "$OUT/bench.log" 2>&1
$MPI -np 2 build-gpu/bench/collectives_bench --max-mib 1024 --iters 20 --dtype fp32 >> "$OUT/bench.log" 2>&1
cat "$OUT/bench.log"

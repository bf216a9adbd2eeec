#!/usr/bin/env bash
# quartet train on the GPU machine (NCCL groups, CUDA models, parking in pinned memory):
#   bash bench/gpu_train_check.sh        (after source .gpu/env.sh; logs in $OUT)
set -uo pipefail
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"
S=$(date +%s); t(){ echo "[$(( $(date +%s)-S ))s] $*"; }
[ -d build-gpu ] || cmake -S . -B build-gpu $QUARTET_CMAKE_ARGS -DQUARTET_PYTHON="$(command -v python3)" > "$OUT/build.log" 2>&1
cmake --build build-gpu -j "$(nproc)" --target quartet >> "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
t built
export OMP_NUM_THREADS=1
M="mpirun --oversubscribe --bind-to none -np"
GPU="--set dist.backend=auto --set dist.device=auto"
run() { local name=$1; shift; echo "== $name"; timeout 150 "$@" > "$OUT/$name.log" 2>&1; echo "exit $?";
        grep -E "^iter|^train:|^  |rror" "$OUT/$name.log" | grep -v "^  #" | tail -14; t "$name"; }
run ppo_3ranks_2gpus $M 3 build-gpu/quartet train inputs/demo.deck $GPU --set run.iterations=30 --set run.out=runs/gpu-ppo
build-gpu/quartet inspect runs/gpu-ppo/run.h5
run ppo_bf16_2gpus $M 3 build-gpu/quartet train inputs/demo.deck $GPU --set run.iterations=10 \
    --set model.actor.dtype=bfloat16 --set model.critic.dtype=bfloat16 --set model.actor.offload_optimizer=true
run colocated_2gpus $M 2 build-gpu/quartet train tests/decks/train_colocated.deck $GPU --set run.iterations=5 \
    --set run.out=runs/gpu-colocated --set output.rollouts_every=1
build-gpu/quartet inspect runs/gpu-colocated/run.h5 | head -9
run grpo_2gpus $M 2 build-gpu/quartet train inputs/demo.deck $GPU --set run.iterations=10 --set algorithm.name=grpo \
    --set algorithm.samples_per_prompt=4 --set rollout.batch=8 --set placement.critic=0

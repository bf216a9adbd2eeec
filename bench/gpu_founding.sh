#!/usr/bin/env bash
# The founding scenario on 2 H200s: four GPT-J-6B-shaped models (inputs/founding.deck: actor,
# critic, reference, reward; random weights, bf16), PPO, colocated over both GPUs (every model
# ZeRO-3 sharded over 2; the memory plan parks idle models in host memory when it must).
# Prints the plan, then the iterations' phase times and every rank's peak memory per phase.
# Run after `source .gpu/env.sh`; logs in $OUT.
set -uo pipefail
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
[ -d build-gpu ] || cmake -S . -B build-gpu $QUARTET_CMAKE_ARGS -DQUARTET_PYTHON="$(command -v python3)" > "$OUT/build.log" 2>&1
cmake --build build-gpu -j "$(nproc)" --target quartet >> "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
export OMP_NUM_THREADS=4
ARGS=(--set placement.mode=colocated --set placement.actor=2 --set placement.critic=2 --set placement.reference=2
      --set placement.reward=2 --set dist.device_memory=auto --set dist.backend=auto --set dist.device=auto
      --set "run.iterations=${ITERATIONS:-3}" --set checkpoint.at_end=false --set run.out=runs/founding-2gpu
      --set output.rollouts_every=0 --set rollout.prompts=inputs/prompts/sort_digits.jsonl)
build-gpu/quartet plan inputs/founding.deck --ranks 2 "${ARGS[@]}" 2>&1 | tail -14
timeout "${LIMIT:-420}" mpirun --oversubscribe --bind-to none -np 2 build-gpu/quartet train inputs/founding.deck "${ARGS[@]}" \
  > "$OUT/founding.log" 2>&1
echo "exit $?"
grep -E "^iter|^train:|^  [0-9]|rror|memory" "$OUT/founding.log" | tail -14

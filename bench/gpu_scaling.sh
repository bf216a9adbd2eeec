#!/usr/bin/env bash
# Issue 9: scaling on one host of 2, 4 or 8 H200s. PPO with the founding models (four
# GPT-J-6B shapes, inputs/founding.deck) and with a 13B-class actor (inputs/founding_13b.deck:
# Llama-2-13B-shaped actor and reference, GPT-J-6B-shaped critic and reward); random weights,
# bf16, 64 prompts of 128 tokens in all, 256 new tokens (rollout.min_new_tokens: never fewer).
#   colocated-N: every model ZeRO-3 over all N GPUs, 64/N prompts per rank, N = 2, 4, 8;
#   disjoint-8:  the founding placement, actor 4 / critic 2 / reference 1 / reward 1 ranks,
#                16 prompts per actor rank (8 GPUs only).
# Prints each run's plan verdict, per-iteration phase times (iteration 1 is the warm-up) and
# every rank's peak memory per phase, then a summary table with the scaling efficiency of the
# colocated runs against the fewest GPUs measured. From the repo root, after
# `source .gpu/env.sh`; logs in $OUT. MODELS="6b 13b", GPUS="2 4 8" and ITERATIONS=3 choose.
set -uo pipefail
source bench/gpu_quartet_run.sh  # $OUT, t(), quartet built, runs/prompts128.jsonl
gpus=$(nvidia-smi -L | wc -l)
COMMON=(--set dist.device_memory=auto --set dist.backend=auto --set dist.device=auto
        --set "run.iterations=${ITERATIONS:-3}" --set checkpoint.at_end=false --set output.rollouts_every=0
        --set rollout.prompts=runs/prompts128.jsonl --set rollout.max_prompt_tokens=128
        --set rollout.max_new_tokens=256 --set rollout.min_new_tokens=256 --set algorithm.epochs=1)
run() {  # name deck ranks args...
  local name=$1 deck=$2 np=$3; shift 3
  echo "== $name ($np ranks)"
  local verdict
  verdict=$(build-gpu/quartet plan "$deck" --ranks "$np" "${COMMON[@]}" "$@" 2>&1 | grep -E "^(fits|does NOT|colocated:)")
  echo "$verdict"
  # (The 13B set does not fit 2 GPUs even parked: the plan says so, and the run is skipped.)
  if grep -q "does NOT" <<< "$verdict"; then echo "skipped: the memory plan does not fit"; return; fi
  timeout "${LIMIT:-900}" mpirun --oversubscribe --bind-to none -np "$np" build-gpu/quartet train "$deck" \
    "${COMMON[@]}" "$@" --set "run.out=runs/scaling-$name" > "$OUT/scaling_$name.log" 2>&1
  echo "exit $?"
  grep -E "^iter|^train: (peak|done)|^  [0-9]|rror" "$OUT/scaling_$name.log" | tail -14
  t "$name"
}
for models in ${MODELS:-6b 13b}; do
  deck=inputs/founding.deck; [ "$models" = 13b ] && deck=inputs/founding_13b.deck
  for n in ${GPUS:-2 4 8}; do
    [ "$n" -le "$gpus" ] || { echo "== $models colocated-$n: this machine has $gpus GPU(s), skipped"; continue; }
    run "$models-colocated-$n" "$deck" "$n" --set placement.mode=colocated --set "placement.actor=$n" \
      --set "placement.critic=$n" --set "placement.reference=$n" --set "placement.reward=$n" --set "rollout.batch=$((64 / n))"
  done
  if [ "$gpus" -ge 8 ]; then
    run "$models-disjoint-8" "$deck" 8 --set placement.mode=disjoint --set placement.actor=4 --set placement.critic=2 \
      --set placement.reference=1 --set placement.reward=1 --set rollout.batch=16
  fi
done
# Summary per model set: postprocess/phase_table.py over the run files (iteration 1, the warm-up,
# left out; scaling against the fewest GPUs measured).
for models in ${MODELS:-6b 13b}; do
  echo; echo "== summary, $models"
  specs=()
  for n in ${GPUS:-2 4 8}; do specs+=("runs/scaling-$models-colocated-$n:$n"); done
  specs+=("runs/scaling-$models-disjoint-8:8")
  phase_summary "${specs[@]}"
done

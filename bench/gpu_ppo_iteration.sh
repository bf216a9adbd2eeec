#!/usr/bin/env bash
# The reference PPO iteration of the performance issue, run by `quartet train` as it is today:
# four 886M Llama-shaped models (hidden 2048, 16 layers, 16 heads, 8 KV heads, FFN 5632,
# vocabulary 32000), bf16, 64 prompts of 128 tokens, 128 new tokens, minibatch 8, one epoch;
# every completion 128 tokens long (rollout.min_new_tokens, as the reference's generate ran: the
# same work every iteration), learning rates as in OpenRLHF's PPO examples (5e-7 actor, 9e-6 critic);
# on 1 H200 (colocated, one rank) and on 2 (colocated over both, and disjoint). Prints the phase times of the
# iterations after the first (warm-up). Run after `source .gpu/env.sh`; logs in $OUT.
# PPO_GPUS="1 2" chooses the GPU counts; on 2 GPUs both colocated and disjoint are run.
# MIN_NEW_TOKENS (128), ACTOR_LR (5e-7), CRITIC_LR (9e-6), MICRO_BATCH (8) and ITERATIONS (4)
# change those settings: e.g. MIN_NEW_TOKENS=0 ACTOR_LR=3e-3 CRITIC_LR=3e-3 lets the lengths vary.
# TAG=x suffixes the run directories and logs (ppo_colocated-1-x.log), to compare settings in one call.
# PROMPTS=prompts_varied takes prompts of 64 to 128 tokens (left-padded batches) instead.
# SET="rollout.score_micro_batch=8 ..." adds deck settings to every run (kernels.adamw=false: a
# kernel switched off, [kernels] in `quartet train --help`).
# RESHARD_AFTER_FORWARD=false keeps the actor's and critic's gathered blocks through each update
# (model.<role>.reshard_after_forward; matters where they are sharded, colocated on 2 GPUs).
set -uo pipefail
source bench/gpu_quartet_run.sh  # $OUT, t(), quartet built, runs/prompts128.jsonl
# The 886M Llama shape of the benchmarks (also the reference workload).
CFG=$PWD/inputs/models/llama-886m/config.json
COMMON=(--set dist.backend=auto --set dist.device=auto --set "run.iterations=${ITERATIONS:-4}" --set checkpoint.at_end=false
        --set "rollout.prompts=runs/${PROMPTS:-prompts128}.jsonl"
        --set rollout.micro_batch=0 --set rollout.max_prompt_tokens=128 --set rollout.max_new_tokens=128
        --set "rollout.min_new_tokens=${MIN_NEW_TOKENS:-128}" --set "model.actor.lr=${ACTOR_LR:-5e-7}"
        --set "model.critic.lr=${CRITIC_LR:-9e-6}"
        --set algorithm.minibatch=8 --set algorithm.epochs=1 --set "train.micro_batch=${MICRO_BATCH:-8}" --set model.reward.kind=model
        --set output.rollouts_every=0)
for role in actor critic reference reward; do COMMON+=(--set "model.$role.path=random:$CFG" --set "model.$role.dtype=bfloat16"); done
for kv in ${SET:-}; do COMMON+=(--set "$kv"); done  # SET="key=value ...": more deck settings
if [ -n "${RESHARD_AFTER_FORWARD:-}" ]; then
  for role in actor critic; do COMMON+=(--set "model.$role.reshard_after_forward=$RESHARD_AFTER_FORWARD"); done
fi
gpus=$(nvidia-smi -L | wc -l)
# PROFILE=N profiles iteration N's phases (profile.iteration: kernel tables in the log, traces in
# the run dir); PROFILE=none (or unset) profiles nothing.
if [ -n "${PROFILE:-}" ] && [ "$PROFILE" != none ]; then COMMON+=(--set profile.iteration="$PROFILE"); fi
# PROFILE_HOST=0: device activity only in that profile (profile.host=false).
if [ "${PROFILE_HOST:-1}" = 0 ]; then COMMON+=(--set profile.host=false); fi
run() {  # name ranks args...
  local name=$1${TAG:+-$TAG} np=$2; shift 2
  echo "== $name"
  timeout 400 mpirun --oversubscribe --bind-to none -np "$np" build-gpu/quartet train inputs/demo.deck \
    "${COMMON[@]}" "$@" --set "run.out=runs/ppo886m-$name" > "$OUT/ppo_$name.log" 2>&1
  echo "exit $?"
  grep -E "^iter|^train:|^  [0-9]|rror" "$OUT/ppo_$name.log" | tail -10
  t "$name"
}
for n in ${PPO_GPUS:-1 2}; do
  [ "$n" -le "$gpus" ] || { echo "== $n H200: this machine has $gpus GPU(s), skipped"; continue; }
  # Colocated: every model sharded over all n GPUs, 64/n prompts per rank (64 in all).
  run "colocated-$n" "$n" --set placement.mode=colocated --set "placement.actor=$n" --set "placement.critic=$n" \
    --set "placement.reference=$n" --set "placement.reward=$n" --set "rollout.batch=$((64 / n))"
  if [ "$n" = 2 ]; then
    # Disjoint: one rank per model, actor and reference on GPU 0, critic and reward on GPU 1.
    run disjoint-2 4 --set placement.mode=disjoint --set placement.actor=1 --set placement.critic=1 \
      --set placement.reference=1 --set placement.reward=1 --set rollout.batch=64
  fi
done
echo; echo "== summary (iterations 2-${ITERATIONS:-4})"
phase_summary runs/ppo886m-colocated-1${TAG:+-$TAG}:1 runs/ppo886m-colocated-2${TAG:+-$TAG}:2 \
  runs/ppo886m-disjoint-2${TAG:+-$TAG}:2

#!/usr/bin/env bash
# Issue 9: scaling on one host of 2, 4 or 8 H200s. PPO with the founding models (four
# GPT-J-6B shapes, inputs/founding.deck) and with a 13B-class actor (inputs/founding_13b.deck:
# Llama-2-13B-shaped actor and reference, GPT-J-6B-shaped critic and reward); random weights,
# bf16, 64 prompts of 128 tokens in all, 256 new tokens (the random models never stop early).
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
        --set run.iterations=${ITERATIONS:-3} --set checkpoint.at_end=false --set output.rollouts_every=0
        --set rollout.prompts=runs/prompts128.jsonl --set rollout.max_prompt_tokens=128
        --set rollout.max_new_tokens=256 --set algorithm.epochs=1)
run() {  # name deck ranks args...
  local name=$1 deck=$2 np=$3; shift 3
  echo "== $name ($np ranks)"
  local verdict
  verdict=$(build-gpu/quartet plan "$deck" --ranks "$np" "${COMMON[@]}" "$@" 2>&1 | grep -E "^(fits|does NOT|colocated:)")
  echo "$verdict"
  # (The 13B set does not fit 2 GPUs even parked: the plan says so, and the run is skipped.)
  if grep -q "does NOT" <<< "$verdict"; then echo "skipped: the memory plan does not fit"; return; fi
  timeout ${LIMIT:-900} mpirun --oversubscribe --bind-to none -np "$np" build-gpu/quartet train "$deck" \
    "${COMMON[@]}" "$@" --set run.out=runs/scaling-$name > "$OUT/scaling_$name.log" 2>&1
  echo "exit $?"
  grep -E "^iter|^train: (peak|done)|^  [0-9]|rror" "$OUT/scaling_$name.log" | tail -14
  t "$name"
}
for models in ${MODELS:-6b 13b}; do
  deck=inputs/founding.deck; [ "$models" = 13b ] && deck=inputs/founding_13b.deck
  for n in ${GPUS:-2 4 8}; do
    [ "$n" -le "$gpus" ] || { echo "== $models colocated-$n: this machine has $gpus GPU(s), skipped"; continue; }
    run "$models-colocated-$n" "$deck" "$n" --set placement.mode=colocated --set placement.actor=$n \
      --set placement.critic=$n --set placement.reference=$n --set placement.reward=$n --set rollout.batch=$((64 / n))
  done
  if [ "$gpus" -ge 8 ]; then
    run "$models-disjoint-8" "$deck" 8 --set placement.mode=disjoint --set placement.actor=4 --set placement.critic=2 \
      --set placement.reference=1 --set placement.reward=1 --set rollout.batch=16
  fi
done
# Summary: mean phase times of iterations 2.. and the largest per-rank peak, per run.
python3 - "$OUT" <<'PY'
import glob, os, re, sys
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "scaling_*.log"))):
    name = os.path.basename(f)[len("scaling_"):-4]
    text = open(f, errors="replace").read()
    its = [dict(re.findall(r"(gen|score|adv|train|iter) ([0-9.]+)s", l)) for l in re.findall(r"^iter (?:[2-9]|\d\d+)/\d+ .*$", text, re.M)]
    # "  rank  roles  generate score advantages train plan": the phases' peaks, not the plan's.
    peaks = [max(float(x) for x in re.findall(r"\d+\.\d+", l)[:-1]) for l in re.findall(r"^  \d+ .*$", text, re.M)]
    if not its:
        rows.append((name, None, {}, max(peaks) if peaks else 0)); continue
    mean = {k: sum(float(i[k]) for i in its) / len(its) for k in ("gen", "score", "adv", "train")}
    # The iteration's wall time ("iter"); the phases overlap across ranks when placed apart.
    total = sum(float(i["iter"]) for i in its) / len(its) if all("iter" in i for i in its) else sum(mean.values())
    rows.append((name, total, mean, max(peaks) if peaks else 0))
print("\n| run | gpus | generate s | score s | train s | iteration s | scaling | peak GiB/GPU |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
base = {}
for name, total, m, peak in rows:
    n = int(name.rsplit("-", 1)[1]); models = name.split("-")[0]
    if total is None:
        print(f"| {name} | {n} | failed | | | | | {peak:.1f} |"); continue
    eff = ""
    if "colocated" in name:
        if models not in base: base[models] = (n, total)
        n0, t0 = base[models]
        eff = f"{100 * t0 * n0 / (total * n):.0f}%"
    print(f"| {name} | {n} | {m['gen']:.2f} | {m['score']:.2f} | {m['train']:.2f} | {total:.2f} | {eff} | {peak:.1f} |")
PY

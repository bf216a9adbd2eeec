#!/usr/bin/env bash
# Checkpoints on the GPU machine, at a real size (four ~886M Llama-shaped models, bf16, NCCL):
#   1. the checkpoint tests of the suite on this build;
#   2. PPO with actor, critic and reference on 3 ranks over 2 GPUs, checkpoints every 3
#      iterations (write time and size = the stall a synchronous checkpoint costs), SIGUSR1 to
#      mpirun after iteration 4: exit 75 and a complete checkpoint;
#   3. resumed on 2 ranks in colocated placement: the actor, saved by a group of 1, reshards
#      over 2 GPUs, and the run finishes (checkpoint at the end);
#   4. the actor exported to a Hugging Face directory; transformers loads it on the GPU
#      (tests/gpu/export_matches_hf.py: weights bitwise, logits against HF bf16/fp32).
# Run after `source .gpu/env.sh`; logs in $OUT.   bash bench/gpu_checkpoint_check.sh
set -uo pipefail
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
S=$(date +%s); t(){ echo "[$(( $(date +%s)-S ))s] $*"; }
[ -d build-gpu ] || cmake -S . -B build-gpu $QUARTET_CMAKE_ARGS -DQUARTET_PYTHON="$(command -v python3)" > "$OUT/build.log" 2>&1
cmake --build build-gpu -j "$(nproc)" --target quartet test_sharded_h5 test_checkpoint_dir >> "$OUT/build.log" 2>&1 \
  || { tail -20 "$OUT/build.log"; exit 1; }
t built
export OMP_NUM_THREADS=4
(cd build-gpu && ctest -R "sharded_h5|checkpoint_dir" --output-on-failure > "$OUT/ctest.log" 2>&1); tail -4 "$OUT/ctest.log"
t ctest

M="mpirun --oversubscribe --bind-to none -np"
# The 886M Llama shape of the benchmarks (also the issue's reference workload).
CFG=$PWD/inputs/models/llama-886m/config.json
mkdir -p runs
RUN=$PWD/runs/gpu-ckpt
rm -rf "$RUN"
SIZE=(--set dist.backend=auto --set dist.device=auto --set run.out="$RUN" --set run.iterations=8
      --set checkpoint.every=3 --set checkpoint.keep=2 --set rollout.batch=32 --set train.micro_batch=16)
for role in actor critic reference; do
  SIZE+=(--set "model.$role.path=random:$CFG" --set "model.$role.dtype=bfloat16")
done
SIZE+=(--set model.actor.lr=1e-5 --set model.critic.lr=1e-5)

echo "== the disk: 8 GB written and fsynced by dd (the ceiling for a checkpoint here)"
dd if=/dev/zero of=runs/dd.bin bs=16M count=512 conv=fdatasync 2>&1 | tail -1; rm -f runs/dd.bin
echo "== disjoint, 3 ranks on 2 GPUs, SIGUSR1 after iteration 4"
$M 3 build-gpu/quartet train inputs/demo.deck "${SIZE[@]}" > "$OUT/stop.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "^iter 4/" "$OUT/stop.log" && break; sleep 0.5; done
# To the ranks themselves, as srun delivers it under Slurm.
pkill -USR1 -P $pid
wait $pid; echo "exit $? (75 expected)"
grep -E "^iter|^train:|warning" "$OUT/stop.log" | tail -12
t stopped

echo "== resumed: colocated on 2 ranks (the actor reshards 1 -> 2 GPUs)"
timeout 400 $M 2 build-gpu/quartet train inputs/demo.deck "${SIZE[@]}" --set placement.mode=colocated \
  --set placement.actor=2 --set placement.critic=2 --set placement.reference=2 > "$OUT/resume.log" 2>&1
echo "exit $? (0 expected)"
grep -E "^iter|^train:|^  [0-9]|rror" "$OUT/resume.log" | tail -16
build-gpu/quartet inspect "$RUN/checkpoints" > "$OUT/inspect.log" 2>&1; echo "inspect exit $?"; tail -30 "$OUT/inspect.log"
t resumed

echo "== export the actor, load it with transformers on the GPU"
rm -rf "$RUN/hf-actor"
build-gpu/quartet export "$RUN" --role actor --out "$RUN/hf-actor" 2>&1 | tail -6
timeout 300 python3 tests/gpu/export_matches_hf.py --quartet build-gpu/quartet \
  --checkpoint "$RUN/checkpoints/step_8" --export "$RUN/hf-actor" --device cuda 2>&1 | tee "$OUT/export.log" | grep -v "^\[\|^[a-z_]* = " | tail -8
t exported
df -h . | tail -1
rm -rf "$RUN"

#!/usr/bin/env bash
# The three training stages at 886M on one GPU: `quartet sft`, `quartet rm` and `quartet dpo` on
# the 886M Llama shape (inputs/models/llama-886m), random start, bf16, sequences of SEQ tokens
# (default 512: a 255-character prompt and a 255-character response with the built-in character
# tokenizer, plus BOS and EOS), every row the same length so that padded and real tokens agree.
#   sft: 16 sequences a step in micro-batches of 8;
#   rm:  16 pairs a step in micro-batches of 4 pairs (8 sequences a pass);
#   dpo: 16 pairs a step in micro-batches of 4 pairs, the reference colocated on the same GPU.
# STEPS (12) steps each, no evaluation, no checkpoint. Run after `source .gpu/env.sh`; logs and
# the run files in $OUT; then postprocess/stage_table.py gives steps/s, tokens/s, MFU and peak
# memory (here when python3 has h5py, else on the copied run files).
#   bash bench/gpu_stages.sh
set -uo pipefail
# shellcheck source=bench/gpu_quartet_run.sh
source bench/gpu_quartet_run.sh  # $OUT, t(), quartet built
CFG=$PWD/inputs/models/llama-886m/config.json
SEQ=${SEQ:-512}
half=$(( (SEQ - 2) / 2 ))
python3 - "$half" <<'PY'
import json, random, sys
n = int(sys.argv[1]); r = random.Random(3)
text = lambda: "".join(r.choice("abcdefghij klmnopqrstuvwxyz0123456789") for _ in range(n))
with open("runs/stage_sft.jsonl", "w") as f:
    for _ in range(1024): f.write(json.dumps({"prompt": text(), "response": text()}) + "\n")
with open("runs/stage_pairs.jsonl", "w") as f:
    for _ in range(1024): f.write(json.dumps({"prompt": text(), "chosen": text(), "rejected": text()}) + "\n")
PY
COMMON=(--set dist.backend=auto --set dist.device=auto --set checkpoint.at_end=false --set checkpoint.every=0
        --set train.max_grad_norm=1.0)
stage() {  # command name args...
  local cmd=$1 name=$2; shift 2
  echo "== $cmd"
  timeout 300 mpirun --oversubscribe --bind-to none -np 1 build-gpu/quartet "$cmd" /dev/null "${COMMON[@]}" "$@" \
    --set "run.out=runs/stage-$name" --set "run.name=stage-$name" > "$OUT/stage_$name.log" 2>&1
  echo "exit $?"
  grep -E "^step|rror|refus" "$OUT/stage_$name.log" | tail -4
  mkdir -p "$OUT/stage-$name"; cp "runs/stage-$name/run.h5" "$OUT/stage-$name/" 2>/dev/null
  t "$name"
}
stage sft sft --set placement.actor=1 --set "model.actor.path=random:$CFG" --set model.actor.dtype=bfloat16 \
  --set model.actor.lr=1e-5 --set train.micro_batch=8 --set sft.data=runs/stage_sft.jsonl --set sft.batch=16 \
  --set "sft.steps=${STEPS:-12}" --set "sft.max_tokens=$SEQ"
stage rm rm --set placement.actor=0 --set placement.reward=1 --set "model.reward.path=random:$CFG" \
  --set model.reward.dtype=bfloat16 --set model.reward.lr=1e-5 --set train.micro_batch=4 \
  --set rm.data=runs/stage_pairs.jsonl --set rm.batch=16 --set "rm.steps=${STEPS:-12}" --set "rm.max_tokens=$SEQ"
stage dpo dpo --set placement.mode=colocated --set placement.actor=1 --set placement.reference=1 --set placement.critic=0 \
  --set placement.reward=0 \
  --set "model.actor.path=random:$CFG" --set "model.reference.path=random:$CFG" --set model.actor.dtype=bfloat16 \
  --set model.reference.dtype=bfloat16 --set model.actor.lr=1e-6 --set train.micro_batch=4 \
  --set dpo.data=runs/stage_pairs.jsonl --set dpo.batch=16 --set "dpo.steps=${STEPS:-12}" --set "dpo.max_tokens=$SEQ"
if python3 -c "import h5py" 2>/dev/null; then
  python3 postprocess/stage_table.py "$OUT/stage-sft/run.h5:sft" "$OUT/stage-rm/run.h5:rm" "$OUT/stage-dpo/run.h5:dpo" \
    --config "$CFG" --seq "$SEQ"
else
  echo "(no h5py here: postprocess/stage_table.py on the copied run files, --config $CFG --seq $SEQ)"
fi

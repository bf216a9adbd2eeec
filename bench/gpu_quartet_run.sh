# shellcheck shell=bash
# Sourced by the bench/gpu_*.sh scripts that run `quartet train` (from the repo root, after
# `source .gpu/env.sh`): $OUT (logs) made absolute, t() for elapsed-time lines, quartet built
# into build-gpu (configured on first use), and runs/prompts128.jsonl: 512 prompts of 128
# tokens for the built-in character tokenizer (<bos> and 127 characters); runs/prompts_varied.jsonl
# the same with 64 to 128 tokens (batches of left-padded prompts).
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
S=$(date +%s); t(){ echo "[$(( $(date +%s)-S ))s] $*"; }
[ -d build-gpu ] || cmake -S . -B build-gpu $QUARTET_CMAKE_ARGS -DQUARTET_PYTHON="$(command -v python3)" > "$OUT/build.log" 2>&1
cmake --build build-gpu -j "$(nproc)" --target quartet >> "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
t built
export OMP_NUM_THREADS=4
mkdir -p runs
python3 - > runs/prompts128.jsonl <<'PY'
import json, random
r = random.Random(1)
for i in range(512):
    print(json.dumps({"prompt": "".join(r.choice("abcdefghij klmnopqrstuvwxyz0123456789") for _ in range(127))}))
PY
python3 - > runs/prompts_varied.jsonl <<'PY'
import json, random
r = random.Random(2)
for i in range(512):
    n = r.randint(63, 127)
    print(json.dumps({"prompt": "".join(r.choice("abcdefghij klmnopqrstuvwxyz0123456789") for _ in range(n))}))
PY

# phase_summary RUN_DIR:GPUS ...: each run's run file copied to $OUT/<run>/run.h5 (it comes back
# with the logs), then postprocess/phase_table.py's table of them (phase times, iteration time,
# tokens/s, peak memory, scaling against the fewest GPUs) when this python3 has h5py; else
# run that script on the copies. Runs without a run file (skipped, failed early) are left out.
phase_summary() {
  local files=() counts=() spec dir
  for spec in "$@"; do
    dir=${spec%:*}
    [ -f "$dir/run.h5" ] || continue
    mkdir -p "$OUT/$(basename "$dir")"  # the table names a run by its directory
    cp "$dir/run.h5" "$OUT/$(basename "$dir")/run.h5"
    files+=("$OUT/$(basename "$dir")/run.h5"); counts+=("${spec##*:}")
  done
  [ ${#files[@]} -gt 0 ] || { echo "(no run files to summarise)"; return; }
  if python3 -c "import h5py" 2>/dev/null; then
    python3 postprocess/phase_table.py "${files[@]}" --gpus "${counts[@]}" --markdown
  else
    echo "(no h5py here: python3 postprocess/phase_table.py on the copied run files, --gpus ${counts[*]})"
  fi
}

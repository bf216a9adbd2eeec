# Sourced by the bench/gpu_*.sh scripts that run `quartet train` (from the repo root, after
# `source .gpu/env.sh`): $OUT (logs) made absolute, t() for elapsed-time lines, quartet built
# into build-gpu (configured on first use), and runs/prompts128.jsonl: 512 prompts of 128
# tokens for the built-in character tokenizer (<bos> and 127 characters).
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

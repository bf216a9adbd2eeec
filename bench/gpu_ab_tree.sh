#!/usr/bin/env bash
# This tree against an older one, in one device call, from the repo root with .gpu carried:
#   git diff BASE > ab.patch   (git add -N new files first; ab.patch untracked, so it travels)
#   PATCH=ab.patch bash bench/gpu_ab_tree.sh                     (logs in $OUT)
# or, where the trees differ by more than a text patch carries (moved or binary files):
#   git archive -o old.tar BASE; OLD_TAR=old.tar bash bench/gpu_ab_tree.sh
# Builds both (the older one: a copy of this tree with PATCH taken back, or OLD_TAR) side by side; runs
# TESTS (a ctest -R pattern, default model_np1) on this tree; then the reference PPO iteration
# (1 GPU, ITERATIONS=6) on each, alternating ROUNDS times (default 3); then, with PROFILE=1, one
# device-only profiled iteration of each (the phases' wall and device-busy times).
set -uo pipefail
[ -n "${PATCH:-}${OLD_TAR:-}" ] || { echo "PATCH=file (git diff BASE) or OLD_TAR=file (git archive BASE)"; exit 2; }
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); export OUT
S=$(date +%s); t(){ echo "[$(( $(date +%s)-S ))s] $*"; }
# shellcheck source=/dev/null  # made by the GPU session set-up, not in the tree
source .gpu/env.sh > "$OUT/env.log" 2>&1
nvidia-smi -L
NEW=$PWD OLD=/tmp/quartet-ab-old
# REUSE_OLD=1 keeps an older tree built by an earlier call on the same (warm) machine.
if [ -n "${REUSE_OLD:-}" ] && [ -x "$OLD/build-gpu/quartet" ]; then
  echo "reusing the older tree in $OLD"
elif rm -rf "$OLD" && mkdir -p "$OLD" && [ -n "${OLD_TAR:-}" ]; then
  tar xf "$OLD_TAR" -C "$OLD" && cp -r .gpu "$OLD/"
else
  PATCH=$(cd "$(dirname "$PATCH")" && pwd)/$(basename "$PATCH")
  tar cf - --exclude=./build-gpu --exclude=./runs . | tar xf - -C "$OLD"
  (cd "$OLD" && patch -R -p1 -s < "$PATCH") || { echo "the patch does not come off this tree"; exit 1; }
fi
build() {  # dir name targets...
  local d=$1 n=$2; shift 2
  { cmake -S "$d" -B "$d/build-gpu" $QUARTET_CMAKE_ARGS -DQUARTET_PYTHON="$(command -v python3)" &&
    cmake --build "$d/build-gpu" -j 8 --target quartet "$@"; } > "$OUT/build_$n.log" 2>&1 ||
    { echo "build $n failed"; tail -30 "$OUT/build_$n.log"; return 1; }
}
build "$NEW" new quartet_tests & build "$OLD" old & wait
[ -x "$NEW/build-gpu/quartet" ] && [ -x "$OLD/build-gpu/quartet" ] || exit 1
t built
(cd build-gpu && ctest --timeout 300 -R "${TESTS:-model_np1}" --output-on-failure) > "$OUT/ctest.log" 2>&1
grep -E "tests passed|tests failed|\*\*\*Failed" "$OUT/ctest.log"
t tests
export OMP_NUM_THREADS=4
for r in $(seq "${ROUNDS:-3}"); do
  for v in new old; do
    d=$NEW; [ $v = old ] && d=$OLD
    (cd "$d" && TAG="$v-$r" PPO_GPUS=1 ITERATIONS=${ITERATIONS:-6} PROFILE=none \
      bash bench/gpu_ppo_iteration.sh > "$OUT/ppo_$v-$r.txt" 2>&1)
    # tok/s is 8192 new tokens over the iteration's wall time: 8192 / tok/s is the iteration.
    echo "== $v, round $r: $(grep -E '^iter [2-9]' "$OUT/ppo_$v-$r.txt" | grep -oE '[0-9]+ tok/s' |
      awk '{printf "%.4f ", 8192 / $1}')s"
  done
done
t ppo
if [ "${PROFILE:-0}" = 1 ]; then
  for v in new old; do
    d=$NEW; [ $v = old ] && d=$OLD
    (cd "$d" && TAG="prof-$v" PPO_GPUS=1 ITERATIONS=3 PROFILE=2 PROFILE_HOST=0 \
      bash bench/gpu_ppo_iteration.sh > "$OUT/ppo_prof-$v.txt" 2>&1)
    echo "== profile $v"; grep -hE "^profile " "$OUT/ppo_colocated-1-prof-$v.log"
  done
fi
t finished
rm -rf "$OUT"/ppo886m-*

#!/usr/bin/env bash
# ShellCheck finds nothing in the repository's shell scripts: every file under the folders below
# named *.sh or *.sbatch or starting with a sh/bash #! line (the make scripts of cmake/, CI's
# .ci/run, slurm/, bench/, the tests' scripts and fakes). A user's own slurm/site-env.sh is not
# ours to check and is left out. bench/*.sh are checked without SC2086 (unquoted expansions):
# they split $QUARTET_CMAKE_ARGS, launcher prefixes ($M, $MPI) and option lists ($GPU,
# $TARGETS) into words on purpose. Without shellcheck the test fails: make deps installs it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
command -v shellcheck > /dev/null ||
  { echo "FAIL: shellcheck is not installed (make deps installs it; Debian: apt-get install shellcheck)"; exit 1; }

scripts=() bench=()
while IFS= read -r -d '' f; do
  case $f in
    slurm/site-env.sh) continue ;;
    *.sh | *.sbatch) ;;
    *) head -c 64 "$f" | head -n 1 | grep -qE '^#!.*[/ ](ba)?sh( |$)' || continue ;;
  esac
  case $f in
    bench/*) bench+=("$f") ;;
    *) scripts+=("$f") ;;
  esac
done < <(for d in .ci cmake slurm bench tests postprocess inputs docs; do
           [ ! -d "$d" ] || find "$d" -type f -print0
         done | sort -z)

# -x: follow `source`d files (tests/slurm/lib.sh, bench/gpu_quartet_run.sh) from the root.
failures=0
shellcheck -x "${scripts[@]}" || failures=$((failures + 1))
shellcheck -x -e SC2086 "${bench[@]}" || failures=$((failures + 1))
echo "shellcheck: ${#scripts[@]} scripts, and ${#bench[@]} of bench/ without SC2086:"
printf '  %s\n' "${scripts[@]}" "${bench[@]}"
[ "$failures" = 0 ] || { echo "FAIL: shellcheck"; exit 1; }
echo "shellcheck: nothing found"

#!/bin/bash
# Every shell script of slurm/ and tests/slurm/ parses (bash -n), and so does every `export` line
# of the site hook example once uncommented (what a user does with it); the test scripts are
# executable. (ShellCheck over them and every other script: tests/shellcheck.sh, the shellcheck
# test.) A user's own slurm/site-env.sh is not ours to check and is left out.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
scripts=()
for f in slurm/*.sbatch slurm/*.sh tests/slurm/*.sh tests/slurm/fake-bin/* tests/slurm/stub-quartet; do
  [ "$f" = slurm/site-env.sh ] || scripts+=("$f")
done
failures=0
for f in "${scripts[@]}"; do
  bash -n "$f" || { echo "FAIL: bash -n $f"; failures=$((failures + 1)); }
done
echo "bash -n: ${#scripts[@]} scripts"
exports=$(sed -n 's/^# \(export .*\)$/\1/p' slurm/site-env.example.sh)
[ -n "$exports" ] || { echo "FAIL: no '# export' lines in slurm/site-env.example.sh"; failures=$((failures + 1)); }
bash -n <<<"$exports" || { echo "FAIL: an uncommented export of slurm/site-env.example.sh does not parse"; failures=$((failures + 1)); }
for f in tests/slurm/fake-bin/* tests/slurm/stub-quartet tests/slurm/test_*.sh tests/slurm/check_syntax.sh; do
  [ -x "$f" ] || { echo "FAIL: $f is not executable"; failures=$((failures + 1)); }
done
[ "$failures" = 0 ] || exit 1
echo "all scripts parse"

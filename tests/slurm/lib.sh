# shellcheck shell=bash
# tests/slurm/lib.sh - sourced by the tests of slurm/*.sbatch: a fake Slurm around a batch script.
# A case runs the script as Slurm would (environment, submit directory, fake srun/scontrol/scancel
# first on PATH), lets the test signal it the way Slurm does, and checks what came out.
# Every case gets its own directory $d (= FAKE_SLURM_DIR): srun.args, srun.pid, quartet.args,
# quartet.env, quartet.signals, requeues, and the script's output in log.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034  # (used by the scripts that source this one)
src=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/quartet-slurm-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
case_name=
d=
job_pid=

fail() {
  echo "FAIL [$case_name]: $*"
  failures=$((failures + 1))
}

# begin NAME: a fresh case directory.
begin() {
  case_name=$1
  d=$work/$1
  mkdir -p "$d"
  echo "--- $case_name"
}

# start_job SCRIPT [VAR=value ...] [-- script args...]: the batch script in the background, as
# Slurm starts it: from an unrelated directory, with the submit directory in SLURM_SUBMIT_DIR.
# Whatever Slurm or quartet variables the caller's environment has are dropped first.
start_job() {
  local script=$1
  shift
  local vars=() args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ "${1:-}" = -- ] && shift
  args=("$@")
  local unset_vars=()
  for v in $(compgen -e | grep -E '^(SLURM_|QUARTET_|DECK$|STUB_|FAKE_)'); do unset_vars+=(-u "$v"); done
  (
    cd / || exit 1
    exec env "${unset_vars[@]}" PATH="$here/fake-bin:$PATH" FAKE_SLURM_DIR="$d" \
      SLURM_JOB_ID=4242 SLURM_SUBMIT_DIR="${ROOT:?}" SLURM_CPUS_PER_TASK=3 SLURM_NTASKS=1 \
      SLURM_JOB_NUM_NODES=1 "${vars[@]}" bash "$script" "${args[@]}"
  ) > "$d/log" 2>&1 &
  job_pid=$!
  echo "$job_pid" > "$d/batch.pid"
}

# finish_job: waits for the script (at most $JOB_TIMEOUT s, default 60); its exit status in $status.
finish_job() {
  local limit=${JOB_TIMEOUT:-60} waited=0
  while kill -0 "$job_pid" 2>/dev/null && [ "$waited" -lt $((limit * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$job_pid" 2>/dev/null; then
    fail "still running after ${limit} s; killing it"
    kill -KILL "$job_pid" 2>/dev/null
  fi
  wait "$job_pid"
  status=$?
}

# wait_for FILE [SECONDS]: until FILE exists (or fail).
wait_for() {
  local waited=0
  while [ ! -e "$1" ] && [ "$waited" -lt $(( ${2:-30} * 10 )) ]; do sleep 0.1; waited=$((waited + 1)); done
  [ -e "$1" ] || fail "no $1 after ${2:-30} s"
}

# slurm_signal SIG: what #SBATCH --signal=B:SIG@T does: the signal to the batch script only.
slurm_signal() {
  FAKE_SLURM_DIR=$d "$here/fake-bin/scancel" --batch --signal="$1" 4242
}

expect_status() {
  [ "$status" = "$1" ] || fail "exit status $status, expected $1 (log below)"$'\n'"$(cat "$d/log")"
}

# expect_requeues N: the number of `scontrol requeue 4242` calls.
expect_requeues() {
  local n=0
  [ -f "$d/requeues" ] && n=$(grep -c '^requeue 4242$' "$d/requeues")
  [ "$n" = "$1" ] || fail "$n requeues recorded, expected $1"
}

# expect_log REGEX: the script's output matches (grep -E).
expect_log() {
  grep -Eq -- "$1" "$d/log" || fail "log does not match /$1/:"$'\n'"$(cat "$d/log")"
}

# expect_file_line FILE LINE: FILE (under $d) has that exact line.
expect_file_line() {
  grep -qxF -- "$2" "$d/$1" 2>/dev/null || fail "$1 has no line '$2': $(tr '\n' '|' < "$d/$1" 2>/dev/null)"
}

finish() {
  if [ "$failures" -gt 0 ]; then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "all checks passed"
}

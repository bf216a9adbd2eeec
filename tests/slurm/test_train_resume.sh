#!/bin/bash
# The whole preemptible path with the real quartet: slurm/train.sbatch under a fake Slurm whose
# srun starts `quartet train inputs/demo.deck` on 3 ranks through mpirun. The pre-timeout SIGUSR1
# goes to the batch shell after iteration 5; quartet must finish the iteration, checkpoint, exit
# 75, and the script requeue the job. The requeued attempt (SLURM_RESTART_COUNT=1) must resume
# from that checkpoint, not from the start, finish all iterations (exit 0, no requeue), and leave a
# run file with every iteration exactly once.
#   tests/slurm/test_train_resume.sh QUARTET_BINARY MPIRUN [MPIRUN ARGS...]   (e.g. mpiexec --oversubscribe -n 3)
set -uo pipefail
# shellcheck source=tests/slurm/lib.sh
source "$(dirname "$0")/lib.sh"
quartet=${1:?usage: $0 QUARTET_BINARY MPIRUN [ARGS...]}
shift
[ $# -gt 0 ] || { echo "usage: $0 QUARTET_BINARY MPIRUN [ARGS...]"; exit 2; }
launcher="$*"
ROOT=$src   # inputs/demo.deck and its prompts, relative to the repository root
train=$src/slurm/train.sbatch
out=$work/run
iterations=40
# Long enough that the signal, sent once iteration 5 is printed, arrives well before the end.
args=(--set "run.iterations=$iterations" --set checkpoint.every=4 --set run.out="$out"
      --set output.sample_every=0)

# wait_for_log REGEX SECONDS: until the running script's log matches (or it ends, or time is up).
wait_for_log() {
  local waited=0
  while ! grep -Eq -- "$1" "$d/log" 2>/dev/null; do
    if ! kill -0 "$job_pid" 2>/dev/null || [ "$waited" -ge $(($2 * 10)) ]; then
      fail "the log never matched /$1/:"$'\n'"$(cat "$d/log")"
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
}

begin first_attempt_checkpoints_on_usr1
start_job "$train" QUARTET_BIN="$quartet" DECK=inputs/demo.deck FAKE_SRUN_LAUNCHER="$launcher" SLURM_NTASKS=3 \
  -- "${args[@]}"
wait_for_log "iter +5/$iterations " 180 && slurm_signal USR1
JOB_TIMEOUT=300 finish_job
expect_status 0
expect_requeues 1
expect_log "quartet checkpointed \(exit 75\): requeueing job 4242"
latest=$(readlink "$out/checkpoints/latest" 2>/dev/null)
step=${latest#step_}
case "$step" in
  ''|*[!0-9]*) fail "no checkpoint: $out/checkpoints/latest is '$latest'"
               finish ;;  # nothing to resume from: the rest would only fail after it
esac
if [ "$step" -lt 5 ] || [ "$step" -ge "$iterations" ]; then
  fail "the checkpoint is of iteration $step, expected one after the signal (>= 5, < $iterations)"
fi
# The run stopped where it checkpointed: no iteration beyond it was printed.
grep -Eq "iter +$((step + 1))/$iterations " "$d/log" && fail "iteration $((step + 1)) ran before the stop"
first_log=$d/log

begin requeued_attempt_resumes_and_finishes
start_job "$train" QUARTET_BIN="$quartet" DECK=inputs/demo.deck FAKE_SRUN_LAUNCHER="$launcher" SLURM_NTASKS=3 \
  SLURM_RESTART_COUNT=1 -- "${args[@]}"
JOB_TIMEOUT=300 finish_job
expect_status 0
expect_requeues 0
expect_log "restart 1 of at most 50"
expect_log "newest checkpoint: $out/checkpoints/step_$step "
expect_log "quartet train finished \(exit 0\)"
# It went on from the checkpoint: the first iteration it printed is the one after it.
first=$(grep -oE "iter +[0-9]+/$iterations " "$d/log" | head -n 1 | sed -E 's/iter +([0-9]+)\/.*/\1/')
[ "$first" = $((step + 1)) ] || fail "the resumed run began at iteration '${first}', expected $((step + 1))"
expect_log "iter +$iterations/$iterations "
# The run file holds every iteration once: the first attempt's and the second's.
"$quartet" inspect "$out/run.h5" > "$d/inspect" 2>&1 || fail "quartet inspect failed: $(cat "$d/inspect")"
grep -q "iterations: $iterations complete of $iterations planned" "$d/inspect" ||
  fail "run.h5 is not complete: $(cat "$d/inspect")"
[ -n "${VERBOSE:-}" ] && cat "$first_log" "$d/log"

finish

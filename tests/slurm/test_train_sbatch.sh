#!/bin/bash
# slurm/train.sbatch under a fake Slurm (tests/slurm/fake-bin) with a stub quartet
# (tests/slurm/stub-quartet): the launch line, the site hook, what each exit status of quartet
# leads to (requeue or not, the script's own status), signals passed on from the batch shell to
# quartet, the requeue limit, preemption, and a failing requeue.
set -uo pipefail
# shellcheck source=tests/slurm/lib.sh
source "$(dirname "$0")/lib.sh"

# A submit directory as a user's: a copy of the scripts, a site hook that leaves a mark, a deck.
ROOT=$work/root
mkdir -p "$ROOT/slurm" "$ROOT/inputs" "$ROOT/runs/t/checkpoints/step_8"
cp "$src"/slurm/*.sbatch "$ROOT/slurm/"
cat > "$ROOT/slurm/site-env.sh" <<'HOOK'
export QUARTET_TEST_SITE_ENV=sourced
# A slow `module load`, when a case asks for one: a window for a signal before srun starts.
if [ -n "${TEST_SITE_SLEEP:-}" ]; then touch "$FAKE_SLURM_DIR/site.ready"; sleep "$TEST_SITE_SLEEP"; fi
HOOK
printf '# a deck\n[run]\nname = t\nout = runs/t   # the run directory\n[placement]\nactor = 1\n' > "$ROOT/inputs/t.deck"
ln -s step_8 "$ROOT/runs/t/checkpoints/latest"
train=$ROOT/slurm/train.sbatch
stub=$here/stub-quartet

begin finished
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_EXIT=0 -- --set run.seed=2
finish_job
expect_status 0
expect_requeues 0
# srun: MPI plugin and kill-on-bad-exit; quartet: train, the deck, the extra arguments.
expect_file_line srun.args --mpi=pmix
expect_file_line srun.args --kill-on-bad-exit=1
[ "$(tr '\n' ' ' < "$d/quartet.args")" = "train inputs/t.deck --set run.seed=2 " ] ||
  fail "quartet got: $(tr '\n' ' ' < "$d/quartet.args")"
# The site hook was sourced, srun got the cores per task (Slurm >= 22.05 needs it passed on).
expect_file_line quartet.env QUARTET_TEST_SITE_ENV=sourced
expect_file_line quartet.env SRUN_CPUS_PER_TASK=3
# The log names the restart and the checkpoint the run will resume from.
expect_log "restart 0 of at most 50"
expect_log "newest checkpoint: runs/t/checkpoints/step_8"

begin deck_as_argument_and_srun_mpi
start_job "$train" QUARTET_BIN="$stub" QUARTET_SRUN_MPI=pmix_v4 -- inputs/t.deck --set run.out=elsewhere
finish_job
expect_status 0
expect_file_line srun.args --mpi=pmix_v4
[ "$(tr '\n' ' ' < "$d/quartet.args")" = "train inputs/t.deck --set run.out=elsewhere " ] ||
  fail "quartet got: $(tr '\n' ' ' < "$d/quartet.args")"
expect_log "no elsewhere/checkpoints/latest: a fresh start"

begin checkpointed_requeues
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_EXIT=75
finish_job
expect_status 0
expect_requeues 1
expect_log "requeueing job 4242 \(requeue 1 of at most 50\)"

begin stopped_on_request
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_EXIT=76
finish_job
expect_status 0
expect_requeues 0
expect_log "stopped on request"

for code in 1 2; do
  begin "failed_$code"
  start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_EXIT=$code
  finish_job
  expect_status "$code"
  expect_requeues 0
done

begin killed_by_signal
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_MODE=kill STUB_SIGNAL=KILL
finish_job
expect_status 137
expect_requeues 0
expect_log "killed by signal 9 \(KILL\)"

begin requeue_limit_reached
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_EXIT=75 SLURM_RESTART_COUNT=3 QUARTET_MAX_REQUEUES=3
finish_job
expect_status 75
expect_requeues 0
expect_log "already requeued 3 times"

begin requeue_below_limit
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_EXIT=75 SLURM_RESTART_COUNT=2 QUARTET_MAX_REQUEUES=3
finish_job
expect_status 0
expect_requeues 1
expect_log "restart 2 of at most 3"

begin requeue_fails
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_EXIT=75 FAKE_REQUEUE_RC=1
finish_job
expect_status 75
expect_requeues 1
expect_log "scontrol requeue 4242 failed"

# Preemption (PreemptMode=REQUEUE): Slurm signals the tasks, quartet exits 75, Slurm requeues the
# job itself: the script must neither requeue too nor fail.
begin preempted
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_EXIT=75 FAKE_PREEMPT_TIME=2025-06-01T12:00:00
finish_job
expect_status 0
expect_requeues 0
expect_log "Slurm requeues it itself"

# The pre-timeout signal: SIGUSR1 to the batch shell reaches quartet, which checkpoints (75).
begin usr1_reaches_quartet
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_MODE=wait
wait_for "$d/quartet.ready"
slurm_signal USR1
finish_job
expect_status 0
expect_requeues 1
expect_file_line quartet.signals USR1
[ "$(wc -l < "$d/quartet.signals")" = 1 ] || fail "quartet got $(wc -l < "$d/quartet.signals") signals, expected 1"

# SIGTERM to the batch shell reaches quartet as SIGUSR1 (srun would turn a SIGTERM into SIGKILL).
begin term_passed_as_usr1
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_MODE=wait
wait_for "$d/quartet.ready"
slurm_signal TERM
finish_job
expect_status 0
expect_requeues 1
expect_file_line quartet.signals USR1

# A second signal while quartet checkpoints: quartet stops (76), nothing is requeued.
begin second_signal_stops
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck STUB_MODE=wait STUB_CHECKPOINT_S=3
wait_for "$d/quartet.ready"
slurm_signal USR1
sleep 0.5
slurm_signal USR1
finish_job
expect_status 0
expect_requeues 0
[ "$(grep -c USR1 "$d/quartet.signals")" = 2 ] || fail "quartet got $(cat "$d/quartet.signals"), expected USR1 twice"

# A signal before quartet starts: nothing is launched, the job goes back to the queue.
begin signal_before_launch
start_job "$train" QUARTET_BIN="$stub" DECK=inputs/t.deck TEST_SITE_SLEEP=1
wait_for "$d/site.ready"
slurm_signal USR1
finish_job
expect_status 0
expect_requeues 1
expect_log "signalled before quartet started"
[ -f "$d/quartet.args" ] && fail "quartet was started after the signal"

begin no_deck
start_job "$train" QUARTET_BIN="$stub"
finish_job
expect_status 2
expect_log "no deck"

begin missing_binary
start_job "$train" QUARTET_BIN=build/nothing DECK=inputs/t.deck
finish_job
expect_status 1
expect_log "no executable build/nothing"

finish

#!/bin/bash
# `quartet sweep` and slurm/sweep.sbatch together under a fake Slurm, with a stub quartet: the
# sweep's decks.list drives the job array, task i trains deck i through train.sbatch (same
# requeue and signal handling), and wrong task numbers are refused.
#   tests/slurm/test_sweep_sbatch.sh QUARTET_BINARY
set -uo pipefail
# shellcheck source=tests/slurm/lib.sh
source "$(dirname "$0")/lib.sh"
quartet=${1:?usage: $0 QUARTET_BINARY}
ROOT=$src   # the decks name inputs/... relative to the repository root, as a user's would
stub=$here/stub-quartet
sweep=$src/slurm/sweep.sbatch

# A 2 x 3 sweep of the demo deck, written outside the repository.
out=$work/sweep
printf 'deck = inputs/demo.deck\n[values]\nrun.seed = 1, 2\nmodel.actor.lr = 1e-3, 2e-3, 3e-3\n' > "$work/t.sweep"
(cd "$src" && "$quartet" sweep "$work/t.sweep" --out "$out") > "$work/sweep.out" 2>&1 ||
  { echo "FAIL: quartet sweep: $(cat "$work/sweep.out")"; exit 1; }
grep -qF "sbatch --array=1-6 slurm/sweep.sbatch $out/decks.list" "$work/sweep.out" ||
  fail "quartet sweep did not print the submit line: $(cat "$work/sweep.out")"
[ "$(wc -l < "$out/decks.list")" = 6 ] || fail "decks.list has $(wc -l < "$out/decks.list") lines, expected 6"

begin task_runs_its_deck
start_job "$sweep" QUARTET_BIN="$stub" SLURM_ARRAY_TASK_ID=5 SLURM_ARRAY_JOB_ID=4000 STUB_EXIT=0 -- "$out/decks.list" --set run.iterations=3
finish_job
expect_status 0
# The first key varies slowest: runs 1-3 are seed 1 with the three rates, run 5 is seed 2, lr 2e-3.
[ "$(tr '\n' ' ' < "$d/quartet.args")" = "train $out/decks/run_5.deck --set run.iterations=3 " ] ||
  fail "quartet got: $(tr '\n' ' ' < "$d/quartet.args")"
if ! grep -qx 'seed = 2 .*' "$out/decks/run_5.deck" || ! grep -qx 'lr = 2e-3 .*' "$out/decks/run_5.deck"; then
  fail "run_5.deck is not seed 2, lr 2e-3: $(grep -E '^(seed|lr) ' "$out/decks/run_5.deck")"
fi
grep -qx "out = $out/run_5 .*" "$out/decks/run_5.deck" || fail "run_5.deck does not write to $out/run_5"
expect_log "array job 4000 task 5 of 6"

begin task_checkpointed_requeues_itself
start_job "$sweep" QUARTET_BIN="$stub" SLURM_ARRAY_TASK_ID=2 STUB_EXIT=75 -- "$out/decks.list"
finish_job
expect_status 0
expect_requeues 1

begin task_usr1_reaches_quartet
start_job "$sweep" QUARTET_BIN="$stub" SLURM_ARRAY_TASK_ID=1 STUB_MODE=wait -- "$out/decks.list"
wait_for "$d/quartet.ready"
slurm_signal USR1
finish_job
expect_status 0
expect_requeues 1
expect_file_line quartet.signals USR1

begin task_beyond_the_list
start_job "$sweep" QUARTET_BIN="$stub" SLURM_ARRAY_TASK_ID=7 -- "$out/decks.list"
finish_job
expect_status 2
expect_log "has no line 7 \(it lists 6 decks: --array=1-6\)"
[ -f "$d/quartet.args" ] && fail "quartet ran for a task beyond the list"

begin not_an_array_job
start_job "$sweep" QUARTET_BIN="$stub" -- "$out/decks.list"
finish_job
expect_status 2
expect_log "not an array task"

begin no_list
start_job "$sweep" QUARTET_BIN="$stub" SLURM_ARRAY_TASK_ID=1 -- "$work/none.list"
finish_job
expect_status 2
expect_log "no list of decks"

finish

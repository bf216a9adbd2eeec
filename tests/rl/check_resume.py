"""Stops `quartet train` with real signals (and a time limit, and a damaged checkpoint), resumes
it, and checks that the resumed run is the run that was never interrupted: the same metrics,
bitwise, and the same final weights and optimizer state. Also resharding: a run checkpointed
with the actor on 2 ranks continues on 1 and back on 2.

    check_resume.py WORKDIR SCENARIO [REFERENCE] -- MPIRUN... -np  QUARTET
REFERENCE: the uninterrupted run, made once by the scenario `reference` (a ctest fixture) for the
scenarios of the plain deck to share; without it a scenario makes its own.
SCENARIO: reference | signals | double_signal | time_limit | corrupt | all_damaged | reshard | launch |
          launch_double | unfinished (checkpoints whose write was cut short: no manifest.json) |
          foreign (a step of another run in run.out) |
          same_seed (two fresh runs of one deck: the same checkpoint, generator states included) |
          eval (with [eval] at every iteration: a stop and resume, and a fall-back to an earlier
          checkpoint, continue /eval as the uninterrupted run wrote it, no point lost or twice)
(launch, launch_double: the runs go through `quartet launch MPIRUN ...`, and the signals go to it
as a user, a terminal or a scheduler sends them to the launcher.)
The deck is inputs/demo.deck (run from the repository root), shortened.
"""
import os
import re
import shutil
import signal
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from watched_run import WatchedRun, time_limited_rounds  # noqa: E402

ITER = re.compile(r"^iter\s+(\d+)/(\d+) \|")
EXIT_RESUBMIT, EXIT_STOPPED = 75, 76
ITERATIONS = 16
RUN_SECONDS = 150  # one run of train; past it the run is taken as hung
EXTRA = []  # deck settings every run of the scenario shares
# Timing and throughput differ between any two runs; everything else must not.
UNTIMED = lambda name: not name.startswith("time_") and name != "tokens_per_s"


def fail(msg):
    sys.exit(f"check_resume: {msg}")


class Train(WatchedRun):
    """One `mpirun ... quartet train` with its output collected line by line."""

    def __init__(self, launcher, np_, out, *sets):
        cmd = launcher + [str(np_), QUARTET, "train", "inputs/demo.deck"]
        # Later settings of a key replace earlier ones (a deck refuses a key given twice).
        settings = {}
        # A stalled collective aborts, naming the ranks, well inside the test's time.
        for s in [f"run.iterations={ITERATIONS}", f"run.out={out}", "checkpoint.every=4", "checkpoint.keep=3",
                  "dist.watchdog_timeout=60"] + EXTRA + list(sets):
            key, value = s.split("=", 1)
            settings[key] = value
        for key, value in settings.items():
            cmd += ["--set", f"{key}={value}"]
        super().__init__(cmd, RUN_SECONDS, fail)

    def wait_for_iteration(self, n):
        """Reads output until iteration n is reported."""
        self.wait_for(ITER, n, "iteration")

    def signal_every_rank(self, sig):
        """sig to every rank, as srun relays Slurm's signals to every task; returns their pids. Not
        through mpirun: the Open MPI 4.1.6 of the GPU machine's image catches SIGUSR1 and passes
        it to no rank."""
        ranks = self.ranks()
        if not ranks:
            fail(f"no rank processes under mpirun (pid {self.proc.pid}) to signal")
        for pid in ranks:
            os.kill(pid, sig)
        return ranks


def reward_program(mode):
    """The command of tests/rl/reward_fixtures.py's reward program in `mode`."""
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reward_fixtures.py")
    return f"{sys.executable} {fixtures} program {mode}"


def run_to_end(launcher, np_, out, *sets, expect=0):
    t = Train(launcher, np_, out, *sets)
    rc = t.finish()
    if rc != expect:
        fail(f"{' '.join(t.cmd)} exited {rc}, expected {expect}:\n{t.output()[-3000:]}")
    return t.output()


def metrics(out):
    with h5py.File(os.path.join(out, "run.h5"), "r") as f:
        n = int(f.attrs["iterations_complete"])
        series = {k: np.asarray(f["metrics"][k][:n]) for k in f["metrics"] if UNTIMED(k)}
        # /eval whole: rows past the complete iterations would be a fault of the writer here.
        for k in f.get("eval", {}):
            series[f"eval/{k}"] = np.asarray(f["eval"][k][()])
        return n, series


def final_state(out):
    step = os.path.join(out, "checkpoints", f"step_{ITERATIONS}")
    state = {}
    for name in ("actor.h5", "critic.h5"):
        with h5py.File(os.path.join(step, name), "r") as f:
            f.visititems(lambda k, v: state.__setitem__(f"{name}/{k}", np.asarray(v[()])) if isinstance(v, h5py.Dataset) else None)
    return state


def same_run(reference, resumed, what):
    n_ref, m_ref = metrics(reference)
    n_res, m_res = metrics(resumed)
    if n_ref != ITERATIONS or n_res != ITERATIONS:
        fail(f"{what}: run files hold {n_ref} and {n_res} iterations, expected {ITERATIONS} each")
    if sorted(m_ref) != sorted(m_res):
        fail(f"{what}: different metrics: {sorted(m_ref)} vs {sorted(m_res)}")
    for k in m_ref:
        if m_ref[k].shape != m_res[k].shape:
            fail(f"{what}: {k} has {m_ref[k].shape} rows uninterrupted, {m_res[k].shape} resumed: "
                 f"{m_ref.get('eval/iteration')} vs {m_res.get('eval/iteration')}")
        if not np.array_equal(m_ref[k], m_res[k]):
            i = int(np.nonzero(m_ref[k] != m_res[k])[0][0])
            fail(f"{what}: metric {k} differs first at iteration {i + 1}: {m_ref[k][i]!r} vs {m_res[k][i]!r}")
    s_ref, s_res = final_state(reference), final_state(resumed)
    if sorted(s_ref) != sorted(s_res):
        fail(f"{what}: the final checkpoints hold different tensors")
    for k in s_ref:
        if s_ref[k].tobytes() != s_res[k].tobytes():
            fail(f"{what}: final checkpoint tensor {k} differs")
    print(f"check_resume: {what}: {len(m_ref)} metrics over {ITERATIONS} iterations and {len(s_ref)} checkpoint "
          f"tensors are bitwise equal to the uninterrupted run")


def stopped_at(output):
    m = re.search(r"train: stopping after iteration (\d+)", output)
    if not m:
        fail(f"no 'stopping after iteration' line:\n{output[-3000:]}")
    return int(m.group(1))


def resumed_from(output):
    m = re.search(r"train: resuming from (\S+): (\d+) of", output)
    if not m:
        fail(f"the second run did not resume:\n{output[-3000:]}")
    return m.group(1).rstrip(":"), int(m.group(2))


def main():
    global QUARTET, ITERATIONS, EXTRA
    args = sys.argv[1:]
    split = args.index("--")
    work, scenario, shared = (args[:split] + [None])[:3]
    command = args[split + 1:]
    launcher, QUARTET = command[:-1], command[-1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    if scenario.startswith("launch"):
        launcher = [QUARTET, "launch"] + launcher
    if scenario in ("double_signal", "launch_double"):
        # The reward is rule:sort_digits's, from a program (tests/rl/reward_fixtures.py). In the
        # interrupted run it answers each batch from iteration 4 on three seconds late: iterations
        # of a few seconds, so that two requests more than a second apart (closer ones count as
        # one) both land inside iteration 4, without work that would slow the tests beside. The
        # other runs, and the interrupted one before iteration 4, do not wait. The requests go 1.5 s apart: a rank that a loaded host runs late takes the
        # first late, and a second 1.1 s after the first was once taken for its copy.
        ITERATIONS = 6
        EXTRA = ["checkpoint.every=2", f"model.reward.kind=command:{reward_program('ok')}",
                 "model.reward.timeout=20", "model.reward.start_timeout=30"]
    if scenario == "reshard":
        # With the actor on 2 ranks the critic takes twice the optimizer steps an iteration that it
        # takes with 1 (rollout.batch is per actor rank), and a learning-rate schedule is counted
        # in steps for the placement of the run at hand: the stretch on 1 rank must end before
        # the step count passes that schedule's end.
        ITERATIONS = 24
    if scenario == "eval":
        EXTRA = ["eval.prompts=inputs/prompts/sort_digits_heldout.jsonl", "eval.count=16", "eval.every=1",
                 "eval.at_start=true", "eval.samples=2", "eval.k=2"]
    if scenario == "reference":
        with open(os.path.join(work, "output.txt"), "w") as f:
            f.write(run_to_end(launcher, 3, work))
        return
    if shared:
        reference = shared
        with open(os.path.join(shared, "output.txt")) as f:
            reference_output = f.read()
    elif scenario not in ("reshard", "foreign"):  # checked against the iterations alone, or against nothing
        reference = os.path.join(work, "uninterrupted")
        reference_output = run_to_end(launcher, 3, reference)

    if scenario == "same_seed":
        again = os.path.join(work, "again")
        run_to_end(launcher, 3, again)
        step = os.path.join("checkpoints", f"step_{ITERATIONS}")
        compared = 0
        for name in ("trainer.h5", "actor.h5", "critic.h5"):
            with h5py.File(os.path.join(reference, step, name), "r") as a, h5py.File(os.path.join(again, step, name), "r") as b:
                keys = []
                a.visititems(lambda k, v: keys.append(k) if isinstance(v, h5py.Dataset) else None)
                for k in keys:
                    if k == "train_seconds":  # wall-clock time
                        continue
                    if k not in b or np.asarray(a[k][()]).tobytes() != np.asarray(b[k][()]).tobytes():
                        fail(f"two fresh runs of one deck differ in {name}:{k}")
                    compared += 1
        print(f"check_resume: two fresh runs of one deck: {compared} checkpoint datasets bitwise equal, "
              "rng_cpu included")
        return

    if scenario == "signals":
        # SIGUSR1 to every rank (Slurm's pre-timeout warning, relayed by srun).
        out = os.path.join(work, "usr1")
        t = Train(launcher, 3, out)
        t.wait_for_iteration(6)
        t.signal_every_rank(signal.SIGUSR1)
        rc = t.finish()
        if rc != EXIT_RESUBMIT:
            fail(f"after SIGUSR1 the run exited {rc}, expected {EXIT_RESUBMIT}:\n{t.output()[-3000:]}")
        n = stopped_at(t.output())
        if not os.path.exists(os.path.join(out, "checkpoints", f"step_{n}", "manifest.json")):
            fail(f"stopped after iteration {n} but checkpoints/step_{n} is not complete")
        if os.readlink(os.path.join(out, "checkpoints", "latest")) != f"step_{n}":
            fail("checkpoints/latest does not name the stop's checkpoint")
        _, at = resumed_from(run_to_end(launcher, 3, out))
        if at != n:
            fail(f"resumed at iteration {at}, but the stop's checkpoint is {n}")
        same_run(reference, out, f"SIGUSR1 to every rank after iteration {n}, resumed")

        # SIGTERM to one rank only: the others learn of it when the ranks agree.
        out = os.path.join(work, "term")
        t = Train(launcher, 3, out)
        t.wait_for_iteration(9)
        ranks = t.ranks()
        if len(ranks) != 3:
            fail(f"expected 3 rank processes under mpirun, found {ranks}")
        os.kill(ranks[-1], signal.SIGTERM)
        rc = t.finish()
        if rc != EXIT_RESUBMIT:
            fail(f"after SIGTERM to one rank the run exited {rc}, expected {EXIT_RESUBMIT}:\n{t.output()[-3000:]}")
        n = stopped_at(t.output())
        run_to_end(launcher, 3, out)
        same_run(reference, out, f"SIGTERM to rank 2 alone after iteration {n}, resumed")

    elif scenario == "launch":
        # SIGTERM to the launcher (what `kill`, `timeout` and schedulers send): a clean stop.
        out = os.path.join(work, "launch_term")
        t = Train(launcher, 3, out)
        t.wait_for_iteration(6)
        t.proc.send_signal(signal.SIGTERM)
        rc = t.finish()
        if rc != EXIT_RESUBMIT:
            fail(f"after SIGTERM to quartet launch the run exited {rc}, expected {EXIT_RESUBMIT}:\n{t.output()[-3000:]}")
        n = stopped_at(t.output())
        if not os.path.exists(os.path.join(out, "checkpoints", f"step_{n}", "manifest.json")):
            fail(f"stopped after iteration {n} but checkpoints/step_{n} is not complete")
        _, at = resumed_from(run_to_end(launcher, 3, out))
        if at != n:
            fail(f"resumed at iteration {at}, but the stop's checkpoint is {n}")
        same_run(reference, out, f"SIGTERM to quartet launch after iteration {n}, resumed")

        # Ctrl-C in a terminal: SIGINT to the whole foreground process group. mpirun sits in a
        # group of its own, so only quartet launch sees it.
        out = os.path.join(work, "launch_int")
        t = Train(launcher, 3, out)
        t.wait_for_iteration(9)
        os.killpg(t.proc.pid, signal.SIGINT)
        rc = t.finish()
        if rc != EXIT_RESUBMIT:
            fail(f"after SIGINT to the process group the run exited {rc}, expected {EXIT_RESUBMIT}:\n{t.output()[-3000:]}")
        n = stopped_at(t.output())
        run_to_end(launcher, 3, out)
        same_run(reference, out, f"SIGINT to quartet launch's process group after iteration {n}, resumed")

    elif scenario == "launch_double":
        # Two SIGTERMs to the launcher, more than a second apart: stop without a new checkpoint.
        out = os.path.join(work, "launch_double")
        t = Train(launcher, 3, out, f"model.reward.kind=command:{reward_program('slow')}")
        t.wait_for_iteration(3)
        time.sleep(0.5)
        t.proc.send_signal(signal.SIGTERM)
        time.sleep(1.5)
        if t.proc.poll() is not None:
            fail(f"the run ended ({t.proc.returncode}) before the second SIGTERM:\n{t.output()[-3000:]}")
        t.proc.send_signal(signal.SIGTERM)
        rc = t.finish()
        if rc != EXIT_STOPPED:
            fail(f"after two SIGTERMs to quartet launch the run exited {rc}, expected {EXIT_STOPPED}:\n{t.output()[-3000:]}")
        latest = os.readlink(os.path.join(out, "checkpoints", "latest"))
        run_to_end(launcher, 3, out)
        same_run(reference, out, f"two SIGTERMs to quartet launch (stopped, resumed from {latest})")

    elif scenario == "double_signal":
        # A second request stops at the next safe point, without a new checkpoint.
        out = os.path.join(work, "double")
        t = Train(launcher, 3, out, f"model.reward.kind=command:{reward_program('slow')}")
        t.wait_for_iteration(3)
        # Iteration 3's line comes just before its end-of-iteration check; a request landing
        # before that check is acted on at once (checkpoint, exit 75) and leaves no process for
        # the second. So wait until the check is surely past, then send both requests inside
        # iteration 4 (more than a second apart: closer copies count as one request).
        time.sleep(0.5)
        ranks = t.signal_every_rank(signal.SIGUSR1)
        time.sleep(1.5)
        if t.proc.poll() is not None:
            fail(f"the run ended ({t.proc.returncode}) before the second request could be sent "
                 f"(iterations too short for this test?):\n{t.output()[-3000:]}")
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                fail(f"rank process {pid} had ended before the second request; make the iterations longer")
        rc = t.finish()
        if rc != EXIT_STOPPED:
            fail(f"after two signals the run exited {rc}, expected {EXIT_STOPPED}:\n{t.output()[-3000:]}")
        if "second stop request" not in t.output():
            fail("no message about the second stop request")
        latest = os.readlink(os.path.join(out, "checkpoints", "latest"))
        if not os.path.exists(os.path.join(out, "checkpoints", latest, "manifest.json")):
            fail(f"latest ({latest}) is not complete after the stop")
        run_to_end(launcher, 3, out)
        same_run(reference, out, f"two signals (stopped without a checkpoint, resumed from {latest})")

    elif scenario == "time_limit":
        # A budget shorter than the run: it checkpoints and exits 75 before the budget ends, and
        # resubmissions finish it. Half the uninterrupted run's own time: machines differ
        # several-fold, and a fixed budget outlasted the whole run on a fast one (a budget of
        # 1.5 s took a round of 3 processes an iteration on a loaded host).
        out = os.path.join(work, "limited")
        limit, rounds = time_limited_rounds(lambda limit: Train(launcher, 3, out, f"run.time_limit={limit:.2f}"),
                                            out, r"^train: done in ([0-9.]+)s$", reference_output, fail,
                                            ITERATIONS)
        same_run(reference, out, f"run.time_limit = {limit:.2f}s ({rounds} rounds)")

    elif scenario == "corrupt":
        # Damage the newest checkpoint: resume warns, names the file, and falls back one.
        out = os.path.join(work, "corrupt")
        t = Train(launcher, 3, out)
        t.wait_for_iteration(11)
        t.signal_every_rank(signal.SIGUSR1)
        if t.finish() != EXIT_RESUBMIT:
            fail(f"the run did not stop on SIGUSR1:\n{t.output()[-3000:]}")
        n = stopped_at(t.output())
        newest = os.path.join(out, "checkpoints", f"step_{n}", "actor.h5")
        with open(newest, "r+b") as f:
            f.seek(os.path.getsize(newest) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        output = run_to_end(launcher, 3, out)
        if not re.search(rf"warning: .*step_{n}.*actor\.h5.*checksum", output):
            fail(f"no warning naming step_{n}/actor.h5 and its checksum:\n{output[-3000:]}")
        where, at = resumed_from(output)
        if at >= n or not where.endswith(f"step_{at}"):
            fail(f"resumed from {where} at {at}; expected an earlier checkpoint than {n}")
        same_run(reference, out, f"corrupt step_{n}, resumed from step_{at}")

    elif scenario == "unfinished":
        # A kill while the first checkpoint was written leaves its directory without manifest.json
        # (the commit's last act) and nothing committed: the next attempt removes it and starts
        # afresh, rather than refusing to start (which would end a preempted job for good).
        out = os.path.join(work, "unfinished")
        t = Train(launcher, 3, out)
        t.wait_for_iteration(2)
        t.signal_every_rank(signal.SIGUSR1)
        if t.finish() != EXIT_RESUBMIT:
            fail(f"the run did not stop on SIGUSR1:\n{t.output()[-3000:]}")
        cdir = os.path.join(out, "checkpoints")
        steps = sorted((d for d in os.listdir(cdir) if d.startswith("step_")), key=lambda d: int(d[5:]))
        for d in steps[:-1]:
            shutil.rmtree(os.path.join(cdir, d))
        os.remove(os.path.join(cdir, steps[-1], "manifest.json"))
        os.remove(os.path.join(cdir, "latest"))
        output = run_to_end(launcher, 3, out)
        if not re.search(rf"{steps[-1]} under .* never committed .*removed; no checkpoint was ever committed: "
                         r"starting afresh", output) or "resuming from" in output:
            fail(f"no word of the unfinished {steps[-1]} removed and a fresh start:\n{output[-3000:]}")
        same_run(reference, out, f"an unfinished first checkpoint ({steps[-1]}), started afresh")
        # The newest unfinished, older ones committed: resumed from the newest committed one.
        newest = f"step_{ITERATIONS}"
        os.remove(os.path.join(cdir, newest, "manifest.json"))
        output = run_to_end(launcher, 3, out)
        where, at = resumed_from(output)
        if not re.search(rf"{newest} under .* never committed .*removed; resuming from step_{at}", output):
            fail(f"no word of the unfinished {newest} removed:\n{output[-3000:]}")
        same_run(reference, out, f"an unfinished {newest}, resumed from step_{at}")

    elif scenario == "foreign":
        # A step of another run (another seed) copied over this run's newest: not resumed in
        # silence but refused (exit 2), naming both runs; named in checkpoint.resume, it is taken.
        mine, other = os.path.join(work, "mine"), os.path.join(work, "other")
        run_to_end(launcher, 3, mine, "run.iterations=8")
        run_to_end(launcher, 3, other, "run.iterations=8", "run.seed=2")
        step = os.path.join(mine, "checkpoints", "step_8")
        shutil.rmtree(step)
        shutil.copytree(os.path.join(other, "checkpoints", "step_8"), step)
        text = run_to_end(launcher, 3, mine, "run.iterations=12", expect=2)
        if not re.search(r"checkpoint\.resume.*is auto, and the newest intact checkpoint, \S+/step_8, belongs to run "
                         r"\S+, but \S+/run\.h5 to run \S+: a step copied from another run", text):
            fail(f"a step of another run was not refused by name:\n{text[-3000:]}")
        _, at = resumed_from(run_to_end(launcher, 3, mine, "run.iterations=12", f"checkpoint.resume={step}"))
        if at != 8:
            fail(f"named in checkpoint.resume, the other run's step_8 was not taken (resumed at {at})")
        print("check_resume: a step of another run is refused with checkpoint.resume = auto, and taken when named")
        return

    elif scenario == "all_damaged":
        # Every checkpoint damaged: train refuses (exit 2), naming each, and changes nothing; with
        # checkpoint.on_damaged = start_over it moves them aside and runs from iteration 0.
        out = os.path.join(work, "all_damaged")
        t = Train(launcher, 3, out)
        t.wait_for_iteration(11)
        t.signal_every_rank(signal.SIGUSR1)
        if t.finish() != EXIT_RESUBMIT:
            fail(f"the run did not stop on SIGUSR1:\n{t.output()[-3000:]}")
        cdir = os.path.join(out, "checkpoints")
        steps = sorted(d for d in os.listdir(cdir) if d.startswith("step_"))
        if len(steps) < 2:
            fail(f"expected several checkpoints to damage, found {steps}")
        for d in steps:
            path = os.path.join(cdir, d, "trainer.h5" if d == steps[0] else "actor.h5")
            with open(path, "r+b") as f:
                f.seek(os.path.getsize(path) // 3)
                byte = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([byte[0] ^ 0x55]))
        def snapshot():
            files = {}
            for root, _, names in os.walk(out):
                for n in names:
                    p = os.path.join(root, n)
                    if not n.endswith(".lock"):
                        with open(p, "rb") as f:
                            files[os.path.relpath(p, out)] = f.read()
            return files
        before = snapshot()
        refused = Train(launcher, 3, out)
        rc = refused.finish()
        text = refused.output()
        if rc != 2:
            fail(f"with every checkpoint damaged train exited {rc}, expected 2:\n{text[-3000:]}")
        for d in steps:
            if not re.search(rf"{d}.*(checksum|corrupt)", text):
                fail(f"the refusal does not name {d} and its fault:\n{text[-3000:]}")
        if "checkpoint.on_damaged" not in text:
            fail(f"the refusal does not name the key that starts over:\n{text[-3000:]}")
        if snapshot() != before:
            fail("the refused run changed files under run.out")
        print(f"check_resume: every checkpoint damaged ({', '.join(steps)}): refused with exit 2, nothing changed")
        output = run_to_end(launcher, 3, out, "checkpoint.on_damaged=start_over")
        aside = [d for d in os.listdir(out) if d.startswith("checkpoints.damaged-")]
        if len(aside) != 1 or not set(steps) <= set(os.listdir(os.path.join(out, aside[0]))):
            fail(f"the damaged checkpoints were not moved aside whole: {os.listdir(out)}")
        if not os.path.exists(os.path.join(out, "run.h5.prev")):
            fail("the earlier run.h5 was not kept as run.h5.prev")
        if "resuming from" in output:
            fail("start_over resumed instead of starting at iteration 0")
        same_run(reference, out, f"checkpoint.on_damaged = start_over (the damaged ones in {aside[0]})")

    elif scenario == "reshard":
        # Actor on 2 ranks (4 in all) -> 1 rank (3 in all) -> 2 ranks again.
        out = os.path.join(work, "reshard")
        t = Train(launcher, 4, out, "placement.actor=2", "checkpoint.every=3")
        t.wait_for_iteration(7)
        t.signal_every_rank(signal.SIGUSR1)
        if t.finish() != EXIT_RESUBMIT:
            fail(f"the 4-rank run did not stop on SIGUSR1:\n{t.output()[-3000:]}")
        n1 = stopped_at(t.output())
        t = Train(launcher, 3, out, "placement.actor=1")
        t.wait_for_iteration(n1 + 4)
        t.signal_every_rank(signal.SIGUSR1)
        if t.finish() != EXIT_RESUBMIT:
            fail(f"the 3-rank run did not stop on SIGUSR1:\n{t.output()[-3000:]}")
        _, at = resumed_from(t.output())
        if at != n1:
            fail(f"the 3-rank run resumed at {at}, expected {n1}")
        n2 = stopped_at(t.output())
        output = run_to_end(launcher, 4, out, "placement.actor=2")
        _, at = resumed_from(output)
        if at != n2:
            fail(f"the second 4-rank run resumed at {at}, expected {n2}")
        n, m = metrics(out)
        if n != ITERATIONS or not np.array_equal(m["iteration"], np.arange(1, ITERATIONS + 1)):
            fail(f"the resharded run's file holds iterations {m['iteration']}")
        print(f"check_resume: actor 2 ranks -> 1 (at {n1}) -> 2 (at {n2}): finished {ITERATIONS} iterations")
    elif scenario == "eval":
        n_ref, m_ref = metrics(reference)
        if list(m_ref["eval/iteration"]) != list(range(ITERATIONS + 1)):
            fail(f"the uninterrupted run evaluated at {m_ref['eval/iteration']}, expected 0 .. {ITERATIONS}")
        # A stop (checkpoint, exit 75) and a resume from it.
        out = os.path.join(work, "eval_stop")
        t = Train(launcher, 3, out)
        t.wait_for_iteration(6)
        t.signal_every_rank(signal.SIGUSR1)
        if t.finish() != EXIT_RESUBMIT:
            fail(f"the run did not stop on SIGUSR1:\n{t.output()[-3000:]}")
        n = stopped_at(t.output())
        _, at = resumed_from(run_to_end(launcher, 3, out))
        if at != n:
            fail(f"resumed at iteration {at}, but the stop's checkpoint is {n}")
        same_run(reference, out, f"[eval] every iteration, stopped after iteration {n}, resumed")
        # The newest checkpoint damaged: the run falls back to an earlier one, and the
        # evaluations the file holds past it are written again, once.
        out = os.path.join(work, "eval_fallback")
        t = Train(launcher, 3, out)
        t.wait_for_iteration(11)
        t.signal_every_rank(signal.SIGUSR1)
        if t.finish() != EXIT_RESUBMIT:
            fail(f"the run did not stop on SIGUSR1:\n{t.output()[-3000:]}")
        n = stopped_at(t.output())
        with h5py.File(os.path.join(out, "run.h5"), "r") as f:
            held = list(f["eval"]["iteration"][()])
        newest = os.path.join(out, "checkpoints", f"step_{n}", "actor.h5")
        with open(newest, "r+b") as f:
            f.seek(os.path.getsize(newest) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        _, at = resumed_from(run_to_end(launcher, 3, out))
        if at >= n or max(held) <= at:
            fail(f"resumed at {at} with evaluations up to {max(held)} in the file: nothing to write again")
        same_run(reference, out, f"[eval] every iteration, evaluations {at + 1}..{max(held)} written again after "
                                 f"falling back from step_{n} to step_{at}")
    else:
        fail(f"unknown scenario {scenario}")


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # under ctest stdout is a pipe: show lines as they come
    main()

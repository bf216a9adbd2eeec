"""`quartet train` with rewards in the user's own code (docs/reward-programs.md): a Python
program (model.reward.kind = command:...) and a Python HTTP server on 127.0.0.1 (kind = http://...),
both started by this test (tests/rl/reward_fixtures.py).

    check_reward_programs.py SCENARIO WORKDIR -- MPIRUN... -np QUARTET

same_as_rule_command, same_as_rule_http: the program and the server compute rule:sort_digits
again from the prompt file's answers; the run must equal the rule's run number for number
(every rollout's score, every metric), with two actor ranks, each with its own program.
Every other scenario is a failure: quartet must exit non-zero within a bound, with the
expected message, and leave no reward program running.
"""
import glob
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reward_fixtures  # noqa: E402

BOUND = 90  # seconds a failing run may take, start-up of the ranks included (loaded CI hosts)
# GRPO on the demo task: two actor ranks and a reference (whose rank waits for the actor's while
# the reward fails); four iterations are enough to compare.
DECK = ["inputs/demo.deck", "--set", "algorithm.name=grpo", "--set", "algorithm.samples_per_prompt=4",
        "--set", "rollout.batch=8", "--set", "placement.critic=0", "--set", "output.rollouts_every=1",
        "--set", "run.iterations=4", "--set", "checkpoint.at_end=false"]
METRICS = ["reward_mean", "reward_std", "reward_min", "reward_max", "kl", "policy_loss", "clip_fraction"]


def fail(msg):
    sys.exit(f"check_reward_programs: {msg}")


def program_kind(mode, pid_dir):
    script = os.path.join(HERE, "reward_fixtures.py")
    return f"command:{shlex.quote(sys.executable)} {shlex.quote(script)} program {mode} --pid-dir {pid_dir}"


def run(launcher, quartet, work, name, actors, kind, *extra, timeout=BOUND):
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = launcher + [str(actors + 1), quartet, "train"] + DECK + [
        "--set", f"placement.actor={actors}", "--set", f"run.out={out}", "--set", f"model.reward.kind={kind}"]
    for e in extra:
        cmd += ["--set", e]
    start = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        fail(f"{name}: still running after {timeout} s (a hang):\n{e.stdout}\n{e.stderr}")
    elapsed = time.time() - start
    text = p.stdout + p.stderr
    print(f"$ {shlex.join(cmd)}\n{text}exit status {p.returncode} after {elapsed:.1f} s\n")
    return p.returncode, text, out


def programs_gone(pid_dir, expected):
    pids = [int(os.path.basename(f)) for f in glob.glob(os.path.join(pid_dir, "*"))]
    if len(pids) != expected:
        fail(f"{expected} reward programs should have started (one per actor rank), {len(pids)} did")
    for pid in pids:
        for _ in range(50):  # the ranks are gone; give the kernel a moment to reap
            if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
                break
            time.sleep(0.1)
        else:
            fail(f"reward program {pid} still runs after quartet ended")


def rollouts(run_dir):
    with h5py.File(os.path.join(run_dir, "run.h5"), "r") as f:
        scores = {k: f["rollouts"][k]["scores"][()] for k in f["rollouts"]}
        metrics = {m: f["metrics"][m][()] for m in METRICS}
    return scores, metrics


def same_as_rule(launcher, quartet, work, via):
    rc, _, rule_dir = run(launcher, quartet, work, "rule", 2, "rule:sort_digits")
    if rc != 0:
        fail("the rule's run failed")
    pid_dir = os.path.join(work, "pids")
    shutil.rmtree(pid_dir, ignore_errors=True)
    os.makedirs(pid_dir)
    server = None
    if via == "command":
        kind = program_kind("ok", pid_dir)
    else:
        server, kind = reward_fixtures.start_server("ok")
    rc, text, dir_ = run(launcher, quartet, work, via, 2, kind)
    if server:
        server.shutdown()
    if rc != 0 or "train: done" not in text:
        fail(f"the {via} run did not finish")
    if via == "command":
        programs_gone(pid_dir, 2)
    (want_scores, want_metrics), (got_scores, got_metrics) = rollouts(rule_dir), rollouts(dir_)
    if sorted(want_scores) != sorted(got_scores) or len(got_scores) != 4:
        fail(f"rollouts of iterations {sorted(got_scores)}, the rule's run has {sorted(want_scores)}")
    for k in want_scores:
        if not np.array_equal(want_scores[k], got_scores[k]):
            fail(f"iteration {k}: the scores differ from the rule's:\n{got_scores[k]}\n{want_scores[k]}")
        if np.all(got_scores[k] == got_scores[k].flat[0]):
            fail(f"iteration {k}: every score is the same: nothing was compared")
    for m in METRICS:
        if not np.array_equal(want_metrics[m], got_metrics[m]):
            fail(f"metric {m} differs from the rule's run: {got_metrics[m]} against {want_metrics[m]}")
    print(f"check_reward_programs: the {via} run equals the rule's: {sum(len(v) for v in got_scores.values())} "
          f"scores over {len(got_scores)} iterations, mean reward {got_metrics['reward_mean']}")


def expect_failure(launcher, quartet, work, name, kind, pattern, *extra, status=None, actors=1, pid_dir=None,
                   programs=1):
    start = time.time()
    rc, text, _ = run(launcher, quartet, work, name, actors, kind, *extra)
    elapsed = time.time() - start
    if rc == 0:
        fail(f"{name}: quartet exited 0")
    if status is not None and rc != status:
        fail(f"{name}: exit status {rc}, expected {status}")
    if elapsed > BOUND:
        fail(f"{name}: took {elapsed:.0f} s")
    m = re.search(pattern, text, re.S)
    if not m:
        fail(f"{name}: the output does not match {pattern!r}")
    if pid_dir:
        programs_gone(pid_dir, programs)
    print(f"check_reward_programs: {name}: exit {rc} after {elapsed:.1f} s with the expected message")
    return m, text


def program_failure(launcher, quartet, work, mode, pattern, *extra, status=1):
    pid_dir = os.path.join(work, f"pids-{mode}")
    shutil.rmtree(pid_dir, ignore_errors=True)
    os.makedirs(pid_dir)
    return expect_failure(launcher, quartet, work, mode, program_kind(mode, pid_dir), pattern, *extra,
                          status=status, pid_dir=pid_dir)


def http_failure(launcher, quartet, work, mode, pattern, *extra, status=1):
    server, url = reward_fixtures.start_server(mode)
    try:
        return expect_failure(launcher, quartet, work, "http_" + mode, url, pattern, *extra, status=status)
    finally:
        server.shutdown()


ROWS = r"the batch of prompt rows [0-9, .]+ \(32 samples\)"
WHO = r"reward program '.*reward_fixtures.py program \w+ --pid-dir \S+' \(model.reward.kind\)"


def main():
    scenario, work = sys.argv[1], sys.argv[2]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    launcher, quartet = cmd[:-1], cmd[-1]
    os.makedirs(work, exist_ok=True)
    if scenario == "same_as_rule_command":
        same_as_rule(launcher, quartet, work, "command")
    elif scenario == "same_as_rule_http":
        same_as_rule(launcher, quartet, work, "http")
    elif scenario == "exit_at_start":
        # Refused before any model is built, on every rank alike (exit 2).
        program_failure(launcher, quartet, work, "exit_at_start",
                        WHO + r" closed its pipes before answering its first, empty request \(id 0\); the program "
                        r"exited with status 3; its last lines on stderr:\n    \| reward_fixtures: cannot load the "
                        r"checker: no file 'checker.bin'", status=2)
    elif scenario == "crash":
        program_failure(launcher, quartet, work, "crash",
                        WHO + r" closed its pipes before answering " + ROWS + r"; the program exited with status 1; "
                        r"its last lines on stderr:.*\| reward_fixtures: about to divide by zero\n.*"
                        r"\| ZeroDivisionError: division by zero")
    elif scenario == "garbage":
        program_failure(launcher, quartet, work, "garbage",
                        WHO + r" answered " + ROWS + r" with a line that is not JSON \(parse error at line 1, "
                        r"column 1: syntax error while parsing value - invalid literal; last read: 'L'\):\n"
                        r"    \| Loading the checker\.\.\. "
                        r"done\n  \(stdout is for replies alone: write anything else to stderr\)")
    elif scenario == "wrong_count":
        program_failure(launcher, quartet, work, "wrong_count",
                        WHO + r": 31 scores came back for 32 samples \(prompt rows [0-9, .]+ \(32 samples\)\); "
                        r"the program was stopped; its last lines on stderr:")
    elif scenario == "bad_score":
        m, _ = program_failure(launcher, quartet, work, "bad_score",
                               WHO + r": score 2 \(prompt row (\d+) of rollout.prompts\) is \"1.0\", not a finite "
                               r"number; the program was stopped; its last lines on stderr:.*"
                               r"\| reward_fixtures: bad score for row (\d+)")
        if m.group(1) != m.group(2):
            fail(f"bad_score: quartet names row {m.group(1)}, the program scored row {m.group(2)} wrongly")
    elif scenario == "sleep":
        program_failure(launcher, quartet, work, "sleep",
                        WHO + r" did not answer " + ROWS + r" within 2 s \(model.reward.timeout\), so quartet killed "
                        r"it .*; the program was killed by signal 9", "model.reward.timeout=2")
    elif scenario == "endless":
        program_failure(launcher, quartet, work, "endless",
                        WHO + r" answered " + ROWS + r" with more than 1MiB before the end of its reply line "
                        r"\(model.reward.max_reply\), which begins:\n    \| 7777", "model.reward.max_reply=1MiB")
    elif scenario == "nan":
        program_failure(launcher, quartet, work, "nan",
                        WHO + r" answered " + ROWS + r" with NaN at scores\[2\] \(prompt row \d+\), which JSON does "
                        r"not have \(Python's json.dumps writes NaN and Infinity")
    elif scenario == "http_endless":
        http_failure(launcher, quartet, work, "endless",
                     r"reward endpoint http://127.0.0.1:\d+/score \(model.reward.kind\) answered " + ROWS +
                     r" with a body of more than 1MiB \(model.reward.max_reply\): quartet stopped reading it",
                     "model.reward.max_reply=1MiB")
    elif scenario == "http_nan":
        http_failure(launcher, quartet, work, "nan",
                     r"reward endpoint http://127.0.0.1:\d+/score \(model.reward.kind\) answered " + ROWS +
                     r" with NaN at rewards\[2\] \(prompt row \d+\), which JSON does not have")
    elif scenario == "http_status500":
        http_failure(launcher, quartet, work, "status500",
                     r"reward endpoint http://127.0.0.1:\d+/score \(model.reward.kind\) answered " + ROWS +
                     r" with HTTP status 500; the first lines of its body:\n    \| Traceback \(most recent call "
                     r"last\):\n    \|   File \"rm.py\", line 9\n    \| KeyError: 'query'")
    elif scenario == "http_garbage":
        http_failure(launcher, quartet, work, "garbage",
                     r"reward endpoint http://127.0.0.1:\d+/score \(model.reward.kind\) answered " + ROWS +
                     r" with a body that is not JSON \(parse error at line 1, column 1: .*\):\n"
                     r"    \| <html>Bad Gateway</html>")
    elif scenario == "http_wrong_count":
        http_failure(launcher, quartet, work, "wrong_count",
                     r"reward endpoint http://127.0.0.1:\d+/score \(model.reward.kind\): 31 scores came back for 32 "
                     r"samples \(prompt rows [0-9, .]+ \(32 samples\)\)")
    elif scenario == "http_close":
        before = reward_fixtures.Handler.requests
        http_failure(launcher, quartet, work, "close",
                     r"reward endpoint http://127.0.0.1:\d+/score \(model.reward.kind\): POST failed after 2 retries "
                     r"\(model.reward.retries\): POST http://127.0.0.1:\d+/score: Server returned nothing",
                     "model.reward.retries=2", "model.reward.retry_delay=0.2")
        if reward_fixtures.Handler.requests - before != 3:
            fail(f"http_close: the server saw {reward_fixtures.Handler.requests - before} requests, not 1 + 2 retries")
    elif scenario == "http_not_listening":
        with socket.socket() as s:  # a port that was free a moment ago, and now nothing listens there
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        expect_failure(launcher, quartet, work, "http_not_listening", f"http:http://127.0.0.1:{port}/score",
                       r"reward endpoint http://127.0.0.1:\d+/score \(model.reward.kind\): connecting failed after 1 "
                       r"retries \(model.reward.retries\): connecting to http://127.0.0.1:\d+/score: Couldn't connect",
                       "model.reward.retries=1", "model.reward.retry_delay=0.2", status=2)
    else:
        fail(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main()

"""Tests of postprocess/: the reader and every script, on synthetic run files written here with h5py
in the layout of include/quartet/io/run_file.hpp, and on a real demo run when QUARTET_DEMO_RUN
names one.

    python3 -m unittest discover -s postprocess/tests -v
    QUARTET_DEMO_RUN=runs/demo/run.h5 python3 -m unittest discover -s postprocess/tests -v
"""

import csv
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
POSTPROCESS = os.path.dirname(HERE)
sys.path.insert(0, POSTPROCESS)

import compare_runs  # noqa: E402
import iteration_table  # noqa: E402
import phase_table  # noqa: E402
import pipeline_summary  # noqa: E402
import plot_run  # noqa: E402
import quartet_run  # noqa: E402
import show_rollouts  # noqa: E402
import sweep_table  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SCRIPTS = ("plot_run.py", "sweep_table.py", "show_rollouts.py", "compare_runs.py", "phase_table.py",
           "iteration_table.py")

METRICS = ("reward_mean", "reward_std", "reward_min", "reward_max", "kl", "kl_coef", "policy_loss",
           "clip_fraction", "approx_kl", "entropy", "value_loss", "value_clip_fraction", "response_length",
           "tokens_per_s", "lr", "grad_norm_actor", "grad_norm_critic", "time_generate", "time_score",
           "time_advantages", "time_train", "time_iteration")

DECK_A = """# a deck as the run file stores it: comments, inline comments, sections
[run]
name = demo
out = runs/sweep_a   # per run
seed = 1
iterations = 12

[placement]
mode = disjoint
actor = 1
critic = 1
reference = 1

[algorithm]
name = ppo
kl_coef = 0.01

[model.actor]
path = random:llama
lr = 3e-3
"""
# B differs in kl_coef and actor lr (the sweep's parameters) and run.out (ignored), and adds a key.
DECK_B = DECK_A.replace("kl_coef = 0.01", "kl_coef = 0.05").replace("lr = 3e-3", "lr = 1e-3") \
    .replace("runs/sweep_a", "runs/sweep_b") + "[output]\nrollouts_every = 5\n"


def write_run(path, rows=12, complete=10, deck=DECK_A, world=3, rollouts=(5, 10, 12), metrics=METRICS,
              timing=True, iteration_column=None, reward_offset=0.0, evals=(0, 4, 8, 12)):
    """A run file in the writer's layout. Row r of every per-iteration dataset holds values that
    encode r (reward_mean = offset + r/10), so trimming can be checked. Rows beyond `complete`
    and rollout groups beyond it stand for a half-written iteration the reader must ignore.
    /eval holds one row per iteration in `evals` (greedy_pass@1 = iteration / 20); those past
    `complete` must be ignored too."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs["software"] = "quartet"
        f.attrs["version"] = np.bytes_(b"0.1.0")  # a fixed-length string, as C++ writers often store
        f.attrs["git_commit"] = "abc1234"
        f.attrs["deck"] = deck
        f.attrs["start_time"] = "2025-01-01T00:00:00Z"
        f.attrs["world_size"] = np.int64(world)
        f.attrs["placement"] = "actor ranks 0 | critic ranks 1 | reference ranks 2"
        f.attrs["algorithm"] = "ppo"
        f.attrs["iterations_planned"] = np.int64(rows + 5)
        f.attrs["iterations_complete"] = np.int64(complete)
        m = f.create_group("metrics")
        it = np.arange(1, rows + 1, dtype=np.int64) if iteration_column is None else np.asarray(iteration_column)
        m.create_dataset("iteration", data=it, maxshape=(None,), chunks=(64,))
        r = np.arange(rows, dtype=np.float64)
        for name in metrics:
            if name == "reward_mean":
                values = reward_offset + r / 10
            elif name == "reward_std":
                values = 0.05 + 0 * r
            elif name == "reward_min":
                values = reward_offset + r / 10 - 0.2
            elif name == "reward_max":
                values = reward_offset + r / 10 + 0.2
            elif name == "kl":
                values = 0.01 * r
            elif name.startswith("time_"):
                values = 1.0 + 0 * r
            else:
                values = np.sin(r) + 2
            m.create_dataset(name, data=values, maxshape=(None,), chunks=(64,))
        if timing:
            t = f.create_group("timing")
            mem = f.create_group("memory")
            for k, phase in enumerate(quartet_run.PHASES):
                # rank 1 is the slowest in every phase; plot_run stacks the slowest rank
                times = np.tile(np.array([0.1, 0.2 + k, 0.1]), (rows, 1))[:, :world]
                t.create_dataset(phase, data=times, maxshape=(None, world), chunks=(64, world))
                mem.create_dataset(phase, data=np.zeros((rows, world)), maxshape=(None, world), chunks=(64, world))
            mem.create_dataset("plan", data=np.full(world, 1e9))
        if evals:
            e = f.create_group("eval")
            its = np.asarray(evals, dtype=np.int64)
            e.create_dataset("iteration", data=its, maxshape=(None,), chunks=(64,))
            x = its.astype(np.float64)
            for name, values in (("greedy_pass@1", x / 20), ("greedy_reward", x / 15), ("pass@1", x / 30),
                                 ("pass@4", x / 12), ("sample_reward", x / 16), ("prompts", 64 + 0 * x)):
                e.create_dataset(name, data=values, maxshape=(None,), chunks=(64,))
        ro = f.create_group("rollouts")
        strings = h5py.string_dtype("utf-8")
        B, L, A = 4, 10, 4
        for it_no in rollouts:
            g = ro.create_group(f"{it_no:06d}")
            g.attrs["prompt_length"] = np.int64(L - A)
            g.create_dataset("sequences", data=np.arange(B * L, dtype=np.int64).reshape(B, L))
            g.create_dataset("attention_mask", data=np.ones((B, L), dtype=np.int8))
            am = np.ones((B, A), dtype=np.int8)
            am[:, -1] = 0  # a padded last token: must not count in the means
            g.create_dataset("action_mask", data=am)
            g.create_dataset("scores", data=np.linspace(0, 1, B).astype(np.float32))
            for name in ("logprobs", "values", "returns"):
                g.create_dataset(name, data=np.full((B, A), -1.0, dtype=np.float32))
            g.create_dataset("ref_logprobs", data=np.full((B, A), -1.5, dtype=np.float32))
            adv = np.tile(np.array([1.0, 2.0, 3.0, 100.0], dtype=np.float32), (B, 1))
            g.create_dataset("advantages", data=adv)
            g.create_dataset("prompt", data=[f"sort {1000 * it_no + b}=" for b in range(B)], dtype=strings)
            g.create_dataset("completion", data=[f"ansé{b}\nline2" for b in range(B)], dtype=strings)
    return path


def run_script(script, *args, cwd=None):
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, os.path.join(POSTPROCESS, script), *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120)


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG_SIGNATURE


class Fixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="quartet_postprocess_")
        cls.run_a = write_run(os.path.join(cls.tmp, "sweep_a", "run.h5"))
        # B: another deck, fewer metrics, no /timing (phase times then come from time_<phase>).
        cls.run_b = write_run(os.path.join(cls.tmp, "sweep_b", "run.h5"), rows=8, complete=8, deck=DECK_B,
                              metrics=("reward_mean", "kl", "policy_loss", "time_generate", "time_train"),
                              timing=False, rollouts=(), reward_offset=0.5, evals=())
        cls.config = os.path.join(cls.tmp, "config.json")  # iteration_table.py's model config
        with open(cls.config, "w") as f:
            f.write('{"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16, '
                    '"vocab_size": 32}')
        cls.missing = os.path.join(cls.tmp, "nowhere", "run.h5")
        cls.text = os.path.join(cls.tmp, "notes.h5")
        with open(cls.text, "w") as f:
            f.write("this is not an HDF5 file\n" * 10)
        cls.truncated = os.path.join(cls.tmp, "truncated.h5")
        with open(cls.run_a, "rb") as src, open(cls.truncated, "wb") as dst:
            dst.write(src.read(1000))
        cls.foreign = os.path.join(cls.tmp, "foreign.h5")
        with h5py.File(cls.foreign, "w") as f:
            f.create_dataset("x", data=np.arange(3))
        # The bad files and what the message must say about each.
        cls.bad = {cls.missing: "no such file", cls.text: "not an HDF5 file",
                   cls.truncated: "cannot be read", cls.foreign: "not a quartet run file"}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)


class ReaderTest(Fixture):
    def test_attributes_and_trimming(self):
        run = quartet_run.open_run(self.run_a)
        self.assertEqual(run.attrs["software"], "quartet")
        self.assertEqual(run.attrs["version"], "0.1.0")
        self.assertEqual(run.attrs["world_size"], 3)
        self.assertEqual(run.iterations_complete, 10)
        self.assertEqual(run.iterations.dtype, np.int64)
        np.testing.assert_array_equal(run.iterations, np.arange(1, 11))
        self.assertEqual(set(run.metric_names()), set(METRICS))
        reward = run.metric("reward_mean")
        self.assertEqual(reward.shape, (10,))
        np.testing.assert_allclose(reward, np.arange(10) / 10)
        self.assertEqual(run.timing("train").shape, (10, 3))
        self.assertEqual(run.memory("generate").shape, (10, 3))
        self.assertEqual(run.memory_plan().shape, (3,))
        self.assertEqual(run.name, "sweep_a")
        with self.assertRaises(KeyError):
            run.metric("no_such_metric")

    def test_rollouts(self):
        run = quartet_run.open_run(self.run_a)
        self.assertEqual(run.rollout_iterations(), [5, 10])  # 12 is beyond iterations_complete
        r = run.rollout(10)
        self.assertEqual(r["prompt"], [f"sort {10000 + b}=" for b in range(4)])
        self.assertTrue(all(isinstance(s, str) for s in r["completion"]))
        self.assertEqual(r["completion"][0], "ansé0\nline2")
        self.assertEqual(r["sequences"].shape, (4, 10))
        self.assertEqual(r["prompt_length"], 6)
        with self.assertRaises(quartet_run.RunFileError) as ctx:
            run.rollout(12)
        self.assertIn("5, 10", str(ctx.exception))

    def test_resumed_run_uses_iteration_key(self):
        # Crashed while writing iteration 5 (row 4 half written), resumed, appended 5 and 6.
        path = write_run(os.path.join(self.tmp, "resumed", "run.h5"), rows=7, complete=6,
                         iteration_column=[1, 2, 3, 4, 5, 5, 6], rollouts=())
        run = quartet_run.open_run(path)
        np.testing.assert_array_equal(run.iterations, [1, 2, 3, 4, 5, 6])
        np.testing.assert_allclose(run.metric("reward_mean"), np.array([0, 1, 2, 3, 5, 6]) / 10)
        self.assertEqual(run.timing("score").shape, (6, 3))

    def test_nothing_complete(self):
        path = write_run(os.path.join(self.tmp, "fresh", "run.h5"), rows=1, complete=0, rollouts=(1,))
        run = quartet_run.open_run(path)
        self.assertEqual(len(run.iterations), 0)
        self.assertEqual(run.metric("reward_mean").shape, (0,))
        self.assertEqual(run.timing("train").shape, (0, 3))
        self.assertEqual(run.rollout_iterations(), [])

    def test_deck(self):
        deck = quartet_run.parse_deck(DECK_A)
        self.assertEqual(deck["run.out"], "runs/sweep_a")  # inline comment dropped
        self.assertEqual(deck["model.actor.lr"], "3e-3")
        self.assertEqual(deck["algorithm.kl_coef"], "0.01")
        self.assertNotIn("#", "".join(deck))
        self.assertEqual(quartet_run.parse_deck("top = 1\n[a]\nk=v # c\n"), {"top": "1", "a.k": "v"})
        run = quartet_run.open_run(self.run_b)
        self.assertEqual(run.deck_overrides()["algorithm.kl_coef"], "0.05")
        self.assertEqual(run.deck_overrides(DECK_A), {"run.out": "runs/sweep_b", "algorithm.kl_coef": "0.05",
                                                       "model.actor.lr": "1e-3", "output.rollouts_every": "5"})

    def test_errors(self):
        for path, what in self.bad.items():
            with self.subTest(path=path):
                with self.assertRaises(quartet_run.RunFileError) as ctx:
                    quartet_run.open_run(path)
                self.assertIn(path, str(ctx.exception))
                self.assertIn(what, str(ctx.exception))

    def test_retries_wait_for_the_file(self):
        # Retries on a missing file take their time, then fail.
        start = time.monotonic()
        with self.assertRaises(quartet_run.RunFileError):
            quartet_run.open_run(self.missing, retries=2, wait=0.1)
        self.assertGreaterEqual(time.monotonic() - start, 0.2)
        # A file that appears (atomically, as after the writer's first close) is read.
        target = os.path.join(self.tmp, "late", "run.h5")
        staging = write_run(os.path.join(self.tmp, "late_staging", "run.h5"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        timer = threading.Timer(0.3, os.replace, (staging, target))
        timer.start()
        try:
            run = quartet_run.open_run(target, retries=50, wait=0.05)
        finally:
            timer.join()
        self.assertEqual(len(run.iterations), 10)

    def test_retries_while_writer_holds_the_file(self):
        # Another process holds the file open for writing for a moment, as the writer does every
        # iteration; with HDF5 file locking the reader's open fails meanwhile and is retried.
        path = write_run(os.path.join(self.tmp, "held", "run.h5"))
        holder = subprocess.Popen([sys.executable, "-c",
                                   "import h5py, sys, time\n"
                                   "f = h5py.File(sys.argv[1], 'a'); print('held', flush=True); time.sleep(1.0)\n"
                                   "f.close()", path], stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "held")
            run = quartet_run.open_run(path, retries=100, wait=0.05)
        finally:
            holder.wait(timeout=30)
            holder.stdout.close()
        self.assertEqual(len(run.iterations), 10)


class FunctionTest(Fixture):
    def test_plot(self):
        out = os.path.join(self.tmp, "plots_fn")
        written, notes = plot_run.plot(quartet_run.open_run(self.run_a), out)
        self.assertEqual(sorted(os.path.basename(p) for p in written),
                         ["eval.png", "kl.png", "losses.png", "phase_times.png", "reward.png", "throughput.png"])
        self.assertTrue(all(is_png(p) for p in written))
        self.assertEqual(notes, [])

    def test_eval_series(self):
        run = quartet_run.open_run(self.run_a)
        # The point at 12 lies past iterations_complete (10): a half-written one, ignored.
        np.testing.assert_array_equal(run.eval_iterations, [0, 4, 8])
        np.testing.assert_allclose(run.eval_metric("greedy_pass@1"), [0.0, 0.2, 0.4])
        self.assertEqual(run.eval_metric_names(),
                         ["greedy_pass@1", "greedy_reward", "pass@1", "pass@4", "prompts", "sample_reward"])
        with self.assertRaises(KeyError):
            run.eval_metric("pass@8")
        b = quartet_run.open_run(self.run_b)
        self.assertEqual(len(b.eval_iterations), 0)
        self.assertEqual(b.eval_metric_names(), [])
        _, notes = plot_run.plot(b, os.path.join(self.tmp, "plots_b_fn"))
        self.assertIn("eval.png skipped: no evaluations ([eval]) in the file", notes)
        times = plot_run.phase_times(quartet_run.open_run(self.run_a))
        np.testing.assert_allclose(times["train"], 3.2)  # the slowest rank, not the mean

    def test_sweep_rows(self):
        runs = [quartet_run.open_run(p) for p in (self.run_a, self.run_b)]
        header, rows = sweep_table.build_rows(runs, ["reward_mean", "kl", "value_loss"])
        self.assertEqual(header[:4], ["run", "algorithm.kl_coef", "model.actor.lr", "output.rollouts_every"])
        self.assertNotIn("run.out", header)
        self.assertEqual(rows[0][:5], ["sweep_a", "0.01", "3e-3", None, 10])
        i = header.index("reward_mean final")
        self.assertAlmostEqual(rows[0][i], 0.9)
        self.assertAlmostEqual(rows[1][i], 0.5 + 0.7)
        self.assertAlmostEqual(rows[0][header.index("kl best")], 0.0)  # lower is better for KL
        self.assertIsNone(rows[1][header.index("value_loss final")])

    def test_rollout_summary(self):
        r = quartet_run.open_run(self.run_a).rollout(5)
        s = show_rollouts.sample_summary(r, 3)
        self.assertAlmostEqual(s["score"], 1.0)
        self.assertAlmostEqual(s["mean_advantage"], 2.0)  # the masked-out 100 does not count
        self.assertAlmostEqual(s["kl"], 3 * 0.5)
        self.assertEqual(show_rollouts.pick_rows(4, 10), [0, 1, 2, 3])
        self.assertEqual(show_rollouts.pick_rows(100, 3), [0, 50, 99])

    def test_compare_rows(self):
        a, b = quartet_run.open_run(self.run_a), quartet_run.open_run(self.run_b)
        header, rows = compare_runs.compare_rows(a, b, ["reward_mean"])
        _, fa, fb, ba, bb, la, lb = rows[0]
        self.assertAlmostEqual(fa, 0.9)
        self.assertAlmostEqual(fb, 1.2)
        self.assertAlmostEqual(la, 0.45)  # rows 0..9: all ten are the last ten
        self.assertAlmostEqual(lb, 0.5 + 0.35)


    def test_phase_rows(self):
        a = quartet_run.open_run(self.run_a)
        b = quartet_run.open_run(self.run_b)
        # run_a twice, on 3 and on 6 GPUs, then run_b (no /timing, no time_iteration).
        rows = phase_table.build_rows([a, a, b], [3, 6, 2], skip=1)
        col = {name: i for i, name in enumerate(phase_table.HEADER)}
        first = rows[0]
        self.assertEqual(first[col["placement"]], "disjoint")
        self.assertEqual(first[col["ranks"]], 3)
        self.assertEqual(first[col["iterations"]], 9)  # 10 complete, the warm-up left out
        # rank 1 is the slowest: 0.2 + k seconds in phase k
        for k, phase in enumerate(quartet_run.PHASES):
            self.assertAlmostEqual(first[col[phase + " s"]], 0.2 + k)
        self.assertAlmostEqual(first[col["iteration s"]], 1.0)
        self.assertAlmostEqual(first[col["new tok/s"]], float(np.mean(np.sin(np.arange(1, 10)) + 2)))
        self.assertAlmostEqual(first[col["peak GiB"]], 0.0)
        self.assertAlmostEqual(first[col["plan GiB"]], 1e9 / (1 << 30))
        self.assertAlmostEqual(first[col["scaling"]], 100.0)
        self.assertAlmostEqual(rows[1][col["scaling"]], 50.0)  # the same time on twice the GPUs
        last = rows[2]
        self.assertAlmostEqual(last[col["generate s"]], 1.0)  # from time_generate
        self.assertIsNone(last[col["score s"]])
        self.assertIsNone(last[col["iteration s"]])
        self.assertIsNone(last[col["scaling"]])
        # --skip larger than the run: every iteration is used
        self.assertEqual(phase_table.build_rows([b], [1], skip=50)[0][col["iterations"]], 8)


class IterationTableTest(Fixture):
    """iteration_table.py's closed forms against the work counted token by token and step by step."""

    CONFIG = {"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "intermediate_size": 16, "vocab_size": 32}

    def test_parts(self):
        path = write_run(os.path.join(self.tmp, "grpo", "run.h5"), timing=False,
                         metrics=METRICS + ("time_decode", "decode_steps"))
        with h5py.File(path, "r+") as f:
            f["metrics"]["time_decode"][...] = 0.25
            f["metrics"]["decode_steps"][...] = 7.0
        peak, hbm = 1e9, 1e8
        rows, n = iteration_table.table(path, self.CONFIG, 1, peak, hbm)
        self.assertEqual(n, 2)  # the rollouts of iterations 5 and 10; 12 is past the complete ones
        part = {r[0]: r for r in rows}
        blocks, embed, head, kv_token = iteration_table.model_sizes(self.CONFIG)
        # write_run's rollouts: 4 rows of 10 tokens, 3 answer tokens (the masked fourth counts
        # as prompt here: its attention_mask is 1).
        prompt, answer, L, h = 7, 3, 2, 8
        n_tokens = 4 * (prompt + answer)
        forward = 4 * (2 * blocks * (prompt + answer) + 2 * head * (answer + 1)) + \
            4 * sum(4 * L * h * (prompt + answer) for _ in range(prompt + answer))
        cached = 4 * sum(prompt + k for k in range(1, answer))  # decoding steps 1 .. answer - 1
        prefill = 4 * (2 * (blocks + head) * prompt + 4 * L * h * prompt * prompt)
        floor = (7 * 2 * (blocks + embed + head) + cached * kv_token) / hbm + prefill / peak
        self.assertAlmostEqual(part["decode"][1], 0.25)
        self.assertEqual(part["decode"][2], 4 * answer)
        self.assertEqual(part["decode"][5], f"{100 * floor / 0.25:.1f}%")
        self.assertAlmostEqual(part["old log-probs"][1], 0.75)  # time_generate (1.0) less the decoding
        self.assertEqual(part["old log-probs"][5], f"{100 * forward / 0.75 / peak:.1f}%")
        self.assertEqual(part["score"][5], f"{100 * forward / 1.0 / peak:.1f}%")
        # The deck has no algorithm.epochs: one, forward and backward three forwards.
        self.assertEqual(part["train"][2], n_tokens)
        self.assertEqual(part["train"][5], f"{100 * 3 * forward / 1.0 / peak:.1f}%")
        self.assertAlmostEqual(part["iteration (phases)"][1], 1.0 + 1.0 + 1.0 + 1.0)

    def test_script(self):
        path = write_run(os.path.join(self.tmp, "grpo_script", "run.h5"), metrics=METRICS + ("time_decode", "decode_steps"))
        result = run_script("iteration_table.py", path, "--config", self.config, "--markdown")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("| decode |", result.stdout)
        result = run_script("iteration_table.py", path, "--config", os.path.join(self.tmp, "none.json"))
        self.assertEqual(result.returncode, 1)
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn("none.json", result.stderr)

    def test_needs_rollouts(self):
        path = write_run(os.path.join(self.tmp, "bare", "run.h5"), rollouts=(),
                         metrics=METRICS + ("time_decode", "decode_steps"))
        with self.assertRaises(quartet_run.RunFileError):
            iteration_table.table(path, self.CONFIG, 1, 1e9, 1e8)


class ScriptTest(Fixture):
    def check_ok(self, result):
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertNotIn("Traceback", result.stderr)

    def test_plot_run(self):
        out = os.path.join(self.tmp, "plots_a")
        result = run_script("plot_run.py", self.run_a, "--out", out)
        self.check_ok(result)
        pngs = [line for line in result.stdout.splitlines() if line.endswith(".png")]
        self.assertEqual(len(pngs), 6, result.stdout)  # eval.png among them: A has /eval
        self.assertTrue(all(os.path.dirname(p) == out and is_png(p) for p in pngs))
        # B lacks most metrics: skipped with notes, not an error; the default out is beside it.
        result = run_script("plot_run.py", self.run_b)
        self.check_ok(result)
        self.assertIn("note: throughput.png skipped: no metric tokens_per_s", result.stdout)
        self.assertIn("note: eval.png skipped", result.stdout)
        self.assertIn("value_loss", result.stdout)
        self.assertTrue(is_png(os.path.join(self.tmp, "sweep_b", "plots", "reward.png")))
        self.assertTrue(is_png(os.path.join(self.tmp, "sweep_b", "plots", "phase_times.png")))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "sweep_b", "plots", "throughput.png")))

    def test_sweep_table(self):
        out_csv = os.path.join(self.tmp, "sweep.csv")
        result = run_script("sweep_table.py", self.run_a, self.run_b, "--csv", out_csv)
        self.check_ok(result)
        self.assertIn("algorithm.kl_coef", result.stdout)
        self.assertIn("sweep_a", result.stdout)
        self.assertNotIn("seed", result.stdout)  # same in both runs
        with open(out_csv, newline="") as f:
            rows = list(csv.reader(f))
        self.assertEqual(len(rows), 3)
        self.assertEqual(rows[0], ["run", "algorithm.kl_coef", "model.actor.lr", "output.rollouts_every",
                                   "iterations", "reward_mean final", "reward_mean best", "kl final", "kl best"])
        self.assertEqual(rows[1][:5], ["sweep_a", "0.01", "3e-3", "", "10"])
        self.assertEqual(rows[2][:5], ["sweep_b", "0.05", "1e-3", "5", "8"])
        self.assertAlmostEqual(float(rows[1][5]), 0.9)
        self.assertTrue(all(len(r) == len(rows[0]) for r in rows))
        result = run_script("sweep_table.py", self.run_a, "--metric", "entropy", "--metric", "tokens_per_s")
        self.check_ok(result)
        self.assertIn("tokens_per_s best", result.stdout)

    def test_show_rollouts(self):
        result = run_script("show_rollouts.py", self.run_a)
        self.check_ok(result)
        self.assertIn("iteration 10", result.stdout)
        for b in range(4):
            self.assertIn(f"sort {10000 + b}=", result.stdout)
        self.assertIn("kl +1.5", result.stdout)
        self.assertIn("mean advantage +2", result.stdout)
        result = run_script("show_rollouts.py", self.run_a, "--iteration", "5", "--count", "2")
        self.check_ok(result)
        self.assertIn("sort 5000=", result.stdout)
        self.assertIn("sort 5003=", result.stdout)
        self.assertNotIn("sort 5001=", result.stdout)
        # No such iteration, or no rollouts at all: a clear error.
        result = run_script("show_rollouts.py", self.run_a, "--iteration", "12")
        self.assertEqual(result.returncode, 1)
        self.assertIn("no rollouts for iteration 12", result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        result = run_script("show_rollouts.py", self.run_b)
        self.assertEqual(result.returncode, 1)
        self.assertIn("no complete rollouts", result.stderr)

    def test_compare_runs(self):
        png = os.path.join(self.tmp, "cmp", "reward.png")
        result = run_script("compare_runs.py", self.run_a, self.run_b, "--png", png)
        self.check_ok(result)
        self.assertIn("reward_mean", result.stdout)
        self.assertIn("policy_loss", result.stdout)
        self.assertNotIn("value_loss  ", result.stdout)  # not shared: only in the note
        self.assertTrue(is_png(png))
        # Default PNG name, in the working directory.
        result = run_script("compare_runs.py", self.run_a, self.run_b, "--metric", "kl", cwd=self.tmp)
        self.check_ok(result)
        self.assertTrue(is_png(os.path.join(self.tmp, "compare_sweep_a_vs_sweep_b.png")))

    def test_compare_runs_identical(self):
        result = run_script("compare_runs.py", self.run_a, self.run_a, "--identical")
        self.check_ok(result)
        self.assertIn("identical:", result.stdout)
        result = run_script("compare_runs.py", self.run_a, self.run_b, "--identical")
        self.assertEqual(result.returncode, 1)
        self.assertIn("not identical", result.stdout)
        # One value changed in a copy: named, with its iteration.
        changed = os.path.join(self.tmp, "changed", "run.h5")
        os.makedirs(os.path.dirname(changed), exist_ok=True)
        shutil.copy(self.run_a, changed)
        with h5py.File(changed, "r+") as f:
            f["metrics"]["policy_loss"][3] += 1e-12
        result = run_script("compare_runs.py", self.run_a, changed, "--identical")
        self.assertEqual(result.returncode, 1)
        self.assertIn("policy_loss differs first at iteration 4", result.stdout)

    def test_phase_table(self):
        result = run_script("phase_table.py", self.run_a, self.run_a, "--gpus", "1", "2", "--markdown")
        self.check_ok(result)
        lines = result.stdout.splitlines()
        self.assertTrue(lines[0].startswith("| run | placement |"), result.stdout)
        self.assertEqual(len(lines), 4)
        self.assertIn("| sweep_a | disjoint | 3 | 1 | 9 | 0.20 | 1.20 | 2.20 | 3.20 | 1.00 |", lines[2])
        self.assertTrue(lines[2].endswith("| 100% |") and lines[3].endswith("| 50% |"), result.stdout)
        result = run_script("phase_table.py", self.run_a, "--gpus", "1", "2")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--gpus needs one positive count per run", result.stderr)

    def test_bad_files(self):
        for path, what in self.bad.items():
            for script in SCRIPTS:
                args = [self.run_a, path] if script in ("compare_runs.py", "sweep_table.py") else [path]
                if script == "iteration_table.py":
                    args += ["--config", self.config]
                with self.subTest(script=script, path=os.path.basename(path)):
                    result = run_script(script, *args)
                    self.assertNotEqual(result.returncode, 0)
                    self.assertNotIn("Traceback", result.stderr)
                    self.assertIn(path, result.stderr)
                    self.assertIn(what, result.stderr)
                    self.assertTrue(result.stderr.startswith(f"{script}: error: "), result.stderr)


class DemoRunTest(unittest.TestCase):
    """Every script on a run file of the real demo (QUARTET_DEMO_RUN=<out>/run.h5)."""

    def setUp(self):
        self.path = os.environ.get("QUARTET_DEMO_RUN")
        if not self.path:
            self.skipTest("QUARTET_DEMO_RUN is not set: set it to the run.h5 of a real demo run "
                          "(e.g. runs/demo/run.h5) to run the scripts on it")
        self.tmp = tempfile.mkdtemp(prefix="quartet_demo_post_")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def check_ok(self, result):
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertNotIn("Traceback", result.stderr)

    def test_reader(self):
        run = quartet_run.open_run(self.path, retries=10, wait=1.0)
        self.assertEqual(run.attrs["software"], "quartet")
        self.assertGreater(run.iterations_complete, 0)
        self.assertEqual(len(run.iterations), run.iterations_complete)
        np.testing.assert_array_equal(run.iterations, np.arange(1, run.iterations_complete + 1))
        self.assertIn("reward_mean", run.metric_names())
        for name in run.metric_names():
            self.assertEqual(run.metric(name).shape, (run.iterations_complete,), name)
        for phase in run.timing_phases():
            self.assertEqual(run.timing(phase).shape, (run.iterations_complete, run.world_size), phase)
        self.assertTrue(run.deck())
        # The demo run of the tests evaluates (its [eval] set by ctest): a point per evaluation.
        for name in run.eval_metric_names():
            self.assertEqual(run.eval_metric(name).shape, run.eval_iterations.shape, name)
        self.assertTrue(np.all(np.diff(run.eval_iterations) > 0))
        for it in run.rollout_iterations():
            r = run.rollout(it)
            self.assertEqual(len(r["prompt"]), r["scores"].shape[0])
            self.assertEqual(r["sequences"].shape[1] - r["action_mask"].shape[1], r["prompt_length"])

    def test_scripts(self):
        result = run_script("plot_run.py", self.path, "--out", self.tmp, "--retries", "10")
        self.check_ok(result)
        self.assertTrue(is_png(os.path.join(self.tmp, "reward.png")), result.stdout)
        if len(quartet_run.open_run(self.path, retries=10, wait=1.0).eval_iterations):
            self.assertTrue(is_png(os.path.join(self.tmp, "eval.png")), result.stdout)
        out_csv = os.path.join(self.tmp, "sweep.csv")
        result = run_script("sweep_table.py", self.path, self.path, "--csv", out_csv, "--retries", "10")
        self.check_ok(result)
        with open(out_csv, newline="") as f:
            self.assertEqual(len(list(csv.reader(f))), 3)
        result = run_script("compare_runs.py", self.path, self.path, "--png", os.path.join(self.tmp, "c.png"),
                            "--retries", "10")
        self.check_ok(result)
        self.assertTrue(is_png(os.path.join(self.tmp, "c.png")))
        run = quartet_run.open_run(self.path, retries=10, wait=1.0)
        result = run_script("show_rollouts.py", self.path, "--retries", "10")
        if run.rollout_iterations():
            self.check_ok(result)
            first_prompt = run.rollout(run.rollout_iterations()[-1])["prompt"][0]
            self.assertIn(first_prompt.splitlines()[0] if first_prompt else "", result.stdout)
        else:
            self.assertEqual(result.returncode, 1)
            self.assertIn("no complete rollouts", result.stderr)


class PipelineSummaryTest(unittest.TestCase):
    """The reward-hacking line of postprocess/pipeline_summary.py: (iteration, exact match, reward)."""

    def test_a_stage_that_learns_is_not_named(self):
        self.assertIsNone(pipeline_summary.hacking("grpo", [(0, 0.40, 0.83), (10, 0.78, 0.90), (30, 0.80, 0.91)]))

    def test_reward_up_and_accuracy_flat_over_the_run_is_named(self):
        line = pipeline_summary.hacking("ppo", [(0, 0.40, 0.2), (10, 0.40, 1.0), (30, 0.41, 2.5)])
        self.assertIn("ppo: reward hacking over the run", line)
        self.assertIn("rose by 2.300", line)

    def test_reward_up_after_the_best_evaluation_is_named(self):
        line = pipeline_summary.hacking("ppo", [(0, 0.40, 0.26), (10, 0.64, 1.70), (30, 0.62, 2.74)])
        self.assertIn("after its best evaluation (iteration 10)", line)
        self.assertIn("moved by -0.020", line)

    def test_a_small_reward_rise_after_the_best_is_not_named(self):
        self.assertIsNone(pipeline_summary.hacking("ppo", [(0, 0.40, 0.26), (10, 0.64, 1.70), (30, 0.62, 1.75)]))


if __name__ == "__main__":
    unittest.main()

"""Reader for quartet's run file, <run.out>/run.h5.

The layout is the one documented in include/quartet/io/run_file.hpp; this module reads exactly
that and nothing else. In short:

    /                  attributes: software = "quartet", version, git_commit, deck, start_time,
                       world_size, placement, algorithm, iterations_planned, iterations_complete
    /metrics/<name>    float64 [n]; /metrics/iteration int64 [n] (1-based iteration of each row)
    /timing/<phase>    float64 [n, world_size] seconds per iteration and rank
    /memory/<phase>    float64 [n, world_size] peak device bytes; /memory/plan float64 [world_size]
    /rollouts/<NNNNNN> sequences, masks, scores, logprobs, ... , prompt, completion
    /eval/<metric>     float64 [m], one row per evaluation ([eval]); /eval/iteration int64 [m]
                       (the iterations done when it was taken, 0 = before the first)

The one rule a reader must keep: rows (and rollout groups) beyond iterations_complete may be half
written and are ignored. The file is opened only for as long as it takes to read it, because the
writer reopens it every iteration and HDF5's file lock would make a reader that keeps it open
block the writer.

    run = open_run("runs/demo/run.h5", retries=5, wait=1.0)
    run.iterations, run.metric("reward_mean"), run.timing("train"), run.rollout(run.rollout_iterations()[-1])
    run.eval_iterations, run.eval_metric("greedy_pass@1")
"""

import contextlib
import fcntl
import os
import time

import h5py
import numpy as np

__all__ = ["RunFileError", "Run", "open_run", "parse_deck", "best_value", "higher_is_better", "PHASES",
           "add_open_arguments", "cli_main"]

PHASES = ("generate", "score", "advantages", "train")

# HDF5's signature; it sits at offset 0, or at 512, 1024, 2048, ... when the file has a user block.
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class RunFileError(Exception):
    """A run file that cannot be read: missing, not HDF5, damaged, or not written by quartet."""


def _decode(value):
    """Attributes come back as bytes, numpy scalars or 0-d arrays depending on how the writer
    stored them (fixed- or variable-length strings, HDF5 native ints); make them plain Python."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return _decode(value[()])
        return [_decode(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def parse_deck(text):
    """Parse deck text (INI as Boost.ProgramOptions reads it) into {"section.key": "value"}.

    `[section]` headers prefix the keys after them; `#` starts a comment anywhere on a line (as
    in Boost's config parser, so inline comments like `mode = disjoint  # ...` are dropped);
    keys before any header keep their bare name. A key given twice keeps its last value."""
    deck = {}
    section = ""
    for raw in (text or "").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        if "=" not in line:
            continue  # not a key line; the C++ side refuses such decks, a reader just skips it
        key, value = line.split("=", 1)
        key = key.strip()
        deck[f"{section}.{key}" if section else key] = value.strip()
    return deck


def higher_is_better(metric):
    """Which way "best" points: up for rewards and throughput, down for everything else
    (KL, losses, clip fractions, times, gradient norms)."""
    return (metric.startswith("reward_") and metric != "reward_std") or metric == "tokens_per_s"


def best_value(metric, values):
    """The best finite value of a metric series (see higher_is_better), or None."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    return float(values.max() if higher_is_better(metric) else values.min())


def _find_signature(path):
    """True when the file carries the HDF5 signature where HDF5 looks for it."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            offset = 0
            while offset + len(_HDF5_SIGNATURE) <= size:
                f.seek(offset)
                if f.read(len(_HDF5_SIGNATURE)) == _HDF5_SIGNATURE:
                    return True
                offset = 512 if offset == 0 else offset * 2
    except OSError:
        return False
    return False


class Run:
    """One run file, read at open time (numbers) or on demand (rollouts, which can be large).

    Everything is trimmed to the complete iterations; no HDF5 handle is kept open."""

    def __init__(self, path, attrs, row_index, iterations, metrics, timing, memory, memory_plan, rollout_groups,
                 eval_iterations=None, evals=None):
        self.path = path
        self.attrs = attrs
        self.iterations = iterations
        self._rows = row_index
        self._metrics = metrics
        self._timing = timing
        self._memory = memory
        self._memory_plan = memory_plan
        self._rollout_groups = rollout_groups  # iteration -> group name
        self.eval_iterations = np.zeros(0, dtype=np.int64) if eval_iterations is None else eval_iterations
        self._evals = evals or {}

    # --- identity -------------------------------------------------------------------------
    @property
    def name(self):
        """A short name for tables and legends: the `name` attribute if the writer set one,
        else the run's directory (run.out; sweep runs share run.name but not their out dir)."""
        if self.attrs.get("name"):
            return str(self.attrs["name"])
        parent = os.path.basename(os.path.dirname(os.path.abspath(self.path)))
        return parent or os.path.splitext(os.path.basename(self.path))[0]

    @property
    def iterations_complete(self):
        return int(self.attrs.get("iterations_complete", 0) or 0)

    @property
    def world_size(self):
        return int(self.attrs.get("world_size", 1) or 1)

    def deck(self):
        """The resolved deck as {"section.key": "value"}."""
        return parse_deck(self.attrs.get("deck", ""))

    def deck_overrides(self, base_deck_text=None):
        """The deck as a flat dict; with a base deck, only the keys whose value differs from it
        (or that the base lacks) -- what a sweep or --set changed."""
        deck = self.deck()
        if base_deck_text is None:
            return deck
        base = parse_deck(base_deck_text)
        return {k: v for k, v in deck.items() if base.get(k) != v}

    # --- numbers --------------------------------------------------------------------------
    def metric_names(self):
        return sorted(self._metrics)

    def has_metric(self, name):
        return name in self._metrics

    def metric(self, name):
        """float64 [n]: the metric at each complete iteration (aligned with .iterations)."""
        if name not in self._metrics:
            raise KeyError(f"{self.path}: no metric '{name}' (has: {', '.join(self.metric_names()) or 'none'})")
        return self._metrics[name]

    def timing_phases(self):
        return sorted(self._timing)

    def memory_phases(self):
        return sorted(self._memory)

    def timing(self, phase):
        """float64 [n, world_size]: seconds of `phase` per complete iteration and rank."""
        if phase not in self._timing:
            raise KeyError(f"{self.path}: no timing for phase '{phase}' (has: {', '.join(self.timing_phases()) or 'none'})")
        return self._timing[phase]

    def memory(self, phase):
        """float64 [n, world_size]: peak device bytes of `phase` per complete iteration and rank."""
        if phase not in self._memory:
            raise KeyError(f"{self.path}: no memory for phase '{phase}' (has: {', '.join(self.memory_phases()) or 'none'})")
        return self._memory[phase]

    def memory_plan(self):
        """float64 [world_size]: each rank's planned peak device bytes (None if not written)."""
        return self._memory_plan

    # --- evaluations ([eval]) ------------------------------------------------------------
    def eval_metric_names(self):
        return sorted(self._evals)

    def has_eval_metric(self, name):
        return name in self._evals

    def eval_metric(self, name):
        """float64 [m]: the evaluation metric at each evaluation (aligned with .eval_iterations)."""
        if name not in self._evals:
            have = ", ".join(self.eval_metric_names()) or "none"
            raise KeyError(f"{self.path}: no eval metric '{name}' (has: {have})")
        return self._evals[name]

    # --- rollouts -------------------------------------------------------------------------
    def rollout_iterations(self):
        """The iterations (ints, ascending) that have a complete rollouts group."""
        return sorted(self._rollout_groups)

    def rollout(self, iteration):
        """One rollouts group: numpy arrays by name, `prompt` and `completion` as lists of str,
        and `prompt_length` (int). Reopens the file briefly (rollouts are read on demand)."""
        iteration = int(iteration)
        if iteration not in self._rollout_groups:
            have = ", ".join(str(i) for i in self.rollout_iterations()) or "none"
            raise RunFileError(f"{self.path}: no rollouts for iteration {iteration} (complete rollout iterations: {have})")
        try:
            with _reading(self.path), h5py.File(self.path, "r") as f:
                group = f["rollouts"][self._rollout_groups[iteration]]
                out = {}
                for key, ds in group.items():
                    if not isinstance(ds, h5py.Dataset):
                        continue
                    if h5py.check_string_dtype(ds.dtype) is not None:
                        out[key] = [s for s in ds.asstr()[()].tolist()]
                    else:
                        out[key] = ds[()]
                out["prompt_length"] = int(_decode(group.attrs.get("prompt_length", 0)))
        except (OSError, KeyError, ValueError) as e:
            raise RunFileError(f"{self.path}: cannot read rollouts of iteration {iteration}: {e}") from None
        return out


def _row_index(f, complete):
    """Which rows of /metrics, /timing and /memory hold the complete iterations, in order.

    /metrics/iteration is the key: a resumed run may append after a half-written row of the
    run it resumes, so for each iteration 1..complete the last row carrying it wins, and rows
    beyond iterations_complete are dropped. Without the key column, the first `complete` rows."""
    metrics = f.get("metrics")
    if metrics is not None and "iteration" in metrics:
        key = np.asarray(metrics["iteration"][()], dtype=np.int64)
        last_row = {}
        for row, it in enumerate(key.tolist()):
            if 1 <= it <= complete:
                last_row[it] = row
        iterations = np.array(sorted(last_row), dtype=np.int64)
        rows = np.array([last_row[it] for it in iterations.tolist()], dtype=np.int64)
        return rows, iterations
    lengths = [ds.shape[0] for g in ("metrics", "timing", "memory") if g in f
               for n, ds in f[g].items() if isinstance(ds, h5py.Dataset) and n != "plan" and ds.ndim >= 1]
    n = min([complete] + lengths) if lengths else 0
    return np.arange(n, dtype=np.int64), np.arange(1, n + 1, dtype=np.int64)


def _eval_rows(f, complete):
    """Which rows of /eval belong to complete iterations (an evaluation is written with the
    iteration it follows), one per evaluation point (the last row wins, as for /metrics), and
    their iterations."""
    group = f.get("eval")
    if group is None or "iteration" not in group:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    key = np.asarray(group["iteration"][()], dtype=np.int64)
    last_row = {}
    for row, it in enumerate(key.tolist()):
        if 0 <= it <= complete:
            last_row[it] = row
    iterations = np.array(sorted(last_row), dtype=np.int64)
    return np.array([last_row[it] for it in iterations.tolist()], dtype=np.int64), iterations


def _take_rows(ds, rows):
    """Rows of a dataset; rows the dataset is too short for (a crash mid-extend) become NaN."""
    data = np.asarray(ds[()], dtype=np.float64)
    shape = (len(rows),) + data.shape[1:]
    out = np.full(shape, np.nan, dtype=np.float64)
    ok = rows < data.shape[0]
    if len(rows):
        out[ok] = data[rows[ok]]
    return out


@contextlib.contextmanager
def _reading(path):
    """Holds a shared lock on <run.h5>.lock while the file is read: the writer takes the
    exclusive lock for each iteration it appends, so a reader sees the file only between
    iterations, never half-written (quartet's src/io/run_file.cpp). No lock file (a file
    copied elsewhere): nothing is being written, nothing to wait for."""
    lock = path + ".lock"
    if not os.path.exists(lock):
        yield
        return
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _read(path):
    """Read one run file (raises OSError for what retrying may cure, RunFileError otherwise)."""
    with _reading(path), h5py.File(path, "r") as f:
        attrs = {k: _decode(v) for k, v in f.attrs.items()}
        software = attrs.get("software")
        if software != "quartet":
            what = "has no 'software' attribute" if software is None else f"has software = {software!r}"
            raise RunFileError(f"{path}: an HDF5 file, but not a quartet run file (it {what}, expected software = 'quartet')")
        try:
            complete = int(attrs.get("iterations_complete", 0) or 0)
            rows, iterations = _row_index(f, complete)
            metrics = {}
            if "metrics" in f:
                for name, ds in f["metrics"].items():
                    if name == "iteration" or not isinstance(ds, h5py.Dataset):
                        continue
                    metrics[name] = _take_rows(ds, rows)
            timing, memory, plan = {}, {}, None
            for group_name, target in (("timing", timing), ("memory", memory)):
                if group_name not in f:
                    continue
                for name, ds in f[group_name].items():
                    if not isinstance(ds, h5py.Dataset):
                        continue
                    if group_name == "memory" and name == "plan":
                        plan = np.asarray(ds[()], dtype=np.float64)
                        continue
                    values = _take_rows(ds, rows)
                    # [n, world_size] by the layout; a 1-D one (one rank) becomes one column.
                    target[name] = values[:, None] if values.ndim == 1 else values
            rollouts = {}
            if "rollouts" in f:
                for name in f["rollouts"]:
                    try:
                        it = int(name)
                    except ValueError:
                        continue  # not an iteration group; nothing of ours
                    if 1 <= it <= complete:
                        rollouts[it] = name
            eval_rows, eval_iterations = _eval_rows(f, complete)
            evals = {name: _take_rows(ds, eval_rows) for name, ds in f["eval"].items()
                     if name != "iteration" and isinstance(ds, h5py.Dataset)} if len(eval_rows) else {}
        except (KeyError, ValueError, TypeError) as e:
            raise RunFileError(f"{path}: a quartet run file, but damaged: {e}") from None
    return Run(path, attrs, rows, iterations, metrics, timing, memory, plan, rollouts, eval_iterations, evals)


def open_run(path, retries=0, wait=1.0):
    """Open a run file and read its complete iterations.

    While a run is being written the file can fail to open (the writer holds it, or has not
    created it yet); `retries` more attempts are made, `wait` seconds apart, on such failures.
    Raises RunFileError, naming the path and what is wrong, when it still cannot be read."""
    path = os.fspath(path)
    attempts = max(0, int(retries)) + 1
    last = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(wait)
        if not os.path.exists(path):
            last = RunFileError(f"{path}: no such file")
            continue
        if os.path.isdir(path):
            raise RunFileError(f"{path}: a directory, not a run file (the run file is <run.out>/run.h5)")
        if not _find_signature(path):
            # Not HDF5 at all: no retry will change that (a file being created has the
            # signature written first).
            if os.path.getsize(path) == 0:
                last = RunFileError(f"{path}: empty file, not an HDF5 run file")
                continue
            raise RunFileError(f"{path}: not an HDF5 file (no HDF5 signature)")
        try:
            return _read(path)
        except RunFileError:
            raise
        except OSError as e:
            # Truncated, damaged, or locked by the writer right now.
            last = RunFileError(f"{path}: an HDF5 file that cannot be read (truncated, damaged, or being "
                                f"written right now): {e}")
    raise last


# --- shared by the command-line scripts -------------------------------------------------------

def pyplot():
    """matplotlib's pyplot on the Agg backend (files only: compute nodes have no display), imported
    when a figure is drawn, so that a script refusing its input does not load it first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def add_open_arguments(parser):
    """--retries/--wait: for reading a run that is being written (the writer holds the file for
    a moment every iteration)."""
    parser.add_argument("--retries", type=int, default=0, metavar="N",
                        help="retry opening N more times when the file cannot be opened (a run being written)")
    parser.add_argument("--wait", type=float, default=1.0, metavar="S", help="seconds between retries (default 1)")


def cli_main(prog, main, argv=None):
    """Run a script's main(argv); a RunFileError becomes one line on stderr and exit status 1
    (a user's bad file is not a bug in the script, so no traceback)."""
    try:
        return main(argv)
    except RunFileError as e:
        import sys
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1

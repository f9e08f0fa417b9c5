"""Rerun notebooks with other seeds and thread counts; print the spread of every target.

Each notebook that trains has a cell tagged ``parameters`` (papermill's convention) holding
``SEED`` and ``THREADS``, and asserts its learning targets through
``course_utils.targets.target``, which appends each figure to the file named by
``COURSE_TARGETS_FILE``. This script runs every (notebook, seed, threads) combination with
papermill, each with its own targets file and an empty cache of trained weights (so every
run trains for real), and prints, per target, its threshold and the min / median / max over
the runs, with how many runs met it. Use it to set a threshold far from the worst run you
measured, and rerun it after changing a recipe.

    .venv/bin/python benchmarks/robustness.py                      # every notebook, 3 x 2 runs
    .venv/bin/python benchmarks/robustness.py notebooks/06_transformer.ipynb --seeds 0 1 2 3
    .venv/bin/python benchmarks/robustness.py --jobs 2 --json spread.json

``--jobs N`` fills N cores: runs start while the torch threads of the runs in flight add up
to at most N, so on two cores two one-thread runs go together and a two-thread run goes
alone (two threads sharing a core with another run slowed a notebook 01 run more than
five times here). A notebook's own timings are slower when runs share the machine. Figures are measurements, not tests: this script is not run by
``make test`` (a test runs it on a tiny notebook to check that it works).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from course_utils.targets import read_targets

ROOT = Path(__file__).resolve().parents[1]
TARGETS_ENV = "COURSE_TARGETS_FILE"  # read by course_utils.targets
CACHE_ENV = "COURSE_CACHE_DIR"  # read by course_utils.training


@dataclass
class Run:
    notebook: str
    seed: int
    threads: int
    seconds: float = 0.0
    error: str = ""  # the last line of papermill's error, or "" when the run completed
    targets: list[dict] = field(default_factory=list)
    hung: bool = False  # killed after run_timeout seconds
    attempts: int = 1


def parameters_of(path: Path) -> str:
    """The source of the notebook's cell tagged ``parameters``; ValueError if it has none."""
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(
            f"{path.name}: expected one cell tagged 'parameters' (papermill), found {len(cells)}"
        )
    source = cells[0].source
    for name in ("SEED", "THREADS"):
        if f"{name} =" not in source:
            raise ValueError(f"{path.name}: the parameters cell does not set {name}")
    return source


def run_timeout_of(path: Path, given: int | None) -> int:
    """Seconds a run of ``path`` may take: ``given``, else ten times the notebook's budget
    (COURSE_MAP.md, in its metadata), at least five minutes."""
    if given is not None:
        return given
    budget = nbformat.read(path, as_version=4).metadata.get("course", {}).get("budget_seconds")
    return max(300, 10 * int(budget or 120))


def default_notebooks() -> list[Path]:
    """Every notebook of the course that has a parameters cell."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        try:
            parameters_of(path)
        except ValueError:
            continue
        found.append(path)
    return found


def run_one(
    path: Path, seed: int, threads: int, workdir: Path, timeout: int, run_timeout: int
) -> Run:
    """Execute ``path`` once with papermill; return its targets and how it ended.

    ``timeout`` limits each cell (papermill's own limit). ``run_timeout`` limits the whole
    run: papermill (nbclient 0.11) can wait forever for a kernel that has gone idle (seen here
    in 2 of 8 runs of notebook 05, at its widget cells), and its cell limit does not catch
    that.
    """
    run = Run(path.name, seed, threads)
    tag = f"{path.stem}-seed{seed}-threads{threads}"
    targets_file = workdir / f"{tag}.jsonl"
    env = dict(os.environ)
    env[TARGETS_ENV] = str(targets_file)
    env[CACHE_ENV] = str(workdir / f"{tag}-cache")  # empty: every model trains
    targets_file.unlink(missing_ok=True)  # a second try starts afresh
    shutil.rmtree(env[CACHE_ENV], ignore_errors=True)
    env["PYTHONUNBUFFERED"] = "1"
    command = [
        sys.executable,
        "-m",
        "papermill",
        str(path),
        str(workdir / f"{tag}.ipynb"),
        "-p",
        "SEED",
        str(seed),
        "-p",
        "THREADS",
        str(threads),
        "--cwd",
        str(path.parent),
        "--kernel",
        "python3",
        "--no-progress-bar",
        "--execution-timeout",
        str(timeout),
    ]
    start = time.perf_counter()
    # A session of its own, so that a hung run is killed with its kernel.
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, stderr = proc.communicate(timeout=run_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        run.hung = True
    run.seconds = time.perf_counter() - start
    if run.hung:
        run.error = f"no result after {run_timeout} s: killed"
    elif proc.returncode != 0:
        lines = [line for line in stderr.splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line] or lines or ["(no message)"]
        run.error = errors[-1].strip()[:300]
    run.targets = read_targets(targets_file)
    return run


def summarise(runs: list[Run]) -> dict[str, list[dict]]:
    """Per notebook, one row per target: threshold, min / median / max, runs that met it."""
    table: dict[str, dict[str, dict]] = {}
    for run in runs:
        rows = table.setdefault(run.notebook, {})
        for t in run.targets:
            row = rows.setdefault(
                t["name"], dict(name=t["name"], op=t["op"], threshold=t["threshold"], values=[])
            )
            row["values"].append(t["value"])
            row.setdefault("met", 0)
            row["met"] += bool(t["met"])
    summary = {}
    for notebook, rows in table.items():
        n_runs = sum(r.notebook == notebook for r in runs)
        summary[notebook] = [
            dict(
                row,
                min=min(row["values"]),
                median=statistics.median(row["values"]),
                max=max(row["values"]),
                runs=n_runs,
            )
            for row in rows.values()
        ]
    return summary


def report(runs: list[Run], summary: dict[str, list[dict]], out=None) -> None:
    out = out or sys.stdout  # looked up now, so a redirected stdout is used
    by_notebook: dict[str, list[Run]] = {}
    for run in runs:
        by_notebook.setdefault(run.notebook, []).append(run)
    for notebook, nb_runs in by_notebook.items():
        seeds = sorted({r.seed for r in nb_runs})
        threads = sorted({r.threads for r in nb_runs})
        times = [r.seconds for r in nb_runs]
        print(
            f"\n{notebook}: {len(nb_runs)} runs (seeds {seeds} x threads {threads}), "
            f"{min(times):.0f}-{max(times):.0f} s each",
            file=out,
        )
        for r in nb_runs:
            if r.error:
                print(f"  FAILED seed {r.seed}, threads {r.threads}: {r.error}", file=out)
            elif r.attempts > 1:
                print(
                    f"  seed {r.seed}, threads {r.threads}: second try (the first hung)", file=out
                )
        rows = summary.get(notebook, [])
        if not rows:
            print("  (no target was recorded)", file=out)
            continue
        width = max(len(row["name"]) for row in rows)
        print(
            f"  {'target':<{width}}  {'threshold':>11}  {'min':>8}  {'median':>8}  {'max':>8}  met",
            file=out,
        )
        for row in rows:
            print(
                f"  {row['name']:<{width}}  {row['op']:>2} {row['threshold']:<8g}  "
                f"{row['min']:8.3f}  {row['median']:8.3f}  {row['max']:8.3f}  "
                f"{row['met']}/{row['runs']}",
                file=out,
            )


class Cores:
    """``total`` cores shared by runs: ``take(n)`` waits until n of them are free."""

    def __init__(self, total: int):
        self.total, self.free = total, total
        self.changed = threading.Condition()

    def take(self, n: int) -> int:
        n = min(n, self.total)  # a run wider than the machine runs alone
        with self.changed:
            self.changed.wait_for(lambda: self.free >= n)
            self.free -= n
        return n

    def give(self, n: int) -> None:
        with self.changed:
            self.free += n
            self.changed.notify_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every one that trains")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="cores to fill (default 1): runs go at once while their threads add up to at "
        "most this",
    )
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument(
        "--run-timeout",
        type=int,
        help="seconds per run (default: ten times the notebook's budget, at least 300); a run "
        "that takes longer is killed and tried once more",
    )
    parser.add_argument("--json", type=Path, help="also write every run and the summary here")
    parser.add_argument("--keep", type=Path, help="keep executed notebooks in this folder")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if any(t < 1 for t in args.threads):
        parser.error(f"--threads must be positive, got {args.threads}")

    notebooks = [p.resolve() for p in args.notebooks] or default_notebooks()
    for path in notebooks:
        parameters_of(path)  # fail early, with the notebook's name, before any run
    # Runs of one thread count go together, so one-thread runs pair up on two cores.
    combos = [(p, s, t) for t in args.threads for p in notebooks for s in args.seeds]
    print(
        f"{len(combos)} runs: {len(notebooks)} notebooks x seeds {args.seeds} x threads "
        f"{args.threads}, on {args.jobs} core(s)",
        flush=True,
    )

    with tempfile.TemporaryDirectory(prefix="robustness-") as tmp:
        workdir = args.keep.resolve() if args.keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)

        cores = Cores(args.jobs)

        def job(combo):
            taken = cores.take(combo[2])
            limit = run_timeout_of(combo[0], args.run_timeout)
            try:
                run = run_one(*combo, workdir=workdir, timeout=args.timeout, run_timeout=limit)
                if run.hung:  # a hang is papermill's, not the notebook's: one more try
                    print(f"  {run.notebook} seed {run.seed}: {run.error}; again", flush=True)
                    run = run_one(*combo, workdir=workdir, timeout=args.timeout, run_timeout=limit)
                    run.attempts = 2
            finally:
                cores.give(taken)
            status = "ok" if not run.error else f"FAILED: {run.error}"
            print(
                f"  {run.notebook} seed {run.seed} threads {run.threads}: "
                f"{run.seconds:.0f} s, {len(run.targets)} targets, {status}",
                flush=True,
            )
            return run

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            runs = list(pool.map(job, combos))

    summary = summarise(runs)
    report(runs, summary)
    if args.json:
        args.json.write_text(
            json.dumps({"runs": [asdict(r) for r in runs], "summary": summary}, indent=1)
        )
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

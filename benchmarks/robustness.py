"""Rerun notebooks with other seeds on simulated machines; record and check every target.

Each notebook that trains has a cell tagged ``parameters`` (papermill's convention) holding
``SEED`` and ``THREADS``, and asserts its learning targets through
``course_utils.claims.target``, which appends each figure to the file named by
``COURSE_TARGETS_FILE``. This script runs every (notebook, seed, threads) combination with
papermill, each with its own targets file and an empty cache of trained weights (so every
run trains for real), and prints, per target, its threshold and the min / median / max over
the runs, with how many runs met it. Use it to set a threshold far from the worst run you
measured, and rerun it after changing a recipe.

    .venv/bin/python benchmarks/robustness.py --jobs 2 --record     # every notebook, 15 runs each
    .venv/bin/python benchmarks/robustness.py notebooks/06_transformer.ipynb --seeds 0 1
    .venv/bin/python benchmarks/robustness.py --audit               # recorded files vs notebooks

A *machine* is a set of environment variables that makes this CPU run other kernels, as
another CPU would: ``avx2`` caps MKL, ATen and oneDNN at AVX2 (roughly an AMD or an older
Intel box), ``portable`` runs ATen's default kernels with MKL's conditional-numerical-
reproducibility mode. Each changes the bits of a whole training run, so one machine stands
in for several. ``--record`` writes ``benchmarks/results/NN.json`` per notebook as soon as
its runs are done; ``--audit`` checks every notebook's ``target(...)`` calls against those
files and the threshold rule (benchmarks/README.md); ``tests/test_recorded_targets.py`` runs
the audit in ``make test``.

``--jobs N`` fills N cores: runs start while the torch threads of the runs in flight add up
to at most N, so on two cores two one-thread runs go together and a two-thread run goes
alone (two threads sharing a core with another run slowed a notebook 01 run more than
five times here). The cores are lock files in ``--slots-dir``, so several invocations of
this script at once (one per notebook, say) share the machine's cores instead of each
filling them. A notebook's own timings are slower when runs share the machine. Figures are measurements, not tests: this script is not run by
``make test`` (a test runs it on a tiny notebook to check that it works).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import fcntl
import json
import os
import platform
import re
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

from course_utils.claims import OPERATORS, RESULTS_DIR, read_targets, rule_limit

ROOT = Path(__file__).resolve().parents[1]
TARGETS_ENV = "COURSE_TARGETS_FILE"  # read by course_utils.claims
CACHE_ENV = "COURSE_CACHE_DIR"  # read by course_utils.training
SLOTS_DIR = Path(tempfile.gettempdir()) / "course-robustness-slots"

# Simulated machines: environment variables that make MKL, ATen (torch's own CPU kernels)
# and oneDNN pick other kernels, as another CPU would. Every variable any machine sets is
# removed first, so "native" is native even when the caller's shell exports one of them.
MACHINES: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "MKL_CBWR": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
    "portable": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}
MACHINE_VARS = sorted({name for env in MACHINES.values() for name in env})


# papermill through its Python API, with course_utils.run_notebook's kernel manager: plain
# nbclient sometimes misses a cell's reply after a widget cell and sleeps until the cell's
# timeout (course_utils/run_notebook.py says why); this client finds it within half a second.
PAPERMILL = """\
import sys
import papermill
from course_utils.run_notebook import PromptKernelManager

source, output, cwd, seed, threads, timeout = sys.argv[1:]
papermill.execute_notebook(
    source, output, parameters={"SEED": int(seed), "THREADS": int(threads)}, cwd=cwd,
    kernel_name="python3", progress_bar=False, execution_timeout=int(timeout),
    kernel_manager_class=PromptKernelManager,
)
"""


@dataclass
class Run:
    notebook: str
    seed: int
    threads: int
    machine: str = "native"
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


def machine_env(machine: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) as the simulated ``machine`` sees it."""
    if machine not in MACHINES:
        raise ValueError(f"machine must be one of {list(MACHINES)}, got {machine!r}")
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in MACHINE_VARS}
    env.update(MACHINES[machine])
    return env


def run_one(
    path: Path,
    seed: int,
    threads: int,
    machine: str,
    workdir: Path,
    timeout: int,
    run_timeout: int,
) -> Run:
    """Execute ``path`` once with papermill; return its targets and how it ended.

    ``timeout`` limits each cell (papermill's own limit). ``run_timeout`` limits the whole
    run, a backstop: with plain nbclient a run could sleep through a cell's whole limit after a
    widget cell (seen here in notebooks 02, 04, 05, 09 and 15); :data:`PAPERMILL` uses
    ``course_utils.run_notebook.PromptKernelManager``, which does not.
    """
    run = Run(path.name, seed, threads, machine)
    tag = f"{path.stem}-seed{seed}-threads{threads}-{machine}"
    targets_file = workdir / f"{tag}.jsonl"
    env = machine_env(machine)
    env[TARGETS_ENV] = str(targets_file)
    env[CACHE_ENV] = str(workdir / f"{tag}-cache")  # empty: every model trains
    targets_file.unlink(missing_ok=True)  # a second try starts afresh
    shutil.rmtree(env[CACHE_ENV], ignore_errors=True)
    env["PYTHONUNBUFFERED"] = "1"
    command = [
        sys.executable,
        "-c",
        PAPERMILL,
        str(path),
        str(workdir / f"{tag}.ipynb"),
        str(path.parent),
        str(seed),
        str(threads),
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
        machines = list(dict.fromkeys(r.machine for r in nb_runs))
        times = [r.seconds for r in nb_runs]
        print(
            f"\n{notebook}: {len(nb_runs)} runs (seeds {seeds} x machines {machines} x threads "
            f"{threads}), {min(times):.0f}-{max(times):.0f} s each",
            file=out,
        )
        for r in nb_runs:
            where = f"seed {r.seed}, {r.machine}, threads {r.threads}"
            if r.error:
                print(f"  FAILED {where}: {r.error}", file=out)
            elif r.attempts > 1:
                print(f"  {where}: second try (the first hung)", file=out)
        rows = summary.get(notebook, [])
        if not rows:
            print("  (no target was recorded)", file=out)
            continue
        width = max(len(row["name"]) for row in rows)
        print(
            f"  {'target':<{width}}  {'threshold':>11}  {'min':>8}  {'median':>8}  {'max':>8}  "
            f"met    rule allows",
            file=out,
        )
        for row in rows:
            limit = rule_limit(row["op"], row["values"])
            print(
                f"  {row['name']:<{width}}  {row['op']:>2} {row['threshold']:<8g}  "
                f"{row['min']:8.3f}  {row['median']:8.3f}  {row['max']:8.3f}  "
                f"{row['met']:>2}/{row['runs']:<2}  {row['op']} {limit:.4g}",
                file=out,
            )


def results_of(runs: list[Run]) -> dict:
    """One notebook's runs as ``benchmarks/results/NN.json`` holds them: ``runs`` in order, and
    per target its operator, threshold and ``values`` in run order (None where a run recorded
    no value: it failed before that target, or the target was not reached)."""
    targets: dict[str, dict] = {}
    for i, run in enumerate(runs):
        for t in run.targets:
            entry = targets.setdefault(
                t["name"], dict(op=t["op"], threshold=t["threshold"], values=[None] * len(runs))
            )
            if entry["op"] != t["op"] or entry["threshold"] != t["threshold"]:
                raise ValueError(
                    f"{run.notebook}: target {t['name']!r} changed its threshold between runs "
                    f"({entry['op']} {entry['threshold']} and {t['op']} {t['threshold']})"
                )
            entry["values"][i] = t["value"]
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - the course always has torch
        torch_version = "?"
    return {
        "notebook": runs[0].notebook,
        "recorded": {
            "date": datetime.date.today().isoformat(),
            "commit": _git_head(),
            "cpu": _cpu_name(),
            "torch": torch_version,
            "python": platform.python_version(),
        },
        "runs": [
            {
                k: getattr(r, k)
                for k in ("seed", "machine", "threads", "seconds", "error", "attempts")
            }
            for r in runs
        ],
        "targets": targets,
    }


def write_results(runs: list[Run], results_dir: Path) -> Path:
    """Write one notebook's runs to ``results_dir/NN.json`` (NN: the notebook's number)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{runs[0].notebook[:2]}.json"
    data = results_of(runs)
    for run in data["runs"]:
        run["seconds"] = round(run["seconds"], 1)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def _git_head() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "notebooks", "course_utils"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return out.stdout.strip() + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


# -- the audit: every notebook's target(...) calls against its recorded runs ----------------

#: Targets that the recorded CPU runs cannot reach, with the reason. Keep this list short.
NOT_RECORDED = {
    "GPU, N=8192: math backend time / fastest fused backend time": "runs only where CUDA is "
    "available; the recorded runs are on a CPU",
}


@dataclass
class TargetCall:
    notebook: str
    cell: int
    pattern: str  # a regular expression for the recorded names (f-strings vary)
    op: str | None
    threshold: float | None
    problem: str = ""  # why the call cannot be checked, or ""


def target_calls(path: Path) -> list[TargetCall]:
    """Every ``target(name, value, op, threshold)`` call in the notebook's code cells.

    ``name`` may be an f-string: its replacement fields match any text. ``op`` and
    ``threshold`` must be literals (a threshold computed in the cell cannot be compared with
    the recorded one); a call that breaks this carries a ``problem``.
    """
    nb = nbformat.read(path, as_version=4)
    calls = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        source = "\n".join(
            line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "target"):
                continue
            args = {i: a for i, a in enumerate(node.args)}
            args.update({k.arg: k.value for k in node.keywords if k.arg})
            call = TargetCall(path.name, index, "", None, None)
            name = args.get(0, args.get("name"))
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                call.pattern = re.escape(name.value)
            elif isinstance(name, ast.JoinedStr):
                call.pattern = "".join(
                    re.escape(v.value) if isinstance(v, ast.Constant) else ".+?"
                    for v in name.values
                )
            else:
                call.problem = "its name is neither a string nor an f-string"
            op = args.get(2, args.get("op"))
            if isinstance(op, ast.Constant) and op.value in OPERATORS:
                call.op = op.value
            else:
                call.problem = call.problem or "its operator is not a literal '>=', '<=', '>', '<'"
            threshold = args.get(3, args.get("threshold"))
            try:
                value = ast.literal_eval(threshold) if threshold is not None else None
            except ValueError:
                value = None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                call.threshold = float(value)
            else:
                call.problem = call.problem or (
                    "its threshold is not a number literal, so it cannot be compared with the "
                    "recorded one"
                )
            calls.append(call)
    return calls


def audit(path: Path, results_dir: Path = RESULTS_DIR) -> list[str]:
    """What is wrong between a notebook's targets and its recorded runs (empty: nothing).

    Caught: a call whose threshold is not a literal; a notebook with targets and no results
    file; a target with no recorded value, or a run that recorded none; a threshold or operator
    that differs from the recorded one; a run that failed; a threshold that breaks the rule
    (benchmarks/README.md: every run meets it, at least half the spread beyond the worst);
    a recorded target that no call in the notebook makes any more.
    """
    calls = target_calls(path)
    problems = [f"{path.name} cell {c.cell}: {c.problem}" for c in calls if c.problem]
    calls = [c for c in calls if not c.problem]
    if not calls:
        return problems
    results_path = results_dir / f"{path.name[:2]}.json"
    if not results_path.exists():
        return problems + [
            f"{path.name}: {len(calls)} targets and no recorded runs ({results_path} is missing; "
            f"run benchmarks/robustness.py {path.relative_to(path.parents[1])} --record)"
        ]
    results = json.loads(results_path.read_text())
    recorded = results["targets"]
    for run in results["runs"]:
        if run.get("error"):
            problems.append(
                f"{path.name}: the recorded run seed {run['seed']}, {run['machine']}, threads "
                f"{run['threads']} failed: {run['error']}"
            )
    matched: set[str] = set()
    # A name that a literal call makes belongs to that call, not to an f-string call whose
    # pattern happens to match it too ("accuracy, {name}" against "accuracy, uniform").
    literal = {n for c in calls for n in recorded if c.pattern == re.escape(n)}
    for call in calls:
        names = [
            n
            for n in recorded
            if re.fullmatch(call.pattern, n) and (n not in literal or call.pattern == re.escape(n))
        ]
        where = f"{path.name} cell {call.cell}"
        if not names:
            if not any(re.fullmatch(call.pattern, n) for n in NOT_RECORDED):
                problems.append(f"{where}: target /{call.pattern}/ has no recorded values")
            continue
        for name in names:
            matched.add(name)
            t = recorded[name]
            if (t["op"], float(t["threshold"])) != (call.op, call.threshold):
                problems.append(
                    f"{where}: {name!r} is '{call.op} {call.threshold:g}' in the notebook but "
                    f"'{t['op']} {t['threshold']:g}' in {results_path.name}: record it again"
                )
                continue
            values = t["values"]
            if len(values) != len(results["runs"]) or any(v is None for v in values):
                missing = sum(v is None for v in values) + len(results["runs"]) - len(values)
                problems.append(f"{where}: {name!r} has no value from {missing} recorded run(s)")
                continue
            worst = min(values) if call.op in (">=", ">") else max(values)
            failing = sum(not OPERATORS[call.op](v, call.threshold) for v in values)
            limit = rule_limit(call.op, values)
            if failing:
                problems.append(
                    f"{where}: {name!r} {call.op} {call.threshold:g} failed in {failing} of "
                    f"{len(values)} recorded runs (worst {worst:.4g})"
                )
            elif (call.op in (">=", ">") and call.threshold > limit) or (
                call.op in ("<=", "<") and call.threshold < limit
            ):
                problems.append(
                    f"{where}: {name!r} {call.op} {call.threshold:g} is too close to the worst "
                    f"recorded run ({worst:.4g}); the rule allows at most {call.op} {limit:.4g}"
                )
    for name in recorded:
        if name not in matched:
            problems.append(
                f"{path.name}: {results_path.name} records {name!r}, which no target(...) call "
                f"in the notebook makes: record it again"
            )
    return problems


README_START = "<!-- recorded-targets:start (benchmarks/robustness.py --readme writes this) -->"
README_END = "<!-- recorded-targets:end -->"


def render_markdown(results_dir: Path = RESULTS_DIR) -> str:
    """Every recorded notebook's targets as Markdown: one folded table per notebook."""
    blocks = []
    for path in sorted(results_dir.glob("*.json")):
        results = json.loads(path.read_text())
        runs = results["runs"]
        seconds = [r["seconds"] for r in runs]
        machines = ", ".join(dict.fromkeys(r["machine"] for r in runs))
        seeds = sorted({r["seed"] for r in runs})
        threads = sorted({r["threads"] for r in runs})
        meta = results.get("recorded", {})
        lines = [
            f"<details><summary><code>{results['notebook'].removesuffix('.ipynb')}</code>: "
            f"{len(results['targets'])} targets, {len(runs)} runs</summary>",
            "",
            f"Seeds {seeds[0]}-{seeds[-1]} x machines {machines} x "
            f"{' or '.join(map(str, threads))} thread{'s' if threads != [1] else ''}, "
            f"{min(seconds):.0f}-{max(seconds):.0f} s a run; {meta.get('cpu', '?')}, torch "
            f"{meta.get('torch', '?')}, {meta.get('date', '?')}.",
            "",
            "| target | threshold | min | median | max | runs met |",
            "|---|---|---|---|---|---|",
        ]
        for name, t in results["targets"].items():
            values = [v for v in t["values"] if v is not None]
            met = sum(OPERATORS[t["op"]](v, t["threshold"]) for v in values)
            lo, mid, hi = min(values), statistics.median(values), max(values)
            lines.append(
                f"| {name} | {t['op']} {t['threshold']:g} | {lo:.4g} | {mid:.4g} | {hi:.4g} "
                f"| {met}/{len(t['values'])} |"
            )
        blocks.append("\n".join(lines + ["", "</details>"]))
    return "\n\n".join(blocks)


def readme_with_results(readme: str, results_dir: Path = RESULTS_DIR) -> str:
    """``readme`` with the text between its recorded-targets markers rendered anew."""
    start, end = readme.find(README_START), readme.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"the README has no {README_START!r} ... {README_END!r} section")
    head = readme[: start + len(README_START)]
    return f"{head}\n{render_markdown(results_dir)}\n{readme[end:]}"


class Cores:
    """``total`` cores shared by runs: ``take(n)`` waits until n of them are free.

    Each core is a lock file in ``slots_dir`` (``flock``), so runs of several invocations of
    this script at once share the cores too. Waiting runs queue first come, first served: each
    leaves a ticket file in the folder, and only the oldest live ticket may take cores, so an
    invocation that gives a core back cannot take it again ahead of another one that has been
    waiting. A lock goes with the process that holds it, and a ticket of a process that has
    died is ignored, so a killed run never leaves a core taken or the queue stuck.
    """

    def __init__(self, total: int, slots_dir: Path = SLOTS_DIR):
        self.total = total
        self.slots_dir = Path(slots_dir)
        self.slots_dir.mkdir(parents=True, exist_ok=True)
        self.changed = threading.Condition()

    def _try(self, n: int) -> list[int] | None:
        held = []
        for slot in range(self.total):
            fd = os.open(self.slots_dir / f"core{slot}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            held.append(fd)
            if len(held) == n:
                return held
        self._release(held)
        return None

    def _release(self, fds: list[int]) -> None:
        for fd in fds:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _first_in_queue(self, ticket: Path) -> bool:
        waiting = []
        for path in self.slots_dir.glob("ticket-*"):
            pid = int(path.name.split("-")[2])
            try:
                os.kill(pid, 0)  # a dead process's ticket is ignored (and removed)
            except ProcessLookupError:
                path.unlink(missing_ok=True)
                continue
            except PermissionError:
                pass  # alive, another user's
            waiting.append(path.name)
        return not waiting or min(waiting) == ticket.name

    def take(self, n: int) -> list[int]:
        n = min(n, self.total)  # a run wider than the machine runs alone
        ticket = self.slots_dir / (
            f"ticket-{time.time_ns():020d}-{os.getpid()}-{threading.get_ident()}"
        )
        ticket.touch()
        try:
            with self.changed:
                while True:
                    if self._first_in_queue(ticket) and (held := self._try(n)) is not None:
                        return held
                    self.changed.wait(timeout=0.5)  # woken by give(), or polls other processes
        finally:
            ticket.unlink(missing_ok=True)

    def give(self, held: list[int]) -> None:
        with self.changed:
            self._release(held)
            self.changed.notify_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every one that trains")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--machines",
        nargs="+",
        default=list(MACHINES),
        choices=list(MACHINES),
        help="simulated machines (default: all): "
        + "; ".join(
            f"{name}: {' '.join(f'{k}={v}' for k, v in env.items()) or 'as this CPU is'}"
            for name, env in MACHINES.items()
        ),
    )
    parser.add_argument("--threads", nargs="+", type=int, default=[1])
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="cores to fill (default 1): runs go at once while their threads add up to at "
        "most this, counted across every invocation that shares --slots-dir",
    )
    parser.add_argument("--slots-dir", type=Path, default=SLOTS_DIR, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument(
        "--run-timeout",
        type=int,
        help="seconds per run (default: ten times the notebook's budget, at least 300); a run "
        "that takes longer is killed and tried once more",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="write each notebook's runs to benchmarks/results/NN.json once they are done",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help=argparse.SUPPRESS)
    parser.add_argument(
        "--audit",
        action="store_true",
        help="run nothing: check the notebooks' targets against the recorded files and the rule",
    )
    parser.add_argument(
        "--readme",
        type=Path,
        help="run nothing: render the recorded files into this file's recorded-targets section "
        "(docs/measurements.md)",
    )
    parser.add_argument("--json", type=Path, help="also write every run and the summary here")
    parser.add_argument("--keep", type=Path, help="keep executed notebooks in this folder")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if any(t < 1 for t in args.threads):
        parser.error(f"--threads must be positive, got {args.threads}")

    if args.readme:
        text = args.readme.read_text()
        args.readme.write_text(readme_with_results(text, args.results_dir))
        print(f"{args.readme}: recorded-targets section rendered from {args.results_dir}")
        return 0

    if args.audit:
        paths = [p.resolve() for p in args.notebooks] or sorted(
            (ROOT / "notebooks").glob("*.ipynb")
        )
        problems = [p for path in paths for p in audit(path, args.results_dir)]
        for line in problems:
            print(line)
        print(f"{len(problems)} problem(s) in {len(paths)} notebook(s)")
        return 1 if problems else 0

    notebooks = [p.resolve() for p in args.notebooks] or default_notebooks()
    for path in notebooks:
        parameters_of(path)  # fail early, with the notebook's name, before any run
    # A notebook's runs go together, so its results file is written as early as possible.
    combos = [
        (p, s, t, m)
        for p in notebooks
        for t in args.threads
        for m in args.machines
        for s in args.seeds
    ]
    per_notebook = len(combos) // len(notebooks)
    print(
        f"{len(combos)} runs: {len(notebooks)} notebooks x seeds {args.seeds} x machines "
        f"{args.machines} x threads {args.threads}, on {args.jobs} core(s)",
        flush=True,
    )

    with tempfile.TemporaryDirectory(prefix="robustness-") as tmp:
        workdir = args.keep.resolve() if args.keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)

        cores = Cores(args.jobs, args.slots_dir)
        done: dict[str, list[Run]] = {}
        done_lock = threading.Lock()

        def job(combo):
            path, seed, threads, machine = combo
            held = cores.take(threads)
            limit = run_timeout_of(path, args.run_timeout)
            try:
                run = run_one(*combo, workdir=workdir, timeout=args.timeout, run_timeout=limit)
                if run.hung:  # a hang is papermill's, not the notebook's: one more try
                    print(f"  {run.notebook} seed {seed} {machine}: {run.error}; again", flush=True)
                    run = run_one(*combo, workdir=workdir, timeout=args.timeout, run_timeout=limit)
                    run.attempts = 2
            finally:
                cores.give(held)
            status = "ok" if not run.error else f"FAILED: {run.error}"
            print(
                f"  {run.notebook} seed {seed} {machine} threads {threads}: "
                f"{run.seconds:.0f} s, {len(run.targets)} targets, {status}",
                flush=True,
            )
            with done_lock:
                finished = done.setdefault(run.notebook, [])
                finished.append(run)
                if args.record and len(finished) == per_notebook:
                    order = {c: i for i, c in enumerate(combos)}
                    finished.sort(key=lambda r: order[(path, r.seed, r.threads, r.machine)])
                    print(f"  recorded {write_results(finished, args.results_dir)}", flush=True)
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

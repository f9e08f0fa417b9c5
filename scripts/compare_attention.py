"""With and without attention, for every application of the course: the grid behind notebook 12.

For each application of :data:`course_utils.apps.registry.APPLICATIONS`, each model (with
attention, without, and the position-keeping variants) and each seed, this trains the model
with the application's recipe, measures it on the test split (overall and per level of
difficulty) and appends the result to a JSON-lines file as soon as it finishes, so a stop
loses at most the runs under way and a second call carries on where the first stopped. At
the end it writes the summary (mean, spread, difference, whether the difference exceeds the
spread) to ``--out`` (default ``benchmarks/comparison-SIZE.json``; ``benchmarks/results/``
holds the notebooks' recorded targets only). Two equal-cost runs per seed for the reversal task and translation:
the model without attention made as large as the one with it (``rnn_dim``), and trained for
as long as the one with it took (its steps scaled by the measured time ratio).

    .venv/bin/python scripts/compare_attention.py --size full --jobs 2      # the recorded grid
    .venv/bin/python scripts/compare_attention.py --size small --seeds 0 1 --apps memory

Each run uses one torch thread; ``--jobs`` runs that many at once. Timings are this
machine's: compare them as ratios.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EQUAL_COST = ("reverse", "translation")  # the applications that also get equal-cost runs


def variants_of(app: object) -> list:
    return [True, False, *app.variants]


def run_task(task: dict) -> dict:
    """One model, one seed: train, measure, return a JSON-ready record (in a worker)."""
    import torch

    from course_utils.apps.protocol import record, run
    from course_utils.apps.registry import APPLICATIONS

    torch.set_num_threads(1)
    app = APPLICATIONS[task["app"]]
    attention = {"attention": True, "none": False}.get(task["model"], task["model"])
    start = time.perf_counter()
    out = run(app, attention, task["seed"], task["size"], task.get("steps"), **task["sizes"])
    return {**task, **record(app, out), "seconds": time.perf_counter() - start}


def key(task: dict) -> tuple:
    return (task["app"], task["model"], task["seed"], task["size"], task["cost"])


def base_tasks(apps: list[str], seeds: list[int], size: str) -> list[dict]:
    from course_utils.apps.protocol import label
    from course_utils.apps.registry import APPLICATIONS

    return [
        {"app": a, "model": label(v), "seed": s, "size": size, "cost": "equal steps", "sizes": {}}
        for a in apps
        for s in seeds
        for v in variants_of(APPLICATIONS[a])
    ]


def equal_cost_tasks(records: list[dict], app: str, seeds: list[int], size: str) -> list[dict]:
    """The model without attention at the attention model's size, and for its time."""
    from course_utils.apps.registry import APPLICATIONS

    mine = [r for r in records if r["app"] == app and r["cost"] == "equal steps"]
    with_att = [r for r in mine if r["model"] == "attention"]
    without = [r for r in mine if r["model"] == "none"]
    if not with_att or not without:
        return []
    target = with_att[0]["parameters"]
    rnn_dim = matching_rnn_dim(app, target, size)
    ratio = statistics.median(r["train_seconds"] for r in with_att) / statistics.median(
        r["train_seconds"] for r in without
    )
    steps = round(APPLICATIONS[app].recipes[size].steps * ratio)
    tasks = []
    for s in seeds:
        base = {"app": app, "model": "none", "seed": s, "size": size}
        tasks.append({**base, "cost": "equal parameters", "sizes": {"rnn_dim": rnn_dim}})
        tasks.append({**base, "cost": "equal time", "sizes": {}, "steps": steps})
    return tasks


def matching_rnn_dim(app: str, target: int, size: str) -> int:
    """The smallest GRU state whose model without attention has ``target`` parameters or more."""
    from course_utils.apps.registry import APPLICATIONS
    from course_utils.training import count_parameters

    entry = APPLICATIONS[app]
    splits = entry.make_splits(0, size)
    rnn_dim = 64
    while count_parameters(entry.build_model(False, splits, rnn_dim=rnn_dim)) < target:
        rnn_dim += 1
    return rnn_dim


def summarise(records: list[dict]) -> dict:
    """Per application: its measure and, per model (the equal-cost runs named by their cost),
    :func:`course_utils.apps.protocol.summarise` of its runs."""
    from course_utils.apps import protocol
    from course_utils.apps.registry import APPLICATIONS

    out = {}
    for name in dict.fromkeys(r["app"] for r in records):
        app = APPLICATIONS[name]
        models: dict[str, list[dict]] = {}
        for r in records:
            if r["app"] == name:
                tag = r["model"] if r["cost"] == "equal steps" else f"{r['model']}, {r['cost']}"
                models.setdefault(tag, []).append(r)
        out[name] = {
            "metric": app.metric,
            "higher_is_better": app.higher_is_better,
            "difficulty": app.difficulty_name,
            "notebook": app.notebook,
            "models": protocol.summarise(app, models),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("small", "full"), default="full")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--apps", nargs="+", default=None, help="default: every application")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--no-equal-cost", action="store_true")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/comparison-SIZE.json")  # fmt: skip
    args = parser.parse_args()

    from course_utils.apps.registry import APPLICATIONS

    apps = args.apps or list(APPLICATIONS)
    out = args.out or ROOT / "benchmarks" / f"comparison-{args.size}.json"
    runs_file = out.with_suffix(".runs.jsonl")
    records = [json.loads(line) for line in runs_file.read_text().splitlines()] if (
        runs_file.exists()
    ) else []  # fmt: skip
    done = {key(r) for r in records}
    print(f"{len(records)} runs already in {runs_file.name}")

    def execute(tasks: list[dict]) -> None:
        todo = [t for t in tasks if key(t) not in done]
        if not todo:
            return
        with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
            for r in pool.imap_unordered(run_task, todo):
                records.append(r)
                done.add(key(r))
                with runs_file.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                print(f"{r['app']:>13} {r['model']:>9} {r['cost']:>16} seed {r['seed']}: "
                      f"{r['metric']} {r['value']:.3f}, {r['parameters']:,} parameters, "
                      f"{r['train_seconds']:.0f} s", flush=True)  # fmt: skip

    execute(base_tasks(apps, args.seeds, args.size))
    if not args.no_equal_cost:
        for app in [a for a in apps if a in EQUAL_COST]:
            execute(equal_cost_tasks(records, app, args.seeds, args.size))
    mine = [r for r in records if r["size"] == args.size]  # every application run so far
    summary = {
        "size": args.size,
        "seeds": args.seeds,
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "jobs": args.jobs,
        },  # fmt: skip
        "applications": summarise(mine),
    }
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()

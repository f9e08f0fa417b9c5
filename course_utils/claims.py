"""A notebook's claims, asserted as learning targets: print each figure with its threshold,
and keep a record. (The module is named for what it holds, claims a notebook makes and
asserts, not for a model's targets, its labels.)

A notebook asserts what it teaches in a visible cell::

    assert target("held-out exact match", acc, ">=", 0.95)

``target`` prints ``held-out exact match: 0.987 >= 0.95  ok`` and returns whether the figure
meets its threshold, so the ``assert`` stays in the cell where the learner reads it. When the
environment variable ``COURSE_TARGETS_FILE`` names a file, every call also appends one JSON
line there (name, value, operator, threshold, met). ``benchmarks/robustness.py`` sets it when
it reruns a notebook with other seeds and thread counts, and reads the figures back from that
file instead of parsing printed text.

>>> target("accuracy", 0.97, ">=", 0.9)
accuracy: 0.970 >= 0.9  ok
True
>>> target("loss", 2.5, "<=", 1.5)
loss: 2.500 <= 1.5  NOT MET
False
"""

from __future__ import annotations

import json
import math
import operator
import os
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

ENV_VAR = "COURSE_TARGETS_FILE"
OPERATORS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


def target(name: str, value: float, op: str, threshold: float, digits: int = 3) -> bool:
    """Print ``name: value op threshold`` and return whether it holds; record it if asked.

    ``op`` is one of ``>=``, ``<=``, ``>``, ``<``. ``value`` and ``threshold`` are numbers
    (a one-element tensor or NumPy scalar is converted with ``float``); NaN never meets a
    target. ``digits`` sets how many decimals of ``value`` are printed.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    if op not in OPERATORS:
        raise ValueError(f"op must be one of {sorted(OPERATORS)}, got {op!r}")
    value, threshold = _number(value, "value"), _number(threshold, "threshold")
    met = not math.isnan(value) and bool(OPERATORS[op](value, threshold))
    print(f"{name}: {value:.{digits}f} {op} {threshold:g}  {'ok' if met else 'NOT MET'}")
    path = os.environ.get(ENV_VAR)
    if path:
        line = dict(name=name, value=value, op=op, threshold=threshold, met=met)
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    return met


def read_targets(path: str | os.PathLike) -> list[dict]:
    """The records that :func:`target` appended to ``path``, in order (none if it is missing)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _number(x: object, argument: str) -> float:
    if isinstance(x, bool) or not hasattr(x, "__float__"):
        raise TypeError(f"{argument} must be a number, got {type(x).__name__} {x!r}")
    shape = getattr(x, "shape", ())
    if len(shape) > 0 and math.prod(shape) != 1:
        raise ValueError(f"{argument} must hold a single number, got shape {tuple(shape)}")
    return float(x)


# -- recorded runs: benchmarks/results/NN.json and the threshold rule ------------------------

#: Where ``benchmarks/robustness.py --record`` writes one file per notebook (``NN.json``). The
#: course is installed editable (``pip install -e .``), so this is the repository's folder.
RESULTS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "results"

#: How far beyond the worst recorded run a threshold must sit, in units of the spread
#: (max - min) of the recorded values: benchmarks/README.md explains the rule.
MARGIN_IN_SPREADS = 0.5


def rule_limit(op: str, values: list[float]) -> float:
    """The loosest threshold the rule allows for these recorded ``values``.

    For ``>=`` (and ``>``) that is ``min - 0.5 * (max - min)``; for ``<=`` (and ``<``),
    ``max + 0.5 * (max - min)``. A threshold may be stricter than the runs allow only in the
    other direction: ``>=`` thresholds at or below the limit, ``<=`` thresholds at or above it.

    >>> rule_limit(">=", [0.8, 0.9, 1.0])
    0.7
    >>> rule_limit("<=", [0.1, 0.3])
    0.4
    """
    if op not in OPERATORS:
        raise ValueError(f"op must be one of {sorted(OPERATORS)}, got {op!r}")
    numbers = [_number(v, "values") for v in values]
    if not numbers:
        raise ValueError("values must hold at least one recorded figure, got none")
    if any(math.isnan(v) for v in numbers):
        raise ValueError(f"values must not hold NaN, got {numbers}")
    low, high = min(numbers), max(numbers)
    spread = high - low
    limit = (
        low - MARGIN_IN_SPREADS * spread if op in (">=", ">") else high + MARGIN_IN_SPREADS * spread
    )
    return round(limit, 12)  # no float dust in printed limits


def rule_holds(op: str, threshold: float, values: list[float]) -> bool:
    """Whether every recorded value meets ``op threshold`` and the threshold sits at least half
    the spread beyond the worst value (:func:`rule_limit`). A missing value (``None``) fails.

    >>> rule_holds(">=", 0.7, [0.8, 0.9, 1.0])  # worst 0.8, spread 0.2: limit 0.7
    True
    >>> rule_holds(">=", 0.75, [0.8, 0.9, 1.0])  # every run meets it, but too close
    False
    >>> rule_holds("<=", 0.5, [0.1, 0.3, None])  # a run that recorded nothing
    False
    """
    threshold = _number(threshold, "threshold")
    if not values or any(v is None for v in values):
        return False
    if not all(OPERATORS[op](_number(v, "values"), threshold) for v in values):
        return False
    limit = rule_limit(op, values)
    return threshold <= limit if op in (">=", ">") else threshold >= limit


def load_results(notebook: str, results_dir: str | os.PathLike | None = None) -> dict:
    """The recorded runs of one notebook: ``load_results("15")`` reads ``15.json``.

    ``notebook`` is the notebook's two-digit number or its file name (``"15_x.ipynb"``).
    FileNotFoundError names the file and the command that writes it.
    """
    if not isinstance(notebook, str) or len(notebook) < 2 or not notebook[:2].isdigit():
        raise ValueError(f"notebook must start with its two-digit number, got {notebook!r}")
    path = Path(results_dir or RESULTS_DIR) / f"{notebook[:2]}.json"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist: record it with "
            f"'benchmarks/robustness.py notebooks/{notebook[:2]}_*.ipynb --record'"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def results_table(notebook: str, results_dir: str | os.PathLike | None = None) -> pd.DataFrame:
    """A notebook's recorded targets as a table: one row per target, with its threshold, the
    min / median / max over the recorded runs, how many runs met it, and whether the threshold
    keeps the rule's margin (:func:`rule_holds`). Prints which runs were recorded.

    A notebook's closing cell calls it, so the figures a learner reads there come from the
    committed file, never typed by hand.
    """
    import pandas as pd  # a notebook dependency; the rest of this module needs none

    results = load_results(notebook, results_dir)
    runs = results["runs"]
    seeds = sorted({r["seed"] for r in runs})
    machines = list(dict.fromkeys(r["machine"] for r in runs))
    threads = sorted({r["threads"] for r in runs})
    meta = results.get("recorded", {})
    print(
        f"{len(runs)} recorded runs: seeds {seeds} x machines {machines} x threads {threads}"
        + (
            f" ({meta.get('cpu', '?')}, torch {meta.get('torch', '?')}, {meta.get('date', '?')})"
            if meta
            else ""
        )
    )
    rows = []
    for name, t in results["targets"].items():
        values = [v for v in t["values"] if v is not None]
        met = sum(OPERATORS[t["op"]](v, t["threshold"]) for v in values)
        rows.append(
            {
                "target": name,
                "threshold": f"{t['op']} {t['threshold']:g}",
                "min": min(values) if values else math.nan,
                "median": statistics.median(values) if values else math.nan,
                "max": max(values) if values else math.nan,
                "runs met": f"{met}/{len(t['values'])}",
                "rule": "ok" if rule_holds(t["op"], t["threshold"], t["values"]) else "BROKEN",
            }
        )
    return pd.DataFrame(rows).set_index("target").round(4)

"""A notebook's learning targets: print each figure with its threshold, and keep a record.

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
from pathlib import Path

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

"""The applications protocol: what every application of the course offers notebook 12.

An :class:`Application` bundles one application's data, models, training recipe and
measures behind the same five calls, so that notebook 12 and ``scripts/compare_attention.py``
loop over all of them without a branch per application:

* ``make_splits(seed, size)`` -> ``{"train", "val", "test"}``: the application's data at
  ``size`` ``"full"`` (what its own notebook trains on) or ``"small"`` (a short run on two
  cores), drawn with ``seed``;
* ``build_model(attention, splits, **sizes)``: ``True`` (the notebook's attention model),
  ``False`` (its baseline without attention) or a named variant from ``variants``, such as
  ``"grid"``, a baseline without attention that keeps every position. ``splits`` is there
  because a model's vocabulary can come from its data (summarisation's does);
* ``train(model, splits, seed, size, steps=None)``: the application's :class:`Recipe` (data,
  not code) run through :func:`~course_utils.training.fit`; every model trained with the
  same ``seed`` sees the same batches;
* ``evaluate(model, data)``: the application's own measures, the primary ``metric`` first;
* ``difficulty(data)``: one number per example, what makes an example hard for a model that
  must squeeze its input into one vector (input length, digits, facts), and ``subset(data,
  rows)``, so that :func:`by_difficulty` can measure per level (in the groups of
  :func:`reference_groups`, the same for every seed).

One cell of notebook 12's table is :func:`run` (one application, one model, one seed, the
recipe's steps or more); :func:`record` measures it (overall and per level of difficulty)
into a JSON-ready record, and :func:`summarise` turns the records of several seeds into the
table's rows (mean, spread, parameters, seconds, :func:`compare_runs` against attention), for
the notebook's live table and the script's recorded one alike.

:mod:`course_utils.apps.registry` holds the eight applications. Shapes and names follow the
glossary in :mod:`course_utils`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from course_utils._validate import check_positive
from course_utils.training import count_parameters, fit, set_seed

SIZES = ("small", "full")


@dataclass(frozen=True)
class Recipe:
    """How an application trains: ``steps`` optimiser steps of Adam at ``lr`` on batches of
    ``batch_size``, the gradient clipped to norm 1; ``decay``: the rate falls linearly
    towards 0 over the steps (notebooks 01, 03, 07 and 10)."""

    steps: int
    batch_size: int
    lr: float
    decay: bool = False


@dataclass(frozen=True)
class Application:
    """One application behind the protocol of this module (see its docstring)."""

    name: str
    notebook: str
    metric: str  # the primary measure, first in evaluate's dict
    higher_is_better: bool
    difficulty_name: str  # what difficulty() counts, e.g. "source length"
    variants: tuple[str, ...]  # names build_model takes besides True and False
    recipes: dict[str, Recipe]  # one per size
    splits_fn: Callable[[int, str], dict] = field(repr=False)
    build_fn: Callable[..., nn.Module] = field(repr=False)
    batches_fn: Callable[[object, int, int], Iterator] = field(repr=False)
    loss_fn: Callable[[nn.Module, object], torch.Tensor] = field(repr=False)
    evaluate_fn: Callable[[nn.Module, object], dict] = field(repr=False)
    difficulty_fn: Callable[[object], list[int]] = field(repr=False)
    subset_fn: Callable[[object, list[int]], object] = field(repr=False)

    def make_splits(self, seed: int = 0, size: str = "full") -> dict:
        _check_size(size)
        return self.splits_fn(seed, size)

    def build_model(self, attention: bool | str, splits: dict, **sizes: object) -> nn.Module:
        if not (isinstance(attention, bool) or attention in self.variants):
            raise ValueError(
                f"attention must be True, False or one of {self.variants} for {self.name}, "
                f"got {attention!r}"
            )
        return self.build_fn(attention, splits, **sizes)

    def train(
        self,
        model: nn.Module,
        splits: dict,
        seed: int = 0,
        size: str = "full",
        steps: int | None = None,
        progress: bool = False,
    ) -> dict[str, list[float]]:
        _check_size(size)
        r = self.recipes[size]
        steps = r.steps if steps is None else steps
        batches = self.batches_fn(splits["train"], r.batch_size, seed)
        schedule = (lambda step: 1 - (step - 1) / steps) if r.decay else None
        return fit(model, batches, self.loss_fn, steps, lr=r.lr, lr_schedule=schedule,
                   eval_every=max(1, steps // 20), desc=self.name, progress=progress)  # fmt: skip

    def evaluate(self, model: nn.Module, data: object) -> dict[str, float]:
        scores = self.evaluate_fn(model, data)
        return {self.metric: scores[self.metric], **scores}

    def difficulty(self, data: object) -> list[int]:
        return self.difficulty_fn(data)

    def subset(self, data: object, rows: list[int]) -> object:
        return self.subset_fn(data, rows)


def _check_size(size: object) -> None:
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")


def run(
    app: Application,
    attention: bool | str,
    seed: int = 0,
    size: str = "full",
    steps: int | None = None,
    **sizes: object,
) -> dict:
    """One cell of notebook 12's table: data, model, training and test measures for one
    application, one model and one seed -> ``{"metrics", "parameters", "seconds", "model",
    "splits", "history"}`` and what named it (``"application"``, ``"model_name"`` as
    :func:`label` writes it, ``"seed"``, ``"size"``); seconds: training only; ``steps``: the
    recipe's by default."""
    splits = app.make_splits(seed, size)
    set_seed(seed)
    model = app.build_model(attention, splits, **sizes)
    start = time.perf_counter()
    history = app.train(model, splits, seed, size, steps)
    seconds = time.perf_counter() - start
    model.eval()
    return {
        "application": app.name,
        "model_name": label(attention),
        "seed": seed,
        "size": size,
        "metrics": app.evaluate(model, splits["test"]),
        "parameters": count_parameters(model),
        "seconds": seconds,
        "model": model,
        "splits": splits,
        "history": history,
    }


def label(attention: bool | str) -> str:
    """The table's name for a model: ``"attention"``, ``"none"`` or the variant's own name."""
    if isinstance(attention, bool):
        return "attention" if attention else "none"
    if not isinstance(attention, str):
        raise TypeError(f"attention must be a bool or a variant's name, got {attention!r}")
    return attention


def record(app: Application, out: dict) -> dict:
    """One run of :func:`run` as a JSON-ready record, what the table is made of:
    ``{"app", "model", "seed", "size", "metric", "value", "metrics", "parameters",
    "train_seconds", "by_difficulty", "final_train_loss"}``, the measure by difficulty in the
    groups of :func:`reference_groups` (the same for every seed)."""
    if out.get("application") != app.name:
        raise ValueError(f"out is a run of {out.get('application')!r}, not of {app.name!r}")
    groups = reference_groups(app, out["size"])
    return {
        "app": app.name,
        "model": out["model_name"],
        "seed": out["seed"],
        "size": out["size"],
        "metric": app.metric,
        "value": out["metrics"][app.metric],
        "metrics": out["metrics"],
        "parameters": out["parameters"],
        "train_seconds": out["seconds"],
        "by_difficulty": by_difficulty(app, out["model"], out["splits"]["test"], groups),
        "final_train_loss": out["history"]["train_loss"][-1],
    }


def summarise(app: Application, runs: dict[str, list[dict]]) -> dict[str, dict]:
    """The table's rows for one application: ``runs`` maps a model's name to its records (one
    per seed, from :func:`record`) -> per model ``{"seeds", "values", "mean", "std",
    "parameters", "train_seconds", "by_difficulty", "all_metrics"}``, the measure by
    difficulty averaged over the seeds, and for every model but ``"attention"`` (when both
    have two seeds or more) :func:`compare_runs` of attention against it."""
    rows = {}
    for tag, records in runs.items():
        if not records or any(r["app"] != app.name for r in records):
            raise ValueError(f"runs[{tag!r}] must hold one or more records of {app.name!r}")
        records = sorted(records, key=lambda r: r["seed"])
        values = [r["value"] for r in records]
        groups: dict[tuple[int, int], list[float]] = {}
        for r in records:
            for g in r["by_difficulty"]:
                groups.setdefault((g["lo"], g["hi"]), []).append(g[app.metric])
        rows[tag] = {
            "seeds": [r["seed"] for r in records],
            "values": values,
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "parameters": records[0]["parameters"],
            "train_seconds": statistics.median(r["train_seconds"] for r in records),
            "by_difficulty": [
                {"lo": lo, "hi": hi, "mean": statistics.fmean(v), "runs": len(v)}
                for (lo, hi), v in sorted(groups.items())
            ],
            "all_metrics": {
                k: statistics.fmean(r["metrics"][k] for r in records) for k in records[0]["metrics"]
            },
        }
    base = rows.get("attention")
    for tag, row in rows.items():
        if tag != "attention" and base and len(base["values"]) > 1 and len(row["values"]) > 1:
            row.update(compare_runs(base["values"], row["values"], app.higher_is_better))
    return rows


def difficulty_groups(levels: list[int], max_groups: int = 5) -> list[tuple[int, int]]:
    """At most ``max_groups`` ranges ``(lo, hi)`` (both included) of difficulty ``levels``,
    each holding about as many examples as the others; a level is never split, and with no
    more levels than groups each level is a group.

    >>> difficulty_groups([2, 2, 3, 3, 4, 4])  # few levels: one group each
    [(2, 2), (3, 3), (4, 4)]
    >>> difficulty_groups(list(range(4, 31)) * 2, max_groups=3)
    [(4, 12), (13, 21), (22, 30)]
    """
    check_positive("max_groups", max_groups)
    if not levels:
        raise ValueError("levels is empty: one difficulty per example is needed")
    values = sorted(set(levels))
    if len(values) <= max_groups:
        return [(v, v) for v in values]
    counts = {v: levels.count(v) for v in values}
    groups, start, held, taken = [], values[0], 0, 0
    for i, v in enumerate(values):
        held += counts[v]
        left = max_groups - len(groups)  # groups still to fill, this one included
        if held >= (len(levels) - taken) / left or i == len(values) - 1:
            groups.append((start, v))
            taken, held = taken + held, 0
            start = values[i + 1] if i + 1 < len(values) else v
    return groups


_REFERENCE_GROUPS: dict[tuple[str, str, int], list[tuple[int, int]]] = {}


def reference_groups(app: Application, size: str, max_groups: int = 5) -> list[tuple[int, int]]:
    """The difficulty groups of seed 0's test split (:func:`difficulty_groups`), the same for
    every seed, so that measures per group can be averaged over seeds; computed once."""
    key = (app.name, size, max_groups)
    if key not in _REFERENCE_GROUPS:
        test = app.make_splits(0, size)["test"]
        _REFERENCE_GROUPS[key] = difficulty_groups(app.difficulty(test), max_groups)
    return _REFERENCE_GROUPS[key]


def by_difficulty(
    app: Application,
    model: nn.Module,
    data: object,
    groups: list[tuple[int, int]] | None = None,
    max_groups: int = 5,
) -> list[dict[str, float]]:
    """The primary measure per group of difficulty: one ``{"lo", "hi", "examples",
    app.metric}`` per group ``(lo, hi)`` of ``groups`` (default: :func:`difficulty_groups`
    of ``data``'s own levels) that holds an example, easiest first."""
    levels = app.difficulty(data)
    out = []
    for lo, hi in groups if groups is not None else difficulty_groups(levels, max_groups):
        rows = [i for i, v in enumerate(levels) if lo <= v <= hi]
        if rows:
            score = app.evaluate(model, app.subset(data, rows))[app.metric]
            out.append({"lo": lo, "hi": hi, "examples": len(rows), app.metric: score})
    return out


def compare_runs(
    with_attention: Sequence[float], without: Sequence[float], higher_is_better: bool = True
) -> dict[str, float | bool]:
    """Attention's runs against a baseline's, one value per seed each ->
    ``{"difference", "standard_error", "beyond_spread", "attention_better"}``.

    ``difference`` is the mean with attention minus the mean without; ``standard_error`` is
    Welch's, ``sqrt(s1^2 / n1 + s2^2 / n2)`` with each sample's standard deviation ``s``;
    the difference is ``beyond_spread`` when it exceeds twice that (roughly a 95% interval
    that excludes zero), and ``attention_better`` says which way it points for a measure
    where ``higher_is_better`` (or lower, as an error rate).

    >>> out = compare_runs([0.91, 0.93, 0.92], [0.20, 0.25, 0.15])
    >>> round(out["difference"], 3), round(out["standard_error"], 3), out["beyond_spread"]
    (0.72, 0.029, True)
    >>> compare_runs([0.30, 0.25], [0.40, 0.50], higher_is_better=False)["attention_better"]
    True
    """
    for name, values in (("with_attention", with_attention), ("without", without)):
        if len(values) < 2 or not all(isinstance(v, (int, float)) for v in values):
            raise ValueError(f"{name} must hold a number per seed, two or more, got {values!r}")
    difference = statistics.fmean(with_attention) - statistics.fmean(without)
    se = math.sqrt(sum(statistics.variance(v) / len(v) for v in (with_attention, without)))
    return {
        "difference": difference,
        "standard_error": se,
        "beyond_spread": abs(difference) > 2 * se,
        "attention_better": difference != 0 and (difference > 0) == higher_is_better,
    }

"""Seeding, device choice, a plain, readable training loop, and a cache of trained weights.

The loop is deliberately a single function you can read top to bottom: draw a batch, compute
the loss, step the optimiser, and every ``eval_every`` steps evaluate with ``model.eval()``
under ``torch.no_grad()``. It records everything in a history dict of lists.
:func:`course_utils.data.shuffled_batches` feeds it from any dataset with a ``batch(rows)``
method.

:func:`train_or_load` wraps any training code with a cache: a notebook rerun after a kernel
restart loads its trained weights in seconds instead of training again, and ``make test``
trains each model once per run (the browser tests load what the notebook run trained).

Losses and schedules that :func:`fit` takes: the label-smoothed cross-entropy and the
Transformer paper's warm-up learning rate (notebook 06).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import os
import random
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from course_utils._validate import check_per_step, check_positive

if TYPE_CHECKING:
    from course_utils.data import Batch


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) in one call."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def get_device(prefer: str | None = None) -> torch.device:
    """CUDA when present, else CPU. ``prefer="cpu"`` forces the CPU."""
    if prefer is not None:
        return torch.device(prefer)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def count_parameters(model: torch.nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def fit(
    model: torch.nn.Module,
    batches: Iterator,
    loss_fn: Callable[[torch.nn.Module, object], torch.Tensor],
    steps: int,
    lr: float = 3e-3,
    eval_fn: Callable[[torch.nn.Module], dict[str, float]] | None = None,
    eval_every: int = 100,
    clip_grad: float | None = 1.0,
    optimizer: torch.optim.Optimizer | None = None,
    device: torch.device | str | None = None,
    desc: str = "training",
    progress: bool = True,
    lr_schedule: Callable[[int], float] | None = None,
    eval_at_start: bool = False,
) -> dict[str, list[float]]:
    """Train ``model`` for ``steps`` optimiser steps and return its history.

    ``batches`` yields batches forever (e.g. :func:`course_utils.data.infinite_batches`);
    each batch must have a ``.to(device)`` method. ``loss_fn(model, batch)`` returns a scalar
    loss; ``eval_fn(model)`` returns a dict of metrics, called every ``eval_every`` steps
    and after the last step, with the model in eval mode and gradients off.

    ``lr_schedule(step)``, when given, multiplies the learning rate at each step (1 to
    ``steps``), e.g. ``lambda step: 1 - (step - 1) / steps`` decays it linearly towards 0.

    The history has ``step`` and ``train_loss`` (mean over the steps since the last
    evaluation) plus one list per metric that ``eval_fn`` returns; ``eval_at_start`` records
    step 0 too (``train_loss`` NaN), before any training. ``clip_grad=None`` turns clipping off.
    """
    check_positive("steps", steps)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=lr)
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    history: dict[str, list[float]] = {"step": [], "train_loss": []}
    running, count = 0.0, 0

    def record(step: int, train_loss: float) -> None:
        history["step"].append(step)
        history["train_loss"].append(train_loss)
        if eval_fn is not None:
            model.eval()
            with torch.no_grad():
                metrics = eval_fn(model)
            for name, value in metrics.items():
                history.setdefault(name, []).append(float(value))

    if eval_at_start:
        record(0, float("nan"))

    bar = tqdm(range(1, steps + 1), desc=desc, disable=not progress, leave=False)
    for step in bar:
        model.train()
        batch = next(batches).to(device)
        loss = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip_grad is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
        if lr_schedule is not None:
            for group, base_lr in zip(optimizer.param_groups, base_lrs, strict=True):
                group["lr"] = base_lr * lr_schedule(step)
        optimizer.step()
        running, count = running + loss.item(), count + 1

        if step % eval_every == 0 or step == steps:
            record(step, running / count)
            running, count = 0.0, 0
            bar.set_postfix(loss=f"{history['train_loss'][-1]:.3f}")
    model.eval()
    return history


# --------------------------------------------------------------------------------------
# A cache of trained weights
# --------------------------------------------------------------------------------------
CACHE_ENV_VAR = "COURSE_CACHE_DIR"


def cache_dir() -> Path:
    """Where trained weights are kept: ``$COURSE_CACHE_DIR`` if set (``make test`` points it
    at a fresh folder per run), else ``attention-from-scratch/models`` in the user's cache
    folder (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attention-from-scratch" / "models"


@dataclass
class TrainingRun:
    """What :func:`train_or_load` returns: the training code's result (usually the history
    from :func:`fit`), how long the training took when it ran, and whether it was loaded."""

    history: dict
    seconds: float
    from_cache: bool
    path: Path


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _source_of(module: types.ModuleType) -> str:
    """The digest of a module's source (its name where the source cannot be read)."""
    try:
        return _digest(inspect.getsource(module).encode())
    except (OSError, TypeError):
        return f"no source: {module.__name__}"


def cache_key(model: torch.nn.Module, config: dict, modules: Sequence = ()) -> str:
    """A digest of everything that determines a training result.

    It covers ``config`` (JSON-serialisable: data and model settings, steps, seed, ...), the
    model's structure (its ``repr``) and initial weights (so the seed used to build it), the
    source of the modules that define the model and the training loop plus any in
    ``modules`` (modules or dotted names, e.g. the data generator's ``"course_utils.data"``), the torch version, the device and the number of torch threads (which
    change float rounding, hence the trained weights). Change any of them and the key
    changes.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    try:
        config_text = json.dumps(config, sort_keys=True)
    except TypeError as error:
        raise TypeError(
            f"config must hold only JSON values (numbers, strings, ...): {error}"
        ) from None
    involved = {sys.modules[__name__]}
    for part in model.modules():  # the model and every layer inside it
        for cls in type(part).__mro__:
            module = sys.modules.get(cls.__module__)
            if module is not None and cls.__module__.startswith("course_utils"):
                involved.add(module)
    for module in modules:
        if isinstance(module, str):  # a dotted name such as "course_utils.data"
            module = importlib.import_module(module)
        if not isinstance(module, types.ModuleType):
            raise TypeError(f"modules must hold modules or their names, got {module!r}")
        involved.add(module)
    weights = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        weights.update(name.encode())
        weights.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())
    key = {
        "config": config_text,
        "model": repr(model),
        "initial_weights": weights.hexdigest(),
        "sources": {m.__name__: _source_of(m) for m in sorted(involved, key=lambda m: m.__name__)},
        "torch": torch.__version__,
        "device": first.device.type
        if (first := next(model.parameters(), None)) is not None
        else "",
        "threads": torch.get_num_threads(),
    }
    return _digest(json.dumps(key, sort_keys=True).encode())[:32]


def train_or_load(
    model: torch.nn.Module,
    train: Callable[[], dict],
    config: dict,
    *,
    modules: Sequence = (),
    retrain: bool = False,
    folder: str | os.PathLike | None = None,
    name: str = "model",
) -> TrainingRun:
    """Train ``model`` by calling ``train()``, or load the weights a previous run cached.

    ``model`` is freshly built and seeded; ``train()`` trains it in place and returns its
    history (a dict of lists of numbers, as :func:`fit` does). The cache entry is keyed by
    :func:`cache_key`. On a hit the weights and the history are loaded with
    ``torch.load(..., weights_only=True)`` and ``train`` is not called; ``retrain=True``
    always trains (and refreshes the entry). A file that cannot be read (truncated,
    corrupt, or for another model) is never used: a warning says so and the model is
    trained again over it. ``folder`` defaults to :func:`cache_dir`.
    """
    if not callable(train):
        raise TypeError(f"train must be a function that trains the model, got {type(train)}")
    key = cache_key(model, config, modules)
    path = Path(folder if folder is not None else cache_dir()) / f"{name}-{key}.pt"
    if path.exists() and not retrain:
        try:
            entry = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(entry, dict) or entry.get("key") != key:
                raise ValueError("the file holds another model's entry")
            model.load_state_dict(entry["state_dict"])
        except Exception as error:  # any unreadable file is trained over, never used
            warnings.warn(
                f"{name}: the cached weights in {path} could not be used ({error}); training again",
                stacklevel=2,
            )
        else:
            model.eval()
            print(
                f"{name}: loaded the weights trained earlier (in {entry['seconds']:.0f} s) from "
                f"the cache {path.parent}; set RETRAIN = True to train again"
            )
            return TrainingRun(entry["history"], float(entry["seconds"]), True, path)
    start = time.perf_counter()
    history = train()
    seconds = time.perf_counter() - start
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    entry = {"key": key, "state_dict": state, "history": history, "seconds": seconds}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    torch.save(entry, partial)
    os.replace(partial, path)  # atomic: a reader never sees half a file
    return TrainingRun(history, seconds, False, path)


# ---------------------------------------------------------------------------------------
# Losses (notebooks 01, 06) and learning-rate schedules (notebook 06)
# ---------------------------------------------------------------------------------------
def sequence_loss(
    logits: torch.Tensor, targets: torch.Tensor, pad_id: int, smoothing: float = 0.0
) -> torch.Tensor:
    """Mean cross-entropy over the non-pad target positions; ``logits (B, T, V), targets
    (B, T) -> scalar``. With ``smoothing``, against ``(1 - smoothing) * one_hot + smoothing /
    V`` (label smoothing, notebook 06). Equals ``F.cross_entropy(..., ignore_index=pad_id,
    label_smoothing=smoothing)``.

    >>> logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    >>> round(sequence_loss(logits, torch.tensor([[0, 1]]), pad_id=1).item(), 4)
    0.2395
    """
    check_per_step("logits", logits, "targets", targets, last="V")
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)):
        raise TypeError(f"smoothing must be a float, got {smoothing!r}")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    B, T, V = logits.shape
    return F.cross_entropy(
        logits.reshape(B * T, V),  # (B, T, V) -> (B*T, V)
        targets.reshape(B * T),  # (B, T) -> (B*T,)
        ignore_index=pad_id,
        label_smoothing=smoothing,
    )


def seq2seq_loss(model: torch.nn.Module, batch: Batch, smoothing: float = 0.0) -> torch.Tensor:
    """``loss_fn`` for :func:`fit`: the teacher-forced :func:`sequence_loss` of one batch."""
    logits = model(batch.src, batch.src_len, batch.tgt_in)  # (B, T, V)
    return sequence_loss(logits, batch.tgt_out, model.pad_id, smoothing)


def smoothed_seq2seq_loss(
    smoothing: float = 0.1,
) -> Callable[[torch.nn.Module, Batch], torch.Tensor]:
    """:func:`seq2seq_loss` with label smoothing, as a ``loss_fn`` for :func:`fit`."""
    return functools.partial(seq2seq_loss, smoothing=smoothing)


def noam_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The paper's learning rate: ``factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``.

    Rises linearly for ``warmup_steps`` steps, then falls as ``1 / sqrt(step)``; step 1 is
    the first optimiser step.

    >>> round(noam_rate(4000, d_model=512, warmup_steps=4000), 6)  # the peak
    0.000699
    """
    if step < 1 or warmup_steps < 1 or d_model < 1:
        raise ValueError(
            f"step, warmup_steps and d_model must be positive, got {step}, {warmup_steps}, "
            f"{d_model}"
        )
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def warmup_then_linear(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """An ``lr_schedule`` for :func:`fit`: a linear rise over ``warmup_steps``, then a line
    down to 0 after step ``total_steps`` (notebook 06's schedule, reused in 07).

    >>> schedule = warmup_then_linear(2, 5)
    >>> [round(schedule(step), 2) for step in range(1, 6)]
    [0.5, 1.0, 0.75, 0.5, 0.25]
    """
    check_positive("warmup_steps", warmup_steps)
    check_positive("total_steps", total_steps)
    if warmup_steps > total_steps:
        raise ValueError(
            f"warmup_steps must be at most total_steps, got {warmup_steps} > {total_steps}"
        )

    def factor(step: int) -> float:
        return min(step / warmup_steps, (total_steps - step + 1) / (total_steps - warmup_steps + 1))

    return factor


def noam_optimizer(
    params: Iterable[torch.nn.Parameter], d_model: int, warmup_steps: int, factor: float = 1.0
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam(betas 0.9, 0.98, eps 1e-9) whose learning rate follows :func:`noam_rate`.

    The schedule advances after every ``optimizer.step()`` by itself (a step hook), so the
    optimiser can be handed to :func:`fit` as it is.

    >>> w = torch.nn.Parameter(torch.zeros(2))
    >>> optimizer, _ = noam_optimizer([w], d_model=64, warmup_steps=10)
    >>> for _ in range(3):
    ...     w.grad = torch.ones(2)
    ...     optimizer.step()
    >>> optimizer.param_groups[0]["lr"] == noam_rate(4, 64, 10)  # the rate for the next step
    True
    """
    optimizer = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    # LambdaLR multiplies lr=1.0 by the rate; its counter starts at 0, the rate at step 1.
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: noam_rate(i + 1, d_model, warmup_steps, factor)
    )
    optimizer.register_step_post_hook(lambda *_: scheduler.step())
    return optimizer, scheduler

"""Seeding, device choice and a plain, readable training loop.

The loop is deliberately a single function you can read top to bottom: draw a batch, compute
the loss, step the optimiser, and every ``eval_every`` steps evaluate with ``model.eval()``
under ``torch.no_grad()``. It records everything in a history dict of lists.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm


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
) -> dict[str, list[float]]:
    """Train ``model`` for ``steps`` optimiser steps and return its history.

    ``batches`` yields batches forever (e.g. :func:`course_utils.data.infinite_batches`);
    each batch must have a ``.to(device)`` method. ``loss_fn(model, batch)`` returns a scalar
    loss; ``eval_fn(model)`` returns a dict of metrics, called every ``eval_every`` steps
    and after the last step, with the model in eval mode and gradients off.

    The history has ``step`` and ``train_loss`` (mean over the steps since the last
    evaluation) plus one list per metric that ``eval_fn`` returns.
    """
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=lr)
    history: dict[str, list[float]] = {"step": [], "train_loss": []}
    running, count = 0.0, 0

    bar = tqdm(range(1, steps + 1), desc=desc, disable=not progress, leave=False)
    for step in bar:
        model.train()
        batch = next(batches).to(device)
        loss = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip_grad is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
        optimizer.step()
        running, count = running + loss.item(), count + 1

        if step % eval_every == 0 or step == steps:
            history["step"].append(step)
            history["train_loss"].append(running / count)
            running, count = 0.0, 0
            if eval_fn is not None:
                model.eval()
                with torch.no_grad():
                    metrics = eval_fn(model)
                for name, value in metrics.items():
                    history.setdefault(name, []).append(float(value))
            bar.set_postfix(loss=f"{history['train_loss'][-1]:.3f}")
    model.eval()
    return history

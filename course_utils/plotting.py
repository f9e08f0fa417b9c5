"""Plots the course uses again and again. Each returns its figure and changes no global setting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
import torch


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def _new_axes(ax, figsize):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
        return fig, ax
    return ax.figure, ax


def plot_attention(
    weights,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    xlabel: str = "key position",
    ylabel: str = "query position",
    annot: bool | None = None,
    vmax: float | None = 1.0,
    cmap: str = "rocket_r",
):
    """A heatmap of one ``(Lq, Lk)`` attention matrix with token labels on both axes.

    Row i shows where query i looks: its weights over the keys (columns). ``annot`` writes
    the numbers in the cells (by default when the matrix is at most 8 x 8). ``vmax=1``
    keeps colours comparable between plots; pass ``None`` to stretch to the data.
    """
    w = _to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"weights must be a 2-D (Lq, Lk) matrix, got shape {w.shape}")
    Lq, Lk = w.shape
    for name, labels, n in (("x_labels", x_labels, Lk), ("y_labels", y_labels, Lq)):
        if labels is not None and len(labels) != n:
            raise ValueError(
                f"{name} has {len(labels)} labels for {n} positions (weights {w.shape})"
            )
    if annot is None:
        annot = max(Lq, Lk) <= 8
    fig, ax = _new_axes(ax, figsize=(1.0 + 0.45 * Lk, 0.8 + 0.4 * Lq))
    sns.heatmap(
        w,
        ax=ax,
        vmin=0.0,
        vmax=vmax,
        cmap=cmap,
        square=True,
        annot=annot,
        fmt=".2f",
        annot_kws={"fontsize": 8},
        cbar_kws={"label": "attention weight", "shrink": 0.8},
        xticklabels=list(x_labels) if x_labels is not None else True,
        yticklabels=list(y_labels) if y_labels is not None else True,
    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", labelrotation=90)
    ax.tick_params(axis="y", labelrotation=0)
    ax.set_title(title or "Attention weights")
    fig.tight_layout()
    return fig


def plot_history(
    history: Mapping[str, Sequence[float]],
    metrics: Sequence[str] | None = None,
    title: str | None = None,
):
    """Training loss (left) and evaluation metrics (right) against the step.

    ``history`` is what :func:`course_utils.training.fit` returns; ``metrics`` defaults to
    every list in it other than ``step`` and ``train_loss``.
    """
    if "step" not in history or "train_loss" not in history:
        raise ValueError(f"history needs 'step' and 'train_loss', got keys {sorted(history)}")
    if metrics is None:
        metrics = [k for k in history if k not in ("step", "train_loss")]
    ncols = 2 if metrics else 1
    fig, axes = plt.subplots(1, ncols, figsize=(5 * ncols, 3.5), squeeze=False)
    ax = axes[0, 0]
    ax.plot(history["step"], history["train_loss"], marker=".")
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss")
    ax.set_title("Training loss")
    if metrics:
        ax = axes[0, 1]
        for name in metrics:
            ax.plot(history["step"], history[name], marker=".", label=name)
        ax.set_xlabel("training step")
        ax.set_ylabel("metric")
        ax.set_title("Evaluation")
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_accuracy_by_length(
    curves: Mapping[str, Mapping[int, float]],
    title: str | None = None,
    train_lengths: Sequence[int] | range | None = None,
    ylabel: str = "exact-match accuracy",
    ax=None,
):
    """One line per model: accuracy against input length.

    ``curves`` is ``{label: {length: accuracy}}``. ``train_lengths`` shades the lengths
    seen in training, so extrapolation is visible.
    """
    fig, ax = _new_axes(ax, figsize=(7, 4))
    if train_lengths is not None:
        lo, hi = min(train_lengths), max(train_lengths)
        ax.axvspan(lo - 0.5, hi + 0.5, color="0.92", zorder=0, label="lengths seen in training")
    for label, curve in curves.items():
        lengths = sorted(curve)
        ax.plot(lengths, [curve[n] for n in lengths], marker="o", markersize=3, label=label)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("input length (tokens)")
    ax.set_ylabel(ylabel)
    ax.set_title(title or "Accuracy by input length")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig

"""Plots the course uses again and again. Each returns its figure and changes no global setting."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn  # noqa: F401  (registers the "rocket" colour maps used below)
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

# What the plots take: a tensor (any device, with or without gradients), an array, a list
Array = torch.Tensor | np.ndarray | Sequence


def to_numpy(x: Array) -> np.ndarray:
    """A float NumPy array of ``x``: a tensor is detached and copied to the CPU first.

    Every plot and widget passes its data through it, so each accepts tensors (on any
    device, with or without gradients), NumPy arrays and nested lists alike.

    >>> to_numpy(torch.tensor([[1, 2]]))  # an int tensor becomes float
    array([[1., 2.]], dtype=float32)
    >>> to_numpy([0.5, 1])
    array([0.5, 1. ])
    """
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def _new_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
        return fig, ax
    return ax.figure, ax


def plot_attention(
    weights: Array,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    xlabel: str = "key position",
    ylabel: str = "query position",
    annot: bool | None = None,
    vmax: float | None = 1.0,
    cmap: str = "rocket_r",
    colorbar_label: str = "attention weight",
) -> Figure:
    """A heatmap of one ``(Lq, Lk)`` attention matrix with token labels on both axes.

    Row i shows where query i looks: its weights over the keys (columns). ``annot`` writes
    the numbers in the cells (by default when the matrix is at most 8 x 8). ``vmax=1``
    keeps colours comparable between plots; pass ``None`` to stretch to the data. Rows of
    other distributions (a model's next-token probabilities) take another ``colorbar_label``.
    """
    w = to_numpy(weights)
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
    # seaborn.heatmap's look (cells, colour bar, ticks at the centres, first row on top),
    # drawn with one pcolormesh: seaborn draws the whole figure once per call to decide
    # whether the tick labels overlap, which makes multi-panel figures slow.
    mesh = ax.pcolormesh(w, vmin=0.0, vmax=vmax, cmap=cmap)
    ax.set_xlim(0, Lk)
    ax.set_ylim(Lq, 0)  # row 0 at the top
    ax.set_aspect("equal")
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_xticks(np.arange(Lk) + 0.5, list(x_labels) if x_labels is not None else range(Lk))
    ax.set_yticks(np.arange(Lq) + 0.5, list(y_labels) if y_labels is not None else range(Lq))
    ax.tick_params(length=0)
    fig.colorbar(mesh, ax=ax, label=colorbar_label, shrink=0.8)  # sets mesh.colorbar
    if annot:
        colours = mesh.cmap(mesh.norm(w))  # (Lq, Lk, 4) RGBA of each cell
        luminance = colours[..., :3] @ np.array([0.2126, 0.7152, 0.0722])  # (Lq, Lk)
        for i, j in np.ndindex(Lq, Lk):
            colour = "black" if luminance[i, j] > 0.408 else "white"
            ax.text(
                j + 0.5,
                i + 0.5,
                f"{w[i, j]:.2f}",
                ha="center",
                va="center",
                fontsize=8,
                color=colour,
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
) -> Figure:
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
    ax: Axes | None = None,
) -> Figure:
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


def _check_square(name: str, w: np.ndarray, tokens: Sequence[str], dims: int) -> None:
    if w.ndim != dims or w.shape[-1] != w.shape[-2] or w.shape[-1] != len(tokens):
        raise ValueError(
            f"{name} must be {dims}-D with two last dims (L, L) and L = len(tokens) = "
            f"{len(tokens)}, got shape {w.shape}"
        )


def plot_head_view(
    weights: Array,
    tokens: Sequence[str],
    selected: int | None = None,
    title: str | None = None,
    cmap: str = "rocket_r",
) -> Figure:
    """One head's ``(L, L)`` attention two ways: a heatmap (queries down, keys across) and,
    as in bertviz's head view, lines from each token on the left to the tokens it attends
    to on the right, darker for larger weights. The ``selected`` token's row is framed and
    its lines drawn in colour; the others stay faint grey.
    """
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Rectangle

    w = to_numpy(weights)
    _check_square("weights", w, tokens, 2)
    L = len(tokens)
    if selected is not None and not 0 <= selected < L:
        raise ValueError(f"selected must be a token index in [0, {L}), got {selected}")
    size = max(3.2, 0.28 * L + 1.2)
    fig, (ax_map, ax_lines) = plt.subplots(
        1, 2, figsize=(2 * size + 1.0, size), gridspec_kw={"width_ratios": [1.15, 1]}
    )
    image = ax_map.imshow(w, cmap=cmap, vmin=0.0, vmax=1.0)
    ax_map.set_xticks(range(L), tokens, rotation=90)
    ax_map.set_yticks(range(L), tokens)
    ax_map.set_xlabel("key (attended to)")
    ax_map.set_ylabel("query (attending)")
    fig.colorbar(image, ax=ax_map, shrink=0.8, label="attention weight")
    if selected is not None:
        ax_map.add_patch(
            Rectangle((-0.5, selected - 0.5), L, 1, fill=False, edgecolor="tab:blue", lw=2)
        )

    y = -np.arange(L, dtype=float)  # token 0 at the top
    segments = [[(0.0, y[i]), (1.0, y[j])] for i in range(L) for j in range(L)]
    flat = w.reshape(-1)
    grey = np.zeros((L * L, 4))
    grey[:, :3] = 0.55
    grey[:, 3] = 0.35 * flat
    ax_lines.add_collection(LineCollection(segments, colors=grey, linewidths=1.0))
    if selected is not None:
        row = w[selected]
        blue = np.zeros((L, 4))
        blue[:, :3] = (0.12, 0.47, 0.71)  # tab:blue
        blue[:, 3] = row / max(row.max(), 1e-9)  # strongest line fully opaque
        mine = [[(0.0, y[selected]), (1.0, y[j])] for j in range(L)]
        ax_lines.add_collection(LineCollection(mine, colors=blue, linewidths=1.0 + 3.0 * row))
    for i, tok in enumerate(tokens):
        bold = "bold" if i == selected else "normal"
        ax_lines.text(-0.04, y[i], tok, ha="right", va="center", fontsize=9, fontweight=bold)
        ax_lines.text(1.04, y[i], tok, ha="left", va="center", fontsize=9)
    ax_lines.set_xlim(-0.6, 1.6)
    ax_lines.set_ylim(y[-1] - 0.7, 0.7)
    ax_lines.axis("off")
    ax_lines.set_title("query -> key (line darkness = weight)", fontsize=10)
    fig.suptitle(title or "Attention of one head")
    fig.tight_layout()
    return fig


def plot_model_view(
    attentions: Array,
    tokens: Sequence[str],
    title: str | None = None,
    cmap: str = "rocket_r",
    panel_size: float = 0.95,
) -> Figure:
    """Every head of every layer as a small heatmap: ``attentions (num_layers, H, L, L)``.

    Rows are layers (bottom layer at the top), columns are heads; each panel has queries
    down and keys across, like :func:`plot_head_view`'s heatmap, and all share one colour
    bar (0 to 1). Token labels sit on the outer panels (keys under the bottom row, queries
    left of the first column), as large as a panel of ``panel_size`` inches allows; where a
    label would be under 7 points, every second (third, ...) token is labelled (a figure
    this wide is shown shrunk in a notebook, and a smaller label cannot be read there). Drawn with
    ``imshow`` so that the 72 panels of a 6 x 12 model draw in about a second.
    """
    A = to_numpy(attentions)
    _check_square("attentions", A, tokens, 4)
    num_layers, H, L = A.shape[0], A.shape[1], len(tokens)
    per_token = 0.9 * 72 * panel_size / L  # points of panel height per token
    stride = max(1, math.ceil(7.0 / per_token))  # label every stride-th token, at >= 7 pt
    fontsize = min(8.0, per_token * stride)
    label = max(len(t) for t in tokens) * 0.6 * fontsize / 72 + 0.1  # inches of the longest
    # Margins in inches: layer names and query labels left, key labels below, title above,
    # the colour bar right; the panels keep their size whatever the labels need.
    left, right, bottom, top = 0.35 + label, 0.9, 0.15 + label, 0.6
    width = left + panel_size * (H + 0.08 * (H - 1)) + right
    height = bottom + panel_size * (num_layers + 0.08 * (num_layers - 1)) + top
    fig, axes = plt.subplots(num_layers, H, figsize=(width, height), squeeze=False)
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        bottom=bottom / height,
        top=1 - top / height,
        wspace=0.08,
        hspace=0.08,
    )
    shown = list(range(0, L, stride))
    for n in range(num_layers):
        for h in range(H):
            ax = axes[n, h]
            image = ax.imshow(A[n, h], cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
            # ticks on the outer panels only: 72 panels of labels would draw slowly
            bottom_row, first_column = n == num_layers - 1, h == 0
            ax.set_xticks(shown if bottom_row else [])
            ax.set_yticks(shown if first_column else [])
            if bottom_row:
                ax.set_xticklabels([tokens[i] for i in shown], rotation=90, fontsize=fontsize)
                ax.tick_params(axis="x", length=0, pad=1)
            if first_column:
                ax.set_yticklabels([tokens[i] for i in shown], fontsize=fontsize)
                ax.tick_params(axis="y", length=0, pad=1)
            if n == 0:
                ax.set_title(f"head {h + 1}", fontsize=8)
            if h == 0:
                ax.set_ylabel(f"layer {n + 1}", fontsize=8)
    colour_bar = fig.add_axes(
        (1 - (right - 0.15) / width, bottom / height, 0.12 / width, 1 - (bottom + top) / height)
    )
    fig.colorbar(image, cax=colour_bar, label="attention weight")
    fig.suptitle(
        title or f"All {num_layers} x {H} heads ({len(tokens)} tokens; queries down, keys across)"
    )
    return fig


def plot_pointer_attention(
    weights: Array,
    src_tokens: Sequence[str],
    out_tokens: Sequence[str],
    p_gen: Array,
    title: str | None = None,
) -> Figure:
    """A pointer-generator's attention ``weights`` (T, S), one column per output token and
    the source down the rows, under a strip of its ``p_gen`` (T,): a dark cell in the strip
    means that column's word was mostly copied from where the column looks."""
    w, p = to_numpy(weights), to_numpy(p_gen)
    if w.shape != (len(out_tokens), len(src_tokens)) or p.shape != (len(out_tokens),):
        raise ValueError(
            f"weights must be (T, S) = ({len(out_tokens)}, {len(src_tokens)}) and p_gen "
            f"({len(out_tokens)},) for the given tokens, got {w.shape} and {p.shape}"
        )
    T, S = w.shape
    fig, (top, ax) = plt.subplots(
        2, 1, figsize=(2.5 + 0.3 * T, 1.6 + 0.14 * S), sharex=True,
        gridspec_kw={"height_ratios": [1.2, max(S / 2.2, 2)]},
    )  # fmt: skip
    strip = top.pcolormesh(p[None, :], vmin=0, vmax=1, cmap="viridis")
    top.set_yticks([0.5], ["p_gen"])
    top.tick_params(length=0, labelbottom=False)
    top.set_title(title or "Where each output word looked, and whether it was generated")
    fig.colorbar(strip, ax=top, label="p_gen", shrink=0.9)
    plot_attention(w.T, out_tokens, src_tokens, ax=ax, annot=False, vmax=None,
                   xlabel="output word (greedy)", ylabel="source token")  # fmt: skip
    ax.set_title("")  # the strip above carries the figure's title
    ax.set_aspect("auto")
    ax.tick_params(axis="y", labelsize=6)
    return fig


def plot_coverage(
    coverages: Mapping[str, Array], src_tokens: Sequence[str], title: str | None = None
) -> Figure:
    """Each model's coverage ``c^t`` (T+1, S), the attention summed over the steps before
    each output step, one panel per model; above 1, a token was attended to more than once."""
    arrays = {name: to_numpy(c) for name, c in coverages.items()}
    bad = {n: c.shape for n, c in arrays.items() if c.ndim != 2 or c.shape[1] != len(src_tokens)}
    if not arrays or bad:
        raise ValueError(f"coverages must map names to (T+1, S={len(src_tokens)}), got {bad}")
    top = max(1.0, max(float(c.max()) for c in arrays.values()))
    n = len(arrays)
    fig, axes = plt.subplots(n, 1, figsize=(2 + 0.13 * len(src_tokens), 2.4 * n), squeeze=False)
    for ax, (name, c) in zip(axes[:, 0], arrays.items(), strict=True):
        mesh = ax.pcolormesh(c, vmin=0, vmax=top, cmap="magma_r")
        ax.set_ylim(c.shape[0], 0)
        ax.set_xticks(np.arange(len(src_tokens)) + 0.5, list(src_tokens), rotation=90, fontsize=6)
        ax.set_ylabel("output step")
        ax.set_title(f"{name}: coverage (attention summed over earlier steps)")
        fig.colorbar(mesh, ax=ax, label="coverage")
    axes[-1, 0].set_xlabel("source token")
    fig.suptitle(title or "Coverage before each output step")
    fig.tight_layout()
    return fig


def plot_attention_overlay(
    image: Array,
    weights: Array,
    words: Sequence[str],
    boxes: Sequence[tuple[int, int, int, int] | None] | None = None,
    title: str | None = None,
    ncols: int = 6,
    panel_size: float = 2.3,
) -> Figure:
    """One panel per word: the grey ``image`` (H, W) with where the model looked drawn over it.

    ``weights`` (T, G, G) holds one attention grid per word; each is stretched over the image
    (bilinear) and coloured from 0 to its own maximum, so every panel shows its own peak.
    ``boxes`` may give, per word, the box ``(top, left, bottom, right)`` of what the word
    names (drawn as a green frame) or ``None``. Panels are ``panel_size`` inches wide, at
    most ``ncols`` to a row.
    """
    img, w = to_numpy(image), to_numpy(weights)
    if img.ndim != 2:
        raise ValueError(f"image must be (H, W), got shape {img.shape}")
    if w.ndim != 3 or w.shape[1] != w.shape[2] or w.shape[0] != len(words):
        raise ValueError(
            f"weights must be (T, G, G) with T = len(words) = {len(words)}, got shape {w.shape}"
        )
    if boxes is not None and len(boxes) != len(words):
        raise ValueError(f"boxes must hold one entry per word ({len(words)}), got {len(boxes)}")
    H, W = img.shape
    cols = min(ncols, len(words))
    rows = math.ceil(len(words) / cols)
    size = (panel_size * cols, (panel_size + 0.2) * rows + 0.4)
    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False)
    for k, ax in enumerate(axes.flat):
        ax.set_axis_off()
        if k >= len(words):
            continue
        ax.imshow(img, cmap="gray_r", vmin=0, vmax=1)
        extent = (-0.5, W - 0.5, H - 0.5, -0.5)  # the grid covers the image exactly
        ax.imshow(w[k], cmap="inferno", alpha=0.55, extent=extent, interpolation="bilinear")
        if boxes is not None and boxes[k] is not None:
            top, left, bottom, right = boxes[k]
            frame = plt.Rectangle((left - 0.5, top - 0.5), right - left, bottom - top)
            frame.set(fill=False, edgecolor="lime", linewidth=1.5)
            ax.add_patch(frame)
        ax.set_title(f"{k + 1}. {words[k]}  (peak {w[k].max():.2f})", fontsize=9)
    fig.suptitle(title or "Where the model looked before each word")
    fig.tight_layout()
    return fig

"""How well attention lines up with where it should look: alignments and their scores.

- :func:`alignment_accuracy`: on a task whose right source position is known at every
  output step (reversal: step ``t`` of an input of length ``n`` reads ``n - 1 - t``), the
  share of steps whose most-attended position is that one.
- An *alignment* is a set of ``(source index, target index)`` links.
  :func:`attention_to_alignment` turns a ``(T, S)`` attention matrix into one (each target
  token links to the source token it attends to most), and :func:`alignment_error_rate`
  compares alignments with gold ones (Och & Ney, 2003): with predicted links ``A``, sure gold
  links ``S`` and possible gold links ``P`` (``S`` is a subset of ``P``)::

      AER = 1 - (|A & S| + |A & P|) / (|A| + |S|)

  0 is perfect, 1 shares no link with the gold alignment.
- :func:`diagonal_alignment` and :func:`random_alignment` are the baselines a learned
  alignment must beat.
- Over an image, attention is a ``(G, G)`` grid of weights over cells. :func:`region_hits`
  says, per word, whether the peak cell's centre lies inside the box of the object the word
  names ("pointing"); :func:`region_chance` is each box's share of the cell centres, the
  hit rate of a peak dropped on a random cell.
- Over time (speech), attention should move forward. :func:`peak_progress` is the Spearman
  rank correlation between the decoding step and the frame of its attention peak, averaged
  over examples: 1 for a peak that moves forward at every step, 0 for a peak that never
  moves (and, on average, for peaks dropped on random frames), -1 for one that runs
  backwards. :func:`monotonic_share` is the share of decoding steps whose peak does not move
  backwards and :func:`monotonic_chance` that share for random peaks; a peak that never
  moves scores a perfect 1 on it, so it cannot tell progress from a frozen attention.

Shapes follow the legend in :mod:`course_utils`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

import torch

from course_utils._validate import check_lengths, check_per_step, check_positive, check_tensor

Alignment = set[tuple[int, int]]


# ---------------------------------------------------------------------------------------
# Attention against a known position per step
# ---------------------------------------------------------------------------------------
def alignment_accuracy(weights: torch.Tensor, gold: torch.Tensor) -> float:
    """Share of decoding steps whose most-attended source position is the gold one.

    ``weights`` (B, T, S) are attention weights; ``gold`` (B, T) long holds the source
    position each output step should look at, or ``-1`` for steps that do not count (e.g.
    ``<eos>`` and padding). For the reverse task, step ``t`` of an input of length ``n``
    should look at position ``n - 1 - t``.

    >>> w = torch.tensor([[[0.1, 0.9], [0.8, 0.2], [0.5, 0.5]]])  # (1, 3, 2)
    >>> alignment_accuracy(w, torch.tensor([[1, 1, -1]]))  # step 0 right, step 1 wrong
    0.5
    """
    check_per_step("weights", weights, "gold", gold, last="S")
    counted = gold >= 0  # (B, T)
    if not bool(counted.any()):
        raise ValueError("gold marks no step to count (every entry is -1)")
    hits = (weights.argmax(dim=-1) == gold) & counted  # (B, T)
    return hits.sum().item() / counted.sum().item()


# ---------------------------------------------------------------------------------------
# Alignments
# ---------------------------------------------------------------------------------------
def _as_links(name: str, links: object) -> Alignment:
    if not isinstance(links, Iterable) or isinstance(links, (str, torch.Tensor)):
        raise TypeError(
            f"{name} must be a set of (source, target) index pairs, got {type(links).__name__}"
        )
    out = set()
    for link in links:
        if len(link) != 2:
            raise ValueError(f"{name} must hold (source, target) pairs, got {link!r}")
        out.add((int(link[0]), int(link[1])))
    return out


def alignment_error_rate(
    predicted: Sequence[Iterable[tuple[int, int]]],
    sure: Sequence[Iterable[tuple[int, int]]],
    possible: Sequence[Iterable[tuple[int, int]]] | None = None,
) -> float:
    """Och & Ney's AER over a corpus: one alignment per sentence in each list.

    Counts are summed over all sentences before dividing. ``possible`` defaults to ``sure``
    (then AER is ``1 - F1`` of the links); each sentence's sure links are added to its
    possible ones, as the definition requires ``S`` within ``P``.

    >>> alignment_error_rate([{(0, 0), (1, 1)}], [{(0, 0), (2, 1)}])  # 1 - 2 * 1 / 4
    0.5
    >>> alignment_error_rate([{(0, 0), (1, 1)}], [{(0, 0)}], [{(1, 1)}])  # 1 - (1 + 2) / 3
    0.0
    """
    if possible is None:
        possible = sure
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(
            f"predicted, sure and possible need one alignment per sentence, got "
            f"{len(predicted)}, {len(sure)} and {len(possible)}"
        )
    a_s = a_p = n_a = n_s = 0
    for a, s, p in zip(predicted, sure, possible, strict=True):
        a, s = _as_links("predicted", a), _as_links("sure", s)
        p = _as_links("possible", p) | s
        a_s, a_p, n_a, n_s = a_s + len(a & s), a_p + len(a & p), n_a + len(a), n_s + len(s)
    if n_a + n_s == 0:
        raise ValueError("predicted and sure are both empty: AER is undefined")
    return 1.0 - (a_s + a_p) / (n_a + n_s)


def attention_to_alignment(weights: torch.Tensor) -> Alignment:
    """A ``(T, S)`` attention matrix -> links ``{(argmax source index, t)}``, one per row.

    >>> sorted(attention_to_alignment(torch.tensor([[0.1, 0.9], [0.7, 0.3], [0.2, 0.8]])))
    [(0, 1), (1, 0), (1, 2)]
    """
    if not isinstance(weights, torch.Tensor) or weights.dim() != 2:
        raise ValueError(
            f"weights must be a 2-D tensor (T, S), got {type(weights).__name__} of shape "
            f"{tuple(getattr(weights, 'shape', ()))}"
        )
    return {(int(s), t) for t, s in enumerate(weights.argmax(dim=-1).tolist())}


def diagonal_alignment(src_len: int, tgt_len: int) -> Alignment:
    """Target token ``t`` linked to source token ``floor((t + 0.5) * S / T)``, the diagonal.

    The alignment a model that ignored word order would guess.

    >>> sorted(diagonal_alignment(4, 2))
    [(1, 0), (3, 1)]
    """
    if src_len < 1 or tgt_len < 1:
        raise ValueError(f"src_len and tgt_len must be positive, got {src_len} and {tgt_len}")
    return {(min(src_len - 1, int((t + 0.5) * src_len / tgt_len)), t) for t in range(tgt_len)}


def random_alignment(src_len: int, tgt_len: int, rng: random.Random) -> Alignment:
    """Each target token linked to a uniformly random source token (chance level).

    >>> len(random_alignment(5, 3, random.Random(0)))
    3
    """
    if src_len < 1 or tgt_len < 1:
        raise ValueError(f"src_len and tgt_len must be positive, got {src_len} and {tgt_len}")
    return {(rng.randrange(src_len), t) for t in range(tgt_len)}


# ---------------------------------------------------------------------------------------
# Attention over an image grid against boxes
# ---------------------------------------------------------------------------------------
Box = tuple[int, int, int, int]  # (top, left, bottom, right) in pixels, bottom and right excluded


def _cell_centres(grid: int, image_size: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pixel coordinates (rows (G,), columns (G,)) of the centres of a G x G grid's cells."""
    height, width = image_size
    steps = torch.arange(grid) + 0.5
    return steps * height / grid, steps * width / grid


def _check_boxes(boxes: Sequence[Box], n: int) -> torch.Tensor:
    out = torch.as_tensor([list(b) for b in boxes], dtype=torch.float32)
    if out.shape != (n, 4):
        raise ValueError(
            f"boxes must hold {n} (top, left, bottom, right) boxes, got shape {tuple(out.shape)}"
        )
    return out


def region_hits(
    weights: torch.Tensor, boxes: Sequence[Box], image_size: tuple[int, int]
) -> torch.Tensor:
    """Per row of ``weights`` (N, G, G), whether its peak cell's centre lies inside its box.

    ``boxes`` holds N boxes ``(top, left, bottom, right)`` in the pixels of an image of
    ``image_size`` = (H, W), which the grid covers evenly. Returns bool (N,).

    >>> w = torch.zeros(2, 2, 2)
    >>> w[0, 1, 0] = w[1, 0, 0] = 1.0  # peaks: bottom-left cell, then top-left cell
    >>> region_hits(w, [(4, 0, 8, 4), (4, 0, 8, 4)], (8, 8))  # the box is the bottom-left quarter
    tensor([ True, False])
    """
    check_tensor("weights", weights, dims=3)
    N, G = weights.shape[0], weights.shape[1]
    if weights.shape[2] != G:
        raise ValueError(f"weights must be (N, G, G), got shape {tuple(weights.shape)}")
    b = _check_boxes(boxes, N)  # (N, 4)
    rows, cols = _cell_centres(G, image_size)
    peak = weights.reshape(N, G * G).argmax(dim=-1)  # (N,)
    y, x = rows[peak // G], cols[peak % G]  # (N,), (N,)
    return (b[:, 0] <= y) & (y < b[:, 2]) & (b[:, 1] <= x) & (x < b[:, 3])


def region_chance(boxes: Sequence[Box], grid: int, image_size: tuple[int, int]) -> torch.Tensor:
    """Each box's share of the ``grid`` x ``grid`` cell centres: (N,), the chance that a peak
    on a uniformly random cell falls inside it.

    >>> region_chance([(4, 0, 8, 4), (0, 0, 8, 8)], 2, (8, 8))
    tensor([0.2500, 1.0000])
    """
    check_positive("grid", grid)
    b = _check_boxes(boxes, len(boxes))  # (N, 4)
    rows, cols = _cell_centres(grid, image_size)
    inside_rows = (b[:, None, 0] <= rows) & (rows < b[:, None, 2])  # (N, G)
    inside_cols = (b[:, None, 1] <= cols) & (cols < b[:, None, 3])  # (N, G)
    return inside_rows.float().mean(dim=1) * inside_cols.float().mean(dim=1)


# ---------------------------------------------------------------------------------------
# Attention over time: does its peak move forward?
# ---------------------------------------------------------------------------------------
def monotonic_share(weights: torch.Tensor, steps: torch.Tensor) -> float:
    """The share of decoding steps ``t >= 1`` whose most-attended frame is not before the
    previous step's, over every example: ``weights`` (B, T, S), ``steps`` (B,) how many rows
    of each example are real (at least 2 for it to count).

    >>> w = torch.eye(3)[[0, 2, 1, 1]].unsqueeze(0)  # peaks at frames 0, 2, 1, 1
    >>> monotonic_share(w, torch.tensor([4]))  # 0 -> 2 forward, 2 -> 1 back, 1 -> 1 stays
    0.6666666666666666
    """
    check_tensor("weights", weights, dims=3)
    check_lengths("steps", steps, weights.shape[0], weights.shape[1], low=0)
    peaks = weights.argmax(dim=-1)  # (B, T, S) -> (B, T)
    forward = peaks[:, 1:] >= peaks[:, :-1]  # (B, T - 1)
    counted = torch.arange(1, weights.shape[1])[None, :] < steps[:, None].cpu()  # (B, T - 1)
    if not bool(counted.any()):
        raise ValueError("no example has two decoding steps to compare")
    return forward.cpu()[counted].double().mean().item()


def monotonic_chance(frames: torch.Tensor, steps: torch.Tensor) -> float:
    """What :func:`monotonic_share` gives when every peak is a uniformly random frame:
    two independent peaks over ``S`` frames satisfy ``later >= earlier`` with probability
    ``(S + 1) / (2 S)``, averaged over the counted steps. ``frames`` (B,) the frames each
    example attends over, ``steps`` (B,) its decoding steps.

    >>> monotonic_chance(torch.tensor([4]), torch.tensor([10]))
    0.625
    """
    check_tensor("frames", frames, dims=1)
    check_tensor("steps", steps, dims=1)
    if frames.shape != steps.shape or int(frames.min()) < 1:
        raise ValueError(
            f"frames and steps must be (B,) with frames >= 1, got {tuple(frames.shape)}, "
            f"{tuple(steps.shape)} and frames {frames.tolist()}"
        )
    pairs = (steps - 1).clamp(min=0).double()  # steps t >= 1 compare with t - 1
    if float(pairs.sum()) == 0:
        raise ValueError("no example has two decoding steps to compare")
    per_step = (frames.double() + 1) / (2 * frames.double())
    return float((per_step * pairs).sum() / pairs.sum())


def _average_ranks(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Ranks 1..n of each row's real entries, ties given their average rank: ``x`` (B, T)
    and ``real`` bool (B, T) -> (B, T) float64, 0 at the entries that are not real."""
    x = x.double()
    real_j = real[:, None, :]  # (B, 1, T): compare with real entries only
    below = ((x[:, None, :] < x[:, :, None]) & real_j).sum(-1)  # (B, T, T) -> (B, T)
    equal = ((x[:, None, :] == x[:, :, None]) & real_j).sum(-1)  # itself included
    return (below + (equal + 1) / 2).double() * real


def peak_progress_per_example(weights: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Each example's Spearman rank correlation between the decoding step ``t`` and the
    frame its attention peaks on, over its first ``steps[b]`` rows: ``weights`` (B, T, S),
    ``steps`` (B,) -> float64 (B,). A peak that never moves has no rank order to correlate
    and scores 0 (no progress); an example with fewer than 2 steps gets NaN.

    >>> w = torch.eye(4)[torch.tensor([[0, 1, 2, 3], [1, 1, 1, 1], [3, 2, 2, 0]])]  # (3, 4, 4)
    >>> peak_progress_per_example(w, torch.tensor([4, 4, 4]))
    tensor([ 1.0000,  0.0000, -0.9487], dtype=torch.float64)
    """
    check_tensor("weights", weights, dims=3)
    B, T, _ = weights.shape
    check_lengths("steps", steps, B, T, low=0)
    peaks = weights.argmax(dim=-1).cpu()  # (B, T, S) -> (B, T)
    real = torch.arange(T)[None, :] < steps.cpu()[:, None]  # (B, T)
    n = real.sum(-1).double()  # (B,)
    ranks = _average_ranks(peaks, real)  # (B, T)
    t = (torch.arange(T, dtype=torch.float64)[None, :] + 1) * real  # the step's own rank
    mean_rank = (n + 1) / 2  # (B,), the same for both variables
    dt, dp = (t - mean_rank[:, None]) * real, (ranks - mean_rank[:, None]) * real
    cov, var_t, var_p = (dt * dp).sum(-1), (dt * dt).sum(-1), (dp * dp).sum(-1)
    rho = torch.where(var_p > 0, cov / (var_t * var_p).clamp(min=1e-300).sqrt(), 0.0)
    return torch.where(n >= 2, rho, torch.nan)


def peak_progress(weights: torch.Tensor, steps: torch.Tensor) -> float:
    """How steadily the attention peak moves forward: :func:`peak_progress_per_example`
    averaged over the examples with at least 2 steps. 1 for a peak that moves forward at
    every step, 0 for one that never moves, -1 for one that runs backwards at every step;
    peaks dropped on random frames score 0 on average (step order and peak order are then
    independent).

    >>> diagonal = torch.eye(5).unsqueeze(0)  # (1, 5, 5): step t reads frame t
    >>> frozen = torch.eye(5)[[2, 2, 2, 2, 2]].unsqueeze(0)  # always frame 2
    >>> peak_progress(diagonal, torch.tensor([5])), peak_progress(frozen, torch.tensor([5]))
    (1.0, 0.0)
    >>> peak_progress(diagonal.flip(1), torch.tensor([5]))  # reversed: frame 4, 3, ..., 0
    -1.0
    """
    rho = peak_progress_per_example(weights, steps)
    counted = ~torch.isnan(rho)
    if not bool(counted.any()):
        raise ValueError("no example has two decoding steps to compare")
    return rho[counted].mean().item()

"""Checkers for the exercises of notebook 09 (image captioning).

``check_gated_grid_read`` compares one step of Show, Attend and Tell's look at the image
(additive attention over the grid cells, then the gate ``beta``) with
``attention.attend`` around an ``attention.AdditiveScore`` holding the given
matrices; ``check_caption_loss`` compares the training loss (cross-entropy over the real
steps plus ``lam`` times the mean doubly stochastic penalty), computed from a small spatial
captioner's logits and weights, with ``apps.captioning.caption_loss`` on the same model and
batch; ``check_peak_in_box`` compares whether an
attention grid's peak falls inside a box with ``alignment.region_hits``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course_utils import alignment, attention
from course_utils.apps import captioning
from course_utils.exercises import additive_score_from, check_function, seeded


def _gated_read_reference(
    hidden: Tensor,
    features: Tensor,
    W_q: Tensor,
    W_k: Tensor,
    v: Tensor,
    w_beta: Tensor,
    b_beta: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    with torch.no_grad():
        context, weights = attention.attend(hidden, features, additive_score_from(W_q, W_k, v))
    beta = torch.sigmoid(hidden @ w_beta + b_beta)  # (B,)
    return beta[:, None] * context, weights, beta


def check_gated_grid_read(fn: Callable) -> None:
    """Check ``gated_read(hidden, features, W_q, W_k, v, w_beta, b_beta)`` ->
    ``(context (B, C), weights (B, P), beta (B,))``.

    ``hidden (B, R)``, ``features (B, P, C)``, ``W_q (A, R)``, ``W_k (A, C)``, ``v (A,)``,
    ``w_beta (R,)`` and ``b_beta`` a 0-d tensor.
    """
    g = seeded(90)

    def case(B: int, P: int, C: int, R: int, A: int) -> tuple[Tensor, ...]:
        return (
            torch.randn(B, R, generator=g),
            torch.randn(B, P, C, generator=g),
            torch.randn(A, R, generator=g),
            torch.randn(A, C, generator=g),
            torch.randn(A, generator=g),
            torch.randn(R, generator=g),
            torch.randn((), generator=g),
        )

    check_function(
        fn,
        _gated_read_reference,
        [case(1, 4, 3, 3, 5), case(3, 9, 5, 4, 6), case(2, 36, 8, 6, 4)],
        name="gated_read",
        hint="scores (B, P) = v . tanh(W_q h + W_k f_i) for every cell i (broadcast: "
        "(B, 1, A) + (B, P, A)); weights = softmax over the cells; context = weights @ "
        "features; beta = sigmoid(h . w_beta + b_beta), one number per image; return "
        "(beta[:, None] * context, weights, beta).",
    )


def check_caption_loss(fn: Callable) -> None:
    """Check ``caption_loss(logits (B, T, V), tgt_out (B, T), weights (B, T, P), pad_id, lam)``
    -> a scalar tensor, against ``apps.captioning.caption_loss(model, batch, lam)``."""
    torch.manual_seed(93)
    model = captioning.build_model(True, emb_dim=16, rnn_dim=24, attn_dim=16, channels=8)
    data = captioning.make_splits(6, 1, 1, seed=93)["train"]
    batch = data.batch(list(range(6)))  # captions of 2-4 digits: padded steps in most rows
    with torch.no_grad():
        logits, weights, _ = model.forward_with_attention(batch.images, batch.tgt_in)
        expected = {lam: captioning.caption_loss(model, batch, lam) for lam in (0.0, 1.0, 0.3)}
    check_function(
        fn,
        lambda logits, tgt_out, weights, pad_id, lam: expected[lam],
        [(logits, batch.tgt_out, weights, model.pad_id, lam) for lam in expected],
        name="caption_loss",
        hint="cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=pad_id) "
        "averages over the real words only; the real steps are tgt_out != pad_id; add lam "
        "times the mean over the images of the (B,) penalty of section 3.",
    )


def check_peak_in_box(fn: Callable) -> None:
    """Check ``peak_in_box(weights (G, G), box (top, left, bottom, right), image_size (H, W))``
    -> ``bool``: whether the centre of the most-attended cell lies inside the box."""
    g = seeded(92)
    cases = []
    for G, size in [(6, (48, 48)), (4, (32, 48)), (6, (48, 48)), (3, (30, 30))]:
        top, left = torch.randint(0, size[0] // 2, (2,), generator=g).tolist()
        cases.append((torch.rand(G, G, generator=g), (top, left, top + 15, left + 18), size))
    # by hand: the peak cell (1, 2) of a 4 x 4 grid on 48 x 48 pixels has its centre at (18, 30)
    # and its top-left corner at (12, 24); the box holds the centre but not the corner, and the
    # same box read with rows and columns swapped holds neither
    peak = torch.zeros(4, 4)
    peak[1, 2] = 1.0
    cases += [(peak, (15, 27, 21, 33), (48, 48)), (peak, (9, 21, 15, 27), (48, 48))]

    def reference(weights: Tensor, box: tuple, image_size: tuple) -> bool:
        return bool(alignment.region_hits(weights[None], [box], image_size)[0])

    check_function(
        lambda w, b, s: bool(fn(w, b, s)),
        reference,
        cases,
        name="peak_in_box",
        hint="row, col = divmod(argmax of the flattened grid, G); the cell's centre is at "
        "pixel ((row + 0.5) * H / G, (col + 0.5) * W / G); inside when top <= y < bottom "
        "and left <= x < right.",
    )

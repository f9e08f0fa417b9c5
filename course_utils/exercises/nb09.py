"""Checkers for the exercises of notebook 09 (image captioning).

``check_gated_grid_read`` compares one step of Show, Attend and Tell's look at the image
(additive attention over the grid cells, then the gate ``beta``) with
``apps.captioning.spatial_attend`` around an ``attention.AdditiveScore`` holding the given
matrices; ``check_doubly_stochastic`` compares ``sum_i (1 - sum_t a_ti)^2`` with
``apps.captioning.doubly_stochastic_penalty``; ``check_peak_in_box`` compares whether an
attention grid's peak falls inside a box with ``alignment.region_hits``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course_utils import alignment
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
        context, weights = captioning.spatial_attend(
            hidden, features, additive_score_from(W_q, W_k, v)
        )
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


def check_doubly_stochastic(fn: Callable) -> None:
    """Check ``doubly_stochastic(weights (B, T, P), step_mask (B, T))`` -> ``(B,)``."""
    g = seeded(91)

    def case(B: int, T: int, P: int) -> tuple[Tensor, Tensor]:
        weights = torch.softmax(torch.randn(B, T, P, generator=g), dim=-1)
        step_mask = torch.rand(B, T, generator=g) > 0.3
        step_mask[:, 0] = True
        return weights, step_mask

    by_hand = torch.tensor([[[0.5, 0.25, 0.25], [0.0, 1.0, 0.0]]]), torch.tensor([[True, True]])
    check_function(
        fn,
        captioning.doubly_stochastic_penalty,
        [by_hand, case(2, 4, 6), case(3, 6, 36)],
        name="doubly_stochastic",
        hint="zero the weights of padded steps (weights * step_mask[..., None]), sum them "
        "over the steps to get what each cell received (B, P), then sum (1 - that)^2 over "
        "the cells.",
    )


def check_peak_in_box(fn: Callable) -> None:
    """Check ``peak_in_box(weights (G, G), box (top, left, bottom, right), image_size (H, W))``
    -> ``bool``: whether the centre of the most-attended cell lies inside the box."""
    g = seeded(92)
    cases = []
    for G, size in [(6, (48, 48)), (4, (32, 48)), (6, (48, 48)), (3, (30, 30))]:
        top, left = torch.randint(0, size[0] // 2, (2,), generator=g).tolist()
        cases.append((torch.rand(G, G, generator=g), (top, left, top + 15, left + 18), size))

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

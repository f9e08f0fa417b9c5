"""Checkers for the exercises of notebook 02 (queries, keys and values).

``check_masked_softmax`` and ``check_scaled_dot_product_attention`` compare with the
library's ``attention`` functions (a row with nothing allowed, broadcast masks, keys longer
than queries); ``check_additive_score`` compares with ``attention.AdditiveScore`` holding the
given matrices; ``check_nadaraya_watson`` compares Gaussian-kernel regression, predictions
and weights, including queries so far away that every ``exp`` underflows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_utils import attention
from course_utils.exercises import additive_score_from, check_function, seeded


def check_masked_softmax(fn: Callable) -> None:
    """Check a learner's ``masked_softmax(scores, mask)`` against the course's."""
    g = seeded(0)
    scores = torch.randn(2, 3, 5, generator=g)
    mask = torch.rand(2, 3, 5, generator=g) > 0.4
    mask[0, 0] = False  # a row with nothing allowed must give zeros, not NaN
    cases = [
        (scores[0], torch.ones(3, 5, dtype=torch.bool)),
        (scores, mask),
        (scores, torch.tensor([True, True, False, True, False])),  # broadcast over rows
    ]
    check_function(
        fn,
        attention.masked_softmax,
        cases,
        name="masked_softmax",
        hint="set disallowed scores to a very negative number before the softmax, then set "
        "their weights to exactly 0 so a row with nothing allowed gives zeros, not NaN.",
    )


def check_scaled_dot_product_attention(fn: Callable) -> None:
    """Check a learner's ``attention(query, key, value, mask)`` -> ``(output, weights)``."""
    g = seeded(1)
    q, k, v = (torch.randn(2, 4, 8, generator=g) for _ in range(3))
    k6, v6 = torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 3, generator=g)
    mask = torch.rand(2, 4, 6, generator=g) > 0.3
    cases = [(q, k, v, None), (q, k6, v6, None), (q, k6, v6, mask)]
    check_function(
        fn,
        attention.scaled_dot_product_attention,
        cases,
        name="scaled_dot_product_attention",
        hint="scores = Q K^T / sqrt(d_k) with d_k = query.shape[-1]; weights = masked softmax "
        "over the last axis; output = weights @ V. Return (output, weights).",
    )


def _additive_reference(
    query: torch.Tensor, key: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """The library's ``AdditiveScore`` holding the given matrices (``W (A, D)``, ``v (A,)``)."""
    with torch.no_grad():
        return additive_score_from(W_q, W_k, v)(query, key)


def check_additive_score(fn: Callable) -> None:
    """Check a learner's ``additive(query, key, W_q, W_k, v)`` -> scores ``(..., Lq, Lk)``."""
    g = seeded(2)

    def case(
        q_shape: tuple[int, ...], k_shape: tuple[int, ...], A: int
    ) -> tuple[torch.Tensor, ...]:
        Dq, Dk = q_shape[-1], k_shape[-1]
        return (
            torch.randn(*q_shape, generator=g),
            torch.randn(*k_shape, generator=g),
            torch.randn(A, Dq, generator=g),
            torch.randn(A, Dk, generator=g),
            torch.randn(A, generator=g),
        )

    cases = [case((3, 4), (5, 4), 8), case((3, 4), (5, 6), 7), case((2, 3, 4), (2, 6, 5), 8)]
    check_function(
        fn,
        _additive_reference,
        cases,
        name="additive_score",
        hint="project first: query @ W_q.T is (..., Lq, A) and key @ W_k.T is (..., Lk, A); "
        "unsqueeze them to (..., Lq, 1, A) and (..., 1, Lk, A) so their sum is (..., Lq, Lk, A); "
        "then tanh, then @ v.",
    )


def _nadaraya_watson_reference(
    x_query: torch.Tensor, x_train: torch.Tensor, y_train: torch.Tensor, bandwidth: float
) -> tuple[torch.Tensor, torch.Tensor]:
    scores = -((x_query[:, None] - x_train[None, :]) ** 2) / (2 * bandwidth**2)  # (Lq, Lk)
    weights = attention.masked_softmax(scores)
    return weights @ y_train, weights  # (Lq,), (Lq, Lk)


def check_nadaraya_watson(fn: Callable) -> None:
    """Check a learner's ``nw(x_query, x_train, y_train, bandwidth)`` -> ``(pred, weights)``."""
    g = seeded(3)
    x_train = 5 * torch.rand(12, generator=g)
    y_train = torch.sin(x_train) + 0.3 * torch.randn(12, generator=g)
    x_query = torch.linspace(0, 5, 7)
    far = torch.tensor([-50.0, 2.5, 100.0])  # far from every key: exp underflows to 0 there
    cases = [
        (x_query, x_train, y_train, 0.5),
        (x_query, x_train, y_train, 2.0),
        (far, x_train, y_train, 0.1),
    ]
    check_function(
        fn,
        _nadaraya_watson_reference,
        cases,
        name="nadaraya_watson",
        hint="scores = -(x_query[:, None] - x_train[None, :])**2 / (2 * bandwidth**2) has "
        "shape (Lq, Lk); weights = torch.softmax(scores, dim=-1); predictions = weights @ "
        "y_train. Return (predictions, weights).",
    )

"""Checkers for the exercises of notebook 11 (visualising attention).

``check_attention_entropy`` compares each query's attention entropy in nats (one-hot rows
give 0, not NaN) on uniform, one-hot and head-like weights; ``check_top_k_search`` compares
cosine-similarity top-k search, ``(similarities, indices)`` best first, with vectors that
are not unit length.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_utils.exercises import check_function, seeded


def _attention_like(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Random rows that sum to 1, some of them sharp, like real attention heads."""
    scores = torch.randn(*shape, generator=g) * torch.rand(*shape[:-1], 1, generator=g) * 6
    return torch.softmax(scores, dim=-1)


def _entropy_reference(weights: torch.Tensor) -> torch.Tensor:
    return torch.special.entr(weights).sum(-1)  # -sum p log p, with 0 log 0 = 0


def check_attention_entropy(fn: Callable) -> None:
    """Check a learner's ``attention_entropy(weights (..., L, L))`` -> ``(..., L)`` in nats."""
    g = seeded(111)
    cases = [
        (torch.full((4, 4), 0.25),),  # uniform over 4 keys: log 4 each
        (torch.eye(3),),  # one-hot rows hold 0 * log 0 terms: must give 0, not NaN
        (_attention_like(g, 12, 6, 6),),
        (_attention_like(g, 2, 3, 5, 5),),
    ]
    check_function(
        fn,
        _entropy_reference,
        cases,
        name="attention_entropy",
        hint="-(w * log w).sum(-1), where a zero weight contributes 0: use torch.special.entr(w) "
        "or torch.where(w > 0, w * w.log(), 0). Sum over the keys (last axis) only.",
    )


def _top_k_reference(queries: torch.Tensor, corpus: torch.Tensor, k: int):
    unit = torch.nn.functional.normalize
    sims = unit(queries, dim=-1) @ unit(corpus, dim=-1).T  # (Lq, Lk) cosine similarities
    return tuple(sims.topk(k, dim=-1))


def check_top_k_search(fn: Callable) -> None:
    """Check a learner's ``top_k_search(queries (Lq, E), corpus (Lk, E), k)`` ->
    ``(similarities (Lq, k), indices (Lq, k))``, best first, by cosine similarity."""
    g = seeded(112)
    corpus = torch.randn(20, 16, generator=g)
    near = corpus[[3, 11]] + 0.1 * torch.randn(2, 16, generator=g)  # close to items 3 and 11
    cases = [
        (near, corpus, 1),
        (torch.randn(5, 16, generator=g), corpus, 3),
        (torch.randn(4, 8, generator=g), 7 * torch.randn(30, 8, generator=g), 5),  # not unit
    ]
    check_function(
        fn,
        _top_k_reference,
        cases,
        name="top_k_search",
        hint="cosine similarity is the dot product of unit vectors: F.normalize both, "
        "queries @ corpus.T gives (Lq, Lk), then .topk(k, dim=-1) returns (values, indices), "
        "largest first.",
    )

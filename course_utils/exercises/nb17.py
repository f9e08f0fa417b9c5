"""Checkers for the exercises of notebook 17 (attention in today's language models).

``check_min_p_filter`` compares min-p filtering (keep the tokens at least ``min_p`` times
as likely as the most likely one) with a reference written from that definition;
``check_windowed_causal_mask`` compares a bottom-right causal mask limited to the last
``window`` keys with ``attention.causal_mask`` and the sliding-window rule; and
``check_cached_attention_step`` compares one decoding step over a KV cache with the
course's attention over the whole sequence.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_utils.attention import causal_mask, scaled_dot_product_attention
from course_utils.exercises import check_function, seeded


def _min_p_reference(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    probs = torch.softmax(logits, dim=-1)
    keep = probs >= min_p * probs.max(dim=-1, keepdim=True).values
    return logits.masked_fill(~keep, float("-inf"))


def check_min_p_filter(fn: Callable) -> None:
    """Check a learner's ``min_p_filter(logits (..., V), min_p) -> logits`` (others ``-inf``)."""
    g = seeded(17)
    cases = [
        (torch.tensor([0.5, 0.2, 0.2, 0.1]).log(), 0.4),  # keeps 0.5, 0.2, 0.2 (>= 0.2)
        (torch.tensor([0.5, 0.2, 0.2, 0.1]).log(), 0.5),  # keeps 0.5 only
        (torch.tensor([1.0, 1.0, 1.0]), 0.9),  # ties: all kept
        (3 * torch.randn(2, 11, generator=g), 0.1),  # rows filtered one by one
    ]
    check_function(
        fn,
        _min_p_reference,
        cases,
        name="min_p_filter",
        hint=(
            "work with probabilities, not logits: compare every token's probability with the "
            "largest one in its row, then hide the others as top-k and top-p do.",
            "probs = torch.softmax(logits, -1); keep = probs >= min_p * probs.max(-1, "
            "keepdim=True).values; return logits.masked_fill(~keep, float('-inf')).",
        ),
    )


def _windowed_reference(Lq: int, Lk: int, window: int) -> torch.Tensor:
    allowed = causal_mask(Lq, Lk, offset=Lk - Lq)  # bottom-right: query i is position i + Lk - Lq
    too_old = causal_mask(Lq, Lk, offset=Lk - Lq - window)  # keys window or more behind
    return allowed & ~too_old


def check_windowed_causal_mask(fn: Callable) -> None:
    """Check a learner's ``windowed_causal_mask(Lq, Lk, window)`` -> bool ``(Lq, Lk)``."""
    assert torch.equal(_windowed_reference(3, 7, 7), causal_mask(3, 7, offset=4))
    cases = [(1, 6, 3), (3, 7, 2), (4, 4, 2), (5, 9, 9), (2, 8, 1)]
    check_function(
        fn,
        _windowed_reference,
        cases,
        name="windowed_causal_mask",
        hint=(
            "start from section 2's bottom-right causal mask and also forbid the keys that lie "
            "window or more positions before the query.",
            "query i sits at position p = i + Lk - Lq; it may see key j when "
            "p - window < j <= p. Build p (Lq, 1) and j (1, Lk) with torch.arange and compare.",
        ),
    )


def _step_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    k_all = torch.cat([k_cache, k_new], dim=-2)
    v_all = torch.cat([v_cache, v_new], dim=-2)
    out, _ = scaled_dot_product_attention(q, k_all, v_all)  # one new query sees every key
    return out, k_all, v_all


def check_cached_attention_step(fn: Callable) -> None:
    """Check ``cached_attention_step(q, k_cache, v_cache, k_new, v_new) -> (out, k_all,
    v_all)`` for one new token: ``q, k_new, v_new (B, H, 1, D)``, caches ``(B, H, T, D)``."""
    g = seeded(170)
    cases = []
    for B, H, T, D in [(1, 1, 3, 4), (2, 4, 6, 8), (3, 2, 1, 5)]:
        q, k_new, v_new = (torch.randn(B, H, 1, D, generator=g) for _ in range(3))
        k_cache, v_cache = (torch.randn(B, H, T, D, generator=g) for _ in range(2))
        cases.append((q, k_cache, v_cache, k_new, v_new))
    check_function(
        fn,
        _step_reference,
        cases,
        name="cached_attention_step",
        hint=(
            "a cache only grows: add the new key and value to it, then let the new query attend "
            "over everything it holds; the new token is the last position, so nothing is masked.",
            "append along the positions (dim -2) with torch.cat; the new query is the last "
            "position, so it may see every key: softmax(q @ k_all^T / sqrt(D)) @ v_all, no mask.",
        ),
    )

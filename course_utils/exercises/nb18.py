"""Checkers for the exercises of notebook 18 (circuits).

``check_mha_without_heads`` compares self-attention with some heads removed by hand with
``circuits.ablate_heads``; ``check_induction_rule`` compares the induction rule (predict the
token that followed the most recent earlier occurrence of the current token, -1 where there
is none) with a vectorised reference; ``check_eigen_copying`` compares Elhage et al.'s
eigenvalue measure of copying with one computed from ``torch.linalg.eigvals`` in float64.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course_utils.attention import MultiHeadAttention
from course_utils.circuits import ablate_heads
from course_utils.exercises import check_function, seeded
from course_utils.induction import repeated_sequences


def _without_heads(mha: MultiHeadAttention, x: Tensor, heads: list[int]) -> Tensor:
    with torch.no_grad(), ablate_heads(mha, [(0, h) for h in heads]):
        return mha(x, x, x)[0]


def check_mha_without_heads(fn: Callable) -> None:
    """Check ``mha_without_heads(mha, x (B, L, E), heads)`` -> the self-attention output
    ``(B, L, E)`` of ``mha`` (a ``MultiHeadAttention``) with the listed heads removed."""
    g = seeded(164)
    cases = []
    for B, L, E, H, heads in ((1, 3, 4, 2, [0]), (2, 5, 8, 4, [1, 3]), (2, 6, 12, 3, [0, 1, 2])):
        torch.manual_seed(164 + E)
        mha = MultiHeadAttention(E, H).eval()
        cases.append((mha, torch.randn(B, L, E, generator=g), heads))
    check_function(
        fn,
        _without_heads,
        cases,
        name="mha_without_heads",
        hint=(
            "compute the attention layer by hand, keeping the heads apart, and zero the removed "
            "heads' outputs before the heads are merged and projected.",
            "q, k, v = mha.q_proj(x), mha.k_proj(x), mha.v_proj(x), each viewed as (B, L, H, D) "
            "and transposed to (B, H, L, D); weights = softmax(q @ k^T / sqrt(D)); "
            "heads_out = weights @ v (B, H, L, D); set heads_out[:, h] = 0 for each removed h; "
            "transpose back, reshape to (B, L, E) and apply mha.out_proj (its bias stays).",
        ),
    )


def _induction_rule_reference(ids: torch.Tensor) -> torch.Tensor:
    B, L = ids.shape
    out = torch.full((B, L), -1, dtype=torch.long)
    for i in range(1, L):
        # (B, i): where an earlier position holds the current token
        same = ids[:, :i] == ids[:, i : i + 1]
        # the most recent one: the last True, found by weighting positions 1..i
        last = (same * torch.arange(1, i + 1)).argmax(dim=1)  # (B,)
        found = same.any(dim=1)
        out[found, i] = ids[found, last[found] + 1]
    return out


def check_induction_rule(fn: Callable) -> None:
    """Check ``induction_rule(ids (B, L))`` -> ``(B, L)`` long predictions (-1: no earlier
    occurrence)."""
    g = seeded(165)
    cases = [
        (torch.tensor([[5, 7, 2, 5, 7, 2, 9]]),),
        (repeated_sequences(4, 12, 20, 3, "test", g).ids,),
        (torch.randint(4, (3, 10), generator=g),),  # a small vocabulary: tokens recur often
        (torch.randint(3, (2, 16), generator=g),),
    ]
    check_function(
        fn,
        _induction_rule_reference,
        cases,
        name="induction_rule",
        hint=(
            "an induction head completes a repeat: find the last earlier occurrence of the "
            "current token and predict the token that followed it.",
            "for position i, look at positions j < i with ids[b, j] == ids[b, i]; take the "
            "largest such j and predict ids[b, j + 1]; -1 where there is none. Position 0 is "
            "always -1. Return a torch.long tensor of the same shape as ids.",
        ),
    )


def _eigen_copying_reference(ov: torch.Tensor) -> float:
    eigenvalues = torch.linalg.eigvals(ov.double())
    return (eigenvalues.sum().real / eigenvalues.abs().sum()).item()


def check_eigen_copying(fn: Callable) -> None:
    """Check ``eigen_copying(ov (V, V))`` -> ``sum(eigenvalues) / sum(|eigenvalues|)``, a float."""
    g = seeded(166)
    V = 6
    cases = [
        (torch.eye(V),),
        (-2.0 * torch.eye(V),),
        (torch.eye(V)[torch.arange(V).roll(1)],),  # a cycle: its eigenvalues sum to zero
        (torch.randn(V, V, generator=g),),
        (torch.randn(10, 10, generator=g) + 2 * torch.eye(10),),
    ]
    check_function(
        fn,
        _eigen_copying_reference,
        cases,
        name="eigen_copying",
        hint=(
            "a copying OV circuit maps a token's direction to itself: measure how much of the "
            "matrix's eigenvalue spectrum is positive and real, as a share of its total size.",
            "eigenvalues = torch.linalg.eigvals(ov) are complex; their sum is real (they come "
            "in conjugate pairs): return (eigenvalues.sum().real / "
            "eigenvalues.abs().sum()).item().",
        ),
        atol=1e-4,
    )

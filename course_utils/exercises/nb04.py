"""Checkers for the exercises of notebook 04 (self-attention and multi-head attention).

``check_split_heads`` compares the ``(B, L, E) -> (B, H, L, D)`` reshape (``D = E / H``) (a plain view
to that shape mixes positions into heads and fails); ``check_multi_head_self_attention``
compares with ``attention.MultiHeadAttention`` without biases holding the given matrices,
with and without a causal mask; ``check_previous_token_score`` compares each head's mean
weight on the previous token with ``interpret.head_pattern_scores``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_utils import attention
from course_utils.exercises import check_function, seeded
from course_utils.interpret import head_pattern_scores


def _split_heads_reference(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, L, E = x.shape  # (B, L, E) -> (B, L, H, D) -> (B, H, L, D)
    return x.reshape(B, L, num_heads, E // num_heads).transpose(1, 2)


def check_split_heads(fn: Callable) -> None:
    """Check a learner's ``split_heads(x, num_heads)``: ``(B, L, E) -> (B, H, L, E / H)``."""
    g = seeded(40)
    cases = [
        (torch.randn(1, 3, 4, generator=g), 2),
        (torch.randn(2, 5, 12, generator=g), 3),
        (torch.randn(3, 4, 8, generator=g), 1),
    ]
    check_function(
        fn,
        _split_heads_reference,
        cases,
        name="split_heads",
        hint="x.view(B, L, H, E // H) puts each head's features in their own axis; then "
        ".transpose(1, 2) moves the head axis in front of the positions. (A plain "
        ".view(B, H, L, E // H) gives the right shape but mixes positions into heads.)",
    )


def _multi_head_reference(
    x: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    W_v: torch.Tensor,
    W_o: torch.Tensor,
    num_heads: int,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The library's ``MultiHeadAttention`` without biases, holding ``W`` (``x @ W`` layout)."""
    E = x.shape[-1]
    module = attention.MultiHeadAttention(E, num_heads, bias=False)
    with torch.no_grad():
        for proj, W in zip(
            (module.q_proj, module.k_proj, module.v_proj, module.out_proj),
            (W_q, W_k, W_v, W_o),
            strict=True,
        ):
            proj.weight.copy_(W.T)  # nn.Linear computes x @ weight.T
        return module(x, x, x, mask=mask)


def check_multi_head_self_attention(fn: Callable) -> None:
    """Check ``mha(x, W_q, W_k, W_v, W_o, num_heads, mask)`` -> ``(out (B, L, E), weights)``."""
    g = seeded(41)

    def case(B: int, L: int, E: int, H: int, masked: bool) -> tuple:
        Ws = [torch.randn(E, E, generator=g) / E**0.5 for _ in range(4)]
        mask = attention.causal_mask(L) if masked else None
        return (torch.randn(B, L, E, generator=g), *Ws, H, mask)

    cases = [case(1, 4, 4, 1, False), case(2, 5, 8, 2, False), case(2, 6, 12, 3, True)]
    check_function(
        fn,
        _multi_head_reference,
        cases,
        name="multi_head_self_attention",
        hint="project with x @ W_q (and W_k, W_v), split each into heads (B, H, L, D), "
        "scores = q @ k^T / sqrt(D) with D = E // H, masked softmax, weights @ v, then "
        "transpose(1, 2).reshape(B, L, E) to merge the heads and multiply by W_o.",
    )


def check_previous_token_score(fn: Callable) -> None:
    """Check a learner's ``previous_token_score(weights (B, H, L, L))`` -> ``(H,)``."""
    g = seeded(42)
    eye = torch.eye(6)
    one_back = torch.diag(torch.ones(5), -1)
    one_back[0, 0] = 1.0  # position 0 can only look at itself
    cases = [
        (torch.stack([one_back, eye, torch.full((6, 6), 1 / 6)])[None],),  # (1, 3, 6, 6)
        (torch.softmax(torch.randn(4, 2, 5, 5, generator=g), dim=-1),),
        (torch.softmax(3 * torch.randn(2, 4, 9, 9, generator=g), dim=-1),),
    ]
    check_function(
        fn,
        lambda w: head_pattern_scores(w)["previous"],
        cases,
        name="previous_token_score",
        hint="the weight of query t on key t - 1 is weights[:, :, t, t - 1] with t = "
        "torch.arange(2, L) (advanced indexing pairs the two index tensors); average over "
        "the batch (dim 0) and the positions, keeping the head axis.",
    )

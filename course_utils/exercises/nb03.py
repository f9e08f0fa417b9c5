"""Checkers for the exercises of notebook 03 (Bahdanau attention).

``check_attention_read`` compares one additive-attention read, ``(context, weights)`` with
padding weighted exactly 0, with ``attention.attend`` around an ``attention.AdditiveScore``
holding the given matrices; ``check_alignment_accuracy`` compares the share of counted steps
whose most-attended source position is the gold one with ``alignment.alignment_accuracy``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course_utils import alignment, attention
from course_utils.data import lengths_to_mask
from course_utils.exercises import additive_score_from, check_function, seeded


def _attention_read_reference(
    query: Tensor, enc_states: Tensor, src_mask: Tensor, W_q: Tensor, W_k: Tensor, v: Tensor
) -> tuple[Tensor, Tensor]:
    """``attention.attend`` with an ``AdditiveScore`` holding ``W_q (A, R)``, ``W_k (A, C)``, ``v (A,)``."""
    with torch.no_grad():
        return attention.attend(query, enc_states, additive_score_from(W_q, W_k, v), src_mask)


def check_attention_read(fn: Callable) -> None:
    """Check ``attention_read(query, enc_states, src_mask, W_q, W_k, v)`` -> ``(context, weights)``.

    ``query (B, R)``, ``enc_states (B, S, C)``, ``src_mask (B, S)`` boolean (True = real
    token), ``W_q (A, R)``, ``W_k (A, C)``, ``v (A,)``; ``context (B, C)``, ``weights (B, S)``.
    """
    g = seeded(30)

    def case(B: int, S: int, R: int, C: int, A: int, lengths: list[int]) -> tuple[Tensor, ...]:
        src_mask = lengths_to_mask(torch.tensor(lengths), S)  # (B, S)
        return (
            torch.randn(B, R, generator=g),
            torch.randn(B, S, C, generator=g),
            src_mask,
            torch.randn(A, R, generator=g),
            torch.randn(A, C, generator=g),
            torch.randn(A, generator=g),
        )

    cases = [
        case(1, 4, 3, 3, 5, [4]),  # no padding
        case(3, 6, 4, 5, 7, [6, 2, 4]),  # padding, and query and key sizes differ
        case(2, 5, 3, 3, 4, [1, 5]),  # an input of one token gets all the weight
    ]
    check_function(
        fn,
        _attention_read_reference,
        cases,
        name="attention_read",
        hint="scores = tanh(query @ W_q.T, unsqueezed to (B, 1, A), + enc_states @ W_k.T) @ v "
        "has shape (B, S); fill the padded scores with a very negative number, softmax over S, "
        "set the padded weights to exactly 0; context = weights (B, 1, S) @ enc_states.",
    )


def check_alignment_accuracy(fn: Callable) -> None:
    """Check ``alignment_acc(weights (B, T, S), gold (B, T))`` -> a float in [0, 1]."""
    g = seeded(31)
    hand = torch.tensor([[[0.1, 0.9], [0.8, 0.2], [0.5, 0.5]]])  # (1, 3, 2)
    random_weights = torch.softmax(torch.randn(3, 6, 5, generator=g), dim=-1)
    random_gold = torch.randint(0, 5, (3, 6), generator=g)
    random_gold[:, -2:] = -1  # the last two steps of every row do not count
    mirrored = torch.softmax(3 * torch.randn(2, 5, 4, generator=g), dim=-1)
    mirrored_gold = torch.tensor([[3, 2, 1, 0, -1], [1, 0, -1, -1, -1]])  # lengths 4 and 2
    cases = [
        (hand, torch.tensor([[1, 1, -1]])),
        (random_weights, random_gold),
        (mirrored, mirrored_gold),
    ]

    def as_tensor(f: Callable) -> Callable:
        return lambda w, gold: torch.as_tensor(f(w, gold), dtype=torch.float64)

    check_function(
        as_tensor(fn),
        as_tensor(alignment.alignment_accuracy),
        cases,
        name="alignment_accuracy",
        hint="weights.argmax(dim=-1) is the most-attended position per step, (B, T); compare it "
        "with gold, keep only the steps where gold >= 0, and divide the hits by the number of "
        "counted steps (not by B * T).",
    )

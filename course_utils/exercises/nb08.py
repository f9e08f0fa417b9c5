"""Checkers for the exercises of notebook 08 (summarisation).

``check_mix`` compares the pointer-generator's final distribution with a loop over the
source positions written here from the definition (repeated source words, ``p_gen`` of 0
and 1 and new words among the cases); ``check_coverage_loss`` compares a whole summary's
coverage loss with a step-by-step loop.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_utils.exercises import check_function


def _mix_reference(
    p_vocab: torch.Tensor, attention: torch.Tensor, src_ext: torch.Tensor, p_gen: torch.Tensor
) -> torch.Tensor:
    B, V = p_vocab.shape
    S = attention.shape[1]
    out = torch.zeros(B, V + S)
    for b in range(B):
        g = float(p_gen.reshape(-1)[b])
        out[b, :V] = g * p_vocab[b]
        for i in range(S):
            out[b, int(src_ext[b, i])] += (1 - g) * attention[b, i]
    return out


def _mix_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(8)
    cases = []
    for B, V, S, p in [(1, 4, 3, [0.5]), (2, 5, 4, [0.0, 1.0]), (3, 6, 5, [0.3, 0.9, 0.6])]:
        p_vocab = torch.softmax(torch.randn(B, V, generator=g), -1)
        attention = torch.softmax(torch.randn(B, S, generator=g), -1)
        src_ext = torch.randint(0, V + 2, (B, S), generator=g)  # repeats and new words
        src_ext[:, 0] = src_ext[:, -1]  # at least one repeated word per row
        cases.append((p_vocab, attention, src_ext, torch.tensor(p)))
    return cases


def check_mix(fn: Callable) -> None:
    """Check ``mix(p_vocab (B, V), attention (B, S), src_ext (B, S), p_gen (B,))`` -> (B, V + S)."""
    check_function(
        fn,
        _mix_reference,
        _mix_cases(),
        name="mix",
        hint="pad p_gen * p_vocab with S zeros on the right (new words cannot be generated), "
        "then add (1 - p_gen) * attention at the ids src_ext with scatter_add along dim 1; "
        "reshape p_gen to (B, 1) so it broadcasts over each row.",
    )


def _coverage_reference(weights: torch.Tensor) -> float:
    coverage = torch.zeros(weights.shape[1])
    total = 0.0
    for a in weights:
        total += float(torch.minimum(a, coverage).sum())
        coverage = coverage + a
    return total


def check_coverage_loss(fn: Callable) -> None:
    """Check ``summary_coverage_loss(weights (T, S))`` -> float, summed over the steps."""
    g = torch.Generator().manual_seed(9)
    cases = [(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]),)]  # looks twice at token 0
    cases += [
        (torch.softmax(torch.randn(T, S, generator=g), -1),) for T, S in [(1, 3), (4, 6), (7, 5)]
    ]
    check_function(
        fn,
        _coverage_reference,
        cases,
        name="summary_coverage_loss",
        hint="the coverage before step t is the sum of the rows before it "
        "(torch.cumsum(weights, 0) - weights); the loss is torch.minimum(weights, coverage) "
        "summed over everything, returned as a float.",
    )

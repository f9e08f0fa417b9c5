"""Checkers for the exercises of notebook 13 (efficient attention).

``check_online_softmax`` compares a one-pass (running maximum and sum) softmax with
``torch.softmax``, scores that overflow ``exp`` in float32 included;
``check_dilated_window_mask`` compares a dilated sliding-window mask with a reference that,
at dilation 1, is ``sparse_attention.sliding_window_mask``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_utils import sparse_attention
from course_utils.exercises import check_function, seeded


def check_online_softmax(fn: Callable) -> None:
    """Check a learner's one-pass ``online_softmax(scores)`` (1-D) against ``torch.softmax``."""
    g = seeded(13)
    cases = [
        (torch.tensor([2.0, 4.0, 1.0, 5.0, 3.0]),),  # the notebook's worked example
        (torch.randn(17, generator=g),),
        (torch.tensor([1000.0, 999.0, -1000.0, 998.0]),),  # exp(1000) overflows float32
        (torch.tensor([-3.0]),),
    ]
    check_function(
        fn,
        lambda scores: torch.softmax(scores, dim=-1),
        cases,
        name="online_softmax",
        hint="start with m = -inf and l = 0; for each score s: m_new = max(m, s), "
        "l = l * exp(m - m_new) + exp(s - m_new), m = m_new; at the end return "
        "exp(scores - m) / l.",
    )


def _dilated_window_reference(N: int, window: int, dilation: int) -> torch.Tensor:
    offset = torch.arange(N)[:, None] - torch.arange(N)[None, :]  # (N, N): i - j
    return (offset.abs() < window * dilation) & (offset % dilation == 0)


def check_dilated_window_mask(fn: Callable) -> None:
    """Check a learner's ``dilated_window_mask(N, window, dilation)`` -> bool ``(N, N)``."""
    cases = [(6, 2, 1), (10, 3, 2), (12, 2, 3), (5, 8, 2)]
    assert torch.equal(
        _dilated_window_reference(9, 3, 1), sparse_attention.sliding_window_mask(9, 3)
    )
    check_function(
        fn,
        _dilated_window_reference,
        cases,
        name="dilated_window_mask",
        hint="offset = i - j for every pair, shape (N, N), from two aranges; a key is allowed "
        "when abs(offset) < window * dilation and offset % dilation == 0. Return booleans.",
    )

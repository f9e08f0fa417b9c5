"""Checkers for the exercises of notebook 01 (the seq2seq bottleneck).

``check_gru_cell_step`` compares one hand-written GRU step with ``nn.GRUCell`` holding the
same weights; ``check_exact_match`` compares a sequence-level exact-match metric with
``metrics.exact_match`` (cut at ``<eos>``, padding ignored, widths that differ).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course_utils import metrics
from course_utils.exercises import check_function, seeded


def check_gru_cell_step(fn: Callable) -> None:
    """Check a learner's ``gru_cell_step(x, h, W_ih, W_hh, b_ih, b_hh)`` against ``nn.GRUCell``.

    The weights use torch's layout: ``W_ih`` (3R, E) and ``W_hh`` (3R, R) stack the reset,
    update and candidate rows in that order; ``b_ih``, ``b_hh`` are (3R,), with ``E`` the input size and ``R`` the state size.
    """

    def reference(
        x: Tensor, h: Tensor, W_ih: Tensor, W_hh: Tensor, b_ih: Tensor, b_hh: Tensor
    ) -> Tensor:
        cell = torch.nn.GRUCell(W_ih.shape[1], W_hh.shape[1])
        with torch.no_grad():
            for name, value in zip(
                ("weight_ih", "weight_hh", "bias_ih", "bias_hh"),
                (W_ih, W_hh, b_ih, b_hh),
                strict=True,
            ):
                getattr(cell, name).copy_(value)
            return cell(x, h)

    g = seeded(10)
    cases = []
    for B, E, R in [(1, 3, 2), (4, 5, 3), (2, 8, 6)]:
        cases.append(
            (
                torch.randn(B, E, generator=g),
                torch.randn(B, R, generator=g),
                torch.randn(3 * R, E, generator=g),
                torch.randn(3 * R, R, generator=g),
                torch.randn(3 * R, generator=g),
                torch.randn(3 * R, generator=g),
            )
        )
    check_function(
        fn,
        reference,
        cases,
        name="gru_cell_step",
        hint="split W_ih @ x + b_ih and W_hh @ h + b_hh into three chunks (reset, update, "
        "candidate) with .chunk(3, dim=-1); the reset gate multiplies only the hidden part of "
        "the candidate, and h_new = (1 - z) * n + z * h.",
    )


def check_exact_match(fn: Callable) -> None:
    """Check a learner's ``exact_match(pred_ids, target_ids, eos_id, pad_id)`` -> bool (B,)."""
    pad, eos = 0, 2
    target = torch.tensor([[5, 6, eos, pad], [5, 6, 7, eos], [5, 6, eos, pad], [5, 6, 7, eos]])
    # Row by row: junk after <eos>; never emits <eos>; one wrong token; stops too early.
    pred_same_width = torch.tensor(
        [[5, 6, eos, 9], [5, 6, 7, 7], [5, 7, eos, pad], [5, 6, eos, pad]]
    )
    # Wider than the target: right; right; one token too many; one token too many.
    pred_wider = torch.tensor(
        [
            [5, 6, eos, pad, pad, pad],
            [5, 6, 7, eos, pad, pad],
            [5, 6, 7, eos, pad, pad],
            [5, 6, 7, 8, eos, pad],
        ]
    )
    cases = [(target, target, eos, pad), (pred_same_width, target, eos, pad)]
    cases.append((pred_wider, target, eos, pad))
    check_function(
        fn,
        metrics.exact_match,
        cases,
        name="exact_match",
        hint="cut both sequences at their first <eos> (replace it and everything after it by "
        "<pad>), pad the narrower one on the right to the same width, then compare whole rows "
        "with (pred == target).all(dim=1).",
    )

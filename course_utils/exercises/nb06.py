"""Checkers for the exercises of notebook 06 (the Transformer).

``check_feed_forward`` compares the position-wise feed-forward block with
``transformer.FeedForward`` holding the given weights; ``check_label_smoothing_loss``
compares with ``training.sequence_loss`` (padding not counted); ``check_noam_rate``
compares the warm-up-then-decay learning rate with ``transformer.noam_rate``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course_utils.exercises import check_function, seeded
from course_utils.training import noam_rate, sequence_loss
from course_utils.transformer import FeedForward


def _feed_forward_reference(x: Tensor, W1: Tensor, b1: Tensor, W2: Tensor, b2: Tensor) -> Tensor:
    module = FeedForward(W1.shape[1], W1.shape[0])
    with torch.no_grad():
        for layer, W, b in ((module.linear1, W1, b1), (module.linear2, W2, b2)):
            layer.weight.copy_(W)
            layer.bias.copy_(b)
        return module(x)


def check_feed_forward(fn: Callable) -> None:
    """Check a learner's ``feed_forward(x, W1, b1, W2, b2)`` against the course's module."""
    g = seeded(60)
    cases = []
    for shape, F in (((4, 8), 16), ((2, 3, 8), 32), ((2, 5, 6), 4)):
        E = shape[-1]
        cases.append(
            (
                torch.randn(*shape, generator=g),
                torch.randn(F, E, generator=g),
                torch.randn(F, generator=g),
                torch.randn(E, F, generator=g),
                torch.randn(E, generator=g),
            )
        )
    check_function(
        fn,
        _feed_forward_reference,
        cases,
        name="feed_forward",
        hint="nn.Linear computes x @ W.T + b; apply relu to the first layer's output, then the "
        "second layer. The shapes: (..., E) -> (..., F) -> (..., E).",
    )


def check_label_smoothing_loss(fn: Callable) -> None:
    """Check a learner's ``loss(logits, targets, pad_id, smoothing)`` -> a scalar tensor."""
    g = seeded(61)
    logits = torch.randn(3, 5, 7, generator=g)
    targets = torch.randint(1, 7, (3, 5), generator=g)
    targets[1, 2:] = 0  # padding, which must not count
    cases = [(logits, targets, 0, 0.0), (logits, targets, 0, 0.1), (3 * logits, targets, 0, 0.4)]
    check_function(
        fn,
        sequence_loss,
        cases,
        name="label_smoothing_loss",
        hint="build q = smoothing / V everywhere plus (1 - smoothing) at the target, take "
        "-(q * log_softmax(logits)).sum(-1) per position, then average only over positions "
        "where targets != pad_id.",
    )


def check_noam_rate(fn: Callable) -> None:
    """Check a learner's ``noam(step, d_model, warmup_steps, factor)`` -> a float."""

    def as_tensor(f: Callable) -> Callable:
        return lambda *args: torch.tensor(float(f(*args)), dtype=torch.float64)

    cases = [(1, 512, 4000, 1.0), (4000, 512, 4000, 1.0), (20000, 512, 4000, 1.0)]
    cases += [(50, 64, 100, 2.0), (300, 64, 100, 2.0)]
    check_function(
        as_tensor(fn),
        as_tensor(noam_rate),
        cases,
        name="noam_rate",
        hint="factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5): the "
        "second term wins while step < warmup_steps (the linear rise).",
        atol=1e-12,
    )

"""Checkers for the exercises of notebook 16 (interpretability).

``check_integrated_gradients`` compares integrated gradients written with plain autograd
with ``attribution.integrated_gradients`` on small attention models and prints how far the
learner's scores are from adding up to ``f(x) - f(baseline)``; ``check_precision_at_k``
compares a rationale precision with ``attribution.precision_at_k``; ``check_js_divergence``
compares a Jensen-Shannon divergence with ``faithfulness.js_divergence``.

For the MiniLM section, ``check_gradient_times_difference`` compares ``(x - baseline) *
df/dx`` with autograd's gradient on small models.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course_utils import attribution, faithfulness
from course_utils.attention import MultiHeadAttention
from course_utils.exercises import check_function, seeded


class _TinyModel:
    """x (B, L, E) -> (B,): one self-attention layer, mean-pooled, a tanh read-out."""

    def __init__(self, E: int, seed: int):
        torch.manual_seed(seed)
        self.mha = MultiHeadAttention(E, 2)
        self.read = torch.nn.Linear(E, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.mha(x, x, x)
        return 3 * torch.tanh(self.read(out.mean(1))).squeeze(-1)

    def __repr__(self) -> str:
        return f"a small self-attention model (E = {self.read.in_features})"


def check_integrated_gradients(fn: Callable) -> None:
    """Check ``integrated_gradients(f, x, baseline, steps)`` -> ``(B, L, E)``: the midpoint
    rule, ``a_k = (k + 1/2) / steps``, as in the notebook; then print its completeness gap."""
    g = seeded(160)
    cases = []
    for B, L, E, steps, seed in [(1, 3, 4, 4, 0), (2, 5, 6, 16, 1), (3, 7, 8, 32, 2)]:
        x = torch.randn(B, L, E, generator=g)
        baseline = (
            torch.zeros(B, L, E) if seed != 1 else torch.randn(1, L, E, generator=g).expand(B, L, E)
        )
        cases.append((_TinyModel(E, seed), x, baseline.clone(), steps))
    check_function(
        fn,
        attribution.integrated_gradients,
        cases,
        name="integrated_gradients",
        hint=(
            "integrated gradients averages the gradient along the straight path from the baseline "
            "to the input (a Riemann sum at the midpoints of equal steps), then multiplies by "
            "input minus baseline.",
            "for k in 0 .. steps-1: point = baseline + (k + 0.5) / steps * (x - baseline), "
            "made a leaf with requires_grad; add the gradient of f(point).sum() with respect to "
            "point; return (x - baseline) * (the sum) / steps.",
        ),
        atol=1e-4,
    )
    f, x, baseline, steps = cases[-1]
    gap = attribution.completeness_gap(f, x, fn(f, x, baseline, steps), baseline)
    print(f"completeness: |sum of your scores - (f(x) - f(baseline))| at most {gap.max():.2e}")


def _rationale(g: torch.Generator, B: int, L: int) -> torch.Tensor:
    rationale = torch.zeros(B, L, dtype=torch.bool)
    for b in range(B):
        rationale[b, torch.randperm(L, generator=g)[:2]] = True
    return rationale


def check_precision_at_k(fn: Callable) -> None:
    """Check ``precision_at_k(scores (B, L), rationale (B, L) bool, k)`` -> ``(B,)``: the share
    of the ``k`` highest-scored tokens that lie in the rationale (ties: the earlier token)."""
    g = seeded(161)
    cases = [
        (torch.tensor([[0.1, 0.9, 0.5, 0.2]]), torch.tensor([[False, True, False, True]]), 2),
        (torch.randn(4, 6, generator=g), _rationale(g, 4, 6), 1),
        (torch.randn(5, 9, generator=g), _rationale(g, 5, 9), 3),
        (torch.tensor([[1.0, 1.0, 0.0, 1.0]]), torch.tensor([[False, True, False, True]]), 2),
    ]
    check_function(
        fn,
        attribution.precision_at_k,
        cases,
        name="precision_at_k",
        hint=(
            "rank the positions by score, keep the k best, and ask what share of them the "
            "rationale marks.",
            "sort each row's scores from high to low, keeping ties in position order "
            "(argsort(-scores, stable=True)); take the first k positions; the result is the "
            "mean of rationale at those positions, as floats.",
        ),
    )


def check_js_divergence(fn: Callable) -> None:
    """Check ``js_divergence(p, q)`` -> ``(...)`` along the last axis, in nats, with
    ``0 log 0 = 0``."""
    g = seeded(162)
    sparse = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    cases = [
        (torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])),
        (torch.softmax(torch.randn(3, 5, generator=g), -1), torch.softmax(torch.randn(3, 5, generator=g), -1)),
        (sparse, sparse.flip(-1)),
    ]  # fmt: skip
    check_function(
        fn,
        faithfulness.js_divergence,
        cases,
        name="js_divergence",
        hint=(
            "the Jensen-Shannon divergence compares each distribution with their average through "
            "the KL divergence and averages the two; entries with zero probability add nothing.",
            "m = (p + q) / 2; KL(a || m) = sum of a * log(a / m) over the entries where "
            "a > 0 (torch.where keeps 0 log 0 out); return (KL(p || m) + KL(q || m)) / 2.",
        ),
    )


def _gradient_times_difference(f: Callable, x: Tensor, baseline: Tensor) -> Tensor:
    with torch.enable_grad():
        z = x.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(f(z).sum(), z)
    return (x - baseline) * grad


def check_gradient_times_difference(fn: Callable) -> None:
    """Check ``gradient_times_difference(f, x (B, L, E), baseline (B, L, E))`` ->
    ``(x - baseline) * df/dx`` with the gradient taken at ``x``, shape ``(B, L, E)``."""
    g = seeded(163)

    def case(B: int, L: int, E: int) -> tuple:
        w = torch.randn(E, 3, generator=g)
        v = torch.randn(3, generator=g)

        def f(x: Tensor) -> Tensor:  # a small nonlinear model, one output per example
            return torch.tanh(x @ w).mean(1) @ v  # (B, L, E) -> (B, L, 3) -> (B, 3) -> (B,)

        return f, torch.randn(B, L, E, generator=g), torch.randn(B, L, E, generator=g)

    check_function(
        fn,
        _gradient_times_difference,
        [case(1, 3, 2), case(2, 5, 4), case(3, 7, 6)],
        name="gradient_times_difference",
        hint=(
            "the gradient of the output with respect to the input, taken for all examples at "
            "once, weighted by how far the input is from the baseline.",
            "z = x.detach().requires_grad_(True); (grad,) = torch.autograd.grad(f(z).sum(), z) "
            "(the examples are independent, so the sum's gradient holds each one's); "
            "return (x - baseline) * grad.",
        ),
    )

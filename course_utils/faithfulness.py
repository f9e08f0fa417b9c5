"""Does an explanation say what the model really uses? Deletion curves, and Jain & Wallace's tests.

An attribution ranks a sentence's tokens; a **faithful** one ranks first the tokens the
output needs. Two ways to put that to the test, for any model read as a function:

- :func:`deletion_curve`: remove the top-``k`` tokens of a ranking, ``k = 0, 1, ..., K``,
  and record the output each time; a faithful ranking makes it fall fast, so the area under
  the curve (:func:`curve_area`) is small. Removed tokens are masked out, so the model reads
  sentences it never saw in training (Hooker et al. 2019 retrain instead; we do not);
- Jain & Wallace (2019), "Attention is not Explanation", on a model whose output reads an
  attention distribution ``alpha`` over the tokens: :func:`permuted_outputs` shuffles
  ``alpha`` among the real tokens, and :func:`adversarial_attention` searches for an
  ``alpha'`` as far from ``alpha`` as it can get (:func:`js_divergence`) while the output
  moves by at most ``epsilon``, and reports per row whether it found one or fell back to
  ``alpha``. If a very different attention gives the same output, the attention was not
  *the* explanation of that output.

Shapes as in the glossary of :mod:`course_utils` (``B`` batch, ``L`` tokens); masks are
``True`` at real tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from course_utils._validate import check_positive, check_tensor, one_output_per_example

# A model read as one output per example, given a mask (B, L) or weights (B, L)
OutputFn = Callable[[torch.Tensor], torch.Tensor]


def _check_pair(name: str, x: object, mask: object) -> None:
    check_tensor(name, x, dims=2)
    check_tensor("mask", mask, dims=2)
    if mask.dtype != torch.bool or mask.shape != x.shape:
        raise ValueError(
            f"mask must be a boolean tensor of {name}'s shape {tuple(x.shape)}, got dtype "
            f"{mask.dtype} and shape {tuple(mask.shape)}"
        )


def _outputs(f: OutputFn, arg: torch.Tensor) -> torch.Tensor:
    return one_output_per_example(f, arg, takes="(B, L)")


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (natural log) between distributions along the last axis.

    ``JSD = (KL(p || m) + KL(q || m)) / 2`` with ``m = (p + q) / 2``, ``0 log 0 = 0``; it lies
    in ``[0, ln 2]`` and is symmetric. ``p`` and ``q`` ``(..., L)`` -> ``(...)``.

    >>> js_divergence(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))  # disjoint: ln 2
    tensor(0.6931)
    """
    check_tensor("p", p)
    check_tensor("q", q)
    if p.shape != q.shape or p.dim() == 0:
        raise ValueError(
            f"p and q must have one shape (..., L), got {tuple(p.shape)} and {tuple(q.shape)}"
        )
    m = (p + q) / 2

    def kl(a: torch.Tensor) -> torch.Tensor:
        # a log(a / m), zero where a is zero (m > 0 wherever a > 0)
        return torch.where(
            a > 0, a * (a.clamp(min=1e-30).log() - m.clamp(min=1e-30).log()), 0.0
        ).sum(-1)

    return ((kl(p) + kl(q)) / 2).clamp(min=0.0)


def deletion_curve(
    f: OutputFn, mask: torch.Tensor, scores: torch.Tensor, steps: int
) -> torch.Tensor:
    """The output as the top-scored tokens are removed one by one: ``(B, steps + 1)``.

    ``f(mask) -> (B,)`` runs the model on the tokens a mask keeps; ``scores (B, L)`` rank
    each sentence's tokens (highest removed first; padding is never chosen; ties go to the
    earlier token). Column ``k`` is the output with the top ``k`` tokens removed, column 0
    the untouched output. A sentence with fewer than ``k`` real tokens keeps its last one.

    >>> f = lambda mask: mask[:, :2].sum(1).float()  # counts how many of tokens 0, 1 remain
    >>> deletion_curve(f, torch.ones(1, 3, dtype=torch.bool), torch.tensor([[0.9, 0.1, 0.5]]), 2)
    tensor([[2., 1., 1.]])
    """
    _check_pair("scores", scores, mask)
    check_positive("steps", steps)
    order = (-scores.detach().masked_fill(~mask, float("-inf"))).argsort(
        dim=-1, stable=True
    )  # (B, L)
    n_real = mask.sum(1)  # (B,)
    kept = mask.clone()
    curve = [_outputs(f, kept)]
    for k in range(steps):
        rows = torch.nonzero(n_real > k + 1).squeeze(1)  # never remove a sentence's last token
        kept[rows, order[rows, k]] = False
        curve.append(_outputs(f, kept.clone()))
    return torch.stack(curve, 1)


def curve_area(curve: torch.Tensor) -> torch.Tensor:
    """The normalised area under curves ``(B, K + 1)`` sampled at ``k = 0 .. K``: the
    trapezoid rule divided by ``K``, so a constant curve ``c`` has area ``c``. ``(B,)``.

    >>> curve_area(torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5]]))
    tensor([0.2500, 0.5000])
    """
    check_tensor("curve", curve, dims=2)
    if curve.shape[1] < 2:
        raise ValueError(
            f"curve must hold at least two points (B, K + 1), got {tuple(curve.shape)}"
        )
    return torch.trapezoid(curve, dim=1) / (curve.shape[1] - 1)


def permuted_outputs(
    f: OutputFn, alpha: torch.Tensor, mask: torch.Tensor, permutations: int = 100, seed: int = 0
) -> torch.Tensor:
    """``f`` run on ``alpha (B, L)`` shuffled among each sentence's real tokens, ``(P, B)``.

    Row ``p`` is the output under the ``p``-th seeded random permutation (padding stays
    where it is, so each shuffled row is still a distribution over the real tokens).

    >>> f = lambda a: a[:, 0]  # reads the weight on the first token
    >>> out = permuted_outputs(f, torch.tensor([[1.0, 0.0, 0.0]]), torch.ones(1, 3, dtype=torch.bool), 300)
    >>> round(out.mean().item(), 1)  # the weight lands on token 0 a third of the time
    0.3
    """
    _check_pair("alpha", alpha, mask)
    check_positive("permutations", permutations)
    g = torch.Generator().manual_seed(seed)
    in_order = mask.float().argsort(dim=-1, descending=True, stable=True)  # real positions first
    real_first = mask.gather(1, in_order)  # (B, L): True for the first n_real entries
    outs = []
    for _ in range(permutations):
        noise = torch.rand(alpha.shape, generator=g).to(alpha.device).masked_fill(~mask, 2.0)
        order = noise.argsort(-1)  # (B, L): the real positions in a random order, then padding
        source = alpha.gather(1, in_order)  # (B, L): the real weights in order, then padding
        shuffled = torch.zeros_like(alpha)  # the j-th real weight goes to the j-th random spot
        shuffled.scatter_(1, order, torch.where(real_first, source, 0.0))
        outs.append(_outputs(f, shuffled))
    return torch.stack(outs)


class Adversary(NamedTuple):
    """What :func:`adversarial_attention` found, one row per sentence.

    - ``attention (B, L)``: the farthest ``alpha'`` seen that kept the output within
      ``epsilon``, or ``alpha`` itself where no candidate did;
    - ``found (B,)``: ``True`` where such an ``alpha'`` other than ``alpha`` was found,
      ``False`` where the row fell back to ``alpha``;
    - ``jsd (B,)``: ``JSD(alpha, attention)``, 0 on the rows that fell back;
    - ``moved (B,)``: ``|f(attention) - f(alpha)|``, at most ``epsilon`` on every row.
    """

    attention: torch.Tensor
    found: torch.Tensor
    jsd: torch.Tensor
    moved: torch.Tensor


def adversarial_attention(
    f: OutputFn,
    alpha: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.01,
    steps: int = 300,
    lr: float = 0.2,
    penalty: float = 10.0,
    seed: int = 0,
) -> Adversary:
    """An attention ``alpha' (B, L)`` far from ``alpha`` whose output stays within ``epsilon``.

    Jain & Wallace's search: maximise ``JSD(alpha, alpha')`` minus ``penalty`` times how far
    ``|f(alpha') - f(alpha)|`` exceeds ``epsilon``, with ``alpha' = softmax(z)`` over the
    real tokens and ``z`` free logits (seeded random start), by Adam for ``steps`` steps.
    Keeps, per row, the ``alpha'`` of largest divergence among those seen that kept the
    output within ``epsilon``; a row where none did falls back to ``alpha`` itself, and the
    returned :class:`Adversary` says which rows did (``found``) and how far each returned
    attention lies from ``alpha`` (``jsd``). So the constraint holds on every row, and only
    ``found`` and ``jsd`` say whether the search succeeded. The search is local (it can
    climb to a lesser far point than the farthest), so ``jsd`` is a lower bound on how far
    an attention that keeps the output can lie. ``f`` must be differentiable.

    >>> f = lambda a: a[:, 0]  # reads the weight on the first token only
    >>> mask = torch.tensor([[True, True, True], [True, False, False]])
    >>> alpha = torch.tensor([[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]])
    >>> adv = adversarial_attention(f, alpha, mask)
    >>> adv.found  # the second sentence has one real token: no other attention exists
    tensor([ True, False])
    >>> adv.jsd[1].item()
    0.0
    """
    _check_pair("alpha", alpha, mask)
    check_positive("steps", steps)
    for name, value in (("epsilon", epsilon), ("lr", lr), ("penalty", penalty)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    alpha = alpha.detach()
    with torch.no_grad():
        target = _outputs(f, alpha)
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(alpha.shape, generator=g).to(alpha).requires_grad_(True)
    optimizer = torch.optim.Adam([z], lr=lr)
    best = alpha.clone()
    best_jsd = alpha.new_zeros(alpha.shape[0])  # (B,), in alpha's dtype and on its device
    best_moved = alpha.new_zeros(alpha.shape[0])
    found = torch.zeros(alpha.shape[0], dtype=torch.bool, device=alpha.device)
    with torch.enable_grad():
        for _ in range(steps):
            candidate = torch.softmax(z.masked_fill(~mask, float("-inf")), dim=-1)
            moved = (_outputs(f, candidate) - target).abs()  # (B,)
            jsd = js_divergence(alpha, candidate)  # (B,)
            with torch.no_grad():  # keep the farthest candidate that meets the constraint
                better = (moved <= epsilon) & (jsd > best_jsd)
                best[better], best_jsd[better] = candidate[better], jsd[better]
                best_moved[better] = moved[better]
                found |= better
            objective = jsd - penalty * (moved - epsilon).clamp(min=0)
            optimizer.zero_grad()
            (-objective.sum()).backward()
            optimizer.step()
    return Adversary(best, found, best_jsd.detach(), best_moved.detach())

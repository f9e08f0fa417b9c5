"""Which input tokens an output depends on: attributions, and how to compare them.

An attribution method gives each input token a score for one scalar output of a model (a
class logit, a similarity). The gradient methods here need only a function ``f`` from an
input ``x (B, L, E)`` (token embeddings) to one output per example ``(B,)``; they return a
score per feature ``(B, L, E)``, which :func:`token_scores` sums to one per token ``(B, L)``.

- :func:`gradient_x_input`: ``x * df/dx``; on a linear model ``f(x) = sum(w * x)`` it is
  exactly ``w * x``;
- :func:`integrated_gradients` (Sundararajan et al., 2017): the gradient averaged along the
  straight path from a baseline to ``x``, times ``x - baseline``; its scores add up to
  ``f(x) - f(baseline)`` (completeness), up to the error of the ``steps``-point midpoint
  rule, which :func:`completeness_gap` measures;
- :func:`occlusion`: leave one token out (replace it by the baseline) and record how far the
  output falls, ``(B, L)``: the faithfulness reference, one forward pass per token;
- :func:`attention_attribution`: the attention weights themselves, the last layer's heads
  averaged (or the rollout through all layers), read from one query or averaged over all;
- :func:`value_norms` (Kobayashi et al., 2020): the size of what each weight actually moves,
  ``|| sum_h alpha^h_ij W_O^h W_V^h x_j ||``, the weight times the vector it reads;
- :func:`spearman` (rank correlation, ties share their mean rank) and
  :func:`precision_at_k` (how many of the top-k tokens are in a known rationale), to score
  methods against each other and against the truth.

Shapes as in the glossary of :mod:`course_utils` (``B`` batch, ``L`` tokens, ``E`` the
embedding size, ``H`` heads).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_utils._validate import check_positive, check_tensor, one_output_per_example
from course_utils.attention import MultiHeadAttention
from course_utils.interpret import Attentions, attention_rollout, stack_attentions

# A model read as one scalar per example: x (B, ...) -> (B,)
ScalarFn = Callable[[torch.Tensor], torch.Tensor]


def _check_input(x: object) -> None:
    check_tensor("x", x)
    if x.dim() < 2 or not x.is_floating_point():
        raise ValueError(
            f"x must be a floating-point (B, L, ...) tensor, got shape {tuple(x.shape)} "
            f"and dtype {x.dtype}"
        )


def _baseline(x: torch.Tensor, baseline: torch.Tensor | None) -> torch.Tensor:
    """``None`` -> zeros like ``x``; else ``baseline`` broadcast to ``x``'s shape."""
    if baseline is None:
        return torch.zeros_like(x)
    check_tensor("baseline", baseline)
    try:
        return torch.broadcast_to(baseline.to(x), x.shape)
    except RuntimeError:
        raise ValueError(
            f"baseline must broadcast to x {tuple(x.shape)}, got {tuple(baseline.shape)}"
        ) from None


def _scalars(f: ScalarFn, x: torch.Tensor) -> torch.Tensor:
    """``f(x)``, checked to be one number per example ``(B,)``."""
    return one_output_per_example(f, x, takes="x")


def _gradient(f: ScalarFn, x: torch.Tensor) -> torch.Tensor:
    """``df/dx`` for each example: the examples are independent, so one backward of the sum."""
    with torch.enable_grad():  # also inside a caller's torch.no_grad()
        x = x.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(_scalars(f, x).sum(), x)
    return grad


def gradient_x_input(f: ScalarFn, x: torch.Tensor) -> torch.Tensor:
    """Gradient times input, ``x * df/dx``: ``(B, L, ...)`` in, the same shape out.

    >>> w = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    >>> gradient_x_input(lambda x: (w * x).sum((1, 2)), torch.ones(1, 2, 2))
    tensor([[[ 1.0000, -2.0000],
             [ 3.0000,  0.5000]]])
    """
    _check_input(x)
    return x.detach() * _gradient(f, x)


def integrated_gradients(
    f: ScalarFn, x: torch.Tensor, baseline: torch.Tensor | None = None, steps: int = 32
) -> torch.Tensor:
    """Integrated gradients: ``(x - baseline) * mean_k df/dx(baseline + a_k (x - baseline))``.

    The path integral is approximated by the midpoint rule, ``a_k = (k + 1/2) / steps`` for
    ``k = 0 .. steps - 1``; the baseline defaults to zeros (a "no input" embedding). Returns
    the shape of ``x``. Their sum is ``f(x) - f(baseline)`` up to an error that shrinks
    as ``steps`` grows (see :func:`completeness_gap`).

    >>> f = lambda x: (x**2).sum((1, 2))  # the gradient grows along the path
    >>> integrated_gradients(f, torch.tensor([[[1.0, 2.0]]]), steps=4)
    tensor([[[1., 4.]]])
    """
    _check_input(x)
    check_positive("steps", steps)
    base = _baseline(x, baseline)
    total = torch.zeros_like(x)
    for k in range(steps):  # one backward pass per point of the path
        alpha = (k + 0.5) / steps
        total = total + _gradient(f, base + alpha * (x.detach() - base))
    return (x.detach() - base) * total / steps


def completeness_gap(
    f: ScalarFn,
    x: torch.Tensor,
    attributions: torch.Tensor,
    baseline: torch.Tensor | None = None,
) -> torch.Tensor:
    """``|sum(attributions) - (f(x) - f(baseline))|`` per example, ``(B,)``.

    Zero for exact integrated gradients; the midpoint rule leaves an error of order
    ``1 / steps**2`` on a smooth model.

    >>> f = lambda x: (x**3).sum((1, 2))
    >>> x = torch.tensor([[[1.0, 2.0]]])
    >>> gap = [float(completeness_gap(f, x, integrated_gradients(f, x, steps=s))) for s in (2, 8)]
    >>> gap[1] < gap[0] / 10
    True
    """
    _check_input(x)
    check_tensor("attributions", attributions)
    if attributions.shape != x.shape:
        raise ValueError(
            f"attributions must have x's shape {tuple(x.shape)}, got {tuple(attributions.shape)}"
        )
    base = _baseline(x, baseline)
    with torch.no_grad():
        change = _scalars(f, x) - _scalars(f, base)  # (B,)
    return (attributions.flatten(1).sum(1) - change).abs()


def token_scores(attributions: torch.Tensor) -> torch.Tensor:
    """Per-feature scores ``(B, L, E)`` -> one per token ``(B, L)``, summed over ``E``.

    >>> token_scores(torch.ones(1, 3, 4))
    tensor([[4., 4., 4.]])
    """
    check_tensor("attributions", attributions, dims=3)
    return attributions.sum(-1)


def occlusion(f: ScalarFn, x: torch.Tensor, baseline: torch.Tensor | None = None) -> torch.Tensor:
    """Leave-one-out occlusion: ``f(x) - f(x with token i replaced by the baseline)``.

    ``x (B, L, ...)``; ``baseline`` broadcasts to ``x`` (default zeros). Returns ``(B, L)``:
    how far the output falls without each token. One forward pass per token.

    >>> f = lambda x: x[:, :, 0].max(1).values  # the output reads only the largest token
    >>> occlusion(f, torch.tensor([[[1.0], [3.0], [2.0]]]))
    tensor([[0., 1., 0.]])
    """
    _check_input(x)
    base = _baseline(x, baseline)
    with torch.no_grad():
        full = _scalars(f, x)  # (B,)
        drops = []
        for i in range(x.shape[1]):
            occluded = x.clone()
            occluded[:, i] = base[:, i]
            drops.append(full - _scalars(f, occluded))
    return torch.stack(drops, 1)  # (B, L)


def attention_attribution(
    attentions: Attentions,
    query: int | None = None,
    attention_mask: torch.Tensor | None = None,
    rollout: bool = False,
) -> torch.Tensor:
    """Attention weights read as an attribution: the weight on each key token, ``(B, L)``.

    The last layer's heads are averaged (or, with ``rollout=True``, the rollout through all
    layers, :func:`course_utils.interpret.attention_rollout`). ``query`` picks the row of one
    query (e.g. 0 for a [CLS] token); ``None`` averages the rows of every real query, as a
    mean-pooled sentence embedding reads them. ``attention_mask (B, L)``: ``True`` at real
    tokens; padded keys get zero.

    >>> A = torch.tensor([[0.5, 0.5], [0.0, 1.0]])[None, None]  # (1, 1, 2, 2)
    >>> attention_attribution([A], query=0), attention_attribution([A])
    (tensor([[0.5000, 0.5000]]), tensor([[0.2500, 0.7500]]))
    """
    A = stack_attentions(attentions)  # (num_layers, B, H, L, L)
    B, L = A.shape[1], A.shape[-1]
    if attention_mask is None:
        real = torch.ones(B, L, dtype=A.dtype, device=A.device)
    else:
        check_tensor("attention_mask", attention_mask)
        if tuple(attention_mask.shape) != (B, L):
            raise ValueError(
                f"attention_mask must be (B, L) = {(B, L)}, got {tuple(attention_mask.shape)}"
            )
        real = attention_mask.to(A)
    weights = attention_rollout(A) if rollout else A[-1].mean(1)  # (B, L, L)
    if query is None:
        rows = (weights * real[:, :, None]).sum(1) / real.sum(1, keepdim=True).clamp(min=1)
    else:
        if isinstance(query, bool) or not isinstance(query, int) or not 0 <= query < L:
            raise ValueError(f"query must be an int position in 0..{L - 1} or None, got {query!r}")
        rows = weights[:, query]  # (B, L)
    return rows * real


def value_norms(mha: MultiHeadAttention, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Kobayashi et al. (EMNLP 2020): the norm of what query ``i`` takes from token ``j``,
    ``|| sum_h alpha^h_ij f^h(x_j) ||`` with ``f^h(x) = W_O^h (W_V^h x + b_V^h)``, the
    vector head ``h`` writes per unit of weight, ``(B, L, L)``. A large weight on a
    small vector moves little; attention weights alone cannot show it.

    ``mha``: the attention module, ``x (B, L, E)`` its input, ``weights (B, H, L, L)`` the
    weights it used on ``x``. The output projection's bias is left out (no token owns it).

    >>> from course_utils.attention import MultiHeadAttention
    >>> mha, x = MultiHeadAttention(4, 2), torch.randn(1, 3, 4)
    >>> value_norms(mha, x, mha(x, x, x)[1]).shape
    torch.Size([1, 3, 3])
    """
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    check_tensor("x", x, dims=3)
    check_tensor("weights", weights, dims=4)
    B, L, E = x.shape
    H, D = mha.num_heads, mha.head_dim
    if E != H * D or tuple(weights.shape) != (B, H, L, L):
        raise ValueError(
            f"x must be (B, L, E) with E = {H * D} and weights (B, H, L, L) = {(B, H, L, L)}, "
            f"got x {tuple(x.shape)} and weights {tuple(weights.shape)}"
        )
    v = mha.v_proj(x).view(B, L, H, D)  # (B, L, H, D): each head's value of each token
    w_o = mha.out_proj.weight.view(E, H, D)  # (E, H, D): head h's columns of W_O
    f = torch.einsum("blhd,ehd->bhle", v, w_o)  # (B, H, L, E): what head h writes, per token
    moved = torch.einsum("bhij,bhje->bije", weights, f)  # (B, L, L, E): weight times vector
    return moved.norm(dim=-1)


def _ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks ``1 .. n`` along the last axis; tied values share the mean of their ranks."""
    # a value's mean rank over its ties: (how many lie below it) + (ties + 1) / 2;
    # (..., n, n) comparisons are cheap for the few dozen tokens of a sentence
    below = (x[..., None, :] < x[..., :, None]).sum(-1)  # (..., n): values below each one
    ties = (x[..., None, :] == x[..., :, None]).sum(-1)  # (..., n): values equal to each one
    return below.double() + (ties.double() + 1) / 2


def spearman(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Spearman's rank correlation along the last axis: Pearson's correlation of the ranks.

    ``a`` and ``b`` ``(..., n)`` with ``n >= 2``; returns ``(...)``. Ties share their mean
    rank; a constant row (no ranking at all) gives NaN, as ``scipy.stats.spearmanr`` does.

    >>> spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 5.0]))
    tensor(-0.5000)
    """
    check_tensor("a", a)
    check_tensor("b", b)
    if a.shape != b.shape or a.dim() == 0 or a.shape[-1] < 2:
        raise ValueError(
            f"a and b must have one shape (..., n) with n >= 2, got {tuple(a.shape)} and "
            f"{tuple(b.shape)}"
        )
    ra, rb = _ranks(a.detach()), _ranks(b.detach())
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    rho = (ra * rb).sum(-1) / ((ra**2).sum(-1) * (rb**2).sum(-1)).sqrt()
    return rho.to(a.dtype if a.is_floating_point() else torch.float32)


def precision_at_k(scores: torch.Tensor, rationale: torch.Tensor, k: int) -> torch.Tensor:
    """The share of the ``k`` highest-scored tokens that lie in the rationale, per example.

    ``scores (B, L)``; ``rationale (B, L)`` boolean, ``True`` at the tokens the label truly
    depends on. Returns ``(B,)``. Ties are broken by position (the earlier token first).

    >>> precision_at_k(torch.tensor([[0.1, 0.9, 0.5, 0.2]]),
    ...                torch.tensor([[False, True, False, True]]), k=2)
    tensor([0.5000])
    """
    check_tensor("scores", scores, dims=2)
    check_tensor("rationale", rationale)
    if rationale.dtype != torch.bool or rationale.shape != scores.shape:
        raise ValueError(
            f"rationale must be a boolean (B, L) = {tuple(scores.shape)} tensor, got dtype "
            f"{rationale.dtype} and shape {tuple(rationale.shape)}"
        )
    check_positive("k", k)
    if k > scores.shape[1]:
        raise ValueError(f"k must be at most L = {scores.shape[1]}, got {k}")
    # a stable sort on the negated scores keeps the earlier token first among ties
    top = (-scores.detach()).argsort(dim=-1, stable=True)[:, :k]  # (B, k)
    return rationale.gather(1, top).float().mean(1)

"""Attention as a soft dictionary lookup: score functions, masked softmax, and attention.

Shapes follow one legend: ``Lq`` queries and ``Lk`` keys, ``D`` features per query/key,
``Dv`` per value, and any number of leading batch dimensions ``...``. Masks are boolean and
mean the same everywhere in the course: ``True`` = this position may be attended to.
"""

from __future__ import annotations

import math

import torch
from torch import nn


# ---------------------------------------------------------------------------------------
# Input checks: every public function names the argument and the shapes it got.
# ---------------------------------------------------------------------------------------
def _check_tensor(name: str, x, min_dim: int = 2) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dims, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def _check_batch_dims(names: str, *tensors: torch.Tensor) -> None:
    """Leading (batch) dims must broadcast; the last two dims are the matrix dims."""
    try:
        torch.broadcast_shapes(*(t.shape[:-2] for t in tensors))
    except RuntimeError:
        shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
        raise ValueError(f"{names} have batch dims that do not broadcast: {shapes}") from None


def _check_query_key(query: torch.Tensor, key: torch.Tensor) -> None:
    _check_tensor("query", query)
    _check_tensor("key", key)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            "query and key must have the same feature size (last dim), got "
            f"query {tuple(query.shape)} and key {tuple(key.shape)}"
        )
    _check_batch_dims("query and key", query, key)


def _check_mask(mask, scores_shape: torch.Size) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be boolean (True = may attend), got dtype {mask.dtype} "
            f"with shape {tuple(mask.shape)}"
        )
    try:
        ok = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} (..., Lq, Lk)"
        )


def _check_sized_query_key(module: nn.Module, query, key) -> None:
    """For a score module built for ``query_dim`` and ``key_dim`` features."""
    _check_tensor("query", query)
    _check_tensor("key", key)
    if query.shape[-1] != module.query_dim or key.shape[-1] != module.key_dim:
        raise ValueError(
            f"{type(module).__name__} expects query (..., Lq, {module.query_dim}) and key "
            f"(..., Lk, {module.key_dim}), got query {tuple(query.shape)} and key "
            f"{tuple(key.shape)}"
        )
    _check_batch_dims("query and key", query, key)


# ---------------------------------------------------------------------------------------
# Score functions: how well does each query match each key?
# ---------------------------------------------------------------------------------------
def dot_product_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``score(q, k) = q . k``: ``(..., Lq, D), (..., Lk, D) -> (..., Lq, Lk)``."""
    _check_query_key(query, key)
    return query @ key.transpose(-2, -1)  # (..., Lq, D) @ (..., D, Lk) -> (..., Lq, Lk)


def scaled_dot_product_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``score(q, k) = q . k / sqrt(D)``, which keeps unit variance for unit-variance inputs."""
    _check_query_key(query, key)
    D = query.shape[-1]
    return query @ key.transpose(-2, -1) / math.sqrt(D)  # (..., Lq, Lk)


class AdditiveScore(nn.Module):
    """Additive (Bahdanau) score ``v^T tanh(W_q q + W_k k)``; query and key sizes may differ.

    ``forward(query (..., Lq, query_dim), key (..., Lk, key_dim)) -> (..., Lq, Lk)``.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int):
        super().__init__()
        self.query_dim, self.key_dim, self.hidden_dim = query_dim, key_dim, hidden_dim
        self.w_q = nn.Linear(query_dim, hidden_dim, bias=False)
        self.w_k = nn.Linear(key_dim, hidden_dim, bias=False)
        self.v = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        _check_sized_query_key(self, query, key)
        q = self.w_q(query).unsqueeze(-2)  # (..., Lq, H) -> (..., Lq, 1, H)
        k = self.w_k(key).unsqueeze(-3)  # (..., Lk, H) -> (..., 1, Lk, H)
        # note: broadcasting builds all Lq x Lk sums at once: (..., Lq, Lk, H)
        return self.v(torch.tanh(q + k)).squeeze(-1)  # (..., Lq, Lk, 1) -> (..., Lq, Lk)


class BilinearScore(nn.Module):
    """Luong's "general" (bilinear) score ``q^T W k``; query and key sizes may differ.

    ``forward(query (..., Lq, query_dim), key (..., Lk, key_dim)) -> (..., Lq, Lk)``.
    """

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.query_dim, self.key_dim = query_dim, key_dim
        # W maps a key into query space, so the score is a dot product there.
        self.w = nn.Linear(key_dim, query_dim, bias=False)

    def forward(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        _check_sized_query_key(self, query, key)
        return query @ self.w(key).transpose(-2, -1)  # (..., Lq, Dq) @ (..., Dq, Lk)


GeneralScore = BilinearScore  # the name Luong et al. (2015) use


# ---------------------------------------------------------------------------------------
# Softmax with a mask, and attention itself
# ---------------------------------------------------------------------------------------
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last axis, over allowed positions only (``mask`` True = allowed).

    ``mask`` must broadcast to ``scores``. A row with no allowed position gives all zeros,
    never NaN, and passes zero gradient.
    """
    _check_tensor("scores", scores, min_dim=1)
    if mask is None:
        return torch.softmax(scores, dim=-1)
    _check_mask(mask, scores.shape)
    # A finite fill (not -inf) keeps a fully masked row finite: its softmax is uniform
    # garbage, which the second masked_fill then zeroes, with zero gradient.
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=-1).masked_fill(~mask, 0.0)


def causal_mask(Lq: int, Lk: int | None = None, device=None) -> torch.Tensor:
    """``(Lq, Lk)`` boolean mask, True on and below the diagonal: query i sees keys 0..i.

    Aligned at the top-left, as ``torch.nn.functional.scaled_dot_product_attention`` does
    for ``is_causal=True``.
    """
    Lk = Lq if Lk is None else Lk
    return torch.ones(Lq, Lk, dtype=torch.bool, device=device).tril()


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(Q K^T / sqrt(D)) V`` with an optional boolean mask and/or causal mask.

    ``query (..., Lq, D), key (..., Lk, D), value (..., Lk, Dv) -> (output (..., Lq, Dv),
    weights (..., Lq, Lk))``. The output equals ``torch.nn.functional.
    scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=is_causal)``
    wherever that is defined; a query with no allowed key gets a zero output (not NaN).
    Given both, ``mask`` and ``is_causal`` are combined (a key must pass both).
    """
    _check_query_key(query, key)
    _check_tensor("value", value)
    if value.shape[-2] != key.shape[-2]:
        raise ValueError(
            "key and value must have the same number of positions (dim -2), got "
            f"key {tuple(key.shape)} and value {tuple(value.shape)}"
        )
    _check_batch_dims("query, key and value", query, key, value)
    scores = scaled_dot_product_scores(query, key)  # (..., Lq, Lk)
    if mask is not None:
        _check_mask(mask, scores.shape)
    if is_causal:
        causal = causal_mask(query.shape[-2], key.shape[-2], device=query.device)
        mask = causal if mask is None else mask & causal
    weights = masked_softmax(scores, mask)  # (..., Lq, Lk)
    return weights @ value, weights  # (..., Lq, Lk) @ (..., Lk, Dv) -> (..., Lq, Dv)

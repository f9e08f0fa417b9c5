"""Attention as a soft dictionary lookup: score functions, masked softmax, and attention.

Shapes follow the glossary of :mod:`course_utils` (``Lq`` queries, ``Lk`` keys, ``D`` and ``Dv``
features per query/key and value, leading batch dims ``...``). Masks are boolean and mean
the same everywhere in the course: ``True`` = this position may be attended to.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_utils._validate import (
    check_batch_dims,
    check_bool_mask,
    check_float_tensor,
    check_positive,
    check_query_key,
    check_scores_mask,
    check_sized_query_key,
)

Device = torch.device | str | None  # where a new tensor goes (None: the default device)
Mask = torch.Tensor | None  # a boolean mask (True = may attend), or no mask


# ---------------------------------------------------------------------------------------
# Score functions: how well does each query match each key?
# ---------------------------------------------------------------------------------------
def dot_product_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``score(q, k) = q . k``: ``(..., Lq, D), (..., Lk, D) -> (..., Lq, Lk)``."""
    check_query_key(query, key)
    return query @ key.transpose(-2, -1)  # (..., Lq, D) @ (..., D, Lk) -> (..., Lq, Lk)


def scaled_dot_product_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``score(q, k) = q . k / sqrt(D)``, which keeps unit variance for unit-variance inputs."""
    check_query_key(query, key)
    D = query.shape[-1]
    return query @ key.transpose(-2, -1) / math.sqrt(D)  # (..., Lq, Lk)


class AdditiveScore(nn.Module):
    """Additive (Bahdanau) score ``v^T tanh(W_q q + W_k k)``; query and key sizes may differ.

    ``forward(query (..., Lq, query_dim), key (..., Lk, key_dim)) -> (..., Lq, Lk)``, ``A = hidden_dim``.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int):
        super().__init__()
        self.query_dim, self.key_dim, self.hidden_dim = query_dim, key_dim, hidden_dim
        self.w_q = nn.Linear(query_dim, hidden_dim, bias=False)
        self.w_k = nn.Linear(key_dim, hidden_dim, bias=False)
        self.v = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        check_sized_query_key(self, query, key)
        q = self.w_q(query).unsqueeze(-2)  # (..., Lq, A) -> (..., Lq, 1, A)
        k = self.w_k(key).unsqueeze(-3)  # (..., Lk, A) -> (..., 1, Lk, A)
        # note: broadcasting builds all Lq x Lk sums at once: (..., Lq, Lk, A)
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
        check_sized_query_key(self, query, key)
        return query @ self.w(key).transpose(-2, -1)  # (..., Lq, query_dim) @ (..., query_dim, Lk)


GeneralScore = BilinearScore  # the name Luong et al. (2015) use


# ---------------------------------------------------------------------------------------
# Softmax with a mask, and attention itself
# ---------------------------------------------------------------------------------------
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last axis, over allowed positions only (``mask`` True = allowed).

    ``mask`` must broadcast to ``scores``. A row with no allowed position gives all zeros,
    never NaN, and passes zero gradient.
    """
    check_float_tensor("scores", scores, min_dim=1)
    if mask is not None:
        check_scores_mask(mask, scores.shape)
    return _masked_softmax(scores, mask)


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """:func:`masked_softmax` without its checks, for the functions of this module that have
    checked the mask already: a mask is checked once, where it enters, and trusted below."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    # A finite fill (not -inf) keeps a fully masked row finite: its softmax is uniform
    # garbage, which the second masked_fill then zeroes, with zero gradient.
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=-1).masked_fill(~mask, 0.0)


def causal_mask(
    Lq: int, Lk: int | None = None, device: Device = None, offset: int = 0
) -> torch.Tensor:
    """``(Lq, Lk)`` boolean mask, True on and below a diagonal: query i sees keys 0..i + offset.

    ``offset=0`` aligns it at the top-left, as ``torch.nn.functional.scaled_dot_product_attention``
    does for ``is_causal=True``; ``offset=Lk - Lq`` at the bottom-right, which queries that
    are the last Lq of Lk positions need (a decoder with a cache of past keys, notebook 17).

    >>> causal_mask(2, 4, offset=2).int()  # two new queries after two cached keys
    tensor([[1, 1, 1, 0],
            [1, 1, 1, 1]], dtype=torch.int32)
    """
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an int, got {type(offset).__name__} {offset!r}")
    Lk = Lq if Lk is None else Lk
    return torch.ones(Lq, Lk, dtype=torch.bool, device=device).tril(diagonal=offset)


def mask_from_torch(mask: torch.Tensor) -> torch.Tensor:
    """A PyTorch attention or key-padding mask in the course convention (True = may attend).

    PyTorch's boolean masks are ``True`` where attention is *blocked*, so they are inverted.
    Its float masks are added to the scores: ``0`` keeps a position, ``-inf`` blocks it; other
    values are biases, which a boolean mask cannot express, and raise ``ValueError``.

    >>> torch_mask = torch.nn.Transformer.generate_square_subsequent_mask(3)
    >>> mask_from_torch(torch_mask)
    tensor([[ True, False, False],
            [ True,  True, False],
            [ True,  True,  True]])
    >>> mask_from_torch(torch.tensor([[False, True]]))  # key padding: True = <pad> in torch
    tensor([[ True, False]])
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype == torch.bool:
        return ~mask
    if mask.is_floating_point():
        blocked = torch.isneginf(mask)
        if not ((mask == 0) | blocked).all():
            raise ValueError("a float mask must hold only 0 (keep) and -inf (block) values")
        return ~blocked
    raise TypeError(f"mask must be boolean or float, got dtype {mask.dtype}")


def with_key_padding(
    attn_mask: Mask, padding_mask: Mask, name: str, batch: int, length: int
) -> Mask:
    """An attention mask and a ``(B, S)`` key-padding mask -> one mask (or None).

    ``padding_mask`` is ``True`` at real tokens (what ``Batch.src_mask`` gives); ``name``
    names it in error messages. The result broadcasts over heads: ``(B, 1, 1, S)`` for the
    padding alone, ``(B, 1, L, S)`` or ``(B, H, L, S)`` with an attention mask.

    >>> src_mask = torch.tensor([[True, True, False]])  # one sequence of 2 tokens + <pad>
    >>> with_key_padding(causal_mask(3), src_mask, "src_mask", 1, 3)[0, 0].int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 0]], dtype=torch.int32)
    """
    if padding_mask is None:
        return attn_mask
    check_bool_mask(name, padding_mask, "True = real token")
    if padding_mask.shape != (batch, length):
        raise ValueError(
            f"{name} must have shape (B, S) = {(batch, length)}, got {tuple(padding_mask.shape)}"
        )
    padding = padding_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S): the same for every query
    if attn_mask is None:
        return padding
    check_bool_mask("attention masks", attn_mask)
    if attn_mask.dim() == 3:  # (B, L, S) -> (B, 1, L, S), so it broadcasts over heads
        attn_mask = attn_mask[:, None]
    return attn_mask & padding


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
    check_query_key(query, key)
    check_float_tensor("value", value)
    if value.shape[-2] != key.shape[-2]:
        raise ValueError(
            "key and value must have the same number of positions (dim -2), got "
            f"key {tuple(key.shape)} and value {tuple(value.shape)}"
        )
    check_batch_dims("query, key and value", query, key, value)
    scores = scaled_dot_product_scores(query, key)  # (..., Lq, Lk)
    if mask is not None:
        check_scores_mask(mask, scores.shape)
    if is_causal:
        causal = causal_mask(query.shape[-2], key.shape[-2], device=query.device)
        mask = causal if mask is None else mask & causal
    weights = _masked_softmax(scores, mask)  # (..., Lq, Lk), the mask checked above
    return weights @ value, weights  # (..., Lq, Lk) @ (..., Lk, Dv) -> (..., Lq, Dv)


def attend(
    query: torch.Tensor, states: torch.Tensor, score: nn.Module, mask: Mask = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One attention read, as a decoder makes at each step: ``query`` (B, R) against
    ``states`` (B, S, C) -> ``(context (B, C), weights (B, S))``.

    ``score`` is any module mapping ``(B, 1, R), (B, S, C) -> (B, 1, S)``, e.g.
    :class:`AdditiveScore`. The weights are zero where ``mask`` (B, S) is False and sum to 1
    over the rest; the context is the weighted mean of the states. Bahdanau's decoder reads
    its source with it, Show, Attend and Tell's captioner an image grid, the speller of
    Listen, Attend and Spell the audio, the VQA model the image regions.

    >>> _ = torch.manual_seed(0)
    >>> states = torch.randn(1, 3, 4)
    >>> context, weights = attend(torch.randn(1, 4), states, AdditiveScore(4, 4, 5),
    ...                           torch.tensor([[True, True, False]]))
    >>> context.shape, weights[0, 2].item(), round(weights.sum().item(), 6)
    (torch.Size([1, 4]), 0.0, 1.0)
    """
    check_float_tensor("query", query, min_dim=2)
    check_float_tensor("states", states, min_dim=3)
    if query.dim() != 2 or states.dim() != 3 or query.shape[0] != states.shape[0]:
        raise ValueError(
            "query must be (B, R) and states (B, S, C) with the same B, got query "
            f"{tuple(query.shape)} and states {tuple(states.shape)}"
        )
    if mask is not None:
        check_bool_mask("mask", mask, "True = real token")
        if mask.shape != states.shape[:2]:
            raise ValueError(
                f"mask must be (B, S) = {tuple(states.shape[:2])} like states' first two dims, "
                f"got {tuple(mask.shape)}"
            )
        mask = mask.unsqueeze(1)  # (B, S) -> (B, 1, S), one query per sequence
    scores = score(query.unsqueeze(1), states)  # (B, 1, R), (B, S, C) -> (B, 1, S)
    weights = _masked_softmax(scores, mask)  # (B, 1, S), the mask checked above
    context = weights @ states  # (B, 1, S) @ (B, S, C) -> (B, 1, C)
    return context.squeeze(1), weights.squeeze(1)  # (B, C), (B, S)


# ---------------------------------------------------------------------------------------
# Multi-head attention: several attentions in parallel, each in its own subspace
# ---------------------------------------------------------------------------------------
def _mask_for_heads(
    mask: torch.Tensor, batch: int, num_heads: int, lq: int, lk: int
) -> torch.Tensor:
    """Bring a boolean mask to 4-D ``(B or 1, H or 1, Lq, Lk)``.

    Accepted: ``(Lq, Lk)`` (the same for every sequence), ``(B, Lq, Lk)`` (per sequence),
    ``(B or 1, H or 1, Lq, Lk)`` (per head). A key-padding mask is ``(B, 1, Lk)`` or
    ``(B, 1, 1, Lk)``.
    """
    check_bool_mask("mask", mask)
    given = tuple(mask.shape)
    if mask.dim() == 2:
        mask = mask[None, None]
    elif mask.dim() == 3:
        mask = mask[:, None]
    elif mask.dim() != 4:
        raise ValueError(
            f"mask must be (Lq, Lk), (B, Lq, Lk) or (B, H, Lq, Lk), got shape {tuple(mask.shape)}"
        )
    target = (batch, num_heads, lq, lk)
    if any(m not in (1, t) for m, t in zip(mask.shape, target, strict=True)):
        raise ValueError(
            f"mask of shape {given} (as 4-D: {tuple(mask.shape)}) does not fit the attention "
            f"weights' shape (B, H, Lq, Lk) = {target}"
        )
    return mask


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch-first, written out: project, split into heads, attend, merge.

    ``forward(query (B, L, E), key (B, S, E), value (B, S, E), mask=None, is_causal=False)
    -> (output (B, L, E), weights (B, H, L, S))``. Each of the ``num_heads`` heads attends in
    its own ``D = E / H``-dimensional subspace with scaled dot-product attention; their outputs
    are concatenated and mixed by ``out_proj``. ``mask`` is boolean (True = may attend) of
    shape ``(L, S)``, ``(B, L, S)`` or ``(B, H, L, S)`` (any dim may be 1); ``is_causal``
    adds the causal mask. A query with no allowed key gets a zero output, not NaN.

    ``MultiHeadAttention.from_torch(m)`` copies a batch-first ``torch.nn.MultiheadAttention``:

    >>> import torch
    >>> m = torch.nn.MultiheadAttention(8, num_heads=2, batch_first=True).eval()
    >>> mha = MultiHeadAttention.from_torch(m).eval()
    >>> x = torch.randn(3, 5, 8)
    >>> out, weights = mha(x, x, x)
    >>> out.shape, weights.shape
    (torch.Size([3, 5, 8]), torch.Size([3, 2, 5, 5]))
    >>> torch.allclose(out, m(x, x, x)[0], atol=1e-5)
    True
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        check_positive("embed_dim", embed_dim)
        check_positive("num_heads", num_heads)
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}): "
                "each head gets embed_dim / num_heads features"
            )
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape  # (B, L, E) -> (B, L, H, D) -> (B, H, L, D), D = E / H
        return x.view(B, L, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_float_tensor(name, x, min_dim=3)
            if x.dim() != 3 or x.shape[-1] != self.embed_dim:
                raise ValueError(
                    f"{name} must be (B, L, {self.embed_dim}) (batch first), got shape "
                    f"{tuple(x.shape)}"
                )
            if x.dtype != self.q_proj.weight.dtype:
                raise TypeError(
                    f"{name} has dtype {x.dtype} but the module's weights are "
                    f"{self.q_proj.weight.dtype}; convert one (e.g. module.double())"
                )
        if key.shape[:2] != value.shape[:2] or query.shape[0] != key.shape[0]:
            raise ValueError(
                "query (B, L, E), key (B, S, E) and value (B, S, E) must agree on B and S, got "
                f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
            )
        B, L, S = query.shape[0], query.shape[1], key.shape[1]
        if mask is not None:
            mask = _mask_for_heads(mask, B, self.num_heads, L, S)
        if is_causal:
            causal = causal_mask(L, S, device=query.device)
            mask = causal if mask is None else mask & causal
        q = self._split_heads(self.q_proj(query))  # (B, H, L, D)
        k = self._split_heads(self.k_proj(key))  # (B, H, S, D)
        v = self._split_heads(self.v_proj(value))  # (B, H, S, D)
        scores = scaled_dot_product_scores(q, k)  # (B, H, L, S)
        weights = _masked_softmax(scores, mask)  # the mask checked by _mask_for_heads
        heads = self.dropout(weights) @ v  # (B, H, L, D)
        merged = heads.transpose(1, 2).reshape(B, L, self.embed_dim)  # (B, L, E)
        return self.out_proj(merged), weights

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of a batch-first ``torch.nn.MultiheadAttention`` (same weights, same outputs).

        Supported: ``batch_first=True``, equal query/key/value sizes, with or without bias;
        not ``add_bias_kv`` or ``add_zero_attn``.
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"m must be a torch.nn.MultiheadAttention, got {type(m).__name__}")
        if not m.batch_first:
            raise ValueError("m must be built with batch_first=True (this course is batch-first)")
        if not m._qkv_same_embed_dim:
            raise ValueError(
                f"m has kdim={m.kdim}, vdim={m.vdim} != embed_dim={m.embed_dim}; only equal "
                "sizes are supported"
            )
        if m.bias_k is not None or m.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn are not supported")
        bias = m.in_proj_bias is not None
        new = cls(m.embed_dim, m.num_heads, bias=bias, dropout=m.dropout)
        new = new.to(device=m.in_proj_weight.device, dtype=m.in_proj_weight.dtype)
        E = m.embed_dim
        with torch.no_grad():
            for i, proj in enumerate((new.q_proj, new.k_proj, new.v_proj)):
                proj.weight.copy_(m.in_proj_weight[i * E : (i + 1) * E])
                if bias:
                    proj.bias.copy_(m.in_proj_bias[i * E : (i + 1) * E])
            new.out_proj.weight.copy_(m.out_proj.weight)
            if bias:
                new.out_proj.bias.copy_(m.out_proj.bias)
        new.train(m.training)
        return new

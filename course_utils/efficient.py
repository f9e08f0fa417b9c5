"""Attention that does not build the ``N x N`` matrix: tiled (exact) and linear.

Every function takes ``query (..., N, D)``, ``key (..., M, D)`` and ``value (..., M, Dv)``
with the same leading (batch, head) dims and returns the output ``(..., N, Dv)``:

- :func:`tiled_attention` is exact attention computed tile by tile with an online softmax
  ("flash" style); its memory grows linearly with ``N``, in training too, because
  :class:`TiledAttentionFunction` recomputes tiles in the backward pass instead of storing
  them.
- :func:`linear_attention` replaces ``exp(q . k / sqrt(D))`` by ``phi(q) . phi(k)`` with
  ``phi = elu + 1``, which costs ``O(N D Dv)`` instead of ``O(N^2 D)``: attention with a
  different similarity kernel, not an estimate of softmax attention.
  :func:`feature_map_attention` is the same computation for any positive features
  (:mod:`course_utils.random_features` feeds it Performer's, which do estimate softmax).
- :func:`naive_attention` builds the whole matrix: the reference the others are measured
  against.

Attention restricted to a sparse pattern (sliding window, block-sparse) is in
:mod:`course_utils.sparse_attention`; measuring memory is :mod:`course_utils.measure`.

Masks mean what they mean everywhere in the course: ``True`` = this position may be
attended to. Causal masks are aligned at the top left, as in
``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.autograd.function import FunctionCtx

from course_utils._validate import check_positive, check_qkv

# Tile edge (queries and keys per tile), from `benchmarks/attention.py --block-sizes` (N=4096,
# B=2, H=8, D=64, 2 threads, this project's 2-core AMD EPYC, 2026-12-04; time / SDPA's, not
# causal / causal): 64: 2.12 / 1.95, 128: 1.55 / 1.47, 256: 1.33 / 1.37, 512: 1.51 / 1.84,
# 1024: 1.69 / 2.20. Small tiles pay Python's per-tile overhead; big tiles grow memory as
# block_size^2 and leave the cache.
DEFAULT_BLOCK_SIZE = 256
# Chunk length of causal linear attention: quadratic work inside a chunk, a running state
# between chunks. 32, 64 and 128 were within noise of each other at N=1024 (same machine);
# 64 keeps both the (chunk, chunk) blocks and the per-chunk (D, Dv) states small.
DEFAULT_CHUNK_SIZE = 64


# ---------------------------------------------------------------------------------------
# Naive attention: the N x N matrix, for reference and for measuring the quadratic wall
# ---------------------------------------------------------------------------------------
def naive_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``softmax(Q K^T / sqrt(D)) V`` with the whole ``(..., N, M)`` weight matrix in memory.

    >>> q = k = v = torch.randn(1, 2, 5, 4)
    >>> out = naive_attention(q, k, v, is_causal=True)
    >>> torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
    True
    """
    check_qkv(query, key, value)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (..., N, M)
    if is_causal:
        N, M = scores.shape[-2:]
        causal = torch.ones(N, M, dtype=torch.bool, device=scores.device).tril()
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ value  # (..., N, M) @ (..., M, Dv)


# ---------------------------------------------------------------------------------------
# Tiled attention with an online softmax
# ---------------------------------------------------------------------------------------
def _tile_mask(
    mask: torch.Tensor | None,
    is_causal: bool,
    q0: int,
    q1: int,
    k0: int,
    k1: int,
    device: torch.device,
) -> torch.Tensor | None:
    """The boolean mask of tile ``[q0:q1) x [k0:k1)``, or None when every entry is allowed."""
    tile = None
    if mask is not None:
        tile = mask[..., q0:q1, k0:k1]
    if is_causal and k1 - 1 > q0:  # the tile reaches above the diagonal
        rows = torch.arange(q0, q1, device=device)[:, None]
        cols = torch.arange(k0, k1, device=device)[None, :]
        causal = cols <= rows  # (q1 - q0, k1 - k0)
        tile = causal if tile is None else tile & causal
    return tile


def _key_end(is_causal: bool, q1: int, M: int) -> int:
    """Keys past the last query of a causal tile row are never visible: skip those tiles."""
    return min(M, q1) if is_causal else M


def _tiled_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    block_size: int,
    mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(output, logsumexp)``, the log of each query's softmax denominator.

    The batch dims are flattened so that each product is one ``bmm``; the scores are written
    into one buffer reused for every tile (a fresh tile-sized tensor per step costs the
    operating system's page faults each time), and every update is in place.
    """
    *batch, N, D = q.shape
    M, Dv = k.shape[-2], v.shape[-1]
    q3 = (q * (1.0 / math.sqrt(D))).reshape(-1, N, D)  # scaling Q is cheaper than scaling S
    k3, v3 = k.reshape(-1, M, D), v.reshape(-1, M, Dv)
    G, b = q3.shape[0], block_size
    out, lse = q.new_empty(G, N, Dv), q.new_empty(G, N, 1)
    s_buf = q.new_empty(G, b, b)
    # equal, aligned query and key blocks: only a diagonal tile reaches above the diagonal,
    # and every diagonal tile has the same pattern
    above = torch.ones(b, b, dtype=torch.bool, device=q.device).triu_(1) if is_causal else None
    for q0 in range(0, N, b):
        q1 = min(q0 + b, N)
        qb = q3[:, q0:q1]  # (G, b, D)
        row_max = q.new_full((G, q1 - q0, 1), float("-inf"))  # running max m
        row_sum = q.new_zeros(G, q1 - q0, 1)  # running denominator l
        acc = q.new_zeros(G, q1 - q0, Dv)  # running numerator, sum_j exp(s_j - m) v_j
        for k0 in range(0, _key_end(is_causal, q1, M), b):
            k1 = min(k0 + b, M)
            shape = (G, q1 - q0, k1 - k0)
            s = s_buf if shape == s_buf.shape else q.new_empty(shape)
            torch.bmm(qb, k3[:, k0:k1].transpose(1, 2), out=s)  # (G, b, D) @ (G, D, c)
            if is_causal and k0 == q0:
                s.masked_fill_(above[: q1 - q0, : k1 - k0], float("-inf"))
            if mask is not None:  # a view of a view: only this tile is copied
                s.masked_fill_(~mask[..., q0:q1, k0:k1].reshape(shape), float("-inf"))
            new_max = torch.maximum(row_max, s.amax(dim=-1, keepdim=True))
            safe_max = new_max
            if mask is not None:  # a row with nothing allowed so far keeps max -inf: use 0
                safe_max = new_max.masked_fill(new_max == float("-inf"), 0.0)
            p = s.sub_(safe_max).exp_()  # (G, b, c), in place: one tile of memory
            rescale = row_max.sub_(safe_max).exp_()  # exp(m_old - m_new) <= 1
            row_sum.mul_(rescale).add_(p.sum(dim=-1, keepdim=True))
            acc.mul_(rescale).baddbmm_(p, v3[:, k0:k1])  # acc + (G, b, c) @ (G, c, Dv)
            row_max = new_max
        empty = row_sum == 0  # a query that may attend nothing gets zeros, not NaN
        out[:, q0:q1] = acc.div_(row_sum.masked_fill(empty, 1.0))
        # +inf for empty rows makes exp(s - lse) = 0 in the backward pass
        lse[:, q0:q1] = (row_max + row_sum.log()).masked_fill_(empty, float("inf"))
    return out.reshape(*batch, N, Dv), lse.reshape(*batch, N)


def _tiled_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool,
    block_size: int,
    mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients w.r.t. ``q``, ``k`` and ``v``, recomputing each tile's weights."""
    N, M = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    # d(loss)/d(score_ij) = p_ij (dp_ij - delta_i), with delta_i = sum_j p_ij dp_ij = dO_i . O_i
    delta = (grad_out * out).sum(dim=-1, keepdim=True)  # (..., N, 1)
    kT, vT = k.transpose(-2, -1), v.transpose(-2, -1)
    for q0 in range(0, N, block_size):
        q1 = min(q0 + block_size, N)
        qb, dob = q[..., q0:q1, :] * scale, grad_out[..., q0:q1, :]
        lse_b, delta_b = lse[..., q0:q1, None], delta[..., q0:q1, :]
        for k0 in range(0, _key_end(is_causal, q1, M), block_size):
            k1 = min(k0 + block_size, M)
            s = qb @ kT[..., k0:k1]  # (..., b, c): the forward's scores, recomputed
            tile_mask = _tile_mask(mask, is_causal, q0, q1, k0, k1, q.device)
            if tile_mask is not None:
                s = s.masked_fill_(~tile_mask, float("-inf"))
            p = s.sub_(lse_b).exp_()  # the softmax weights of this tile, exactly
            dv[..., k0:k1, :] += p.transpose(-2, -1) @ dob  # (..., c, b) @ (..., b, Dv)
            dp = dob @ vT[..., k0:k1]  # (..., b, Dv) @ (..., Dv, c) -> (..., b, c)
            ds = p.mul_(dp.sub_(delta_b))  # reuse p's memory for d(loss)/d(scores)
            dq[..., q0:q1, :] += ds @ k[..., k0:k1, :]  # (..., b, c) @ (..., c, D)
            dk[..., k0:k1, :] += ds.transpose(-2, -1) @ qb  # (..., c, b) @ (..., b, D)
    return dq.mul_(scale), dk, dv  # scores = (scale * q) k^T


class TiledAttentionFunction(torch.autograd.Function):
    """Tiled attention whose backward recomputes tiles: it saves only Q, K, V, O and one
    log-sum-exp per query, so training memory grows linearly with N (FlashAttention's idea).

    ``TiledAttentionFunction.apply(query, key, value, is_causal, block_size, mask)``;
    prefer :func:`tiled_attention`, which checks its inputs first.
    """

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        is_causal: bool,
        block_size: int,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        out, lse = _tiled_forward(query, key, value, is_causal, block_size, mask)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.is_causal, ctx.block_size, ctx.mask = is_causal, block_size, mask
        return out

    @staticmethod
    def backward(ctx: FunctionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, key, value, out, lse = ctx.saved_tensors
        dq, dk, dv = _tiled_backward(
            q, key, value, out, lse, grad_out.contiguous(), ctx.is_causal, ctx.block_size, ctx.mask
        )
        return dq, dk, dv, None, None, None  # nothing for is_causal, block_size, mask


def tiled_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    block_size: int | None = None,
    mask: torch.Tensor | None = None,
    recompute_backward: bool = True,
) -> torch.Tensor:
    """Exact attention, ``block_size`` queries x ``block_size`` keys at a time.

    Each tile of scores updates a running row maximum, a running softmax denominator and a
    running weighted sum of values (the online softmax), so no more than one tile of scores
    exists at once. With ``is_causal`` the tiles wholly above the diagonal are skipped.
    ``mask`` (boolean, True = may attend, broadcasting to ``(..., N, M)``) is optional; a
    query with nothing allowed gets zeros. ``block_size`` defaults to
    :data:`DEFAULT_BLOCK_SIZE`.

    When gradients are needed, ``recompute_backward=True`` (the default) uses
    :class:`TiledAttentionFunction`, whose backward recomputes the tiles;
    ``recompute_backward=False`` lets autograd record every tile instead (the textbook way,
    which stores ``O(N^2)`` numbers again; kept to measure the difference).

    >>> q, k, v = torch.randn(3, 2, 10, 8).unbind(0)
    >>> out = tiled_attention(q, k, v, is_causal=True, block_size=4)
    >>> torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
    True
    """
    check_qkv(query, key, value)
    block_size = DEFAULT_BLOCK_SIZE if block_size is None else block_size
    check_positive("block_size", block_size)
    scores_shape = (*query.shape[:-1], key.shape[-2])
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"mask must be a boolean tensor (True = may attend), got {mask!r}")
        try:
            mask = mask.expand(scores_shape)  # a view: no copy
        except RuntimeError:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
                f"{scores_shape} (..., N, M)"
            ) from None
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if needs_grad and recompute_backward:
        return TiledAttentionFunction.apply(query, key, value, is_causal, block_size, mask)
    if needs_grad:  # autograd records each tile: do not reuse tensors in place
        return _tiled_forward_recorded(query, key, value, is_causal, block_size, mask)
    return _tiled_forward(query, key, value, is_causal, block_size, mask)[0]


def _tiled_forward_recorded(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    block_size: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """The same online softmax without in-place ops, so that autograd can record it."""
    *batch, N, D = q.shape
    M, scale = k.shape[-2], 1.0 / math.sqrt(D)
    rows = []
    for q0 in range(0, N, block_size):
        q1 = min(q0 + block_size, N)
        qb = q[..., q0:q1, :] * scale
        row_max = q.new_full((*batch, q1 - q0, 1), float("-inf"))
        row_sum, acc = q.new_zeros(*batch, q1 - q0, 1), q.new_zeros(*batch, q1 - q0, v.shape[-1])
        for k0 in range(0, _key_end(is_causal, q1, M), block_size):
            k1 = min(k0 + block_size, M)
            s = qb @ k[..., k0:k1, :].transpose(-2, -1)
            tile_mask = _tile_mask(mask, is_causal, q0, q1, k0, k1, q.device)
            if tile_mask is not None:
                s = s.masked_fill(~tile_mask, float("-inf"))
            new_max = torch.maximum(row_max, s.amax(dim=-1, keepdim=True)).detach()
            safe_max = new_max.masked_fill(new_max == float("-inf"), 0.0)
            p = (s - safe_max).exp()
            rescale = (row_max - safe_max).exp()
            row_sum = row_sum * rescale + p.sum(dim=-1, keepdim=True)
            acc = acc * rescale + p @ v[..., k0:k1, :]
            row_max = new_max
        rows.append(acc / row_sum.masked_fill(row_sum == 0, 1.0))
    return torch.cat(rows, dim=-2)


# ---------------------------------------------------------------------------------------
# Linear attention: a positive feature map instead of exp
# ---------------------------------------------------------------------------------------
def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """``phi(x) = elu(x) + 1``, positive everywhere (Katharopoulos et al., 2020).

    Computed as ``exp(min(x, 0)) + max(x, 0)``, the same function (``elu(x) = exp(x) - 1``
    below 0), because torch's ``elu`` evaluates ``expm1`` several times slower than ``exp``.

    >>> x = torch.linspace(-5, 5, 11)
    >>> torch.allclose(elu_feature_map(x), F.elu(x) + 1, atol=1e-6)
    True
    """
    # two full-size temporaries, not three: exp_ works in place on clamp's output (clamp's
    # backward needs only x, and exp_ keeps its own result for backward)
    return x.clamp(min=0).add_(x.clamp(max=0).exp_())


def linear_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    chunk_size: int | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """``phi(Q) (phi(K)^T V) / (phi(Q) . sum_j phi(K_j))`` with ``phi = elu + 1``.

    This is attention with weights ``phi(q_i) . phi(k_j) / sum_j' phi(q_i) . phi(k_j')``
    instead of ``softmax(q_i . k_j / sqrt(D))``: a different similarity kernel (not an
    estimate of softmax's), which costs ``O(N D Dv)`` time and memory. Causal: see
    :func:`feature_map_attention`.

    >>> q, k, v = torch.randn(3, 1, 7, 4).unbind(0)
    >>> w = (elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)).tril()
    >>> quadratic = (w / w.sum(-1, keepdim=True)) @ v
    >>> torch.allclose(linear_attention(q, k, v, is_causal=True, chunk_size=3), quadratic, atol=1e-5)
    True
    """
    check_qkv(query, key, value, same_length=is_causal)
    phi_q, phi_k = elu_feature_map(query), elu_feature_map(key)  # (..., N, D), (..., M, D)
    return feature_map_attention(phi_q, phi_k, value, is_causal, chunk_size, eps)


def feature_map_attention(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    chunk_size: int | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Linear attention given positive features ``phi_q (..., N, F)`` and ``phi_k (..., M, F)``.

    Returns ``(..., N, Dv)``, query i's output ``sum_j w_ij v_j / sum_j w_ij`` with
    ``w_ij = phi_q[i] . phi_k[j]``, without building the ``(N, M)`` weights. Causal: the
    sequence is cut into chunks of ``chunk_size`` (default :data:`DEFAULT_CHUNK_SIZE`);
    inside a chunk the masked quadratic form is used, between chunks a running ``(F, Dv)``
    state (a prefix sum).

    >>> fq, fk, v = torch.rand(2, 5, 3), torch.rand(2, 5, 3), torch.randn(2, 5, 4)
    >>> w = (fq @ fk.transpose(-2, -1)).tril()
    >>> out = feature_map_attention(fq, fk, v, is_causal=True, chunk_size=2)
    >>> torch.allclose(out, (w / w.sum(-1, keepdim=True)) @ v, atol=1e-5)
    True
    """
    check_qkv(phi_q, phi_k, value, same_length=is_causal, names=("phi_q", "phi_k", "value"))
    chunk_size = DEFAULT_CHUNK_SIZE if chunk_size is None else chunk_size
    check_positive("chunk_size", chunk_size)
    fq, fk = phi_q, phi_k
    if not is_causal:
        kv = fk.transpose(-2, -1) @ value  # (..., F, M) @ (..., M, Dv) -> (..., F, Dv)
        z = fk.sum(dim=-2)  # (..., F)
        numer = fq @ kv  # (..., N, F) @ (..., F, Dv) -> (..., N, Dv)
        denom = fq @ z.unsqueeze(-1)  # (..., N, F) @ (..., F, 1) -> (..., N, 1)
        return numer / (denom + eps)

    *batch, N, D = fq.shape  # D here is the number of features F
    Dv, c = value.shape[-1], chunk_size  # c positions per chunk
    n, pad = -(-N // c), -N % c  # n chunks
    if pad:  # padding phi(k) (not k) with zeros: padded keys add nothing to any sum
        fq, fk, value = (F.pad(x, (0, 0, 0, pad)) for x in (fq, fk, value))
    G = math.prod(batch)  # flattened batch dims: each product below is one bmm
    fq, fk, v = fq.reshape(G * n, c, D), fk.reshape(G * n, c, D), value.reshape(G * n, c, Dv)
    # Each chunk's keys summed into a (D, Dv) state and a (D,) normaliser; the states of all
    # earlier chunks (an exclusive prefix sum over chunks) as one product with a strictly
    # lower-triangular matrix of ones, (n, n) @ (G, n, D Dv): no loop over chunks, no cumsum.
    earlier = torch.ones(n, n, dtype=fq.dtype, device=fq.device).tril_(-1)
    chunk_kv = torch.bmm(fk.transpose(1, 2), v).reshape(G, n, D * Dv)
    state = torch.matmul(earlier, chunk_kv).reshape(G * n, D, Dv)
    z = torch.matmul(earlier, fk.sum(1).reshape(G, n, D)).reshape(G * n, D, 1)  # earlier keys
    # Inside a chunk: the quadratic form with a causal mask, c x c per chunk
    w = torch.bmm(fq, fk.transpose(1, 2)).tril_()  # (G n, c, c)
    numer = torch.bmm(w, v).baddbmm_(fq, state)  # (G n, c, Dv): this chunk + earlier ones
    denom = torch.baddbmm(w.sum(-1, keepdim=True), fq, z)  # (G n, c, 1): the same weights, summed
    numer = numer.reshape(*batch, n * c, Dv)[..., :N, :]
    return numer / (denom.reshape(*batch, n * c, 1)[..., :N, :] + eps)

"""Attention restricted to a sparse pattern: a sliding window, blocks plus globals, or a
coarse-to-fine hierarchy.

- :func:`sliding_window_attention`: each query sees the keys within ``window`` positions.
- :func:`block_sparse_attention`: each query sees its own and the neighbouring blocks of
  keys, plus a few global tokens that see and are seen by every position.
- :func:`hierarchical_attention`: each query sees its own and the neighbouring blocks of keys
  exactly, and every farther block through one pooled summary (two levels of a hierarchy,
  in the spirit of H-Transformer-1D). Not exact: far blocks are seen only on average.

:func:`sliding_window_mask` and :func:`block_sparse_mask` give the same patterns as boolean
``(N, N)`` masks (``True`` = may attend), so each function equals
``torch.nn.functional.scaled_dot_product_attention`` with that mask, at a cost that grows
linearly with ``N``. Inputs as in :mod:`course_utils.efficient`: ``query (..., N, D)``,
``key (..., N, D)``, ``value (..., N, Dv)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils._validate import check_positive, check_qkv
from course_utils.efficient import naive_attention


# ---------------------------------------------------------------------------------------
# Local and block-sparse attention: exact attention on a sparse pattern
# ---------------------------------------------------------------------------------------
def sliding_window_mask(
    N: int, window: int, is_causal: bool = False, device: torch.device | str | None = None
) -> torch.Tensor:
    """``(N, N)`` mask: query i sees key j when ``|i - j| < window`` (and ``j <= i`` if causal).

    >>> sliding_window_mask(4, 2, is_causal=True).int()
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 1, 1, 0],
            [0, 0, 1, 1]], dtype=torch.int32)
    """
    check_positive("N", N)
    check_positive("window", window)
    offset = torch.arange(N, device=device)[:, None] - torch.arange(N, device=device)[None, :]
    allowed = offset.abs() < window  # offset = i - j
    return allowed & (offset >= 0) if is_causal else allowed


def block_sparse_mask(
    N: int,
    block_size: int,
    num_global: int = 0,
    is_causal: bool = False,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``(N, N)`` mask: query i sees every key in its own block and the two neighbouring
    blocks of ``block_size`` positions; the first ``num_global`` tokens see and are seen by
    every position (BigBird / Longformer style). Causal keeps only ``j <= i``.

    >>> block_sparse_mask(6, 2, num_global=1).int()
    tensor([[1, 1, 1, 1, 1, 1],
            [1, 1, 1, 1, 0, 0],
            [1, 1, 1, 1, 1, 1],
            [1, 1, 1, 1, 1, 1],
            [1, 0, 1, 1, 1, 1],
            [1, 0, 1, 1, 1, 1]], dtype=torch.int32)
    """
    check_positive("N", N)
    check_positive("block_size", block_size)
    _check_global(num_global, N)
    blocks = torch.arange(N, device=device) // block_size
    allowed = (blocks[:, None] - blocks[None, :]).abs() <= 1
    allowed[:num_global, :] = True
    allowed[:, :num_global] = True
    return allowed.tril() if is_causal else allowed


def _check_global(num_global: object, N: int) -> None:
    if isinstance(num_global, bool) or not isinstance(num_global, int):
        raise TypeError(f"num_global must be an int, got {type(num_global).__name__}")
    if not 0 <= num_global <= N:
        raise ValueError(f"num_global must be in [0, N={N}], got {num_global}")


def _banded_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    block: int,
    is_causal: bool,
    window: int | None,
    num_global: int,
    far: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Queries in block b see keys in blocks b-1, b, b+1, through an ``unfold`` view.

    ``window`` (or None) restricts that to ``|i - j| < window``; the first ``num_global``
    keys are added to every query, and the first ``num_global`` queries see every key.
    ``far`` = ``(keys (..., F, D), values (..., F, Dv), bias (n_blocks, F))`` adds F more
    keys to every query block, each with an additive score bias (``-inf``: not seen).
    Memory is ``O(N * block)``: 3 blocks of scores per query (2 if causal: the block after
    is all in the future), plus ``num_global`` and F.
    """
    *batch, N, D = query.shape
    Dv = value.shape[-1]
    n_blocks = -(-N // block)
    pad = n_blocks * block - N
    scale = 1.0 / math.sqrt(D)
    q = F.pad(query * scale, (0, 0, 0, pad)).reshape(*batch, n_blocks, block, D)
    # One padding block either side, so every query block has a block before and after it
    k = F.pad(key, (0, 0, block, block + pad))  # (..., (n + 2) * block, D)
    v = F.pad(value, (0, 0, block, block + pad))
    width = (2 if is_causal else 3) * block  # keys per query block: w
    k_win = k.unfold(-2, 3 * block, block)[..., :width]  # (..., n, D, w): a view, no copy
    v_win = v.unfold(-2, 3 * block, block)[..., :width].transpose(-2, -1)  # (..., n, w, Dv)
    s = q @ k_win  # (..., n, block, D) @ (..., n, D, w) -> (..., n, block, w)

    device = query.device
    qi = torch.arange(n_blocks * block, device=device).reshape(n_blocks, block, 1)
    kj = (torch.arange(n_blocks, device=device) * block - block).reshape(n_blocks, 1, 1)
    kj = kj + torch.arange(width, device=device)  # (n, 1, w), absolute key index
    allowed = (kj >= 0) & (kj < N)  # not padding
    if window is not None:
        allowed = allowed & ((qi - kj).abs() < window)
    if is_causal:
        allowed = allowed & (kj <= qi)
    local = allowed & (kj >= num_global)  # global keys come once, from the global part below
    s = s.masked_fill_(~local, float("-inf"))  # in place: matmul's backward does not need s
    if num_global:
        g = torch.arange(num_global, device=device)
        sg = q @ key[..., None, :num_global, :].transpose(-2, -1)  # (..., n, block, num_global)
        ok = (g <= qi) if is_causal else torch.ones_like(g, dtype=torch.bool)
        s = torch.cat([s, sg.masked_fill(~ok, float("-inf"))], dim=-1)
        v_win = torch.cat(
            [v_win, value[..., None, :num_global, :].expand(*batch, n_blocks, -1, -1)], dim=-2
        )
    if far is not None:
        far_keys, far_values, far_bias = far
        sf = q @ far_keys[..., None, :, :].transpose(-2, -1)  # (..., n, block, F)
        s = torch.cat([s, sf + far_bias[:, None, :]], dim=-1)
        v_win = torch.cat([v_win, far_values[..., None, :, :].expand(*batch, n_blocks, -1, -1)], -2)
    p = torch.softmax(s, dim=-1)  # every real query sees at least itself: no empty row
    out = (p @ v_win).reshape(*batch, n_blocks * block, Dv)[..., :N, :]
    if num_global:  # global queries attend to every key: num_global x N scores, linear in N
        full = naive_attention(query[..., :num_global, :], key, value, is_causal=is_causal)
        out = torch.cat([full, out[..., num_global:, :]], dim=-2)
    return out


def sliding_window_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    window: int,
    is_causal: bool = False,
) -> torch.Tensor:
    """Exact attention restricted to ``|i - j| < window`` (and ``j <= i`` if causal).

    Equals ``F.scaled_dot_product_attention`` with ``attn_mask=sliding_window_mask(N,
    window, is_causal)``, but computes only ``O(N * window)`` scores.

    >>> q, k, v = torch.randn(3, 2, 9, 4).unbind(0)
    >>> mask = sliding_window_mask(9, 3, is_causal=True)
    >>> out = sliding_window_attention(q, k, v, window=3, is_causal=True)
    >>> torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-6)
    True
    """
    check_qkv(query, key, value, same_length=True)
    check_positive("window", window)
    return _banded_attention(query, key, value, window, is_causal, window, 0)


def block_sparse_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    block_size: int,
    num_global: int = 0,
    is_causal: bool = False,
) -> torch.Tensor:
    """Exact attention on :func:`block_sparse_mask`'s pattern: neighbouring blocks plus
    ``num_global`` global tokens, with ``O(N * (block_size + num_global))`` scores.

    >>> q, k, v = torch.randn(3, 2, 10, 4).unbind(0)
    >>> mask = block_sparse_mask(10, 3, num_global=2)
    >>> out = block_sparse_attention(q, k, v, block_size=3, num_global=2)
    >>> torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-6)
    True
    """
    check_qkv(query, key, value, same_length=True)
    check_positive("block_size", block_size)
    _check_global(num_global, query.shape[-2])
    return _banded_attention(query, key, value, block_size, is_causal, None, num_global)


def block_summaries(
    key: torch.Tensor, value: torch.Tensor, block_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The coarse level of :func:`hierarchical_attention`: per block of ``block_size``
    positions, the mean key ``(..., n_blocks, D)``, the mean value ``(..., n_blocks, Dv)`` and
    the number of positions in it ``(n_blocks,)`` (the last block may be short).

    >>> k = torch.arange(10.0).reshape(5, 2)  # keys [0, 1], [2, 3], ..., [8, 9]
    >>> mean_k, mean_v, counts = block_summaries(k, k, block_size=2)
    >>> mean_k.tolist(), counts.tolist()  # blocks {0, 1}, {2, 3}, {4}
    ([[1.0, 2.0], [5.0, 6.0], [8.0, 9.0]], [2, 2, 1])
    """
    check_qkv(key, key, value, names=("key", "key", "value"))
    check_positive("block_size", block_size)
    N = key.shape[-2]
    n_blocks = -(-N // block_size)
    pad = n_blocks * block_size - N
    counts = torch.full((n_blocks,), block_size, device=key.device)
    counts[-1] = N - (n_blocks - 1) * block_size

    def pooled(x: torch.Tensor) -> torch.Tensor:  # (..., N, E) -> (..., n_blocks, E)
        blocks = F.pad(x, (0, 0, 0, pad)).reshape(*x.shape[:-2], n_blocks, block_size, -1)
        return blocks.sum(dim=-2) / counts[:, None].to(x.dtype)

    return pooled(key), pooled(value), counts


def hierarchical_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    block_size: int,
    is_causal: bool = False,
) -> torch.Tensor:
    """Coarse-to-fine attention in two levels: exact keys nearby, block summaries far away.

    The sequence is cut into blocks of ``block_size`` positions. A query in block b sees
    every key of blocks b-1, b and b+1 exactly, as :func:`block_sparse_attention` does; each
    farther block c enters as **one** key, the mean of its keys, with the mean of its values,
    and its score is raised by ``log n_c`` (``n_c`` positions in it) so that the block weighs
    as much as its ``n_c`` keys would if they were all equal to their mean. With causal
    attention, block b sees b-1 and (up to itself) b exactly, and the summaries of the blocks
    before b-1. Cost ``O(N * (3 block_size + N / block_size))``, least near ``block_size =
    sqrt(N / 3)``: ``O(N^1.5)``; more levels (H-Transformer-1D, Zhu & Soricut 2021) bring it
    to ``O(N log N)``. Where each far block's keys and values are all equal, it equals exact
    attention; otherwise a far key is seen only through its block's mean.

    >>> q, k, v = torch.randn(3, 2, 12, 4).unbind(0)
    >>> k[:, 8:], v[:, 8:] = k[:, 8:9], v[:, 8:9]  # the far block 8-11: four equal keys
    >>> exact = F.scaled_dot_product_attention(q[:, :4], k, v)  # queries of block 0
    >>> torch.allclose(hierarchical_attention(q, k, v, block_size=4)[:, :4], exact, atol=1e-6)
    True
    """
    check_qkv(query, key, value, same_length=True)
    check_positive("block_size", block_size)
    mean_k, mean_v, counts = block_summaries(key, value, block_size)
    n_blocks = counts.shape[0]
    b = torch.arange(n_blocks, device=query.device)
    gap = b[:, None] - b[None, :]  # (query block, key block): how many blocks back
    far = gap > 1 if is_causal else gap.abs() > 1  # seen through the summary, not exactly
    bias = torch.where(far, counts.to(query.dtype).log()[None, :], float("-inf"))
    return _banded_attention(
        query,
        key,
        value,
        block_size,
        is_causal,
        None,
        0,
        far=(mean_k, mean_v, bias.to(query.dtype)),
    )

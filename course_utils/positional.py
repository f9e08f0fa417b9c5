"""Positional encodings: telling a permutation-equivariant attention layer where tokens are.

``sinusoidal_encoding`` is the fixed encoding of Vaswani et al. (2017); ``offset_rotation``
builds the matrix ``M_k`` with ``PE[p + k] = M_k PE[p]`` (the relative-offset property) and
``relative_positions`` the matrix of offsets ``j - i``. ``LearnedPositionalEmbedding`` is
the trainable alternative (BERT, GPT-2). ``apply_rotary`` and ``RotaryEmbedding`` rotate
queries and keys instead of adding anything (Su et al., 2021), so a query-key score depends
on the offset only. ``alibi_bias`` (Press et al., 2022) and ``RelativePositionBias`` (T5,
Raffel et al., 2020) add nothing to the tokens either: they add a bias that depends on the
offset only to each head's scores, fixed and linear for ALiBi, learned per bucket of offsets
for T5 (``relative_position_bucket``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_utils._validate import check_positive, check_tensor


def sinusoidal_encoding(
    max_len: int,
    d_model: int,
    base: float = 10000.0,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``(max_len, d_model)`` table with ``PE[p, 2i] = sin(p / base^(2i/d))`` and
    ``PE[p, 2i+1] = cos(p / base^(2i/d))``.

    Each pair of columns is a sine and cosine at one frequency; frequencies fall
    geometrically from 1 to about ``1 / base``. An odd ``d_model`` keeps the last sine.

    >>> pe = sinusoidal_encoding(50, 8)
    >>> pe.shape
    torch.Size([50, 8])
    >>> pe[0].tolist()  # position 0: every sine is 0, every cosine 1
    [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    >>> pe[3, :2]  # sin(3), cos(3)
    tensor([ 0.1411, -0.9900])
    """
    for name, value in (("max_len", max_len), ("d_model", d_model)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base}")
    dtype = dtype or torch.get_default_dtype()
    position = torch.arange(max_len, device=device, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, device=device, dtype=torch.float64)  # (ceil(d/2),)
    angle = position / base ** (two_i / d_model)  # (max_len, ceil(d/2))
    pe = torch.zeros(max_len, d_model, device=device, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(dtype)


def offset_rotation(
    k: int | float, d_model: int, base: float = 10000.0, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """The ``(d_model, d_model)`` matrix ``M_k`` with ``PE[p + k] = M_k @ PE[p]`` for every p.

    Block-diagonal, one 2 x 2 rotation per (sin, cos) column pair at frequency ``w_i``:
    ``[[cos(k w_i), sin(k w_i)], [-sin(k w_i), cos(k w_i)]]``, from the angle-addition
    formulas. It depends on the offset ``k`` only, never on the position ``p``.

    >>> pe = sinusoidal_encoding(20, 6, dtype=torch.float64)
    >>> M = offset_rotation(3, 6, dtype=torch.float64)
    >>> torch.allclose(pe[3:] , pe[:-3] @ M.T)
    True
    >>> torch.allclose(M @ M.T, torch.eye(6, dtype=torch.float64))  # a rotation
    True
    """
    if isinstance(k, bool) or not isinstance(k, (int, float)):
        raise TypeError(f"k must be a number, got {type(k).__name__}")
    check_positive("d_model", d_model)
    if d_model % 2:
        raise ValueError(f"d_model must be even (sin, cos pairs), got {d_model}")
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base}")
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = k / base ** (two_i / d_model)  # (d/2,): k times each frequency
    cos, sin = torch.cos(angle), torch.sin(angle)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    # new sin = sin cos(kw) + cos sin(kw); new cos = cos cos(kw) - sin sin(kw)
    M[idx, idx], M[idx, idx + 1] = cos, sin
    M[idx + 1, idx], M[idx + 1, idx + 1] = -sin, cos
    return M.to(dtype or torch.get_default_dtype())


def relative_positions(Lq: int, Lk: int | None = None) -> torch.Tensor:
    """``(Lq, Lk)`` integer matrix of offsets ``key position - query position``.

    >>> relative_positions(3).tolist()
    [[0, 1, 2], [-1, 0, 1], [-2, -1, 0]]
    """
    Lk = Lq if Lk is None else Lk
    for name, value in (("Lq", Lq), ("Lk", Lk)):
        check_positive(name, value)
    return torch.arange(Lk)[None, :] - torch.arange(Lq)[:, None]


class LearnedPositionalEmbedding(nn.Module):
    """One trainable vector per position, added to the input: ``x + weight[:L]``.

    ``forward(x (B, L, E)) -> (B, L, E)`` with ``E = d_model``. Unlike sinusoids it knows nothing
    about positions it never saw: a sequence longer than ``max_len`` is an error.

    >>> torch.manual_seed(0) and None
    >>> pos = LearnedPositionalEmbedding(max_len=8, d_model=4)
    >>> x = torch.zeros(2, 5, 4)
    >>> torch.equal(pos(x)[1], pos.weight[:5].detach())
    True
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        for name, value in (("max_len", max_len), ("d_model", d_model)):
            check_positive(name, value)
        self.max_len, self.d_model = max_len, d_model
        # Small init, as for token embeddings in GPT-2, so positions start as a mild nudge.
        self.weight = nn.Parameter(0.02 * torch.randn(max_len, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] != self.d_model:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must be (..., L, {self.d_model}), got {shape}")
        L = x.shape[-2]
        if L > self.max_len:
            raise ValueError(
                f"x has {L} positions but only max_len={self.max_len} were learned; "
                "a learned embedding cannot extrapolate"
            )
        return x + self.weight[:L]  # (..., L, E) + (L, E)


# ---------------------------------------------------------------------------------------
# Rotary position embedding (Su et al., 2021): rotate queries and keys instead of adding
# ---------------------------------------------------------------------------------------
def rotary_angles(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """``(L, dim / 2)`` angles ``p * theta_i`` with ``theta_i = base^(-2i / dim)``."""
    if dim <= 0 or dim % 2:
        raise ValueError(f"rotary needs an even feature size, got {dim}")
    theta = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
    return positions.to(torch.float64)[:, None] * theta[None, :]  # (L, dim/2)


def apply_rotary(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> torch.Tensor:
    """Rotate each feature pair ``(x[..., 2i], x[..., 2i+1])`` of the vector at position p
    by the angle ``p * theta_i``.

    ``x (..., L, D)`` with ``D`` even; ``positions (L,)`` defaults to ``0 .. L-1``. Because
    rotations compose, ``apply_rotary(q)[m] . apply_rotary(k)[n]`` depends on ``m - n`` only.
    Pairs are adjacent features (the RoFormer layout), the same pairing as the sinusoids.

    With ``D = 2`` there is one pair and ``theta_0 = 1``: position p turns by p radians.

    >>> x = torch.tensor([[1.0, 0.0]]).expand(3, 2)  # the same vector at positions 0, 1, 2
    >>> [[round(v, 3) for v in row] for row in apply_rotary(x).tolist()]
    [[1.0, 0.0], [0.54, 0.841], [-0.416, 0.909]]
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point torch.Tensor, got {type(x).__name__}")
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"x must be (..., L, D) with D even, got shape {tuple(x.shape)}")
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base}")
    L, D = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    if not isinstance(positions, torch.Tensor) or positions.shape != (L,):
        shape = tuple(positions.shape) if isinstance(positions, torch.Tensor) else positions
        raise ValueError(f"positions must be ({L},) for x of shape {tuple(x.shape)}, got {shape}")
    angle = rotary_angles(positions, D, base)  # (L, D/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., L, D/2) each: the pair's two coordinates
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


class RotaryEmbedding(nn.Module):
    """Rotary position embedding for queries and keys: ``forward(q, k) -> (q_rot, k_rot)``.

    ``q (..., Lq, D)`` and ``k (..., Lk, D)``; positions default to ``0 .. L-1`` for each,
    or pass ``q_positions`` / ``k_positions``. No parameters: values are not rotated.

    >>> rope = RotaryEmbedding(dim=8)
    >>> q, k = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    >>> q_rot, k_rot = rope(q, k)
    >>> q_rot.shape, torch.allclose(q_rot.norm(dim=-1), q.norm(dim=-1))  # rotations keep length
    (torch.Size([2, 5, 8]), True)
    """

    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__()
        check_positive("dim", dim)
        if dim % 2:
            raise ValueError(f"dim must be even (pairs of features rotate together), got {dim}")
        if base <= 1:
            raise ValueError(f"base must be > 1, got {base}")
        self.dim, self.base = dim, base

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for name, t in (("q", q), ("k", k)):
            if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.shape[-1] != self.dim:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must be (..., L, {self.dim}), got {shape}")
        return (
            apply_rotary(q, q_positions, self.base),
            apply_rotary(k, k_positions, self.base),
        )


# ---------------------------------------------------------------------------------------
# Biases on the scores: ALiBi (Press et al., 2022) and T5's bucketed relative position
# bias (Raffel et al., 2020). Nothing is added to the tokens; each head adds an (Lq, Lk)
# matrix that depends on the offset j - i only to its scores before the softmax.
# ---------------------------------------------------------------------------------------
def alibi_slopes(num_heads: int) -> torch.Tensor:
    """``(H,)`` ALiBi slopes ``m_h``, one per head, with ``H = num_heads``.

    For ``H`` a power of two they are the geometric sequence that starts at ``2^(-8/H)``
    with that same ratio: ``m_h = 2^(-8h/H)`` for ``h = 1 .. H``. The paper states only
    this case; for any other ``H`` its reference code takes the slopes of the largest power
    of two ``n < H`` and adds the odd-numbered slopes of the ``2n`` sequence
    (``m_1, m_3, ...`` of ``2n`` heads) until there are ``H``.

    >>> alibi_slopes(8).tolist()  # 1/2, 1/4, ..., 1/256
    [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
    >>> alibi_slopes(6).tolist()  # the 4 slopes of H = 4, then 2^(-1), 2^(-3) from H = 8
    [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]
    """
    check_positive("num_heads", num_heads)
    n = 1 << (num_heads.bit_length() - 1)  # the largest power of two <= num_heads
    slopes = 2.0 ** (-8.0 * torch.arange(1, n + 1, dtype=torch.float64) / n)
    if n < num_heads:
        odd = torch.arange(1, 2 * (num_heads - n), 2, dtype=torch.float64)  # h = 1, 3, .. of 2n
        slopes = torch.cat([slopes, 2.0 ** (-8.0 * odd / (2 * n))])
    return slopes.to(torch.get_default_dtype())


def alibi_bias(num_heads: int, Lq: int, Lk: int | None = None) -> torch.Tensor:
    """``(H, Lq, Lk)`` ALiBi bias ``-m_h |j - i|`` for query i and key j, to add to the scores.

    With the causal mask (Press et al.'s language models) every allowed key has ``j <= i``
    and this is their ``m_h (j - i)``; without the mask it penalises both directions alike.
    It depends on the offset ``j - i`` only, so it is the same for every position, and it is
    defined for any length with nothing learned. Offsets as in :func:`relative_positions`.

    >>> alibi_slopes(2).tolist()
    [0.0625, 0.00390625]
    >>> (alibi_bias(num_heads=2, Lq=3)[0] * 16).tolist()  # head 0, divided by its slope
    [[0.0, -1.0, -2.0], [-1.0, 0.0, -1.0], [-2.0, -1.0, 0.0]]
    """
    slopes = alibi_slopes(num_heads)  # validates num_heads
    minus_distance = -relative_positions(Lq, Lk).abs()  # (Lq, Lk): -|j - i|, an int (no -0.0)
    return slopes[:, None, None] * minus_distance  # (H, 1, 1) * (Lq, Lk) -> (H, Lq, Lk)


def _check_buckets(bidirectional: object, num_buckets: object, max_distance: object) -> None:
    if not isinstance(bidirectional, bool):
        raise TypeError(f"bidirectional must be a bool, got {type(bidirectional).__name__}")
    check_positive("num_buckets", num_buckets)
    check_positive("max_distance", max_distance)
    per_side = num_buckets // 2 if bidirectional else num_buckets
    if per_side < 2:
        raise ValueError(
            f"num_buckets must leave at least 2 buckets per direction, got {num_buckets} "
            f"with bidirectional={bidirectional}"
        )
    if max_distance <= per_side // 2:
        raise ValueError(
            f"max_distance must exceed the {per_side // 2} exact buckets, got {max_distance}"
        )


def relative_position_bucket(
    relative_position: torch.Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """T5's bucket (a long tensor, same shape) of each offset ``j - i`` (key minus query).

    Bidirectional: half the buckets for keys after the query, half for the rest; causal
    (``bidirectional=False``): keys after the query share bucket 0 with offset 0, as they
    are masked anyway. On each side, with ``n = |offset|`` and ``B`` buckets there, the
    first ``B/2`` buckets hold ``n = 0, 1, ...`` exactly and the rest are log-spaced up to
    ``max_distance``; every farther offset falls in the last bucket. Computed in float32,
    as T5 does, so the boundaries agree with its code.

    >>> relative_position_bucket(torch.arange(-5, 6), num_buckets=8, max_distance=8).tolist()
    [3, 3, 2, 2, 1, 0, 5, 6, 6, 7, 7]
    >>> relative_position_bucket(torch.arange(-5, 3), False, num_buckets=4, max_distance=8).tolist()
    [3, 3, 2, 2, 1, 0, 0, 0]
    """
    check_tensor("relative_position", relative_position)
    if relative_position.is_floating_point() or relative_position.dtype == torch.bool:
        raise TypeError(
            f"relative_position must hold integer offsets, got dtype {relative_position.dtype}"
        )
    _check_buckets(bidirectional, num_buckets, max_distance)
    relative_position = relative_position.long()
    bucket = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (relative_position > 0).long() * num_buckets  # keys after: upper half
        n = relative_position.abs()
    else:
        n = (-relative_position).clamp(min=0)  # keys after the query count as offset 0
    max_exact = num_buckets // 2
    # log-spaced from max_exact (bucket max_exact) to max_distance (bucket num_buckets);
    # the clamp only keeps log(0) out of entries that take the exact branch
    scaled = torch.log(n.clamp(min=max_exact).float() / max_exact) / math.log(
        max_distance / max_exact
    )
    if_large = (max_exact + (scaled * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return bucket + torch.where(n < max_exact, n, if_large)


class RelativePositionBias(nn.Module):
    """T5's relative position bias: one learned scalar per (bucket, head).

    ``forward(Lq, Lk=None) -> (H, Lq, Lk)``: the scalar of head h for the bucket of
    ``j - i``, added to head h's scores (T5 shares one such module across its layers).
    Initialised like ``nn.Embedding`` (standard normal).

    >>> bias = RelativePositionBias(num_heads=4, num_buckets=8, max_distance=16)
    >>> b = bias(5, 7)
    >>> b.shape, torch.equal(b[:, 1:, 1:], b[:, :-1, :-1])  # the same for every position
    (torch.Size([4, 5, 7]), True)
    """

    def __init__(
        self,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ):
        super().__init__()
        check_positive("num_heads", num_heads)
        _check_buckets(bidirectional, num_buckets, max_distance)
        self.num_heads, self.num_buckets = num_heads, num_buckets
        self.max_distance, self.bidirectional = max_distance, bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)  # T5's name

    def forward(self, Lq: int, Lk: int | None = None) -> torch.Tensor:
        offsets = relative_positions(Lq, Lk).to(self.relative_attention_bias.weight.device)
        bucket = relative_position_bucket(
            offsets, self.bidirectional, self.num_buckets, self.max_distance
        )  # (Lq, Lk)
        return self.relative_attention_bias(bucket).permute(2, 0, 1)  # (Lq, Lk, H) -> (H, Lq, Lk)

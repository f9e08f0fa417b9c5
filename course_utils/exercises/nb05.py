"""Checkers for the exercises of notebook 05 (positional encoding).

``check_sinusoidal_encoding``, ``check_offset_rotation``, ``check_apply_rotary`` and
``check_cached_alibi_bias`` compare the sinusoidal table, the rotation ``M_k`` that shifts it
by ``k`` positions, rotary positions (explicit, out-of-order positions included) and ALiBi's
causal bias for the newest queries over a longer cache with the library's ``positional``
functions.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_utils.exercises import check_function, seeded
from course_utils.positional import (
    alibi_bias,
    apply_rotary,
    offset_rotation,
    sinusoidal_encoding,
)


def check_sinusoidal_encoding(fn: Callable) -> None:
    """Check a learner's ``sinusoidal_encoding(max_len, d_model)`` -> ``(max_len, d_model)``."""
    check_function(
        fn,
        lambda max_len, d_model: sinusoidal_encoding(max_len, d_model),
        [(4, 2), (10, 8), (50, 16)],
        name="sinusoidal_encoding",
        hint="PE[p, 2i] = sin(p / 10000**(2i / d_model)) and PE[p, 2i+1] = cos(the same "
        "angle): build positions (max_len, 1) and 2i = torch.arange(0, d_model, 2), divide, "
        "then fill the even columns with sin and the odd ones with cos.",
        atol=1e-4,
    )


def check_offset_rotation(fn: Callable) -> None:
    """Check a learner's ``offset_rotation(k, d_model)`` -> ``M_k`` ``(d_model, d_model)``."""
    check_function(
        fn,
        lambda k, d_model: offset_rotation(k, d_model),
        [(1, 2), (3, 4), (5, 8), (-2, 6)],
        name="offset_rotation",
        hint="block i (rows and columns 2i, 2i+1) is [[cos(k w), sin(k w)], [-sin(k w), "
        "cos(k w)]] with w = 1 / 10000**(2i / d_model): it maps (sin(p w), cos(p w)) to "
        "(sin((p+k) w), cos((p+k) w)). Every other entry is 0.",
        atol=1e-5,
    )


def check_apply_rotary(fn: Callable) -> None:
    """Check a learner's ``apply_rotary(x, positions)`` against the course's."""
    g = seeded(50)
    cases = [
        (torch.randn(3, 2, generator=g), torch.arange(3)),
        (torch.randn(5, 8, generator=g), torch.arange(5)),
        (torch.randn(2, 4, 6, generator=g), torch.tensor([7, 3, 0, 12])),
    ]
    check_function(
        fn,
        apply_rotary,
        cases,
        name="apply_rotary",
        hint="theta_i = 10000**(-2i / D) for i = 0 .. D/2 - 1; the angle at position p is "
        "p * theta_i; with x1 = x[..., 0::2], x2 = x[..., 1::2], the result has x1 cos - x2 sin "
        "in the even features and x1 sin + x2 cos in the odd ones.",
        atol=1e-5,
    )


def _cached_alibi_bias(num_heads: int, Lq: int, Lk: int) -> torch.Tensor:
    """The reference: rows ``Lk - Lq .. Lk - 1`` of the full bias, future keys at -inf."""
    rows = alibi_bias(num_heads, Lk)[:, Lk - Lq :, :]  # (H, Lq, Lk)
    position = torch.arange(Lk - Lq, Lk)[:, None]  # (Lq, 1): where each query sits
    return rows.masked_fill(torch.arange(Lk)[None, :] > position, float("-inf"))


def check_cached_alibi_bias(fn: Callable) -> None:
    """Check a learner's ``cached_alibi_bias(num_heads, Lq, Lk)`` -> ``(num_heads, Lq, Lk)``.

    The ``Lq`` queries are the newest of ``Lk`` positions (a decoder reading a cache of
    ``Lk`` keys); keys after a query's own position get ``-inf``.
    """
    check_function(
        fn,
        _cached_alibi_bias,
        [(1, 1, 1), (2, 3, 3), (8, 1, 10), (8, 4, 10), (16, 2, 6)],
        name="cached_alibi_bias",
        hint="query i sits at position Lk - Lq + i, so its offset to key j is "
        "j - (Lk - Lq + i); the bias is -m_h * |offset| where offset <= 0 and -inf where "
        "offset > 0 (a key after the query). Build offset as (Lq, Lk) from two aranges and "
        "broadcast the (H, 1, 1) slopes against it.",
        atol=1e-6,
    )

"""Checkers for the exercises of notebook 05 (positional encoding).

``check_sinusoidal_encoding``, ``check_offset_rotation``, ``check_apply_rotary`` and
``check_alibi_bias`` compare the sinusoidal table, the rotation ``M_k`` that shifts it by
``k`` positions, rotary positions (explicit, out-of-order positions included) and ALiBi's
per-head bias with the library's ``positional`` functions.
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


def check_alibi_bias(fn: Callable) -> None:
    """Check a learner's ``alibi_bias(num_heads, L)`` -> ``(num_heads, L, L)``, H a power of 2."""
    check_function(
        fn,
        lambda num_heads, L: alibi_bias(num_heads, L),
        [(1, 1), (2, 3), (8, 10), (16, 6)],
        name="alibi_bias",
        hint="the slopes are m_h = 2**(-8 * h / H) for h = 1 .. H (8 heads: 1/2 .. 1/256); "
        "with offset = j - i from two aranges, the bias of head h is -m_h * |offset|: "
        "slopes[:, None, None] times -offset.abs() broadcasts to (H, L, L).",
        atol=1e-6,
    )

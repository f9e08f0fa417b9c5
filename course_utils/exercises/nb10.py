"""Checkers for the exercises of notebook 10 (speech recognition).

``check_mel_filterbank`` compares triangular mel filters with ``apps.audio.mel_filterbank``;
``check_stack_frames`` compares stacking ``k`` consecutive frames (``k`` a power of two)
with ``k``'s number of halvings by ``apps.speech.pyramid_reduce``; ``check_monotonic_share`` compares the share of decoding steps
whose attention peak does not move back with ``alignment.monotonic_share``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course_utils import alignment
from course_utils.apps import audio, speech
from course_utils.exercises import check_function, seeded


def check_mel_filterbank(fn: Callable) -> None:
    """Check ``mel_filterbank(n_mels, n_fft, rate)`` -> ``(n_mels, n_fft // 2 + 1)``."""
    check_function(
        lambda m, n, r: torch.as_tensor(fn(m, n, r)).float(),
        lambda m, n, r: audio.mel_filterbank(m, n, r),
        [(4, 16, 8000), (10, 256, 8000), (40, 256, 8000), (23, 512, 16000)],
        name="mel_filterbank",
        hint="edges = mel_to_hz(n_mels + 2 values evenly spaced from hz_to_mel(0) to "
        "hz_to_mel(rate / 2)); bins = n_fft // 2 + 1 frequencies evenly spaced from 0 to "
        "rate / 2; filter m = max(0, min((f - edge[m]) / (edge[m+1] - edge[m]), "
        "(edge[m+2] - f) / (edge[m+2] - edge[m+1]))) at each bin frequency f.",
        atol=1e-4,
    )


def _stacked_by_halving(x: Tensor, lengths: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``k`` a power of two: log2(k) pyramid levels without the BLSTMs between them."""
    for _ in range(k.bit_length() - 1):
        x, lengths = speech.pyramid_reduce(x, lengths)
    return x, lengths


def check_stack_frames(fn: Callable) -> None:
    """Check ``stack_frames(x (B, F, D), lengths (B,), k)`` -> ``(B, ceil(F / k), k D)`` and
    the new lengths ``ceil(lengths / k)``, for ``k`` = 2, 4 and 8."""
    g = seeded(100)

    def case(lengths: list[int], D: int, k: int) -> tuple[Tensor, Tensor, int]:
        x = torch.randn(len(lengths), max(lengths), D, generator=g)
        return x, torch.tensor(lengths), k

    check_function(
        fn,
        _stacked_by_halving,
        [case([4], 2, 2), case([5, 3], 3, 2), case([9, 7, 2], 2, 4), case([1, 6], 2, 4)]
        + [case([17, 11, 8], 3, 8), case([3], 1, 8)],
        name="stack_frames",
        hint="zero the padded frames (frame f of example b is real when f < lengths[b]); pad "
        "the time axis with zero frames up to a multiple of k; reshape (B, F, D) -> "
        "(B, F // k, k * D), which puts frames k i .. k i + k - 1 side by side; lengths -> "
        "(lengths + k - 1) // k.",
    )


def check_monotonic_share(fn: Callable) -> None:
    """Check ``monotonic_share(weights (B, T, S), steps (B,))`` -> a float."""
    g = seeded(101)
    by_hand = torch.eye(3)[[0, 2, 1, 1]].unsqueeze(0), torch.tensor([4])
    cases = [by_hand]
    for B, T, S in [(2, 5, 4), (4, 8, 6)]:
        steps = torch.randint(2, T + 1, (B,), generator=g)
        cases.append((torch.rand(B, T, S, generator=g), steps))
    check_function(
        lambda w, s: float(fn(w, s)),
        alignment.monotonic_share,
        cases,
        name="monotonic_share",
        hint="peaks = weights.argmax(-1) (B, T); compare peaks[:, 1:] >= peaks[:, :-1]; count "
        "only steps t = 1 .. steps[b] - 1 of each example; return forward / counted.",
    )

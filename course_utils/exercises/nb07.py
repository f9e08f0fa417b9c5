"""Checkers for the exercises of notebook 07 (machine translation).

``check_modified_precision`` compares BLEU's clipped n-gram matches and hypothesis n-gram
count (the ``counts`` and ``totals`` sacrebleu reports) with a reference written here from
the definition; ``check_brevity_penalty`` compares BLEU's brevity penalty, an empty
hypothesis included.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import torch

from course_utils.exercises import check_function


def _ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def _modified_precision_reference(
    hyp: Sequence[str], ref: Sequence[str], n: int
) -> tuple[int, int]:
    """BLEU's clipped n-gram matches and the number of hypothesis n-grams."""
    hyp_counts, ref_counts = Counter(_ngrams(hyp, n)), Counter(_ngrams(ref, n))
    matches = sum(min(c, ref_counts[g]) for g, c in hyp_counts.items())
    return matches, max(len(hyp) - n + 1, 0)


def check_modified_precision(fn: Callable) -> None:
    """Check ``modified_precision(hyp, ref, n)`` -> ``(clipped matches, hypothesis n-grams)``."""
    cases = [
        ("the the the the".split(), "the cat is on the mat".split(), 1),  # clipping: 2, not 4
        ("kaba ena pado mira -n".split(), "kaba ena pado mira -n".split(), 2),
        ("miro kaba miro kaba miro".split(), "kaba miro kaba".split(), 2),
        ("a b".split(), "a b c d".split(), 3),  # no trigram in the hypothesis
        ("x y z x y z".split(), "x y z w x y".split(), 3),
    ]
    check_function(
        fn,
        _modified_precision_reference,
        cases,
        name="modified_precision",
        hint="count the hypothesis n-grams and the reference n-grams (collections.Counter of "
        "tuples); each hypothesis n-gram scores min(its count, its count in the reference); "
        "return (that sum, len(hyp) - n + 1, or 0 when the hypothesis is shorter than n).",
    )


def _brevity_penalty_reference(hyp_len: int, ref_len: int) -> float:
    if hyp_len >= ref_len:
        return 1.0
    return 0.0 if hyp_len == 0 else math.exp(1 - ref_len / hyp_len)


def check_brevity_penalty(fn: Callable) -> None:
    """Check ``brevity_penalty(hyp_len, ref_len)`` -> BLEU's BP, a float in [0, 1]."""
    cases = [(10, 10), (12, 10), (9, 10), (5, 10), (1, 7), (0, 4)]

    def as_tensor(f: Callable) -> Callable:
        return lambda c, r: torch.tensor(float(f(c, r)), dtype=torch.float64)

    check_function(
        as_tensor(fn),
        as_tensor(_brevity_penalty_reference),
        cases,
        name="brevity_penalty",
        hint="BP = 1 when the hypothesis is at least as long as the reference, else "
        "exp(1 - ref_len / hyp_len) (and 0 for an empty hypothesis).",
    )

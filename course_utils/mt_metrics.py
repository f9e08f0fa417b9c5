"""Measuring translations and alignments: BLEU (through sacrebleu) and alignment error rate.

- :func:`corpus_bleu` is sacrebleu's corpus BLEU on detokenised strings (one reference per
  sentence); :func:`bleu_by_length` splits a test set into source-length buckets first.
- An *alignment* is a set of ``(source index, target index)`` links. :func:`attention_to_alignment`
  turns a ``(T, S)`` attention matrix into one (each target token links to the source token it
  attends to most), and :func:`alignment_error_rate` compares alignments with gold ones
  (Och & Ney, 2003): with predicted links ``A``, sure gold links ``S`` and possible gold links
  ``P`` (``S`` is a subset of ``P``)::

      AER = 1 - (|A & S| + |A & P|) / (|A| + |S|)

  0 is perfect, 1 shares no link with the gold alignment.
- :func:`diagonal_alignment` and :func:`random_alignment` are the baselines a learned
  alignment must beat.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

import sacrebleu
import torch

Alignment = set[tuple[int, int]]


# ---------------------------------------------------------------------------------------
# BLEU
# ---------------------------------------------------------------------------------------
def _check_strings(name: str, x: object) -> list[str]:
    if isinstance(x, str) or not isinstance(x, Sequence):
        raise TypeError(
            f"{name} must be a list of strings (one per sentence), got {type(x).__name__}"
        )
    if not all(isinstance(s, str) for s in x):
        raise TypeError(f"{name} must hold strings only")
    return list(x)


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (0-100) of detokenised ``hypotheses`` against one reference each.

    This is ``sacrebleu.corpus_bleu(hypotheses, [references]).score`` with sacrebleu's
    defaults (13a tokenisation, 4-grams, brevity penalty), so scores compare with published
    ones computed the same way.

    >>> round(corpus_bleu(["the cat sat on the mat"], ["the cat sat on the mat"]), 6)
    100.0
    >>> round(corpus_bleu(["the cat sat on a mat"], ["the cat sat on the mat"]), 1)
    53.7
    """
    hypotheses = _check_strings("hypotheses", hypotheses)
    references = _check_strings("references", references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must have one entry per sentence, got "
            f"{len(hypotheses)} and {len(references)}"
        )
    if not hypotheses:
        raise ValueError("hypotheses must not be empty")
    return float(sacrebleu.corpus_bleu(hypotheses, [references]).score)


def bleu_by_length(
    hypotheses: Sequence[str],
    references: Sequence[str],
    src_lengths: Sequence[int],
    buckets: Sequence[tuple[int, int]],
) -> dict[tuple[int, int], float]:
    """Corpus BLEU per bucket of source lengths: ``{(lo, hi): bleu}``, both ends included.

    >>> scores = bleu_by_length(["a b c d", "x y"], ["a b c d", "x z"], [4, 2], [(1, 3), (4, 6)])
    >>> {bucket: round(bleu, 6) for bucket, bleu in scores.items()}
    {(1, 3): 0.0, (4, 6): 100.0}
    """
    hypotheses = _check_strings("hypotheses", hypotheses)
    references = _check_strings("references", references)
    if not len(hypotheses) == len(references) == len(src_lengths):
        raise ValueError(
            f"hypotheses, references and src_lengths must have the same length, got "
            f"{len(hypotheses)}, {len(references)} and {len(src_lengths)}"
        )
    out = {}
    for lo, hi in buckets:
        inside = [i for i, n in enumerate(src_lengths) if lo <= n <= hi]
        if not inside:
            raise ValueError(f"bucket ({lo}, {hi}) holds no sentence")
        out[(lo, hi)] = corpus_bleu(
            [hypotheses[i] for i in inside], [references[i] for i in inside]
        )
    return out


# ---------------------------------------------------------------------------------------
# Alignments
# ---------------------------------------------------------------------------------------
def _as_links(name: str, links: object) -> Alignment:
    if not isinstance(links, Iterable) or isinstance(links, (str, torch.Tensor)):
        raise TypeError(
            f"{name} must be a set of (source, target) index pairs, got {type(links).__name__}"
        )
    out = set()
    for link in links:
        if len(link) != 2:
            raise ValueError(f"{name} must hold (source, target) pairs, got {link!r}")
        out.add((int(link[0]), int(link[1])))
    return out


def alignment_error_rate(
    predicted: Sequence[Iterable[tuple[int, int]]],
    sure: Sequence[Iterable[tuple[int, int]]],
    possible: Sequence[Iterable[tuple[int, int]]] | None = None,
) -> float:
    """Och & Ney's AER over a corpus: one alignment per sentence in each list.

    Counts are summed over all sentences before dividing. ``possible`` defaults to ``sure``
    (then AER is ``1 - F1`` of the links); each sentence's sure links are added to its
    possible ones, as the definition requires ``S`` within ``P``.

    >>> alignment_error_rate([{(0, 0), (1, 1)}], [{(0, 0), (2, 1)}])  # 1 - 2 * 1 / 4
    0.5
    >>> alignment_error_rate([{(0, 0), (1, 1)}], [{(0, 0)}], [{(1, 1)}])  # 1 - (1 + 2) / 3
    0.0
    """
    if possible is None:
        possible = sure
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(
            f"predicted, sure and possible need one alignment per sentence, got "
            f"{len(predicted)}, {len(sure)} and {len(possible)}"
        )
    a_s = a_p = n_a = n_s = 0
    for a, s, p in zip(predicted, sure, possible, strict=True):
        a, s = _as_links("predicted", a), _as_links("sure", s)
        p = _as_links("possible", p) | s
        a_s, a_p, n_a, n_s = a_s + len(a & s), a_p + len(a & p), n_a + len(a), n_s + len(s)
    if n_a + n_s == 0:
        raise ValueError("predicted and sure are both empty: AER is undefined")
    return 1.0 - (a_s + a_p) / (n_a + n_s)


def attention_to_alignment(weights: torch.Tensor) -> Alignment:
    """A ``(T, S)`` attention matrix -> links ``{(argmax source index, t)}``, one per row.

    >>> sorted(attention_to_alignment(torch.tensor([[0.1, 0.9], [0.7, 0.3], [0.2, 0.8]])))
    [(0, 1), (1, 0), (1, 2)]
    """
    if not isinstance(weights, torch.Tensor) or weights.dim() != 2:
        raise ValueError(
            f"weights must be a 2-D tensor (T, S), got {type(weights).__name__} of shape "
            f"{tuple(getattr(weights, 'shape', ()))}"
        )
    return {(int(s), t) for t, s in enumerate(weights.argmax(dim=-1).tolist())}


def diagonal_alignment(src_len: int, tgt_len: int) -> Alignment:
    """Target token ``t`` linked to source token ``floor((t + 0.5) * S / T)``, the diagonal.

    The alignment a model that ignored word order would guess.

    >>> sorted(diagonal_alignment(4, 2))
    [(1, 0), (3, 1)]
    """
    if src_len < 1 or tgt_len < 1:
        raise ValueError(f"src_len and tgt_len must be positive, got {src_len} and {tgt_len}")
    return {(min(src_len - 1, int((t + 0.5) * src_len / tgt_len)), t) for t in range(tgt_len)}


def random_alignment(src_len: int, tgt_len: int, rng: random.Random) -> Alignment:
    """Each target token linked to a uniformly random source token (chance level).

    >>> len(random_alignment(5, 3, random.Random(0)))
    3
    """
    if src_len < 1 or tgt_len < 1:
        raise ValueError(f"src_len and tgt_len must be positive, got {src_len} and {tgt_len}")
    return {(rng.randrange(src_len), t) for t in range(tgt_len)}

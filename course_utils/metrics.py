"""How good a model's outputs are: exact match, accuracy by input length, BLEU, ROUGE, CER/WER.

- :func:`exact_match` compares predicted and target ids up to their first ``<eos>``;
  :func:`accuracy_by_length` greedy-decodes a held-out split (any model that follows
  :mod:`course_utils.decoding`'s protocol) and reports exact match per source length.
- :func:`corpus_bleu` is sacrebleu's corpus BLEU on detokenised strings (one reference per
  sentence); :func:`bleu_by_length` splits a test set into source-length buckets first.
- Summaries: :func:`rouge` is the ``rouge-score`` package's ROUGE-1/2/L F1;
  :func:`oov_recall` counts the rare (out-of-vocabulary) reference words an output
  contains, and :func:`repeated_trigrams` / :func:`repeated_trigram_rate` how much an
  output repeats itself; :func:`paired_bootstrap` puts an interval on the difference of
  two systems' mean scores over the same test examples.
- Transcripts: :func:`edit_distance` counts the fewest substitutions, insertions and
  deletions; :func:`error_rate` is ``jiwer``'s character or word error rate (CER, WER), the
  summed distances over the summed reference lengths.

How well attention lines up with gold alignments is :mod:`course_utils.alignment`'s job.
Shapes follow the legend in :mod:`course_utils`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import NamedTuple

import jiwer
import numpy as np
import sacrebleu
import torch
import torch.nn.functional as F
from torch import nn

from course_utils._validate import check_ids, check_positive
from course_utils.data import SequencePairs, batches
from course_utils.decoding import greedy_decode


# ---------------------------------------------------------------------------------------
# Exact match
# ---------------------------------------------------------------------------------------
def _upto_eos(ids: torch.Tensor, eos_id: int, pad_id: int) -> torch.Tensor:
    """Replace the first ``<eos>`` and everything after it with ``<pad>``; (B, L) -> (B, L)."""
    after = (ids == eos_id).long().cumsum(dim=1) > 0  # (B, L): True from the first <eos> on
    return ids.masked_fill(after, pad_id)


def exact_match(
    pred_ids: torch.Tensor, target_ids: torch.Tensor, eos_id: int, pad_id: int
) -> torch.Tensor:
    """Per example, True when the prediction equals the target up to their first ``<eos>``.

    ``pred_ids`` (B, Lp) and ``target_ids`` (B, Lt) -> bool (B,). The two widths may
    differ. Tokens from the first ``<eos>`` on are ignored, and so is trailing ``<pad>``; a
    prediction that never emits ``<eos>`` must still hold exactly the target's tokens.

    >>> exact_match(torch.tensor([[5, 6, 2, 7]]), torch.tensor([[5, 6, 2]]), 2, 0)
    tensor([True])
    """
    check_ids("pred_ids", pred_ids)
    check_ids("target_ids", target_ids)
    if pred_ids.shape[0] != target_ids.shape[0]:
        raise ValueError(
            f"pred_ids and target_ids must have the same batch size, got "
            f"{tuple(pred_ids.shape)} and {tuple(target_ids.shape)}"
        )
    L = max(pred_ids.shape[1], target_ids.shape[1])
    pred = F.pad(_upto_eos(pred_ids, eos_id, pad_id), (0, L - pred_ids.shape[1]), value=pad_id)
    tgt = F.pad(_upto_eos(target_ids, eos_id, pad_id), (0, L - target_ids.shape[1]), value=pad_id)
    return (pred == tgt).all(dim=1)  # (B, L) -> (B,)


@torch.no_grad()
def accuracy_by_length(
    model: nn.Module,
    data: SequencePairs,
    batch_size: int = 256,
    device: torch.device | str | None = None,
) -> dict[int, float]:
    """Greedy-decode every example of ``data``; exact-match accuracy per source length.

    Returns ``{length: accuracy}`` sorted by length. Give it held-out data (a ``val`` or
    ``test`` split): accuracy on the training data says little about what was learned.
    ``model`` is any model that follows the decoding protocol of :mod:`course_utils.decoding`.
    """
    if not isinstance(data, SequencePairs):
        raise TypeError(f"data must be a SequencePairs, got {type(data).__name__}")
    check_positive("batch_size", batch_size)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    # Sorting by length keeps the padding, and the number of decoding steps, small.
    order = sorted(range(len(data)), key=lambda i: len(data.src[i]))
    ordered = SequencePairs(
        [data.src[i] for i in order],
        [data.tgt[i] for i in order],
        data.vocab,
        data.task,
        data.split,
    )
    correct: dict[int, int] = defaultdict(int)
    total: dict[int, int] = defaultdict(int)
    for batch in batches(ordered, batch_size):
        batch = batch.to(device)
        pred = greedy_decode(model, batch, max_steps=batch.tgt_out.shape[1] + 1).ids
        ok = exact_match(pred, batch.tgt_out, model.eos_id, model.pad_id)  # (B,)
        for length, hit in zip(batch.src_len.tolist(), ok.tolist(), strict=True):
            correct[length] += int(hit)
            total[length] += 1
    return {length: correct[length] / total[length] for length in sorted(total)}


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


def _check_pairs(hypotheses: object, references: object, unit: str) -> tuple[list[str], list[str]]:
    hypotheses = _check_strings("hypotheses", hypotheses)
    references = _check_strings("references", references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must have one entry per {unit}, got "
            f"{len(hypotheses)} and {len(references)}"
        )
    if not hypotheses:
        raise ValueError("hypotheses must not be empty")
    return hypotheses, references


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
    hypotheses, references = _check_pairs(hypotheses, references, "sentence")
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
# Summaries: ROUGE, out-of-vocabulary recall, repetition
# ---------------------------------------------------------------------------------------
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def rouge(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Mean ROUGE-1, ROUGE-2 and ROUGE-L F1 (0-100) of ``hypotheses`` against one
    reference each, from the ``rouge-score`` package (Porter stemming on, its own
    tokeniser: lower case, letters and digits only).

    >>> rouge(["the cat sat"], ["the cat sat"])
    {'rouge1': 100.0, 'rouge2': 100.0, 'rougeL': 100.0}
    """
    from rouge_score import rouge_scorer  # imported here: only the summary notebook needs it

    hypotheses, references = _check_pairs(hypotheses, references, "summary")
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for hyp, ref in zip(hypotheses, references, strict=True):
        scores = scorer.score(ref, hyp)  # rouge-score takes the reference first
        for name in ROUGE_TYPES:
            totals[name] += scores[name].fmeasure
    return {name: 100 * total / len(hypotheses) for name, total in totals.items()}


def _check_token_lists(name: str, x: object) -> list[list[str]]:
    if isinstance(x, str) or not isinstance(x, Sequence):
        raise TypeError(f"{name} must be a list of token lists, got {type(x).__name__}")
    for i, tokens in enumerate(x):
        if isinstance(tokens, str) or not isinstance(tokens, Sequence):
            raise TypeError(f"{name}[{i}] must be a list of tokens, got {type(tokens).__name__}")
    return [list(t) for t in x]


def _check_same_count(outputs: list, references: list) -> None:
    if len(outputs) != len(references):
        raise ValueError(
            f"outputs and references must have one entry per summary, got {len(outputs)} "
            f"and {len(references)}"
        )


def oov_recall(
    outputs: Sequence[Sequence[str]], references: Sequence[Sequence[str]], vocabulary: set[str]
) -> float:
    """The share of the references' out-of-vocabulary words that the outputs contain.

    Per summary, each distinct reference word outside ``vocabulary`` counts once, found
    when its output contains it; the shares are pooled over all summaries (0 when the
    references have no such word).

    >>> oov_recall([["Ada", "won"], ["won"]], [["Ada", "won", "in", "Oslo"], ["Bo", "won"]],
    ...            {"won", "in"})
    0.3333333333333333
    """
    outputs = _check_token_lists("outputs", outputs)
    references = _check_token_lists("references", references)
    _check_same_count(outputs, references)
    found = total = 0
    for out, ref in zip(outputs, references, strict=True):
        rare = {t for t in ref if t not in vocabulary}
        found += len(rare & set(out))
        total += len(rare)
    return found / total if total else 0.0


def _trigrams(tokens: list[str]) -> Counter:
    return Counter(tuple(tokens[i : i + 3]) for i in range(len(tokens) - 2))


def repeated_trigrams(
    outputs: Sequence[Sequence[str]], references: Sequence[Sequence[str]] | None = None
) -> list[int]:
    """Per output, how many of its trigrams repeat an earlier trigram of the same output.

    With ``references``, only repeats the reference does not have count: a trigram the
    reference itself holds ``r`` times may occur ``max(r, 1)`` times in the output for
    free (a summary of two similar events legitimately says "seconds on monday" twice).

    >>> repeated_trigrams([["a", "b", "c"] * 3, ["x", "y"]])  # 7 trigrams, 3 distinct
    [4, 0]
    >>> repeated_trigrams([["a", "b", "c", "a", "b", "c"]], [["a", "b", "c", "x", "a", "b", "c"]])
    [0]
    """
    outputs = _check_token_lists("outputs", outputs)
    if references is not None:
        references = _check_token_lists("references", references)
        _check_same_count(outputs, references)
    counts = []
    for k, tokens in enumerate(outputs):
        free = _trigrams(references[k]) if references is not None else Counter()
        counts.append(sum(max(0, c - max(1, free[g])) for g, c in _trigrams(tokens).items()))
    return counts


def repeated_trigram_rate(
    outputs: Sequence[Sequence[str]], references: Sequence[Sequence[str]] | None = None
) -> float:
    """The share of the outputs' trigrams that repeat an earlier trigram of the same output:
    :func:`repeated_trigrams` summed over the outputs, over all their trigrams (0 if none).

    >>> repeated_trigram_rate([["a", "b", "c", "a", "b", "c"], ["x", "y"]])  # 1 2 3 1: 1 of 4
    0.25
    >>> repeated_trigram_rate([["a", "b", "c", "a", "b", "c"]], [["a", "b", "c", "a", "b", "c"]])
    0.0
    """
    repeated = sum(repeated_trigrams(outputs, references))
    total = sum(max(0, len(tokens) - 2) for tokens in outputs)
    return repeated / total if total else 0.0


# ---------------------------------------------------------------------------------------
# A bootstrap interval for a paired comparison
# ---------------------------------------------------------------------------------------
class BootstrapInterval(NamedTuple):
    """What :func:`paired_bootstrap` returns: the observed mean difference and the ends of
    its percentile interval."""

    mean: float
    low: float
    high: float


def paired_bootstrap(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapInterval:
    """A percentile bootstrap interval for ``mean(x - y)``, where ``x[k]`` and ``y[k]`` are
    two systems' scores on the same test example ``k`` (Efron & Tibshirani, 1993; for NLP
    systems, Koehn, 2004).

    Each of ``n_resamples`` resamples draws ``n`` examples with replacement (the same
    examples for both systems: the comparison is paired) and takes the mean of their
    differences; the interval runs between the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` quantiles of those means (numpy's default, linear
    interpolation). The draws are ``np.random.default_rng(seed).integers(0, n, (n_resamples,
    n))``, so a notebook can repeat them in the open.

    >>> r = paired_bootstrap([1, 0, 2, 0, 1, 3], [2, 1, 2, 1, 1, 4])
    >>> r.mean, r.low < r.mean < r.high < 0
    (-0.6666666666666666, True)
    """
    arrays = []
    for name, values in (("x", x), ("y", y)):
        if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
            raise TypeError(
                f"{name} must be a 1-D sequence of numbers, got {type(values).__name__}"
            )
        try:
            array = np.asarray(values, dtype=float)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must hold numbers only, got {list(values)[:5]!r}") from None
        if array.ndim != 1 or len(array) < 2:
            raise ValueError(f"{name} must be 1-D with at least 2 values, got shape {array.shape}")
        if not np.isfinite(array).all():
            raise ValueError(
                f"{name} must hold finite numbers, got {array[~np.isfinite(array)][:5]}"
            )
        arrays.append(array)
    x, y = arrays
    if x.shape != y.shape:
        raise ValueError(
            f"x and y must score the same examples (one value each), got {len(x)} and {len(y)}"
        )
    check_positive("n_resamples", n_resamples)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
        raise TypeError(f"confidence must be a number, got {type(confidence).__name__}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    differences = x - y  # (n,)
    n = len(differences)
    draws = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    means = differences[draws].mean(axis=1)  # (n_resamples,)
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return BootstrapInterval(float(differences.mean()), float(low), float(high))


# ---------------------------------------------------------------------------------------
# Character and word error rates (notebook 10)
# ---------------------------------------------------------------------------------------
def edit_distance(hypothesis: Sequence, reference: Sequence) -> int:
    """Levenshtein distance: the fewest substitutions, insertions and deletions that turn
    ``hypothesis`` into ``reference`` (strings compare characters, lists compare items).

    >>> edit_distance("tow five", "two five"), edit_distance(["two", "nine"], ["two", "five", "nine"])
    (2, 1)
    """
    for name, x in (("hypothesis", hypothesis), ("reference", reference)):
        if not isinstance(x, Sequence):
            raise TypeError(f"{name} must be a string or a list, got {type(x).__name__}")
    previous = list(range(len(reference) + 1))  # distances from the empty hypothesis
    for i, h in enumerate(hypothesis, start=1):
        current = [i]
        for j, r in enumerate(reference, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (h != r)))
        previous = current
    return previous[-1]


def error_rate(hypotheses: Sequence[str], references: Sequence[str], unit: str = "char") -> float:
    """``jiwer``'s CER (``unit="char"``) or WER (``unit="word"``): the summed edit distances
    over the summed reference lengths, in characters or in words; 0 is perfect and it can
    exceed 1. An empty hypothesis counts every reference unit as deleted.

    >>> error_rate(["tow five"], ["two five"]), error_rate(["two nine"], ["two five nine"], "word")
    (0.25, 0.3333333333333333)
    """
    hypotheses, references = _check_pairs(hypotheses, references, "utterance")
    if unit not in ("char", "word"):
        raise ValueError(f"unit must be 'char' or 'word', got {unit!r}")
    if any(not r.strip() for r in references):
        raise ValueError("references must not be empty or blank (an error rate divides by them)")
    measure = jiwer.cer if unit == "char" else jiwer.wer
    return float(measure(references, hypotheses))

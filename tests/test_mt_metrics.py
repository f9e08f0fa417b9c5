"""BLEU through sacrebleu, and alignment error rate against hand-worked cases."""

import random

import pytest
import sacrebleu
import torch

from course_utils import mt_metrics
from course_utils.exercises import nb07
from course_utils.mt_metrics import (
    alignment_error_rate,
    attention_to_alignment,
    bleu_by_length,
    corpus_bleu,
    diagonal_alignment,
    random_alignment,
)

WORDS = "miro kaba tulo pela dase gora nimi ena ki mira kesa".split()


def _random_corpus(seed, n=30):
    rng = random.Random(seed)
    refs, hyps = [], []
    for _ in range(n):
        ref = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
        hyp = [w if rng.random() < 0.7 else rng.choice(WORDS) for w in ref]
        hyp = hyp[: rng.randint(2, len(hyp))]
        refs.append(" ".join(ref))
        hyps.append(" ".join(hyp))
    return hyps, refs


@pytest.mark.parametrize("seed", range(4))
def test_corpus_bleu_equals_sacrebleu(seed):
    hyps, refs = _random_corpus(seed)
    assert corpus_bleu(hyps, refs) == sacrebleu.corpus_bleu(hyps, [refs]).score


def test_bleu_by_length_equals_sacrebleu_on_each_bucket():
    hyps, refs = _random_corpus(9, n=40)
    lengths = [len(r.split()) for r in refs]
    buckets = [(3, 6), (7, 9), (10, 12)]
    got = bleu_by_length(hyps, refs, lengths, buckets)
    for lo, hi in buckets:
        inside = [i for i, n in enumerate(lengths) if lo <= n <= hi]
        expected = sacrebleu.corpus_bleu([hyps[i] for i in inside], [[refs[i] for i in inside]])
        assert got[(lo, hi)] == expected.score


def test_bleu_bad_input():
    with pytest.raises(ValueError, match="one entry per sentence"):
        corpus_bleu(["a b"], ["a b", "c"])
    with pytest.raises(TypeError, match="hypotheses"):
        corpus_bleu("a b", "a b")
    with pytest.raises(ValueError, match="empty"):
        corpus_bleu([], [])
    with pytest.raises(ValueError, match="holds no sentence"):
        bleu_by_length(["a"], ["a"], [3], [(5, 9)])


# --- AER: hand-worked cases -------------------------------------------------------------
def test_aer_perfect_and_disjoint():
    gold = [{(0, 0), (1, 2), (2, 1)}]
    assert alignment_error_rate(gold, gold) == 0.0
    assert alignment_error_rate([{(0, 1), (1, 0)}], gold) == 1.0
    assert alignment_error_rate([set()], gold) == 1.0  # no links: nothing right


def test_aer_partial_overlap_by_hand():
    # A = {(0,0), (1,1), (2,2)}, S = {(0,0), (2,1)}, P = S + {(1,1)}
    # |A&S| = 1, |A&P| = 2, |A| = 3, |S| = 2  ->  1 - 3/5 = 0.4
    a, s, p = {(0, 0), (1, 1), (2, 2)}, {(0, 0), (2, 1)}, {(0, 0), (2, 1), (1, 1)}
    assert alignment_error_rate([a], [s], [p]) == pytest.approx(0.4)
    # without possible links: 1 - 2/5 = 0.6
    assert alignment_error_rate([a], [s]) == pytest.approx(0.6)


def test_aer_sums_counts_over_the_corpus():
    # sentence 1: A = S = {(0,0)}            -> A&S 1, A&P 1, |A| 1, |S| 1
    # sentence 2: A = {(0,0),(1,0),(2,0)}, S = {(1,1)} -> 0, 0, 3, 1
    # corpus: 1 - (1 + 1) / (4 + 2) = 2/3 (the mean of the sentence AERs would be 0.5)
    predicted = [{(0, 0)}, {(0, 0), (1, 0), (2, 0)}]
    sure = [{(0, 0)}, {(1, 1)}]
    assert alignment_error_rate(predicted, sure) == pytest.approx(2 / 3)


@pytest.mark.parametrize("seed", range(5))
def test_aer_without_possible_links_is_one_minus_f1(seed):
    rng = random.Random(seed)
    a = {(rng.randrange(6), t) for t in range(8)}
    s = {(rng.randrange(6), t) for t in range(8)} | {(rng.randrange(6), rng.randrange(8))}
    precision, recall = len(a & s) / len(a), len(a & s) / len(s)
    f1 = 2 * precision * recall / (precision + recall) if a & s else 0.0
    assert alignment_error_rate([a], [s]) == pytest.approx(1 - f1)


def test_aer_sure_links_count_as_possible():
    # P given without the sure link: AER adds it, so A = S still scores 0
    assert alignment_error_rate([{(0, 0)}], [{(0, 0)}], [{(1, 1)}]) == 0.0


def test_aer_bad_input():
    with pytest.raises(ValueError, match="one alignment per sentence"):
        alignment_error_rate([set()], [set(), set()])
    with pytest.raises(ValueError, match="undefined"):
        alignment_error_rate([set()], [set()])
    with pytest.raises(ValueError, match="pairs"):
        alignment_error_rate([{(0, 1, 2)}], [{(0, 0)}])
    with pytest.raises(TypeError, match="predicted"):
        alignment_error_rate(["ab"], [{(0, 0)}])


# --- from attention to links, and the baselines ------------------------------------------
def test_attention_to_alignment_takes_each_rows_argmax():
    g = torch.Generator().manual_seed(0)
    w = torch.softmax(torch.randn(7, 5, generator=g), dim=-1)
    links = attention_to_alignment(w)
    assert links == {(int(w[t].argmax()), t) for t in range(7)}
    assert len(links) == 7
    with pytest.raises(ValueError, match="2-D"):
        attention_to_alignment(torch.ones(2, 3, 4))


def test_diagonal_and_random_baselines():
    assert diagonal_alignment(5, 5) == {(i, i) for i in range(5)}
    assert diagonal_alignment(2, 4) == {(0, 0), (0, 1), (1, 2), (1, 3)}
    links = random_alignment(6, 9, random.Random(1))
    assert sorted(t for _, t in links) == list(range(9))
    assert all(0 <= s < 6 for s, _ in links)
    with pytest.raises(ValueError, match="positive"):
        diagonal_alignment(0, 3)
    # chance level: AER of random links against a one-to-one gold alignment is about 1 - 1/S
    rng = random.Random(2)
    gold = [{(i, i) for i in range(10)}] * 300
    aer = alignment_error_rate([random_alignment(10, 10, rng) for _ in gold], gold)
    assert aer == pytest.approx(0.9, abs=0.02)


def test_module_doc_states_the_formula():
    assert "1 - (|A & S| + |A & P|) / (|A| + |S|)" in mt_metrics.__doc__


# --- the exercise references agree with sacrebleu's own statistics ----------------------
@pytest.mark.parametrize("seed", range(3))
def test_exercise_references_match_sacrebleu_statistics(seed):
    hyps, refs = _random_corpus(seed, n=1)
    stats = sacrebleu.corpus_bleu(hyps, [refs])
    h, r = hyps[0].split(), refs[0].split()
    for n in range(1, 5):
        assert nb07._modified_precision_reference(h, r, n) == (
            stats.counts[n - 1],
            stats.totals[n - 1],
        )
    assert nb07._brevity_penalty_reference(len(h), len(r)) == pytest.approx(stats.bp)


def test_exercise_checkers_accept_the_references_and_reject_a_wrong_answer(capsys):
    nb07.check_modified_precision(nb07._modified_precision_reference)
    nb07.check_brevity_penalty(nb07._brevity_penalty_reference)

    def unclipped(hyp, ref, n):
        grams = [tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1)]
        refs = {tuple(ref[i : i + n]) for i in range(len(ref) - n + 1)}
        return sum(g in refs for g in grams), len(grams)

    with pytest.raises(AssertionError):
        nb07.check_modified_precision(unclipped)
    assert "FAILED" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        nb07.check_brevity_penalty(lambda c, r: min(1.0, c / r))

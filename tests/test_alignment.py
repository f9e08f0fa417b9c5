"""Alignments: alignment error rate against hand-worked cases, the baselines, and
alignment accuracy against a per-step count."""

import random

import pytest
import torch

from course_utils import alignment
from course_utils.alignment import (
    alignment_accuracy,
    alignment_error_rate,
    attention_to_alignment,
    diagonal_alignment,
    random_alignment,
)


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
    assert "1 - (|A & S| + |A & P|) / (|A| + |S|)" in alignment.__doc__


@pytest.mark.parametrize("seed", range(3))
def test_alignment_accuracy_counts_the_steps_whose_argmax_is_gold(seed):
    g = torch.Generator().manual_seed(seed)
    weights = torch.rand(4, 6, 5, generator=g).softmax(-1)  # (B, T, S)
    gold = torch.randint(-1, 5, (4, 6), generator=g)
    gold[0, 0] = 2  # at least one counted step
    hits = steps = 0
    for b in range(4):
        for t in range(6):
            if gold[b, t] >= 0:
                steps += 1
                hits += int(max(range(5), key=lambda s: weights[b, t, s].item()) == gold[b, t])
    assert alignment_accuracy(weights, gold) == pytest.approx(hits / steps)


@pytest.mark.parametrize(
    "weights, gold, error, match",
    [
        (torch.rand(2, 3), torch.zeros(2, 3).long(), ValueError, "weights"),
        (torch.rand(2, 3, 4), torch.zeros(2, 3), TypeError, "gold"),
        (torch.rand(2, 3, 4), torch.zeros(2, 4).long(), ValueError, "gold"),
        (torch.rand(2, 3, 4), torch.full((2, 3), -1), ValueError, "no step"),
    ],
)
def test_alignment_accuracy_bad_input(weights, gold, error, match):
    with pytest.raises(error, match=match):
        alignment_accuracy(weights, gold)

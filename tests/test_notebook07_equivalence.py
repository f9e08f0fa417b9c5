"""Notebook 07's hand-written alignment reading and AER equal course_utils.alignment."""

import random

import pytest
import torch

from course_utils import alignment
from course_utils.apps import translation

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "07_machine_translation.ipynb"


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(NOTEBOOK, {"torch": torch})


def test_marked_cells_are_the_ones_tested(nb):
    assert_marked_cells_define(NOTEBOOK, nb, {"attention_to_alignment", "alignment_error_rate"})


@pytest.mark.parametrize("seed", range(5))
def test_attention_to_alignment_equals_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    T, S = 3 + seed, 2 + 2 * seed
    weights = torch.softmax(torch.randn(T, S, generator=g), dim=-1)
    assert nb["attention_to_alignment"](weights) == alignment.attention_to_alignment(weights)


@pytest.mark.parametrize("seed", range(5))
def test_alignment_error_rate_equals_library(nb, seed):
    rng = random.Random(seed)

    def links():
        return {(rng.randrange(6), rng.randrange(7)) for _ in range(rng.randrange(1, 9))}

    predicted = [links() for _ in range(4)]
    sure = [links() for _ in range(4)]
    possible = [links() for _ in range(4)]
    ours = nb["alignment_error_rate"](predicted, sure, possible)
    assert ours == pytest.approx(alignment.alignment_error_rate(predicted, sure, possible))


def test_gold_alignment_scores_zero_and_the_diagonal_does_not(nb):
    pairs = translation.make_pairs(30, seed=2)
    sure = [p.alignment for p in pairs]
    possible = [p.possible for p in pairs]
    assert nb["alignment_error_rate"](sure, sure, possible) == 0.0
    diagonal = [alignment.diagonal_alignment(len(p.src), len(p.tgt)) for p in pairs]
    assert nb["alignment_error_rate"](diagonal, sure, possible) > 0.3

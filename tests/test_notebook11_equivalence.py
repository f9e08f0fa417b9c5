"""Notebook 11's from-scratch definitions equal the library's: mean_pool in
course_utils.pretrained, attention_rollout in course_utils.interpret.

Only the cells whose first line is ``# from-scratch: <name>`` run here (in notebook order, in
one namespace holding what the notebook's import cell provides), so the test needs neither
the pretrained model nor sentence-transformers.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_utils import interpret, pretrained

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "11_visualising_attention.ipynb"
EXPECTED = {"mean_pool", "attention_rollout"}


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(NOTEBOOK, {"torch": torch, "F": F})


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _padding_mask(lengths, L):
    return torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]  # (B, L)


def test_marked_cells_define_what_they_name(nb):
    assert_marked_cells_define(NOTEBOOK, nb, EXPECTED)


@pytest.mark.parametrize(("lengths", "L", "E"), [([5, 3, 1], 5, 8), ([7, 7], 7, 384)])
def test_mean_pool_equals_library_and_a_loop(nb, lengths, L, E):
    g = _gen(0)
    hidden = torch.randn(len(lengths), L, E, generator=g)
    mask = _padding_mask(lengths, L)
    got = nb["mean_pool"](hidden, mask)
    assert torch.allclose(got, pretrained.mean_pool(hidden, mask), atol=1e-6)
    expected = torch.stack([hidden[b, :n].mean(0) for b, n in enumerate(lengths)])
    assert torch.allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("residual", [0.5, 0.0, 0.9])
@pytest.mark.parametrize(("N", "B", "H", "L"), [(6, 2, 12, 7), (2, 1, 3, 4)])
def test_attention_rollout_equals_library(nb, residual, N, B, H, L):
    g = _gen(1)
    attentions = [torch.softmax(3 * torch.randn(B, H, L, L, generator=g), -1) for _ in range(N)]
    got = nb["attention_rollout"](attentions, residual)
    assert got.shape == (B, L, L)
    assert torch.allclose(got, interpret.attention_rollout(attentions, residual), atol=1e-6)
    assert torch.allclose(got.sum(-1), torch.ones(B, L), atol=1e-5)


def test_attention_rollout_of_one_layer_is_the_mixed_layer(nb):
    A = torch.softmax(torch.randn(1, 2, 5, 5, generator=_gen(2)), -1)
    expected = 0.5 * torch.eye(5) + 0.5 * A.mean(1)
    assert torch.allclose(nb["attention_rollout"]([A]), expected, atol=1e-6)

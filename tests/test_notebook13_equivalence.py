"""Notebook 13's from-scratch definitions equal the library and PyTorch's own attention.

Only the cells whose first line is ``# from-scratch: <name>`` run here (in notebook order,
in one namespace holding ``math``, ``torch`` and ``F``), so the test is fast and does not
depend on timings, training, plots or widgets. The exercise checkers are tested here too.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import efficient
from course_utils import random_features as rf
from course_utils import sparse_attention as sparse
from course_utils.exercises import nb13

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "13_efficient_attention.ipynb"
EXPECTED = {
    "naive_attention",
    "online_softmax_attention",
    "tiled_attention",
    "linear_attention",
    "linear_attention_rnn",
    "performer_features",
    "sliding_window_mask",
    "block_sparse_mask",
    "hierarchical_attention",
}


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(NOTEBOOK, {"math": math, "torch": torch, "F": F})


def _qkv(batch, N, M, D, Dv, seed):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*batch, N, D, generator=g),
        torch.randn(*batch, M, D, generator=g),
        torch.randn(*batch, M, Dv, generator=g),
    )


def test_marked_cells_define_what_they_name(nb):
    assert_marked_cells_define(NOTEBOOK, nb, EXPECTED)


@pytest.mark.parametrize(("N", "M"), [(7, 7), (9, 5), (5, 9)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_naive_attention_equals_sdpa_and_library(nb, N, M, is_causal):
    q, k, v = _qkv((2, 3), N, M, 8, 4, seed=N * M)
    got = nb["naive_attention"](q, k, v, is_causal=is_causal)
    assert torch.allclose(
        got, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), atol=1e-5
    )
    assert torch.allclose(got, efficient.naive_attention(q, k, v, is_causal=is_causal), atol=1e-5)


@pytest.mark.parametrize("block", [1, 2, 5, 16])
def test_online_softmax_attention_equals_softmax_then_matmul(nb, block):
    g = torch.Generator().manual_seed(block)
    scores, values = 10 * torch.randn(13, generator=g), torch.randn(13, 3, generator=g)
    got = nb["online_softmax_attention"](scores, values, block)
    assert torch.allclose(got, torch.softmax(scores, 0) @ values, atol=1e-5)


@pytest.mark.parametrize(("N", "M", "block"), [(10, 10, 3), (37, 37, 8), (20, 33, 7), (33, 20, 64)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_tiled_attention_equals_sdpa_and_library(nb, N, M, block, is_causal):
    q, k, v = _qkv((2, 2), N, M, 8, 5, seed=N + M + block)
    got = nb["tiled_attention"](q, k, v, is_causal=is_causal, block_size=block)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert torch.allclose(got, reference, atol=1e-5)
    library = efficient.tiled_attention(q, k, v, is_causal=is_causal, block_size=block)
    assert torch.allclose(got, library, atol=1e-5)


@pytest.mark.parametrize("N", [1, 5, 40, 130])
@pytest.mark.parametrize("is_causal", [False, True])
def test_linear_attention_equals_library(nb, N, is_causal):
    q, k, v = _qkv((2, 3), N, N, 8, 4, seed=N)
    got = nb["linear_attention"](q, k, v, is_causal=is_causal)
    assert torch.allclose(got, efficient.linear_attention(q, k, v, is_causal=is_causal), atol=1e-5)


@pytest.mark.parametrize("N", [1, 5, 40, 130])
def test_linear_attention_rnn_equals_causal_library(nb, N):
    q, k, v = _qkv((2, 3), N, N, 8, 4, seed=N + 1)
    got = nb["linear_attention_rnn"](q, k, v)
    expected = efficient.linear_attention(q, k, v, is_causal=True)
    assert got.shape == (2, 3, N, 4)
    assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize(("D", "m"), [(4, 3), (8, 16), (16, 40)])
def test_performer_features_equal_library(nb, D, m):
    q, _, _ = _qkv((2, 3), 9, 9, D, 4, seed=D + m)
    W = rf.random_projection(D, m, torch.Generator().manual_seed(m))
    got = nb["performer_features"](q, W)
    assert got.shape == (2, 3, 9, m) and (got > 0).all()
    assert torch.allclose(got, rf.positive_random_features(q, W), rtol=1e-5)


@pytest.mark.parametrize(("N", "window"), [(1, 1), (7, 2), (12, 5), (6, 20)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_masks_equal_library(nb, N, window, is_causal):
    got = nb["sliding_window_mask"](N, window, is_causal)
    assert torch.equal(got, sparse.sliding_window_mask(N, window, is_causal))
    for num_global in (0, 1, 3):
        if num_global <= N:
            got = nb["block_sparse_mask"](N, window, num_global, is_causal)
            expected = sparse.block_sparse_mask(N, window, num_global, is_causal)
            assert torch.equal(got, expected)


@pytest.mark.parametrize(("N", "block"), [(5, 2), (17, 3), (40, 8), (64, 8)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_hierarchical_attention_equals_library(nb, N, block, is_causal):
    q, k, v = _qkv((2, 3), N, N, 6, 5, seed=N + block)
    got = nb["hierarchical_attention"](q, k, v, block, is_causal)
    expected = sparse.hierarchical_attention(q, k, v, block, is_causal)
    assert torch.allclose(got, expected, atol=1e-5)


def test_check_online_softmax_accepts_a_one_pass_softmax_and_rejects_a_naive_one(capsys):
    def one_pass(scores):
        m, total = torch.tensor(float("-inf")), torch.tensor(0.0)
        for s in scores:
            m_new = torch.maximum(m, s)
            total = total * torch.exp(m - m_new) + torch.exp(s - m_new)
            m = m_new
        return torch.exp(scores - m) / total

    nb13.check_online_softmax(one_pass)
    with pytest.raises(AssertionError):
        nb13.check_online_softmax(lambda s: torch.exp(s) / torch.exp(s).sum())  # overflows
    assert "NaN" in capsys.readouterr().out


def test_check_dilated_window_mask_accepts_the_solution_and_rejects_no_dilation(capsys):
    def solution(N, window, dilation):
        offset = torch.arange(N)[:, None] - torch.arange(N)[None, :]
        return (offset.abs() < window * dilation) & (offset % dilation == 0)

    nb13.check_dilated_window_mask(solution)
    with pytest.raises(AssertionError):
        nb13.check_dilated_window_mask(lambda N, w, d: sparse.sliding_window_mask(N, w))
    assert "FAILED" in capsys.readouterr().out

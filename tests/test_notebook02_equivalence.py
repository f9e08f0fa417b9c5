"""Notebook 02's from-scratch definitions equal the library and PyTorch's own functions.

Only the cells whose first line is ``# from-scratch: <name>`` run here (in notebook order,
in one namespace holding ``math`` and ``torch``), so the test is fast and does not depend on
plots or widgets.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import attention

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "02_query_key_value.ipynb"
EXPECTED = {
    "dot_product_scores",
    "scaled_dot_product_scores",
    "additive_scores",
    "general_scores",
    "softmax",
    "masked_softmax",
    "causal_mask",
    "scaled_dot_product_attention",
    "nadaraya_watson",
}


@pytest.fixture(scope="module")
def nb():
    """The notebook's from-scratch functions, by name."""
    return run_from_scratch_cells(NOTEBOOK, {"math": math, "torch": torch})


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_marked_cells_define_what_they_name(nb):
    assert_marked_cells_define(NOTEBOOK, nb, EXPECTED)


SHAPES = [((3, 4), (5, 4)), ((2, 3, 8), (2, 6, 8)), ((2, 1, 3, 16), (1, 4, 5, 16))]


@pytest.mark.parametrize(("q_shape", "k_shape"), SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_dot_and_scaled_scores(nb, q_shape, k_shape, seed):
    g = _gen(seed)
    q, k = torch.randn(*q_shape, generator=g), torch.randn(*k_shape, generator=g)
    reference = torch.einsum("...qd,...kd->...qk", q, k)
    got = nb["dot_product_scores"](q, k)
    assert torch.allclose(got, reference, atol=1e-5)
    assert torch.allclose(got, attention.dot_product_scores(q, k), atol=1e-5)
    got_scaled = nb["scaled_dot_product_scores"](q, k)
    assert torch.allclose(got_scaled, reference / math.sqrt(q.shape[-1]), atol=1e-5)
    assert torch.allclose(got_scaled, attention.scaled_dot_product_scores(q, k), atol=1e-5)


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "A"), [((3, 4), (5, 6), 8), ((2, 3, 5), (2, 4, 5), 3)]
)
def test_additive_scores_equal_library_with_copied_weights(nb, q_shape, k_shape, A):
    g = _gen(2)
    q, k = torch.randn(*q_shape, generator=g), torch.randn(*k_shape, generator=g)
    module = attention.AdditiveScore(q_shape[-1], k_shape[-1], A)
    got = nb["additive_scores"](q, k, module.w_q.weight, module.w_k.weight, module.v.weight[0])
    assert got.shape == q_shape[:-1] + (k_shape[-2],)
    assert torch.allclose(got, module(q, k), atol=1e-5)
    # One pair by the formula itself, v^T tanh(W_q q + W_k k)
    i, j = q_shape[-2] - 1, k_shape[-2] - 1
    qi, kj = q[..., i, :].reshape(-1, q_shape[-1])[0], k[..., j, :].reshape(-1, k_shape[-1])[0]
    pair = module.v.weight[0] @ torch.tanh(module.w_q.weight @ qi + module.w_k.weight @ kj)
    assert torch.isclose(got.reshape(-1, q_shape[-2], k_shape[-2])[0, i, j], pair, atol=1e-5)


@pytest.mark.parametrize(("q_shape", "k_shape"), [((3, 4), (5, 6)), ((2, 3, 5), (2, 4, 7))])
def test_general_scores_equal_library_with_copied_weights(nb, q_shape, k_shape):
    g = _gen(3)
    q, k = torch.randn(*q_shape, generator=g), torch.randn(*k_shape, generator=g)
    module = attention.BilinearScore(q_shape[-1], k_shape[-1])
    W = module.w.weight  # (Dq, Dk)
    got = nb["general_scores"](q, k, W)
    assert torch.allclose(got, module(q, k), atol=1e-5)
    assert torch.allclose(got, torch.einsum("...qd,de,...ke->...qk", q, W, k), atol=1e-5)


def test_softmax_is_stable_and_equals_torch(nb):
    g = _gen(4)
    for scores in (torch.randn(3, 7, generator=g), 500 * torch.randn(2, 3, 9, generator=g)):
        got = nb["softmax"](scores)
        assert torch.isfinite(got).all()
        assert torch.allclose(got, torch.softmax(scores, dim=-1), atol=1e-6)


def test_masked_softmax_padding_causal_and_empty_rows(nb):
    g = _gen(5)
    scores = torch.randn(2, 4, 6, generator=g)
    masks = [
        None,
        torch.rand(2, 4, 6, generator=g) > 0.4,
        torch.tensor([True, True, True, False, False, True]),  # broadcast over rows
        attention.causal_mask(4, 6),
    ]
    masks[1][0, 1] = False  # a row with no allowed key
    for mask in masks:
        got = nb["masked_softmax"](scores, mask)
        assert torch.allclose(got, attention.masked_softmax(scores, mask), atol=1e-6)
        if mask is None:
            continue
        full = mask.expand_as(scores)
        assert (got[~full] == 0).all()
        rows = full.any(-1)  # rows with something allowed: torch's -inf softmax is defined
        reference = torch.softmax(scores.masked_fill(~full, float("-inf")), dim=-1)
        assert torch.allclose(got[rows], reference[rows], atol=1e-6)
    assert (nb["masked_softmax"](scores, masks[1])[0, 1] == 0).all()


@pytest.mark.parametrize("L", [1, 4, 9])
def test_causal_mask(nb, L):
    expected = torch.ones(L, L, dtype=torch.bool).tril()
    assert torch.equal(nb["causal_mask"](L), expected)
    assert torch.equal(nb["causal_mask"](L), attention.causal_mask(L))


@pytest.mark.parametrize(("Lq", "Lk"), [(5, 5), (6, 7), (7, 5)])
@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_equals_library_and_torch(nb, Lq, Lk, use_mask, is_causal):
    g = _gen(6)
    q, k = torch.randn(2, 3, Lq, 8, generator=g), torch.randn(2, 3, Lk, 8, generator=g)
    v = torch.randn(2, 3, Lk, 5, generator=g)
    mask = None
    if use_mask:
        mask = torch.rand(2, 3, Lq, Lk, generator=g) > 0.4
        mask[..., 0] = True  # every row keeps a key, so torch's function is defined everywhere
    out, weights = nb["scaled_dot_product_attention"](q, k, v, mask=mask, is_causal=is_causal)
    out_lib, w_lib = attention.scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal)
    if mask is not None and is_causal:  # torch takes one or the other: combine them by hand
        both = mask & torch.ones(Lq, Lk, dtype=torch.bool).tril()
        out_torch = F.scaled_dot_product_attention(q, k, v, attn_mask=both)
    else:
        out_torch = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
    assert out.shape == (2, 3, Lq, 5) and weights.shape == (2, 3, Lq, Lk)
    assert torch.allclose(out, out_lib, atol=1e-5)
    assert torch.allclose(weights, w_lib, atol=1e-6)
    assert torch.allclose(out, out_torch, atol=1e-5)


def test_attention_fully_masked_query_gives_zeros(nb):
    g = _gen(7)
    q, k, v = (torch.randn(4, 6, generator=g) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    out, weights = nb["scaled_dot_product_attention"](q, k, v, mask=mask)
    assert not out.isnan().any()
    assert (out[1] == 0).all() and (weights[1] == 0).all()


@pytest.mark.parametrize("bandwidth", [0.05, 0.3, 2.0])
def test_nadaraya_watson_is_the_gaussian_kernel_smoother(nb, bandwidth):
    g = _gen(8)
    x_train = 5 * torch.rand(20, generator=g)
    y_train = torch.sin(x_train) + 0.2 * torch.randn(20, generator=g)
    x_query = torch.linspace(0, 5, 13)
    pred, weights = nb["nadaraya_watson"](x_query, x_train, y_train, bandwidth)
    # The textbook formula, in float64 so that exp does not underflow at these distances
    xq, xt, yt = x_query.double(), x_train.double(), y_train.double()
    kernel = torch.exp(-((xq[:, None] - xt[None, :]) ** 2) / (2 * bandwidth**2))
    expected_w = kernel / kernel.sum(-1, keepdim=True)
    assert torch.allclose(weights.double(), expected_w, atol=1e-5)
    assert torch.allclose(pred.double(), expected_w @ yt, atol=1e-4)

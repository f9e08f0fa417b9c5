"""course_utils.attention against torch's own attention, explicit loops and closed forms."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import attention as A

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def random_case(seed, dtype):
    """Random batch dims, Lq != Lk, Dv != Dk, drawn from one seeded generator."""
    g = torch.Generator().manual_seed(seed)
    batch = tuple(
        torch.randint(1, 4, (int(torch.randint(0, 3, (1,), generator=g)),), generator=g).tolist()
    )
    Lq, Lk, D, Dv = (int(x) for x in torch.randint(1, 9, (4,), generator=g))
    q = torch.randn(*batch, Lq, D, generator=g, dtype=dtype)
    k = torch.randn(*batch, Lk, D, generator=g, dtype=dtype)
    v = torch.randn(*batch, Lk, Dv, generator=g, dtype=dtype)
    return g, q, k, v


# --- score functions against a loop over query/key pairs -------------------------------
def loop_scores(q, k, score):
    """(Lq, D), (Lk, D) -> (Lq, Lk), one pair at a time."""
    out = torch.empty(q.shape[0], k.shape[0], dtype=q.dtype)
    for i in range(q.shape[0]):
        for j in range(k.shape[0]):
            out[i, j] = score(q[i], k[j])
    return out


@pytest.mark.parametrize("seed", range(5))
def test_dot_and_scaled_scores_equal_a_loop(seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(4, 7, generator=g), torch.randn(6, 7, generator=g)
    expected = loop_scores(q, k, lambda a, b: (a * b).sum())
    torch.testing.assert_close(A.dot_product_scores(q, k), expected)
    torch.testing.assert_close(A.scaled_dot_product_scores(q, k), expected / math.sqrt(7))


def test_scores_keep_batch_dims():
    q, k = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6, 5)
    s = A.dot_product_scores(q, k)
    assert s.shape == (2, 3, 4, 6)
    torch.testing.assert_close(s[1, 2], A.dot_product_scores(q[1, 2], k[1, 2]))


def test_additive_score_equals_formula():
    torch.manual_seed(0)
    score = A.AdditiveScore(query_dim=5, key_dim=3, hidden_dim=7)
    q, k = torch.randn(2, 4, 5), torch.randn(2, 6, 3)
    Wq, Wk, v = score.w_q.weight, score.w_k.weight, score.v.weight[0]  # (7,5), (7,3), (7,)
    expected = torch.stack(
        [loop_scores(q[b], k[b], lambda a, c: v @ torch.tanh(Wq @ a + Wk @ c)) for b in range(2)]
    )
    torch.testing.assert_close(score(q, k), expected)


def test_bilinear_score_equals_formula():
    torch.manual_seed(1)
    score = A.BilinearScore(query_dim=4, key_dim=6)
    q, k = torch.randn(3, 4), torch.randn(5, 6)
    W = score.w.weight  # (4, 6): q^T W k
    torch.testing.assert_close(score(q, k), loop_scores(q, k, lambda a, c: a @ W @ c))
    assert A.GeneralScore is A.BilinearScore


def test_scaled_scores_have_unit_variance():
    """The closed form: for unit-variance q, k the dot product has variance d."""
    g = torch.Generator().manual_seed(0)
    for d in (4, 64, 1024):
        q, k = torch.randn(2000, d, generator=g), torch.randn(2000, d, generator=g)
        raw = (q * k).sum(-1)
        assert 0.85 < raw.var().item() / d < 1.15
        scaled = A.scaled_dot_product_scores(q[:, None], k[:, None]).flatten()
        assert 0.85 < scaled.var().item() < 1.15


# --- masked_softmax ---------------------------------------------------------------------
def test_masked_softmax_without_mask_is_softmax():
    x = torch.randn(3, 4, 5)
    torch.testing.assert_close(A.masked_softmax(x), torch.softmax(x, -1))


def test_masked_softmax_renormalises_over_allowed_positions():
    x = torch.randn(4, 6)
    mask = torch.rand(4, 6) > 0.3
    mask[:, 0] = True
    w = A.masked_softmax(x, mask)
    assert (w[~mask] == 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(4))
    for i in range(4):  # the allowed entries are an ordinary softmax of the allowed scores
        torch.testing.assert_close(w[i, mask[i]], torch.softmax(x[i, mask[i]], -1))


def test_fully_masked_row_gives_zeros_and_zero_gradient():
    x = torch.randn(3, 5, requires_grad=True)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    w = A.masked_softmax(x, mask)
    assert not torch.isnan(w).any()
    assert (w[1] == 0).all()
    (w * torch.randn(3, 5)).sum().backward()
    assert not torch.isnan(x.grad).any()
    assert (x.grad[1] == 0).all()


def test_masked_softmax_survives_large_scores():
    x = torch.tensor([[1e4, -1e4, 3.0]], dtype=torch.float32)
    w = A.masked_softmax(x, torch.tensor([[False, True, True]]))
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.0, 1.0]]))


# --- scaled_dot_product_attention against torch ----------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(12))
def test_sdpa_equals_torch(seed, dtype):
    g, q, k, v = random_case(seed, dtype)
    out, w = A.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v), atol=TOL[dtype], rtol=1e-5
    )
    assert w.shape == q.shape[:-1] + (k.shape[-2],)
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1], dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(12))
def test_sdpa_with_boolean_mask_equals_torch(seed, dtype):
    g, q, k, v = random_case(seed, dtype)
    mask = torch.rand(q.shape[:-1] + (k.shape[-2],), generator=g) > 0.4
    mask[..., 0] = True  # torch's output is only defined where a row has an allowed key
    ours, _ = A.scaled_dot_product_attention(q, k, v, mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, ref, atol=TOL[dtype], rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(8))
def test_sdpa_broadcast_padding_mask_equals_torch(seed, dtype):
    """A key-padding mask (B, 1, Lk) broadcast over queries, the most common shape."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(3, n, 4, generator=g, dtype=dtype) for n in (5, 7, 7))
    lengths = torch.tensor([7, 3, 1])
    mask = (torch.arange(7)[None, :] < lengths[:, None])[:, None, :]  # (3, 1, 7)
    ours, w = A.scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert (w[1, :, 3:] == 0).all() and (w[2, :, 1:] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(8))
def test_sdpa_causal_equals_torch(seed, dtype):
    g, q, k, v = random_case(seed, dtype)
    ours, w = A.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, ref, atol=TOL[dtype], rtol=1e-5)
    assert (w.triu(diagonal=1) == 0).all()


def test_causal_mask_matches_torch_convention():
    """torch's is_causal is the top-left aligned lower triangle, also when Lq != Lk."""
    q, k = torch.randn(4, 3), torch.randn(6, 3)
    v = torch.eye(6)  # output row i = weights row i
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(ref > 0, A.causal_mask(4, 6))


def test_causal_mask_offset_aligns_bottom_right_like_torch():
    """offset = Lk - Lq: query i is key position i + Lk - Lq, and sees keys up to it."""
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    for Lq, Lk in [(1, 5), (3, 7), (4, 4), (2, 3)]:
        brute = torch.tensor([[j <= i + Lk - Lq for j in range(Lk)] for i in range(Lq)])
        bottom_right = A.causal_mask(Lq, Lk, offset=Lk - Lq)
        assert torch.equal(bottom_right, brute)
        q, k, v = torch.randn(1, 1, Lq, 3), torch.randn(1, 1, Lk, 3), torch.eye(Lk)[None, None]
        top_left = A.causal_mask(Lq, Lk)
        for bias, ours in [(causal_lower_right, bottom_right), (causal_upper_left, top_left)]:
            weights = F.scaled_dot_product_attention(q, k, v, attn_mask=bias(Lq, Lk))
            assert torch.equal(weights[0, 0] > 0, ours)  # output row i = weights row i
        assert bottom_right[-1].all()  # the last query sees every key
    with pytest.raises(TypeError, match="offset must be an int"):
        A.causal_mask(3, 5, offset=2.0)


def test_sdpa_causal_and_mask_combined():
    q, k, v = torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 2)
    pad = torch.tensor([True, True, True, False, True])
    ours, w = A.scaled_dot_product_attention(q, k, v, mask=pad, is_causal=True)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=pad & A.causal_mask(5))
    torch.testing.assert_close(ours, ref)
    assert (w[:, 3] == 0).all()


def test_sdpa_fully_masked_query_gives_zero_output():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = False
    out, w = A.scaled_dot_product_attention(q, k, v, mask=mask)
    assert not torch.isnan(out).any()
    assert (out[0, 1] == 0).all() and (w[0, 1] == 0).all()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    keep = mask.any(-1)  # compare only where torch's answer is defined
    torch.testing.assert_close(out[keep], ref[keep])


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_gradients_equal_torch(dtype):
    g = torch.Generator().manual_seed(3)
    tensors = [torch.randn(2, 4, n, 8, generator=g, dtype=dtype) for n in (5, 6, 6)]
    mask = torch.rand(2, 4, 5, 6, generator=g) > 0.3
    mask[..., 0] = True
    grads = []
    for fn in (
        lambda q, k, v: A.scaled_dot_product_attention(q, k, v, mask=mask)[0],
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    ):
        leaves = [t.clone().requires_grad_() for t in tensors]
        fn(*leaves).pow(2).sum().backward()
        grads.append([t.grad for t in leaves])
    for ours, ref in zip(*grads, strict=True):
        assert ours is not None and ours.abs().sum() > 0
        torch.testing.assert_close(ours, ref, atol=TOL[dtype] * 10, rtol=1e-5)


def test_parametrised_scores_get_gradients():
    for score in (A.AdditiveScore(4, 3, 5), A.BilinearScore(4, 3)):
        score(torch.randn(2, 4), torch.randn(6, 3)).sum().backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in score.parameters())


# --- bad input: clear errors that name the argument and the shapes ---------------------
@pytest.mark.parametrize(
    "call, error, words",
    [
        (
            lambda: A.dot_product_scores(torch.randn(3, 4), torch.randn(5, 6)),
            ValueError,
            ["query", "key", "(3, 4)", "(5, 6)"],
        ),
        (
            lambda: A.scaled_dot_product_scores([[1.0]], torch.randn(2, 1)),
            TypeError,
            ["query", "list"],
        ),
        (
            lambda: A.dot_product_scores(torch.randn(4), torch.randn(5, 4)),
            ValueError,
            ["query", "(4,)"],
        ),
        (
            lambda: A.dot_product_scores(torch.ones(3, 4, dtype=torch.long), torch.randn(5, 4)),
            TypeError,
            ["query", "int64"],
        ),
        (
            lambda: A.dot_product_scores(torch.randn(2, 3, 4), torch.randn(3, 5, 4)),
            ValueError,
            ["batch", "(2, 3, 4)", "(3, 5, 4)"],
        ),
        (
            lambda: A.scaled_dot_product_attention(
                torch.randn(3, 4), torch.randn(5, 4), torch.randn(6, 2)
            ),
            ValueError,
            ["value", "(5, 4)", "(6, 2)"],
        ),
        (
            lambda: A.scaled_dot_product_attention(
                torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2), mask=torch.ones(3, 5)
            ),
            TypeError,
            ["mask", "boolean", "float32"],
        ),
        (
            lambda: A.scaled_dot_product_attention(
                torch.randn(3, 4),
                torch.randn(5, 4),
                torch.randn(5, 2),
                mask=torch.ones(5, 3, dtype=torch.bool),
            ),
            ValueError,
            ["mask", "(5, 3)", "(3, 5)"],
        ),
        (
            lambda: A.masked_softmax(torch.randn(3, 5), mask=torch.ones(2, 3, 5, dtype=torch.bool)),
            ValueError,
            ["mask", "(2, 3, 5)", "(3, 5)"],
        ),
        (
            lambda: A.masked_softmax(torch.randn(3, 5), mask=[[True] * 5] * 3),
            TypeError,
            ["mask", "list"],
        ),
        (
            lambda: A.AdditiveScore(4, 3, 5)(torch.randn(2, 3), torch.randn(6, 3)),
            ValueError,
            ["query", "(2, 3)", "4"],
        ),
        (
            lambda: A.BilinearScore(4, 3)(torch.randn(2, 4), torch.randn(6, 4)),
            ValueError,
            ["key", "(6, 4)", "3"],
        ),
    ],
)
def test_bad_input_raises_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} missing from: {message}"


def test_attend_names_a_mask_or_query_that_does_not_fit_the_states():
    score, states = A.AdditiveScore(4, 3, 5), torch.randn(2, 6, 3)
    with pytest.raises(ValueError, match=r"mask must be \(B, S\) = \(2, 6\).*\(2, 5\)"):
        A.attend(torch.randn(2, 4), states, score, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be boolean"):
        A.attend(torch.randn(2, 4), states, score, torch.ones(2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"query must be \(B, R\).*\(3, 4\).*\(2, 6, 3\)"):
        A.attend(torch.randn(3, 4), states, score)


def test_a_mask_checked_where_it_enters_is_not_checked_again_by_the_softmax(monkeypatch):
    # MultiHeadAttention, scaled_dot_product_attention and attend check the mask they are
    # given; the softmax below them trusts it (only masked_softmax itself checks).
    calls = []
    real = A.check_scores_mask
    monkeypatch.setattr(A, "check_scores_mask", lambda *a: calls.append(a) or real(*a))
    x, mask = torch.randn(2, 3, 8), torch.tensor([[True, True, False], [True, False, False]])
    A.MultiHeadAttention(8, 2)(x, x, x, mask=mask[:, None, :])
    A.attend(torch.randn(2, 4), x, A.AdditiveScore(4, 8, 5), mask)
    assert calls == []
    A.scaled_dot_product_attention(x, x, x, mask=mask[:, None, :])
    assert len(calls) == 1
    A.masked_softmax(torch.randn(2, 3), mask)
    assert len(calls) == 2

"""course_utils.efficient against torch's own attention and the closed forms it replaces.

Exact methods (tiled, sliding-window, block-sparse) must equal
``F.scaled_dot_product_attention`` with the equivalent mask; linear attention must equal its
quadratic form. Sizes are small and nothing is timed.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_utils import efficient as eff
from course_utils import sparse_attention as sparse


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _qkv(batch, N, M, D, Dv, seed, dtype=torch.float32, requires_grad=False):
    g = _gen(seed)
    q = torch.randn(*batch, N, D, generator=g, dtype=dtype)
    k = torch.randn(*batch, M, D, generator=g, dtype=dtype)
    v = torch.randn(*batch, M, Dv, generator=g, dtype=dtype)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


def _random_shapes(count: int, seed: int):
    """Random batch dims, lengths (often not multiples of the block) and feature sizes."""
    g = _gen(seed)

    def r(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    cases = []
    for i in range(count):
        batch = [(), (r(1, 3),), (r(1, 2), r(1, 3))][i % 3]
        cases.append((batch, r(1, 70), r(1, 70), r(1, 16), r(1, 12), r(1, 24)))
    return cases


# ---------------------------------------------------------------------------------------
# Tiled attention: values and gradients equal SDPA's
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("batch", "N", "M", "D", "Dv", "block"), _random_shapes(9, seed=0))
@pytest.mark.parametrize("is_causal", [False, True])
def test_tiled_forward_equals_sdpa(batch, N, M, D, Dv, block, is_causal):
    q, k, v = _qkv(batch, N, M, D, Dv, seed=N * M)
    got = eff.tiled_attention(q, k, v, is_causal=is_causal, block_size=block)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert got.shape == (*batch, N, Dv)
    # torch's causal mask is top-left aligned: a query past the last key still sees keys
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()


@pytest.mark.parametrize(("batch", "N", "M", "D", "Dv", "block"), _random_shapes(6, seed=1))
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("recompute", [True, False])
def test_tiled_gradients_equal_sdpa(batch, N, M, D, Dv, block, is_causal, recompute):
    q, k, v = _qkv(batch, N, M, D, Dv, seed=7 + N, requires_grad=True)
    out = eff.tiled_attention(
        q, k, v, is_causal=is_causal, block_size=block, recompute_backward=recompute
    )
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    grad_out = torch.randn(out.shape, generator=_gen(3))
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    expected = torch.autograd.grad(ref, (q, k, v), grad_out)
    for name, a, b in zip("qkv", got, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-4), f"d{name}: {(a - b).abs().max()}"


def test_tiled_custom_backward_passes_gradcheck():
    q, k, v = _qkv((2,), 7, 9, 3, 2, seed=4, dtype=torch.float64, requires_grad=True)
    for is_causal in (False, True):

        def f(q, k, v, is_causal=is_causal):
            return eff.TiledAttentionFunction.apply(q, k, v, is_causal, 4, None)

        assert torch.autograd.gradcheck(f, (q, k, v))


def test_tiled_uses_the_custom_function_only_when_gradients_are_needed():
    q, k, v = _qkv((1,), 8, 8, 4, 4, seed=5, requires_grad=True)
    assert "TiledAttentionFunction" in type(eff.tiled_attention(q, k, v).grad_fn).__name__
    with torch.no_grad():
        assert eff.tiled_attention(q, k, v).grad_fn is None


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("is_causal", [False, True])
def test_tiled_with_boolean_mask_equals_sdpa(seed, is_causal):
    q, k, v = _qkv((2, 3), 21, 17, 8, 5, seed=seed, requires_grad=True)
    mask = torch.rand(2, 1, 21, 17, generator=_gen(seed)) > 0.5  # broadcast over heads
    mask[..., 0] = True  # every query keeps a key, so SDPA's output is defined everywhere
    out = eff.tiled_attention(q, k, v, is_causal=is_causal, block_size=6, mask=mask)
    causal = torch.ones(21, 17, dtype=torch.bool).tril()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask & causal if is_causal else mask)
    assert torch.allclose(out, ref, atol=1e-5)
    got = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for a, b in zip(got, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-4)


def test_tiled_fully_masked_query_gives_zeros_and_finite_gradients():
    q, k, v = _qkv((), 6, 6, 4, 3, seed=6, requires_grad=True)
    mask = torch.ones(6, 6, dtype=torch.bool)
    mask[2] = False
    out = eff.tiled_attention(q, k, v, block_size=4, mask=mask)
    assert (out[2] == 0).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    others = torch.arange(6) != 2  # the other rows see every key
    expected = F.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(out[others], expected[others], atol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_tiled_rows_empty_in_early_tiles_equal_sdpa(is_causal):
    """Rows that see nothing in their first tiles, only later: the merge must not start
    from a NaN or from a made-up zero log-sum-exp."""
    q, k, v = _qkv((2,), 12, 12, 4, 3, seed=9, requires_grad=True)
    mask = torch.zeros(12, 12, dtype=torch.bool)
    mask[:, 8:] = True  # every query sees only keys 8-11 (the third tile of 4)
    mask[5, 4:6] = True  # query 5 also sees two keys of the second tile
    mask = mask | torch.eye(12, dtype=torch.bool)  # and each its own key, so causal rows keep one
    out = eff.tiled_attention(q, k, v, is_causal=is_causal, block_size=4, mask=mask)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask & causal if is_causal else mask)
    assert torch.allclose(out, ref, atol=1e-5)
    with torch.no_grad():
        assert torch.allclose(
            eff.tiled_attention(q, k, v, is_causal=is_causal, block_size=4, mask=mask),
            ref,
            atol=1e-5,
        )
    got = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for a, b in zip(got, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-4)


def test_tiled_skips_tiles_above_the_diagonal():
    """Queries 0-9 (tile rows 0 and 1) never touch key tiles 2 and 3 (keys 10-19)."""
    q, k, v = _qkv((1,), 20, 20, 4, 4, seed=8)
    base = eff.tiled_attention(q, k, v, is_causal=True, block_size=5)
    k2, v2 = k.clone(), v.clone()
    k2[..., 10:, :] = 1e4  # would dominate every softmax row that saw it
    v2[..., 10:, :] = float("nan")  # a masked-but-computed tile would give 0 * nan = nan
    changed = eff.tiled_attention(q, k2, v2, is_causal=True, block_size=5)
    assert torch.equal(base[..., :10, :], changed[..., :10, :])
    assert changed[..., 10:, :].isnan().all()  # rows that do see keys >= 10 are poisoned


def test_naive_attention_equals_sdpa():
    q, k, v = _qkv((2, 3), 9, 11, 8, 5, seed=9)
    for is_causal in (False, True):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        got = eff.naive_attention(q, k, v, is_causal=is_causal)
        assert torch.allclose(got, expected, atol=1e-5)


# ---------------------------------------------------------------------------------------
# Linear attention: its quadratic form, computed independently
# ---------------------------------------------------------------------------------------
def _linear_quadratic_form(q, k, v, is_causal):
    """``phi(Q) phi(K)^T``, masked, normalised by row, times V (float64)."""
    phi_q = F.elu(q.double()) + 1
    phi_k = F.elu(k.double()) + 1
    w = phi_q @ phi_k.transpose(-2, -1)
    if is_causal:
        w = w * torch.ones(w.shape[-2:], dtype=torch.float64).tril()
    return (w / w.sum(-1, keepdim=True)) @ v.double()


@pytest.mark.parametrize(("N", "chunk"), [(1, 4), (16, 4), (37, 8), (50, 64), (64, 1)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_linear_attention_equals_its_quadratic_form(N, chunk, is_causal):
    q, k, v = _qkv((2, 3), N, N, 8, 5, seed=N)
    got = eff.linear_attention(q, k, v, is_causal=is_causal, chunk_size=chunk)
    expected = _linear_quadratic_form(q, k, v, is_causal)
    assert got.shape == (2, 3, N, 5)
    assert torch.allclose(got.double(), expected, atol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_linear_attention_gradients_equal_its_quadratic_form(is_causal):
    q, k, v = _qkv((2,), 19, 19, 4, 3, seed=11, requires_grad=True)
    out = eff.linear_attention(q, k, v, is_causal=is_causal, chunk_size=5)
    w = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)
    w = w.tril() if is_causal else w
    ref = (w / w.sum(-1, keepdim=True)) @ v
    got = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for a, b in zip(got, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-4)


def test_linear_attention_non_causal_allows_different_lengths_and_is_causal_really_causal():
    q, k, v = _qkv((2,), 5, 9, 4, 3, seed=10)
    expected = _linear_quadratic_form(q, k, v, is_causal=False)
    assert torch.allclose(eff.linear_attention(q, k, v).double(), expected, atol=1e-5)
    q, k, v = _qkv((1,), 12, 12, 4, 3, seed=11)
    base = eff.linear_attention(q, k, v, is_causal=True, chunk_size=5)
    k[..., 7:, :] += 3.0
    v[..., 7:, :] -= 5.0
    changed = eff.linear_attention(q, k, v, is_causal=True, chunk_size=5)
    assert torch.allclose(base[..., :7, :], changed[..., :7, :], atol=1e-6)


def test_linear_attention_is_not_softmax_attention():
    """A different kernel, not an estimate of softmax's: the two functions differ."""
    q, k, v = _qkv((1, 2), 32, 32, 8, 8, seed=12)
    err = (eff.linear_attention(q, k, v) - F.scaled_dot_product_attention(q, k, v)).abs()
    assert err.max() > 1e-2


@pytest.mark.parametrize("is_causal", [False, True])
def test_feature_map_attention_takes_any_positive_features(is_causal):
    g = _gen(13)
    phi_q, phi_k = torch.rand(2, 11, 6, generator=g), torch.rand(2, 11, 6, generator=g)
    v = torch.randn(2, 11, 3, generator=g)
    w = phi_q.double() @ phi_k.double().transpose(-2, -1)
    if is_causal:
        w = w.tril()
    expected = (w / w.sum(-1, keepdim=True)) @ v.double()
    got = eff.feature_map_attention(phi_q, phi_k, v, is_causal=is_causal, chunk_size=4)
    assert torch.allclose(got.double(), expected, atol=1e-5)
    with pytest.raises(ValueError, match=r"phi_q and phi_k must have the same feature size"):
        eff.feature_map_attention(phi_q, phi_k[..., :4], v)


# ---------------------------------------------------------------------------------------
# Sliding-window and block-sparse attention: SDPA with the equivalent mask
# ---------------------------------------------------------------------------------------
def _mask_by_loops(N, allowed):
    return torch.tensor([[allowed(i, j) for j in range(N)] for i in range(N)])


@pytest.mark.parametrize(("N", "window"), [(1, 1), (9, 1), (9, 3), (20, 7), (33, 8), (8, 50)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_sliding_window_equals_sdpa_with_the_mask(N, window, is_causal):
    expected_mask = _mask_by_loops(
        N, lambda i, j: abs(i - j) < window and (j <= i or not is_causal)
    )
    mask = sparse.sliding_window_mask(N, window, is_causal=is_causal)
    assert torch.equal(mask, expected_mask)
    q, k, v = _qkv((2, 3), N, N, 8, 5, seed=N + window, requires_grad=True)
    got = sparse.sliding_window_attention(q, k, v, window=window, is_causal=is_causal)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(got, ref, atol=1e-5)
    grads = torch.autograd.grad(got.sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip(grads, ref_grads, strict=True):
        assert torch.isfinite(a).all() and torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize(
    ("N", "block", "num_global"), [(10, 3, 0), (10, 3, 2), (23, 4, 3), (7, 16, 1), (16, 4, 16)]
)
@pytest.mark.parametrize("is_causal", [False, True])
def test_block_sparse_equals_sdpa_with_the_mask(N, block, num_global, is_causal):
    def allowed(i, j):
        near = abs(i // block - j // block) <= 1
        ok = near or i < num_global or j < num_global
        return ok and (j <= i or not is_causal)

    mask = sparse.block_sparse_mask(N, block, num_global=num_global, is_causal=is_causal)
    assert torch.equal(mask, _mask_by_loops(N, allowed))
    q, k, v = _qkv((2,), N, N, 6, 4, seed=N * block, requires_grad=True)
    got = sparse.block_sparse_attention(q, k, v, block, num_global=num_global, is_causal=is_causal)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(got, ref, atol=1e-5)
    grads = torch.autograd.grad(got.sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip(grads, ref_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-4)


def _hierarchical_by_loops(q, k, v, block, is_causal):
    """One query at a time, in float64: the exact keys of the near blocks, then one mean key
    (score + log of its size) and one mean value per far block."""
    *batch, N, D = q.shape
    q, k, v = (t.double().reshape(-1, t.shape[-2], t.shape[-1]) for t in (q, k, v))
    out = torch.zeros(q.shape[0], N, v.shape[-1], dtype=torch.float64)
    blocks = [list(range(s, min(s + block, N))) for s in range(0, N, block)]
    for n in range(q.shape[0]):
        for i in range(N):
            bi = i // block
            scores, values = [], []
            for c, members in enumerate(blocks):
                if abs(bi - c) <= 1:  # near: every key, exactly
                    for j in members:
                        if j <= i or not is_causal:
                            scores.append(q[n, i] @ k[n, j] / D**0.5)
                            values.append(v[n, j])
                elif c < bi or not is_causal:  # far: one summary that weighs len(members)
                    mean_k, mean_v = k[n, members].mean(0), v[n, members].mean(0)
                    scores.append(q[n, i] @ mean_k / D**0.5 + torch.log(torch.tensor(len(members))))
                    values.append(mean_v)
            weights = torch.softmax(torch.stack(scores), 0)
            out[n, i] = (weights[:, None] * torch.stack(values)).sum(0)
    return out.reshape(*batch, N, -1)


@pytest.mark.parametrize(("N", "block"), [(1, 1), (7, 2), (12, 3), (23, 4), (30, 5), (9, 16)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_hierarchical_equals_its_definition_by_loops(N, block, is_causal):
    q, k, v = _qkv((2,), N, N, 6, 4, seed=N * block, requires_grad=True)
    got = sparse.hierarchical_attention(q, k, v, block, is_causal=is_causal)
    ref = _hierarchical_by_loops(q, k, v, block, is_causal)
    assert torch.allclose(got.double(), ref, atol=1e-5)
    grads = torch.autograd.grad(got.sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip(grads, ref_grads, strict=True):
        assert torch.isfinite(a).all() and torch.allclose(a, b.float(), atol=1e-4)


@pytest.mark.parametrize("is_causal", [False, True])
def test_hierarchical_is_exact_where_blocks_are_uniform_or_near(is_causal):
    # Keys and values constant within each block: a block's mean is each of its keys, so the
    # coarse level loses nothing and the result is exact attention (torch's SDPA)
    q, k, v = _qkv((2, 3), 22, 22, 8, 5, seed=3)
    k = k[..., ::4, :].repeat_interleave(4, dim=-2)[..., :22, :]
    v = v[..., ::4, :].repeat_interleave(4, dim=-2)[..., :22, :]
    got = sparse.hierarchical_attention(q, k, v, block_size=4, is_causal=is_causal)
    assert torch.allclose(
        got, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), atol=1e-5
    )
    # Two blocks: every block is near every query, so nothing is summarised
    q, k, v = _qkv((2,), 8, 8, 8, 5, seed=4)
    got = sparse.hierarchical_attention(q, k, v, block_size=4, is_causal=is_causal)
    assert torch.allclose(
        got, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), atol=1e-5
    )
    # ... but with distinct far keys it is not exact attention
    q, k, v = _qkv((2,), 40, 40, 8, 5, seed=5)
    got = sparse.hierarchical_attention(q, k, v, block_size=4, is_causal=is_causal)
    assert not torch.allclose(
        got, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), atol=1e-3
    )


def test_block_summaries_are_block_means():
    k, v = torch.randn(2, 11, 3), torch.randn(2, 11, 5)
    mean_k, mean_v, counts = sparse.block_summaries(k, v, block_size=4)
    assert counts.tolist() == [4, 4, 3]
    for c, (start, stop) in enumerate([(0, 4), (4, 8), (8, 11)]):
        assert torch.allclose(mean_k[:, c], k[:, start:stop].mean(1))
        assert torch.allclose(mean_v[:, c], v[:, start:stop].mean(1))


# ---------------------------------------------------------------------------------------
# Bad input: clear errors that name the argument
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -3])
def test_non_positive_sizes_raise(bad):
    q, k, v = _qkv((1,), 8, 8, 4, 4, seed=0)
    with pytest.raises(ValueError, match="block_size"):
        eff.tiled_attention(q, k, v, block_size=bad)
    with pytest.raises(ValueError, match="window"):
        sparse.sliding_window_attention(q, k, v, window=bad)
    with pytest.raises(ValueError, match="window"):
        sparse.sliding_window_mask(8, bad)
    with pytest.raises(ValueError, match="chunk_size"):
        eff.linear_attention(q, k, v, is_causal=True, chunk_size=bad)
    with pytest.raises(ValueError, match="block_size"):
        sparse.block_sparse_attention(q, k, v, block_size=bad)
    with pytest.raises(ValueError, match="block_size"):
        sparse.hierarchical_attention(q, k, v, block_size=bad)


def test_wrong_types_raise():
    q, k, v = _qkv((1,), 8, 8, 4, 4, seed=0)
    with pytest.raises(TypeError, match="block_size"):
        eff.tiled_attention(q, k, v, block_size=2.5)
    with pytest.raises(TypeError, match="query"):
        eff.tiled_attention(q.numpy(), k, v)
    with pytest.raises(TypeError, match="key"):
        eff.linear_attention(q, k.long(), v)
    with pytest.raises(TypeError, match="mask"):
        eff.tiled_attention(q, k, v, mask=torch.ones(8, 8))
    with pytest.raises(ValueError, match="num_global"):
        sparse.block_sparse_attention(q, k, v, block_size=2, num_global=9)


@pytest.mark.parametrize(
    "fn",
    [
        eff.tiled_attention,
        eff.naive_attention,
        eff.linear_attention,
        lambda q, k, v: sparse.sliding_window_attention(q, k, v, window=2),
        lambda q, k, v: sparse.block_sparse_attention(q, k, v, block_size=2),
        lambda q, k, v: sparse.hierarchical_attention(q, k, v, block_size=2),
    ],
)
def test_mismatched_shapes_raise(fn):
    q, k, v = _qkv((2,), 8, 8, 4, 4, seed=0)
    with pytest.raises(ValueError, match=r"feature size D.*\(2, 8, 4\)"):
        fn(q, k[..., :3], v)
    with pytest.raises(ValueError, match="same length M"):
        fn(q, k, v[:, :5])
    with pytest.raises(ValueError, match="leading dims"):
        fn(q, k[:1], v[:1])
    with pytest.raises(ValueError, match=r"N, D\), got shape \(4,\)"):
        fn(q[0, 0], k, v)


def test_local_patterns_need_equal_lengths_and_masks_must_broadcast():
    q, k, v = _qkv((1,), 6, 8, 4, 4, seed=0)
    with pytest.raises(ValueError, match="same length N"):
        sparse.sliding_window_attention(q, k, v, window=2)
    with pytest.raises(ValueError, match="same length N"):
        sparse.hierarchical_attention(q, k, v, block_size=2)
    with pytest.raises(ValueError, match="same length N"):
        eff.linear_attention(q, k, v, is_causal=True)
    with pytest.raises(ValueError, match=r"does not broadcast.*\(1, 6, 8\)"):
        eff.tiled_attention(q, k, v, mask=torch.ones(6, 6, dtype=torch.bool))

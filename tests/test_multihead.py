"""course_utils.attention.MultiHeadAttention against torch.nn.MultiheadAttention."""

import pytest
import torch
from torch import nn

from course_utils.attention import MultiHeadAttention, causal_mask


def random_config(seed):
    """A seeded torch module (random heads, dims, bias) and a batch of inputs for it."""
    g = torch.Generator().manual_seed(seed)
    H = int(torch.randint(1, 5, (1,), generator=g))
    E = H * int(torch.randint(1, 7, (1,), generator=g))
    B, L, S = (int(x) for x in torch.randint(1, 7, (3,), generator=g))
    bias = bool(seed % 2)
    torch.manual_seed(seed)
    m = nn.MultiheadAttention(E, H, bias=bias, batch_first=True).eval()
    q = torch.randn(B, L, E, generator=g)
    kv = torch.randn(B, S, E, generator=g)
    return g, m, q, kv


def torch_reference(m, q, k, v, allowed=None):
    """torch's boolean masks mean the opposite of the course's: True = blocked."""
    out, w = m(q, k, v, attn_mask=None if allowed is None else ~allowed,
               need_weights=True, average_attn_weights=False)  # fmt: skip
    return out, w


@pytest.mark.parametrize("seed", range(8))
def test_from_torch_matches_without_mask(seed):
    _, m, q, kv = random_config(seed)
    mha = MultiHeadAttention.from_torch(m).eval()
    out, w = mha(q, kv, kv)
    ref_out, ref_w = torch_reference(m, q, kv, kv)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=0)


@pytest.mark.parametrize("seed", range(8))
def test_from_torch_matches_with_padding_mask(seed):
    g, m, q, kv = random_config(seed)
    B, S = kv.shape[:2]
    lengths = torch.randint(1, S + 1, (B,), generator=g)
    keep = torch.arange(S)[None, :] < lengths[:, None]  # (B, S), True = real token
    mha = MultiHeadAttention.from_torch(m).eval()
    out, w = mha(q, kv, kv, mask=keep[:, None, :])  # (B, 1, S) broadcasts over queries
    ref_out, ref_w = m(q, kv, kv, key_padding_mask=~keep, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=0)
    assert (w.masked_select(~keep[:, None, None, :].expand_as(w)) == 0).all()


@pytest.mark.parametrize("seed", range(6))
def test_causal_self_attention_matches_torch(seed):
    _, m, x, _ = random_config(seed)
    L = x.shape[1]
    mha = MultiHeadAttention.from_torch(m).eval()
    out, w = mha(x, x, x, is_causal=True)
    ref_out, ref_w = torch_reference(m, x, x, x, allowed=causal_mask(L))
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=0)
    # the same mask given explicitly, as (L, S), (B, L, S) and (B, H, L, S)
    B, H = x.shape[0], m.num_heads
    for mask in (causal_mask(L), causal_mask(L).expand(B, L, L), causal_mask(L).expand(B, H, L, L)):
        torch.testing.assert_close(mha(x, x, x, mask=mask)[0], ref_out, atol=1e-5, rtol=0)


def test_changing_a_future_token_leaves_earlier_outputs_unchanged():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 7, 16)
    y = x.clone()
    y[:, 4] = torch.randn(2, 16)  # change position 4 only
    out_x, _ = mha(x, x, x, is_causal=True)
    out_y, _ = mha(y, y, y, is_causal=True)
    torch.testing.assert_close(out_x[:, :4], out_y[:, :4], atol=0, rtol=0)
    assert (out_x[:, 4:] - out_y[:, 4:]).abs().amax() > 1e-3
    # without the mask the change leaks backwards
    assert (mha(x, x, x)[0][:, :4] - mha(y, y, y)[0][:, :4]).abs().amax() > 1e-3


def test_heads_are_separate_attentions_in_subspaces():
    """Output = out_proj(concat_h softmax(Q_h K_h^T / sqrt(d_h)) V_h), one head at a time."""
    torch.manual_seed(1)
    E, H = 12, 3
    mha = MultiHeadAttention(E, H).eval()
    x = torch.randn(2, 5, E)
    q, k, v = mha.q_proj(x), mha.k_proj(x), mha.v_proj(x)
    d = E // H
    heads = []
    for h in range(H):
        sl = slice(h * d, (h + 1) * d)
        w = torch.softmax(q[..., sl] @ k[..., sl].transpose(1, 2) / d**0.5, dim=-1)
        heads.append(w @ v[..., sl])
    expected = mha.out_proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(mha(x, x, x)[0], expected, atol=1e-6, rtol=0)


def test_fully_masked_query_gives_zero_not_nan():
    mha = MultiHeadAttention(8, 2, bias=False).eval()
    x = torch.randn(1, 3, 8)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    out, w = mha(x, x, x, mask=mask)
    assert torch.isfinite(out).all() and (w[:, :, 1] == 0).all()
    assert (out[:, 1] == 0).all()  # no bias: nothing attended, nothing out


def test_gradients_reach_every_parameter():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8, requires_grad=True)
    out, _ = mha(x, x, x, is_causal=True)
    out.square().sum().backward()
    for name, p in mha.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert x.grad.abs().sum() > 0


def test_train_mode_and_dropout_are_copied():
    m = nn.MultiheadAttention(8, 2, dropout=0.25, batch_first=True)
    mha = MultiHeadAttention.from_torch(m)
    assert mha.training and mha.dropout.p == 0.25


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: MultiHeadAttention(10, 3), ValueError, "divisible by num_heads"),
        (lambda: MultiHeadAttention(8, 0), ValueError, "positive"),
        (lambda: MultiHeadAttention(8.0, 2), TypeError, "embed_dim must be an int"),
        (lambda: MultiHeadAttention(8, True), TypeError, "num_heads must be an int"),
        (lambda: MultiHeadAttention.from_torch(nn.Linear(2, 2)), TypeError, "MultiheadAttention"),
        (
            lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2)),
            ValueError,
            "batch_first",
        ),  # fmt: skip
        (
            lambda: MultiHeadAttention.from_torch(
                nn.MultiheadAttention(8, 2, kdim=4, batch_first=True)
            ),
            ValueError,
            "kdim",
        ),  # fmt: skip
    ],
)
def test_bad_construction_raises_clear_error(make, error, words):
    with pytest.raises(error, match=words):
        make()


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "words"),
    [
        ((torch.randn(2, 3, 6),) * 3, {}, ValueError, r"\(B, L, 8\).*\(2, 3, 6\)"),
        ((torch.randn(3, 8),) * 3, {}, ValueError, "at least 3 dims"),
        (
            (torch.randn(2, 3, 8), torch.randn(2, 4, 8), torch.randn(2, 5, 8)),
            {},
            ValueError,
            "agree on B and S",
        ),  # fmt: skip
        (
            (torch.randn(2, 3, 8),) * 3,
            {"mask": torch.ones(3, 4, dtype=torch.bool)},
            ValueError,
            r"mask of shape \(3, 4\)",
        ),  # fmt: skip
        ((torch.randn(2, 3, 8),) * 3, {"mask": torch.ones(3, 3)}, TypeError, "boolean"),
        (
            (torch.randn(2, 3, 8),) * 3,
            {"mask": torch.ones(3, dtype=torch.bool)},
            ValueError,
            r"\(Lq, Lk\), \(B, Lq, Lk\)",
        ),  # fmt: skip
        (
            (torch.randn(2, 3, 8, dtype=torch.float64),) * 3,
            {},
            TypeError,
            "dtype torch.float64",
        ),  # fmt: skip
    ],
)
def test_bad_input_raises_clear_error(args, kwargs, error, words):
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(error, match=words):
        mha(*args, **kwargs)

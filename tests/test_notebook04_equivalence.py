"""Notebook 04's from-scratch self-attention and multi-head attention equal the library's
``MultiHeadAttention`` and PyTorch's ``torch.nn.MultiheadAttention`` with copied weights.

Only the cells whose first line is ``# from-scratch: <name>`` run here (in notebook order,
in one namespace holding what the notebook's imports provide), so the test needs neither
the training nor the widgets.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_utils import attention

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "04_self_attention_multihead.ipynb"
EXPECTED = {"self_attention", "multi_head_attention_loop", "MultiHeadAttention"}


@pytest.fixture(scope="module")
def nb():
    """The notebook's from-scratch definitions, by name."""
    return run_from_scratch_cells(
        NOTEBOOK, {"math": math, "torch": torch, "nn": nn, "attention": attention}
    )


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_marked_cells_define_what_they_name(nb):
    assert_marked_cells_define(NOTEBOOK, nb, EXPECTED)


def _torch_mask(mask, B, H, L, S):
    """Course mask (True = may attend) -> torch's (True = blocked), ``(B * H, L, S)``."""
    if mask is None:
        return None
    if mask.dim() == 3:
        mask = mask[:, None]  # (B, L or 1, S) -> (B, 1, L or 1, S): the same for every head
    return (~mask).expand(B, H, L, S).reshape(B * H, L, S)


@pytest.mark.parametrize("batch_shape", [(), (3,), (2, 2)])
@pytest.mark.parametrize("masked", [False, True])
def test_self_attention_is_attention_on_three_projections(nb, batch_shape, masked):
    g = _gen(0)
    L, d, dk, dv = 6, 5, 4, 3
    x = torch.randn(*batch_shape, L, d, generator=g)
    W_q, W_k = torch.randn(d, dk, generator=g), torch.randn(d, dk, generator=g)
    W_v = torch.randn(d, dv, generator=g)
    mask = attention.causal_mask(L) if masked else None
    out, w = nb["self_attention"](x, W_q, W_k, W_v, mask=mask)
    out_lib, w_lib = attention.scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask=mask)
    assert out.shape == (*batch_shape, L, dv) and w.shape == (*batch_shape, L, L)
    assert torch.allclose(out, out_lib, atol=1e-6) and torch.allclose(w, w_lib, atol=1e-6)
    # and the textbook formula, written out with einsum
    scores = torch.einsum("...id,...jd->...ij", x @ W_q, x @ W_k) / math.sqrt(dk)
    if masked:
        scores = scores.masked_fill(~mask, float("-inf"))
    assert torch.allclose(w, torch.softmax(scores, -1), atol=1e-6)


@pytest.mark.parametrize(("E", "H"), [(8, 1), (8, 2), (12, 3), (16, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_loop_over_heads_equals_torch_and_library_without_bias(nb, E, H, causal):
    torch.manual_seed(1)
    torch_mha = nn.MultiheadAttention(E, H, bias=False, batch_first=True).eval()
    lib_mha = attention.MultiHeadAttention.from_torch(torch_mha)
    x = torch.randn(2, 7, E, generator=_gen(1))
    W_q, W_k, W_v = (torch_mha.in_proj_weight[i * E : (i + 1) * E].T for i in range(3))
    W_o = torch_mha.out_proj.weight.T
    mask = attention.causal_mask(7) if causal else None
    with torch.no_grad():
        out, w = nb["multi_head_attention_loop"](x, W_q, W_k, W_v, W_o, num_heads=H, mask=mask)
        ref, w_ref = torch_mha(
            x, x, x, attn_mask=_torch_mask(mask, 2, H, 7, 7), average_attn_weights=False
        )
        out_lib, _ = lib_mha(x, x, x, mask=mask)
    assert out.shape == (2, 7, E) and w.shape == (2, H, 7, 7)
    assert torch.allclose(out, ref, atol=1e-5) and torch.allclose(w, w_ref, atol=1e-5)
    assert torch.allclose(out, out_lib, atol=1e-5)


def _mask_cases(B, H, L, S, g):
    per_head = torch.rand(B, H, L, S, generator=g) > 0.3
    per_head[..., 0] = True  # every query keeps a key, so torch is defined everywhere
    padding = torch.ones(B, 1, S, dtype=torch.bool)
    padding[-1, :, S // 2 :] = False
    return {
        "none": None,
        "2-D": per_head[0, 0],  # (L, S): the same for every sequence and head
        "padding (B, 1, S)": padding,
        "per head (B, H, L, S)": per_head,
    }


@pytest.mark.parametrize(("E", "H", "L", "S"), [(8, 2, 5, 5), (16, 4, 6, 9), (12, 3, 7, 4)])
@pytest.mark.parametrize("mask_name", ["none", "2-D", "padding (B, 1, S)", "per head (B, H, L, S)"])
@pytest.mark.parametrize("bias", [True, False])
def test_class_equals_torch_and_library_with_copied_weights(nb, E, H, L, S, mask_name, bias):
    torch.manual_seed(2)
    g = _gen(2)
    B = 2
    torch_mha = nn.MultiheadAttention(E, H, bias=bias, batch_first=True).eval()
    lib_mha = attention.MultiHeadAttention.from_torch(torch_mha).eval()
    ours = nb["MultiHeadAttention"](E, H, bias=bias)
    ours.load_state_dict(lib_mha.state_dict())
    query, memory = torch.randn(B, L, E, generator=g), torch.randn(B, S, E, generator=g)
    mask = _mask_cases(B, H, L, S, g)[mask_name]
    with torch.no_grad():
        out, w = ours(query, memory, memory, mask=mask)
        out_lib, w_lib = lib_mha(query, memory, memory, mask=mask)
        torch_mask = _torch_mask(mask, B, H, L, S)
        ref, w_ref = torch_mha(
            query, memory, memory, attn_mask=torch_mask, average_attn_weights=False
        )
    assert out.shape == (B, L, E) and w.shape == (B, H, L, S)
    assert torch.allclose(out, ref, atol=1e-5) and torch.allclose(w, w_ref, atol=1e-5)
    assert torch.allclose(out, out_lib, atol=1e-6) and torch.allclose(w, w_lib, atol=1e-6)


def test_class_is_causal_flag_and_gradients_match_the_library(nb):
    torch.manual_seed(3)
    lib_mha = attention.MultiHeadAttention(16, 4)
    ours = nb["MultiHeadAttention"](16, 4)
    ours.load_state_dict(lib_mha.state_dict())
    x = torch.randn(2, 8, 16, generator=_gen(3))
    out, _ = ours(x, x, x, is_causal=True)
    out_lib, _ = lib_mha(x, x, x, is_causal=True)
    out_mask, _ = ours(x, x, x, mask=attention.causal_mask(8))
    assert torch.allclose(out, out_lib, atol=1e-6) and torch.allclose(out, out_mask, atol=1e-6)
    out.square().sum().backward()
    out_lib.square().sum().backward()
    for (name, p), (_, p_lib) in zip(
        ours.named_parameters(), lib_mha.named_parameters(), strict=True
    ):
        assert torch.allclose(p.grad, p_lib.grad, atol=1e-5), name


def test_causal_outputs_ignore_every_future_token(nb):
    torch.manual_seed(4)
    ours = nb["MultiHeadAttention"](12, 3).eval()
    g = _gen(4)
    x = torch.randn(1, 10, 12, generator=g)
    for t in range(10):
        changed = x.clone()
        changed[0, t] = torch.randn(12, generator=g)
        with torch.no_grad():
            y = ours(x, x, x, is_causal=True)[0]
            y_changed = ours(changed, changed, changed, is_causal=True)[0]
        assert torch.equal(y[0, :t], y_changed[0, :t]), t  # bit-for-bit: masked weights are 0
        assert (y[0, t:] - y_changed[0, t:]).abs().amax(-1).min() > 1e-4, t


# ---------------------------------------------------------------------------------------
# The notebook's exercise checkers: an independent right answer passes, a classic slip fails
# ---------------------------------------------------------------------------------------
def _split_heads_by_chunks(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)  # (B, H, L, E/H)


def _mha_by_loop(nb):
    return lambda x, Wq, Wk, Wv, Wo, H, mask=None: nb["multi_head_attention_loop"](
        x, Wq, Wk, Wv, Wo, H, mask
    )


def test_exercise_checkers_tell_right_from_wrong(nb, capsys):
    from course_utils.exercises import nb04

    nb04.check_split_heads(_split_heads_by_chunks)
    with pytest.raises(AssertionError):  # the right shape, but positions mixed into heads
        nb04.check_split_heads(lambda x, H: x.reshape(x.shape[0], H, x.shape[1], -1))

    nb04.check_multi_head_self_attention(_mha_by_loop(nb))
    with pytest.raises(AssertionError):  # scores divided by sqrt(E) instead of sqrt(E / H)
        nb04.check_multi_head_self_attention(
            lambda x, Wq, Wk, Wv, Wo, H, mask=None: nb["multi_head_attention_loop"](
                x, Wq / math.sqrt(H), Wk, Wv, Wo, H, mask
            )
        )

    def previous(w):
        return torch.diagonal(w, offset=-1, dim1=-2, dim2=-1)[..., 1:].mean(dim=(0, 2))

    nb04.check_previous_token_score(previous)
    with pytest.raises(AssertionError):  # includes t = 1, whose previous token is the first
        nb04.check_previous_token_score(
            lambda w: torch.diagonal(w, offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))
        )
    assert "FAILED" in capsys.readouterr().out

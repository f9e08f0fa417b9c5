"""Notebook 17's from-scratch definitions equal the library and PyTorch's own attention.

The model written out (``TinyGPT``) loads ``lm.DecoderLM``'s weights and gives its logits,
in one pass and through its own cache of rotated keys; ``train_step`` takes the step that
``training.fit`` takes.

Only the cells whose first line is ``# from-scratch: <name>`` run here (in notebook order,
in one namespace holding ``math``, ``torch``, ``F`` and the course's attention), so the test
is fast and needs neither the text nor the stored models. The exercise checkers are tested
here too.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.bias import causal_lower_right

from course_utils import language_model as lm
from course_utils import measure, sampling
from course_utils.attention import causal_mask, scaled_dot_product_attention
from course_utils.exercises import nb17
from course_utils.positional import apply_rotary
from course_utils.stdlib_text import LMBatch
from course_utils.training import fit
from course_utils.transformer import FeedForward

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "17_language_models.ipynb"
EXPECTED = {
    "bottom_right_causal_mask",
    "grouped_query_attention",
    "top_k_filter",
    "top_p_filter",
    "sample_next",
    "kv_cache_bytes",
    "step_multiply_adds",
    "TinyGPT",
    "train_step",
}


@pytest.fixture(scope="module")
def nb():
    namespace = {
        "math": math,
        "torch": torch,
        "F": F,
        "scaled_dot_product_attention": scaled_dot_product_attention,
        "nn": nn,
        "apply_rotary": apply_rotary,
        "FeedForward": FeedForward,
    }
    return run_from_scratch_cells(NOTEBOOK, namespace)


def test_marked_cells_define_what_they_name(nb):
    assert_marked_cells_define(NOTEBOOK, nb, EXPECTED)


@pytest.mark.parametrize(("Lq", "Lk"), [(1, 1), (1, 6), (4, 4), (3, 10)])
def test_bottom_right_mask_equals_torch_and_library(nb, Lq, Lk):
    got = nb["bottom_right_causal_mask"](Lq, Lk)
    assert torch.equal(got, causal_lower_right(Lq, Lk)._materialize())
    assert torch.equal(got, causal_mask(Lq, Lk, offset=Lk - Lq))


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize(("Lq", "Lk"), [(6, 6), (1, 9), (3, 8)])
def test_grouped_query_attention_equals_sdpa_and_the_library_layer(nb, num_kv_heads, Lq, Lk):
    g = torch.Generator().manual_seed(Lq * 10 + Lk + num_kv_heads)
    q = torch.randn(2, 4, Lq, 8, generator=g)
    k, v = (torch.randn(2, num_kv_heads, Lk, 8, generator=g) for _ in range(2))
    got = nb["grouped_query_attention"](q, k, v)
    expected = F.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_lower_right(Lq, Lk), enable_gqa=True
    )
    assert torch.allclose(got, expected, atol=1e-5)
    # the library's layer, fed through its cache, on the same projections
    torch.manual_seed(0)
    config = lm.LMConfig(
        vocab_size=5, d_model=32, num_heads=4, num_kv_heads=num_kv_heads, position="none"
    )
    layer = lm.GroupedQueryAttention(config).eval()
    x = torch.randn(2, Lk, 32, generator=g)
    cache = lm.KVCache(1, max_len=Lk)
    if Lk > Lq:
        layer(x[:, : Lk - Lq], cache)
    out, _ = layer(x[:, Lk - Lq :], cache)
    B, H, Hkv, D = 2, 4, num_kv_heads, 8
    qx = layer.w_q(x[:, Lk - Lq :]).view(B, Lq, H, D).transpose(1, 2)
    kx = layer.w_k(x).view(B, Lk, Hkv, D).transpose(1, 2)
    vx = layer.w_v(x).view(B, Lk, Hkv, D).transpose(1, 2)
    ours = nb["grouped_query_attention"](qx, kx, vx).transpose(1, 2).reshape(B, Lq, H * D)
    assert torch.allclose(layer.w_o(ours), out, atol=1e-5)


def test_filters_equal_the_library(nb):
    g = torch.Generator().manual_seed(17)
    logits = 3 * torch.randn(4, 30, generator=g)
    for k in (1, 3, 30):
        assert torch.equal(nb["top_k_filter"](logits, k), sampling.top_k_filter(logits, k))
    for p in (0.05, 0.5, 0.9, 0.999):
        assert torch.equal(nb["top_p_filter"](logits, p), sampling.top_p_filter(logits, p))


def test_sample_next_draws_what_the_library_distribution_draws(nb):
    logits = 2 * torch.randn(3, 12, generator=torch.Generator().manual_seed(1))
    for settings in [(1.0, None, None), (0.7, 5, None), (1.3, None, 0.8), (0.9, 4, 0.6)]:
        g1, g2 = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
        ours = nb["sample_next"](logits, *settings, generator=g1)
        probs = sampling.next_token_probs(logits, *settings)
        theirs = torch.multinomial(probs, 1, generator=g2).squeeze(-1)
        assert torch.equal(ours, theirs)


def test_kv_cache_bytes_equals_the_library(nb):
    for args in [(32, 8, 128, 8192), (2, 1, 32, 100, 3, 4), (80, 8, 128, 131072)]:
        assert nb["kv_cache_bytes"](*args) == measure.kv_cache_bytes(*args)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize(
    "config",
    [
        lm.LMConfig(vocab_size=97),
        lm.LMConfig(vocab_size=11, d_model=24, num_heads=6, num_kv_heads=2, num_layers=3, d_ff=40),
    ],
)
def test_step_multiply_adds_sum_to_the_librarys_totals(nb, config, use_cache):
    for n in (1, 2, 37, 512):
        steps = sum(nb["step_multiply_adds"](config, t, use_cache) for t in range(1, n + 1))
        assert steps == measure.generation_multiply_adds(config, n, use_cache)


# ---------------------------------------------------------------------------------------
# Exercise checkers: the solution passes, a plausible mistake fails
# ---------------------------------------------------------------------------------------
def library_model(num_kv_heads, seed=0):
    torch.manual_seed(seed)
    config = lm.LMConfig(
        vocab_size=11,
        d_model=32,
        num_heads=4,
        num_kv_heads=num_kv_heads,
        d_ff=40,
        num_layers=2,
        max_len=24,
        position="rope",
    )
    model = lm.DecoderLM(config).eval()
    with torch.no_grad():  # larger weights than the init, so that mistakes show
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_tiny_gpt_with_the_librarys_weights_gives_its_logits_with_and_without_a_cache(
    nb, num_kv_heads
):
    library = library_model(num_kv_heads)
    mine = nb["TinyGPT"](library.config).eval()
    mine.load_state_dict(library.state_dict())  # strict: the same names and shapes
    ids = torch.randint(0, 11, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = library(ids)
        torch.testing.assert_close(mine(ids), expected, atol=1e-5, rtol=1e-5)
        cache = [{} for _ in mine.blocks]
        blocks = [(0, 6), (6, 7), (7, 13)] + [(t, t + 1) for t in range(13, 20)]
        stepwise = torch.cat([mine(ids[:, a:b], cache) for a, b in blocks], dim=1)
        torch.testing.assert_close(stepwise, expected, atol=1e-5, rtol=1e-5)
        assert cache[1]["k"].shape == (3, num_kv_heads, 20, 8)
        library_cache = library.new_cache()
        library(ids, library_cache)  # the library's cache holds the same rotated keys
        for layer in range(2):
            torch.testing.assert_close(
                cache[layer]["k"], library_cache.keys[layer], atol=1e-5, rtol=1e-5
            )


def test_train_step_takes_fits_step(nb):
    windows = torch.randint(0, 11, (4, 13), generator=torch.Generator().manual_seed(2))
    batch = LMBatch(windows[:, :-1], windows[:, 1:])
    by_hand, by_fit = library_model(2, seed=3).train(), library_model(2, seed=3).train()
    loss = nb["train_step"](by_hand, torch.optim.AdamW(by_hand.parameters(), lr=1e-2), windows)
    assert loss == pytest.approx(lm.lm_loss(library_model(2, seed=3), batch).item(), rel=1e-5)
    fit(
        by_fit,
        iter([batch]),
        lm.lm_loss,
        1,
        optimizer=torch.optim.AdamW(by_fit.parameters(), lr=1e-2),
        progress=False,
    )
    for a, b in zip(by_hand.parameters(), by_fit.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    assert not torch.equal(
        by_hand.embed.weight, library_model(2, seed=3).embed.weight
    )  # it stepped


def test_check_min_p_filter(capsys):
    def solution(logits, min_p):
        probs = torch.softmax(logits, dim=-1)
        return logits.masked_fill(probs < min_p * probs.max(-1, keepdim=True).values, float("-inf"))

    nb17.check_min_p_filter(solution)
    with pytest.raises(AssertionError):  # compares with min_p itself, not min_p * the maximum
        nb17.check_min_p_filter(
            lambda lo, p: lo.masked_fill(torch.softmax(lo, -1) < p, float("-inf"))
        )
    assert "FAILED" in capsys.readouterr().out


def test_check_windowed_causal_mask(capsys):
    def solution(Lq, Lk, window):
        position = torch.arange(Lq)[:, None] + (Lk - Lq)
        key = torch.arange(Lk)[None, :]
        return (key <= position) & (key > position - window)

    nb17.check_windowed_causal_mask(solution)
    with pytest.raises(AssertionError):  # aligned top-left
        nb17.check_windowed_causal_mask(
            lambda Lq, Lk, w: causal_mask(Lq, Lk) & ~causal_mask(Lq, Lk, offset=-w)
        )
    assert "FAILED" in capsys.readouterr().out


def test_check_cached_attention_step(capsys):
    def solution(q, k_cache, v_cache, k_new, v_new):
        k_all, v_all = torch.cat([k_cache, k_new], -2), torch.cat([v_cache, v_new], -2)
        return F.scaled_dot_product_attention(q, k_all, v_all), k_all, v_all

    nb17.check_cached_attention_step(solution)

    def forgets_the_new_token(q, k_cache, v_cache, k_new, v_new):
        out = F.scaled_dot_product_attention(q, k_cache, v_cache)
        return out, torch.cat([k_cache, k_new], -2), torch.cat([v_cache, v_new], -2)

    with pytest.raises(AssertionError):
        nb17.check_cached_attention_step(forgets_the_new_token)
    assert "FAILED" in capsys.readouterr().out

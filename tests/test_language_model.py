"""course_utils.language_model: the decoder-only model, its KV cache and grouped-query attention.

References are independent of the code under test: PyTorch's own attention (SDPA with
``enable_gqa``, ``nn.MultiheadAttention``, ``causal_lower_right``), the course's
``MultiHeadAttention``, and the model's own full recompute for the cache.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from course_utils.attention import MultiHeadAttention, causal_mask
from course_utils.language_model import (
    DecoderLM,
    KVCache,
    LMConfig,
    load_lm,
    loss_per_position,
    save_lm,
    streaming_loss_per_position,
)
from course_utils.measure import count_multiply_adds, generation_multiply_adds, kv_cache_bytes
from course_utils.positional import apply_rotary

POSITIONS = ["rope", "alibi", "learned", "sinusoidal", "none"]


def small_model(position="rope", num_kv_heads=4, seed=0, max_len=40, scale=0.3, num_layers=2):
    torch.manual_seed(seed)
    config = LMConfig(
        vocab_size=20,
        d_model=32,
        num_heads=4,
        num_kv_heads=num_kv_heads,
        d_ff=48,
        num_layers=num_layers,
        max_len=max_len,
        position=position,
    )
    model = DecoderLM(config).eval()
    with torch.no_grad():  # larger weights than the init, so that mistakes show
        for p in model.parameters():
            p.normal_(0, scale)
    return model


# ---------------------------------------------------------------------------------------
# The bottom-right causal mask
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("Lq", "Lk"), [(1, 1), (1, 9), (3, 3), (3, 8), (6, 7)])
def test_bottom_right_mask_equals_torch_causal_lower_right(Lq, Lk):
    ours = causal_mask(Lq, Lk, offset=Lk - Lq)
    assert torch.equal(ours, causal_lower_right(Lq, Lk)._materialize())
    g = torch.Generator().manual_seed(Lq * Lk)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for n in (Lq, Lk, Lk))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(Lq, Lk))
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=ours)
    assert torch.allclose(got, expected, atol=1e-6)


def test_top_left_mask_is_what_is_causal_gives_and_differs_for_new_queries():
    assert torch.equal(causal_mask(2, 5), causal_upper_left(2, 5)._materialize())
    # the top-left mask lets the last new query see only 2 of its 5 keys: wrong after a cache
    assert causal_mask(2, 5)[-1].sum() == 2 and causal_mask(2, 5, offset=3)[-1].sum() == 5


# ---------------------------------------------------------------------------------------
# Grouped-query attention against independent references
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_gqa_equals_torch_sdpa_with_enable_gqa(num_kv_heads):
    model = small_model("none", num_kv_heads)
    attn = model.blocks[0].attn
    x = torch.randn(3, 11, 32)
    out, _ = attn(x)
    B, L, H, Hkv, D = 3, 11, 4, num_kv_heads, 8
    q = attn.w_q(x).view(B, L, H, D).transpose(1, 2)
    k = attn.w_k(x).view(B, L, Hkv, D).transpose(1, 2)
    v = attn.w_v(x).view(B, L, Hkv, D).transpose(1, 2)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = attn.w_o(ref.transpose(1, 2).reshape(B, L, H * D))
    assert torch.allclose(out, expected, atol=1e-5)


def test_gqa_with_as_many_kv_heads_as_query_heads_is_multi_head_attention():
    model = small_model("none", num_kv_heads=4)
    attn = model.blocks[0].attn
    torch.manual_seed(1)
    theirs = nn.MultiheadAttention(32, 4, bias=False, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([attn.w_q.weight, attn.w_k.weight, attn.w_v.weight]))
        theirs.out_proj.weight.copy_(attn.w_o.weight)
    ours_mha = MultiHeadAttention.from_torch(theirs).eval()
    x = torch.randn(2, 9, 32)
    out, weights = attn(x, need_weights=True)
    ref, ref_w = ours_mha(x, x, x, is_causal=True)
    torch_out = theirs(x, x, x, attn_mask=~causal_mask(9), need_weights=False)[0]
    assert torch.allclose(out, ref, atol=1e-5) and torch.allclose(out, torch_out, atol=1e-5)
    assert torch.allclose(weights, ref_w, atol=1e-6)


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("num_kv_heads", [4, 1])
def test_weights_path_equals_the_fused_path(position, num_kv_heads):
    model = small_model(position, num_kv_heads)
    ids = torch.randint(0, 20, (2, 17))
    x = model.embed(ids)
    fused, _ = model.blocks[0].attn(x)
    written_out, weights = model.blocks[0].attn(x, need_weights=True)
    assert torch.allclose(fused, written_out, atol=1e-5)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 17), atol=1e-5)
    assert (weights.triu(1) == 0).all()  # nothing from the future


def test_alibi_scores_carry_minus_slope_times_distance():
    model = small_model("alibi")
    attn = model.blocks[0].attn
    with torch.no_grad():  # zero queries: every score is the bias alone
        attn.w_q.weight.zero_()
    _, weights = attn(torch.randn(1, 5, 32), need_weights=True)
    slopes = attn.slopes
    # head h, last query: weights proportional to exp(-m_h * (4 - j))
    expected = torch.softmax(-slopes[:, None] * torch.arange(4, -1, -1.0), dim=-1)
    assert torch.allclose(weights[0, :, -1], expected, atol=1e-6)


# ---------------------------------------------------------------------------------------
# The KV cache
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("batch", [1, 3])
def test_cached_decoding_equals_full_recompute(position, num_kv_heads, batch):
    model = small_model(position, num_kv_heads, seed=batch)
    ids = torch.randint(0, 20, (batch, 30))
    full = model(ids)
    cache = model.new_cache()
    blocks = [(0, 7), (7, 8), (8, 20)] + [(i, i + 1) for i in range(20, 30)]
    stepwise = torch.cat([model(ids[:, a:b], cache) for a, b in blocks], dim=1)
    assert torch.allclose(stepwise, full, atol=1e-5)
    assert len(cache) == 30 and cache.seen == 30


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_cache_bytes_by_formula_equal_the_tensors(num_kv_heads):
    model = small_model("rope", num_kv_heads)
    cache = model.new_cache()
    model(torch.randint(0, 20, (3, 13)), cache)
    expected = kv_cache_bytes(2, num_kv_heads, 8, 13, batch=3, bytes_per_value=4)
    assert cache.nbytes() == expected == 2 * 2 * 3 * num_kv_heads * 13 * 8 * 4


def test_a_cache_longer_than_the_models_window_is_an_error():
    model = small_model("rope", max_len=10)
    cache = model.new_cache()
    model(torch.randint(0, 20, (1, 8)), cache)
    with pytest.raises(ValueError, match="max_len = 10"):
        model(torch.randint(0, 20, (1, 3)), cache)
    with pytest.raises(ValueError, match="max_len = 10"):
        model(torch.randint(0, 20, (1, 11)))


def test_rope_keys_are_cached_rotated_once_and_unrotated_in_a_window():
    model = small_model("rope", num_layers=1)
    attn = model.blocks[0].attn
    ids = torch.randint(0, 20, (2, 9))
    with torch.no_grad():
        x = model.blocks[0].norm1(model.embed(ids))  # what the layer's projections read
        raw = attn.w_k(x).view(2, 9, 4, 8).transpose(1, 2)  # (B, Hkv, L, D), not rotated
    cache = model.new_cache()
    model(ids[:, :5], cache)
    for t in range(5, 9):  # later blocks are rotated at their own positions, not from 0
        model(ids[:, t : t + 1], cache)
    expected = apply_rotary(raw, torch.arange(9), model.config.rope_base)
    torch.testing.assert_close(cache.keys[0], expected, atol=1e-6, rtol=1e-5)
    windowed = model.new_cache(window=20)  # StreamingLLM's cache re-rotates at every step
    for t in range(9):
        model(ids[:, t : t + 1], windowed)
    torch.testing.assert_close(windowed.keys[0], raw, atol=1e-6, rtol=1e-5)


def test_windowed_cache_keeps_sinks_and_the_last_tokens():
    cache = KVCache(num_layers=1, max_len=10, window=3, num_sinks=2)
    for t in range(8):
        k = torch.full((1, 1, 1, 1), float(t))
        cache.append(0, k, k)
    assert cache.keys[0].flatten().tolist() == [0.0, 1.0, 5.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="one new token"):
        cache.append(0, torch.zeros(1, 1, 2, 1), torch.zeros(1, 1, 2, 1))


def test_windowed_rope_cache_equals_attention_over_the_kept_tokens_at_cache_positions():
    # one layer: in deeper layers the kept keys were computed while dropped tokens were
    # still visible (they carry what those tokens said), so no plain pass reproduces them
    model = small_model("rope", max_len=40, num_layers=1)
    ids = torch.randint(0, 20, (2, 12))
    got = streaming_loss_per_position(model, ids, window=4, num_sinks=2)
    # the prediction at position 10: the cache holds tokens 0, 1 and 7..10, at cache
    # positions 0..5, so the model's plain forward pass over those 6 tokens is the reference
    kept = torch.cat([ids[:, :2], ids[:, 7:11]], dim=1)
    logits = model(kept)[:, -1]
    expected = F.cross_entropy(logits, ids[:, 11])
    assert torch.allclose(got[10], expected, atol=1e-5)
    # until the cache is full nothing is dropped: equal to the plain loss per position
    assert torch.allclose(got[:6], loss_per_position(model, ids)[:6], atol=1e-5)


# ---------------------------------------------------------------------------------------
# Config, inputs, storage
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(num_heads=4, num_kv_heads=3), ValueError, "multiple of num_kv_heads"),
        (dict(d_model=30, num_heads=4), ValueError, "divisible by num_heads"),
        (dict(position="relative"), ValueError, "position must be one of"),
        (dict(num_layers=0), ValueError, "num_layers must be positive"),
        (dict(d_ff=2.5), TypeError, "d_ff must be an int"),
        (dict(d_model=12, num_heads=4, position="rope"), ValueError, "even head_dim"),
    ],
)
def test_config_checks_itself(kwargs, error, match):
    with pytest.raises(error, match=match):
        LMConfig(vocab_size=10, **kwargs)


def test_bad_ids_are_named():
    model = small_model()
    with pytest.raises(TypeError, match="ids must hold token ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="ids must lie in 0..19"):
        model(torch.tensor([[3, 25]]))
    with pytest.raises(TypeError, match="config must be an LMConfig"):
        DecoderLM(dict(vocab_size=10))


def test_kv_cache_bytes_of_published_shapes_and_bad_input():
    assert kv_cache_bytes(32, 32, 128, 4096) == 2 * 2**30  # Llama-2-7B at 4k, 16-bit
    with pytest.raises(ValueError, match="tokens must be positive"):
        kv_cache_bytes(32, 8, 128, 0)


def test_learned_positions_beyond_max_len_are_an_error():
    model = small_model("learned", max_len=10)
    cache = model.new_cache(window=4, num_sinks=0)
    for t in range(10):
        model(torch.tensor([[t % 20]]), cache)
    with pytest.raises(ValueError, match="past the table's max_len"):
        model(torch.tensor([[1]]), cache)


def test_save_and_load_round_trip_in_float16(tmp_path):
    model = small_model("alibi", num_kv_heads=2, scale=0.05)
    save_lm(model, tmp_path / "m.pt", "abc", seconds=1.5)
    loaded, entry = load_lm("m", tmp_path)
    assert entry["chars"] == "abc" and entry["seconds"] == 1.5
    assert loaded.config == model.config
    ids = torch.randint(0, 20, (2, 9))
    assert torch.allclose(loaded(ids), model(ids), atol=2e-2)  # float16 rounding only
    with pytest.raises(FileNotFoundError, match="train_language_models"):
        load_lm("missing", tmp_path)


# ---------------------------------------------------------------------------------------
# Multiply-adds of generation, against torch's own counter
# ---------------------------------------------------------------------------------------
def counted_generation(model, ids, use_cache):
    """Multiply-adds counted by torch's FlopCounterMode while generating ``ids`` one token at
    a time, through the path that returns weights (explicit matrix products, all counted)."""
    total, cache = 0, model.new_cache()
    with torch.no_grad():
        for t in range(ids.shape[1]):
            if use_cache:
                _, macs = count_multiply_adds(model._run, ids[:, t : t + 1], cache, True)
            else:
                _, macs = count_multiply_adds(model._run, ids[:, : t + 1], None, True)
            total += macs
    return total


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_multiply_adds_equal_torchs_count(num_kv_heads, use_cache):
    model = small_model("rope", num_kv_heads=num_kv_heads, num_layers=3)
    ids = torch.randint(0, 20, (2, 11), generator=torch.Generator().manual_seed(num_kv_heads))
    expected = counted_generation(model, ids, use_cache)
    assert generation_multiply_adds(model.config, 11, use_cache, batch=2) == expected


def test_generation_multiply_adds_grow_as_stated():
    c = LMConfig(vocab_size=50, d_model=64, d_ff=128)
    with_cache = [generation_multiply_adds(c, n, True) for n in (1, 2, 100, 200)]
    without = [generation_multiply_adds(c, n, False) for n in (1, 2, 100, 200)]
    assert with_cache[0] == without[0]  # one token: nothing to recompute
    # a loop over steps, term by term: dense work per token a, attention 2 L d per key
    a = 2 * (4 * 64 * 64 + 2 * 64 * 128) + 64 * 50
    assert with_cache[3] == sum(a + 4 * 64 * t for t in range(1, 201))
    assert without[3] == sum(a * t + 4 * 64 * t * t for t in range(1, 201))


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((dict(vocab_size=5), 3, True), TypeError, "config must be an LMConfig"),
        ((LMConfig(vocab_size=5), 0, True), ValueError, "n must be positive"),
        ((LMConfig(vocab_size=5), 3, 1), TypeError, "use_cache must be a bool"),
    ],
)
def test_generation_multiply_adds_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        generation_multiply_adds(*args)

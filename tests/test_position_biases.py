"""ALiBi and T5's relative position bias against closed forms and independent references.

ALiBi's slopes against the paper's geometric sequence and a re-implementation of its
reference code (and BLOOM's slopes in ``transformers`` where it is installed); its bias
against ``-m |j - i|`` entry by entry and, under the causal mask, against the paper's
``m (j - i)`` and BLOOM's ``m j`` (equal after the softmax). T5's buckets against a
plain-Python re-implementation of its formula, one offset at a time, and against
``transformers``' T5 code; the module against T5's ``compute_bias`` with copied weights.
"""

from __future__ import annotations

import math

import pytest
import torch

from course_utils import attention, positional


# ---------------------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------------------
def _paper_slopes(n: int) -> list[float]:
    """Press et al.'s reference code for the slopes, rewritten: recursive, in plain floats."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))  # 2^(-8/n)
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_two(closest) + _paper_slopes(2 * closest)[0::2][: n - closest]


def test_alibi_slopes_for_eight_heads_are_one_half_to_one_256th():
    expected = torch.tensor([1 / 2**h for h in range(1, 9)])
    assert torch.equal(positional.alibi_slopes(8), expected)


@pytest.mark.parametrize("num_heads", [1, 2, 4, 16, 32])
def test_alibi_slopes_power_of_two_are_geometric_from_two_to_minus_8_over_h(num_heads):
    slopes = positional.alibi_slopes(num_heads).double()
    start = 2 ** (-8 / num_heads)
    assert slopes[0].item() == pytest.approx(start)
    assert torch.allclose(slopes[1:] / slopes[:-1], torch.full((num_heads - 1,), start).double())
    assert slopes[-1].item() == pytest.approx(2**-8)  # always ends at 1/256


@pytest.mark.parametrize("num_heads", [1, 3, 5, 6, 7, 8, 12, 20, 40, 64])
def test_alibi_slopes_equal_the_papers_reference_code(num_heads):
    expected = torch.tensor(_paper_slopes(num_heads), dtype=torch.float64)
    assert torch.allclose(positional.alibi_slopes(num_heads).double(), expected, rtol=1e-6)


@pytest.mark.parametrize("num_heads", [4, 6, 12, 16])
def test_alibi_slopes_equal_blooms(num_heads):
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    # build_alibi_tensor, public in every transformers the pins name: (B * H, 1, L) biases
    # slope * key position; at key position 1 they are the slopes themselves
    expected = bloom.build_alibi_tensor(torch.ones(1, 2), num_heads, torch.float32)[:, 0, 1]
    assert torch.allclose(positional.alibi_slopes(num_heads), expected.float(), rtol=1e-6)


@pytest.mark.parametrize(("num_heads", "Lq", "Lk"), [(1, 1, 1), (4, 6, 6), (6, 5, 9), (8, 7, 3)])
def test_alibi_bias_is_minus_slope_times_distance(num_heads, Lq, Lk):
    bias = positional.alibi_bias(num_heads, Lq, Lk)
    assert bias.shape == (num_heads, Lq, Lk)
    slopes = _paper_slopes(num_heads)
    for h in range(num_heads):
        for i in range(Lq):
            for j in range(Lk):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h] * abs(i - j), abs=1e-6)
                if j <= i:  # the paper's causal form
                    assert bias[h, i, j].item() == pytest.approx(slopes[h] * (j - i), abs=1e-6)


def test_alibi_bias_depends_on_the_offset_only():
    bias = positional.alibi_bias(8, 20, 25)
    for t in range(1, 6):  # shift query and key together by t
        assert torch.equal(bias[:, t:, t:], bias[:, :-t, : 25 - t])
    offsets = positional.relative_positions(20, 25)
    for k in range(-19, 25):  # every entry with offset k holds one value per head
        on_k = bias[:, offsets == k]  # (H, entries)
        assert torch.equal(on_k, on_k[:, :1].expand_as(on_k))


def test_alibi_causal_weights_equal_blooms_key_position_form():
    # BLOOM adds m * j instead of m * (j - i): a constant per query row, which the softmax
    # ignores, so under the causal mask the attention weights are the same.
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    H, L = 6, 10
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(H, L, L, generator=g)
    mask = attention.causal_mask(L)
    ours = attention.masked_softmax(scores + positional.alibi_bias(H, L), mask)
    theirs = bloom.build_alibi_tensor(torch.ones(1, L), H, torch.float32)  # (H, 1, L)
    assert torch.allclose(ours, attention.masked_softmax(scores + theirs, mask), atol=1e-6)


# ---------------------------------------------------------------------------------------
# T5's relative position buckets
# ---------------------------------------------------------------------------------------
def _t5_bucket(offset: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5's formula for one offset, in plain Python; the log ratio in float32, as T5's code."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        bucket = num_buckets if offset > 0 else 0
        n = abs(offset)
    else:
        n = max(-offset, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    ratio = torch.tensor(n / max_exact, dtype=torch.float32).log() / math.log(
        max_distance / max_exact
    )
    return bucket + min(num_buckets - 1, max_exact + int(ratio * (num_buckets - max_exact)))


CONFIGS = [(True, 32, 128), (False, 32, 128), (True, 8, 20), (False, 4, 8), (True, 18, 128)]
CONFIGS += [(False, 9, 128), (True, 64, 256), (False, 16, 9)]


@pytest.mark.parametrize(("bidirectional", "num_buckets", "max_distance"), CONFIGS)
def test_buckets_equal_t5s_formula_offset_by_offset(bidirectional, num_buckets, max_distance):
    offsets = torch.arange(-300, 301)
    got = positional.relative_position_bucket(offsets, bidirectional, num_buckets, max_distance)
    assert got.dtype == torch.long
    expected = [_t5_bucket(int(k), bidirectional, num_buckets, max_distance) for k in offsets]
    assert got.tolist() == expected


@pytest.mark.parametrize(("bidirectional", "num_buckets", "max_distance"), CONFIGS)
def test_buckets_equal_transformers_t5(bidirectional, num_buckets, max_distance):
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    offsets = positional.relative_positions(200, 260)  # (200, 260) int matrix, as T5 builds
    expected = t5.T5Attention._relative_position_bucket(
        offsets, bidirectional, num_buckets, max_distance
    )
    got = positional.relative_position_bucket(offsets, bidirectional, num_buckets, max_distance)
    assert torch.equal(got, expected)


def test_bucket_structure_exact_near_log_far_one_bucket_past_max_distance():
    bucket = positional.relative_position_bucket(torch.arange(-400, 401))  # 32 buckets, 128
    b = dict(zip(range(-400, 401), bucket.tolist(), strict=True))
    assert [b[-k] for k in range(8)] == list(range(8))  # offsets 0..-7: one bucket each
    assert [b[k] for k in range(1, 8)] == list(range(17, 24))  # keys after: upper half
    assert len({b[-k] for k in range(128, 401)}) == 1 and b[-128] == 15  # past max_distance
    assert len({b[k] for k in range(128, 401)}) == 1 and b[128] == 31
    assert bucket.min() == 0 and bucket.max() == 31
    causal = positional.relative_position_bucket(torch.arange(-400, 401), bidirectional=False)
    assert set(causal[400:].tolist()) == {0}  # offsets >= 0 share bucket 0
    assert causal.max() == 31


# ---------------------------------------------------------------------------------------
# RelativePositionBias: one learned scalar per bucket and head
# ---------------------------------------------------------------------------------------
def test_relative_position_bias_looks_up_each_offsets_bucket():
    torch.manual_seed(0)
    module = positional.RelativePositionBias(4, num_buckets=8, max_distance=16)
    bias = module(6, 9)
    assert bias.shape == (4, 6, 9)
    table = module.relative_attention_bias.weight  # (num_buckets, H)
    for i in range(6):
        for j in range(9):
            k = _t5_bucket(j - i, True, 8, 16)
            assert torch.equal(bias[:, i, j], table[k])
    assert torch.equal(bias[:, 1:, 1:], bias[:, :-1, :-1])  # translation invariant
    bias.sum().backward()  # learned: the gradient reaches the table
    assert module.relative_attention_bias.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("is_decoder", [False, True])
def test_relative_position_bias_equals_t5s_compute_bias(is_decoder):
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    from transformers import T5Config

    config = T5Config(
        d_model=16,
        d_kv=4,
        num_heads=4,
        relative_attention_num_buckets=12,
        relative_attention_max_distance=40,
        is_decoder=is_decoder,
    )
    theirs = t5.T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
    ours = positional.RelativePositionBias(4, 12, 40, bidirectional=not is_decoder)
    ours.relative_attention_bias.load_state_dict(theirs.relative_attention_bias.state_dict())
    with torch.no_grad():
        assert torch.equal(ours(50, 70), theirs.compute_bias(50, 70)[0])


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: positional.alibi_slopes(0), ValueError, "num_heads must be positive, got 0"),
        (lambda: positional.alibi_slopes(4.0), TypeError, "num_heads must be an int"),
        (lambda: positional.alibi_slopes(True), TypeError, "num_heads must be an int"),
        (lambda: positional.alibi_bias(4, 0), ValueError, "Lq must be positive, got 0"),
        (lambda: positional.alibi_bias(4, 3, -1), ValueError, "Lk must be positive, got -1"),
        (
            lambda: positional.relative_position_bucket([0, 1]),
            TypeError,
            "relative_position must be a torch.Tensor, got list",
        ),
        (
            lambda: positional.relative_position_bucket(torch.zeros(3)),
            TypeError,
            "relative_position must hold integer offsets, got dtype torch.float32",
        ),
        (
            lambda: positional.relative_position_bucket(torch.arange(3), bidirectional=1),
            TypeError,
            "bidirectional must be a bool, got int",
        ),
        (
            lambda: positional.relative_position_bucket(torch.arange(3), True, 3),
            ValueError,
            "num_buckets must leave at least 2 buckets per direction, got 3",
        ),
        (
            lambda: positional.relative_position_bucket(torch.arange(3), True, 32, 8),
            ValueError,
            "max_distance must exceed the 8 exact buckets, got 8",
        ),
        (
            lambda: positional.RelativePositionBias(0),
            ValueError,
            "num_heads must be positive, got 0",
        ),
        (
            lambda: positional.RelativePositionBias(4, num_buckets=0),
            ValueError,
            "num_buckets must be positive, got 0",
        ),
        (
            lambda: positional.RelativePositionBias(4)(5, 0),
            ValueError,
            "Lk must be positive, got 0",
        ),
    ],
)
def test_position_biases_reject_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()

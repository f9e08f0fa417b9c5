"""course_utils.circuits: heads removed, recorded and patched, against references written out.

Zero ablation is checked against multi-head attention rebuilt from torch's own SDPA with the
head's output multiplied by a weight; recording and patching against the same module run on
another input, where every head patched in from that input must give its output exactly.
"""

from __future__ import annotations

import pytest
import torch

from course_utils.attention import MultiHeadAttention
from course_utils.circuits import ablate_heads, attention_modules, patch_heads, record_heads

# -- ablate_heads --------------------------------------------------------------------------


def _two_layer_encoder(seed: int) -> torch.nn.Module:
    from course_utils.transformer import EncoderLayer

    torch.manual_seed(seed)
    return torch.nn.Sequential(
        EncoderLayer(8, 2, 16, dropout=0.0), EncoderLayer(8, 2, 16, dropout=0.0)
    ).eval()


def _run(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    for layer in model:
        x = layer(x)[0]
    return x


def _reference_mha(mha, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Multi-head attention from torch's own SDPA, head h's output multiplied by keep[h]."""
    B, L, E = x.shape
    H, D = mha.num_heads, E // mha.num_heads
    q, k, v = (p(x).view(B, L, H, D).transpose(1, 2) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B, H, L, D)
    heads = heads * keep.view(1, H, 1, 1)
    return mha.out_proj(heads.transpose(1, 2).reshape(B, L, E))


@pytest.mark.parametrize("seed", range(3))
def test_ablate_heads_equals_a_reference_with_the_head_zeroed(seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    for heads, weight in [([(0, 1)], 0.0), ([(0, 0), (0, 2)], 0.0), ([(0, 2)], 0.5)]:
        keep = torch.ones(3)
        for _, h in heads:
            keep[h] = weight
        with ablate_heads(mha, heads, weight=weight):
            ours = mha(x, x, x)[0]
        torch.testing.assert_close(ours, _reference_mha(mha, x, keep), atol=1e-5, rtol=1e-5)


def test_ablating_a_head_whose_output_is_zero_changes_nothing():
    model = _two_layer_encoder(0)
    x = torch.randn(3, 6, 8)
    mha = attention_modules(model)[1]
    with torch.no_grad():  # head 1 of layer 1 writes nothing: zero value weights and bias
        mha.v_proj.weight[4:8] = 0
        mha.v_proj.bias[4:8] = 0
    before = _run(model, x)
    with ablate_heads(model, [(1, 1)]):
        after = _run(model, x)
    torch.testing.assert_close(after, before, atol=0, rtol=0)
    with ablate_heads(model, [(1, 0)]):  # while removing a head that writes something does
        assert not torch.allclose(_run(model, x), before, atol=1e-3)


def test_ablate_heads_with_weight_one_changes_nothing_and_is_undone():
    model = _two_layer_encoder(1)
    x = torch.randn(2, 4, 8)
    before = _run(model, x)
    with ablate_heads(model, [(0, 0), (1, 1)], weight=1.0):
        torch.testing.assert_close(_run(model, x), before, atol=0, rtol=0)
    with pytest.raises(RuntimeError), ablate_heads(model, [(0, 0)]):
        raise RuntimeError("a failure inside the block still removes the hooks")
    torch.testing.assert_close(_run(model, x), before, atol=0, rtol=0)


@pytest.mark.parametrize(
    "heads, weight, error",
    [
        ([(2, 0)], 0.0, ValueError),
        ([(0, 2)], 0.0, ValueError),
        ([(0,)], 0.0, ValueError),
        ([(0, 0.5)], 0.0, ValueError),
        ([(0, 0)], "0", TypeError),
    ],  # fmt: skip
)
def test_ablate_heads_rejects_bad_input(heads, weight, error):
    with (
        pytest.raises(error, match="weight|heads|head"),
        ablate_heads(_two_layer_encoder(0), heads, weight),
    ):
        pass


# -- record_heads and patch_heads -------------------------------------------------------


def test_recorded_heads_rebuild_the_module_output():
    model = _two_layer_encoder(2)
    x = torch.randn(2, 5, 8)
    with torch.no_grad(), record_heads(model) as outputs:
        _run(model, x)
    assert sorted(outputs) == [0, 1] and outputs[0].shape == (2, 2, 5, 4)  # (B, H, L, D)
    mha = attention_modules(model)[0]
    merged = outputs[0].transpose(1, 2).reshape(2, 5, 8)  # the heads side by side again
    with torch.no_grad():
        torch.testing.assert_close(mha.out_proj(merged), mha(x, x, x)[0], atol=1e-6, rtol=0)


def test_patching_every_head_from_another_input_gives_that_input_output():
    torch.manual_seed(3)
    mha = MultiHeadAttention(12, 3)
    x, y = torch.randn(2, 4, 12), torch.randn(2, 4, 12)
    with torch.no_grad():
        with record_heads(mha) as on_y:
            expected = mha(y, y, y)[0]
        with patch_heads(mha, {(0, h): on_y[0][:, h] for h in range(3)}):
            torch.testing.assert_close(mha(x, x, x)[0], expected, atol=1e-6, rtol=0)
        # one head patched with zeros is zero ablation
        with patch_heads(mha, {(0, 1): torch.zeros(4)}):
            patched = mha(x, x, x)[0]
        with ablate_heads(mha, [(0, 1)]):
            torch.testing.assert_close(patched, mha(x, x, x)[0], atol=1e-6, rtol=0)
        # a mean per position broadcasts over the batch: the reference built by hand
        mean = on_y[0][:, 2].mean(0)  # (L, D): the head's mean output per position on y
        with patch_heads(mha, {(0, 2): mean}):
            torch.testing.assert_close(
                mha(x, x, x)[0], _mean_reference(mha, x, mean), atol=1e-5, rtol=0
            )


def _mean_reference(mha, x, mean):
    """Head 2's output replaced by ``mean (L, D)``, the rest from torch's own SDPA."""
    B, L, E = x.shape
    H, D = mha.num_heads, E // mha.num_heads
    q, k, v = (p(x).view(B, L, H, D).transpose(1, 2) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B, H, L, D)
    heads[:, 2] = mean
    return mha.out_proj(heads.transpose(1, 2).reshape(B, L, E))


@pytest.mark.parametrize(
    "values, error, words",
    [
        ({(0, 3): torch.zeros(4)}, ValueError, "head must lie"),
        ({(1, 0): torch.zeros(4)}, ValueError, "values' keys"),
        ({(0, 0): torch.zeros(5)}, ValueError, "D = 4"),
        ({(0, 0): torch.zeros(2, 3, 4, 4)}, ValueError, "D = 4"),
        ({(0, 0): torch.zeros(4, dtype=torch.long)}, TypeError, "floating-point"),
        ([((0, 0), torch.zeros(4))], TypeError, "map"),
    ],
)
def test_patch_heads_rejects_bad_values(values, error, words):
    mha = MultiHeadAttention(12, 3)
    with pytest.raises(error, match=words), patch_heads(mha, values):
        pass


def test_patch_heads_names_a_value_that_does_not_broadcast():
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(2, 4, 12)
    with (
        pytest.raises(ValueError, match=r"\(B, L, D\) = \(2, 4, 4\)"),
        patch_heads(mha, {(0, 0): torch.zeros(3, 4, 4)}),
    ):
        mha(x, x, x)

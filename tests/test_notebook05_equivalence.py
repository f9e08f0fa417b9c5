"""Notebook 05's from-scratch positional encodings equal the library's and the closed forms.

Only the cells whose first line is ``# from-scratch: <name>`` run here (in notebook order,
in one namespace holding ``math``, ``torch`` and ``nn``), so the test does not train.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_utils import positional

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "05_positional_encoding.ipynb"
EXPECTED = {
    "sinusoidal_encoding",
    "offset_rotation",
    "LearnedPositionalEmbedding",
    "apply_rotary",
    "alibi_slopes",
    "alibi_bias",
    "relative_position_bucket",
    "RelativePositionBias",
}


@pytest.fixture(scope="module")
def nb():
    """The notebook's from-scratch definitions, by name."""
    return run_from_scratch_cells(NOTEBOOK, {"math": math, "torch": torch, "nn": nn})


def test_marked_cells_define_what_they_name(nb):
    assert_marked_cells_define(NOTEBOOK, nb, EXPECTED)


@pytest.mark.parametrize(
    ("max_len", "d_model", "base"), [(1, 2, 1e4), (30, 8, 1e4), (64, 32, 100.0)]
)
def test_sinusoidal_encoding_equals_library_and_closed_form(nb, max_len, d_model, base):
    got = nb["sinusoidal_encoding"](max_len, d_model, base=base)
    assert got.shape == (max_len, d_model)
    assert torch.allclose(
        got, positional.sinusoidal_encoding(max_len, d_model, base=base), atol=1e-6
    )
    p, c = max_len - 1, d_model - 1  # the last entry, a cosine, by the formula
    assert got[p, c].item() == pytest.approx(math.cos(p / base ** ((c - 1) / d_model)), abs=1e-6)


@pytest.mark.parametrize("d_model", [2, 6, 16])
@pytest.mark.parametrize("k", [0, 1, 7, -4])
def test_offset_rotation_equals_library_and_shifts_the_table(nb, d_model, k):
    M = nb["offset_rotation"](k, d_model)
    assert torch.allclose(M, positional.offset_rotation(k, d_model), atol=1e-6)
    pe = positional.sinusoidal_encoding(60, d_model, dtype=torch.float64)
    lo, hi = max(0, -k), 60 - max(0, k)
    assert torch.allclose(pe[lo:hi] @ M.double().T, pe[lo + k : hi + k], atol=1e-6)


def test_learned_embedding_equals_library_with_copied_weights(nb):
    torch.manual_seed(0)
    ours = nb["LearnedPositionalEmbedding"](12, 8)
    library = positional.LearnedPositionalEmbedding(12, 8)
    library.load_state_dict(ours.state_dict())
    x = torch.randn(3, 9, 8)
    assert torch.equal(ours(x), library(x))
    assert torch.equal(ours(x[0]), library(x[0]))  # no batch dim


@pytest.mark.parametrize(
    ("shape", "positions"), [((5, 2), None), ((2, 3, 7, 16), None), ((4, 8), [9, 2, 0, 31])]
)
def test_apply_rotary_equals_library_and_complex_rotation(nb, shape, positions):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    pos = None if positions is None else torch.tensor(positions)
    got = nb["apply_rotary"](x, pos)
    assert torch.allclose(got, positional.apply_rotary(x, pos), atol=1e-6)
    D, L = shape[-1], shape[-2]
    p = torch.arange(L) if pos is None else pos
    angle = p.double()[:, None] * 10000 ** (-torch.arange(0, D, 2).double() / D)
    z = torch.view_as_complex(x.double().reshape(*shape[:-1], D // 2, 2)) * torch.exp(1j * angle)
    assert torch.allclose(got.double(), torch.view_as_real(z).reshape(shape), atol=1e-5)


@pytest.mark.parametrize("num_heads", [1, 2, 3, 5, 8, 12, 16, 24, 33])
def test_alibi_equals_library_and_closed_form(nb, num_heads):
    slopes = nb["alibi_slopes"](num_heads)
    assert torch.allclose(slopes, positional.alibi_slopes(num_heads), rtol=1e-6)
    if num_heads & (num_heads - 1) == 0:  # a power of two: 2^(-8h/H), h = 1 .. H
        expected = [2 ** (-8 * h / num_heads) for h in range(1, num_heads + 1)]
        assert slopes.tolist() == pytest.approx(expected)
    bias = nb["alibi_bias"](num_heads, 7, 11)
    assert torch.allclose(bias, positional.alibi_bias(num_heads, 7, 11))
    i, j = 6, 2
    assert bias[:, i, j].tolist() == pytest.approx((-slopes * abs(j - i)).tolist())


@pytest.mark.parametrize(
    ("bidirectional", "num_buckets", "max_distance"),
    [(True, 32, 128), (False, 32, 128), (True, 18, 128), (False, 9, 128), (True, 4, 3)],
)
def test_relative_position_bucket_equals_library(nb, bidirectional, num_buckets, max_distance):
    offsets = positional.relative_positions(150, 400)
    got = nb["relative_position_bucket"](offsets, bidirectional, num_buckets, max_distance)
    expected = positional.relative_position_bucket(
        offsets, bidirectional, num_buckets, max_distance
    )
    assert torch.equal(got, expected)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_bias_equals_library_with_copied_weights(nb, bidirectional):
    torch.manual_seed(0)
    ours = nb["RelativePositionBias"](3, 10, 30, bidirectional)
    library = positional.RelativePositionBias(3, 10, 30, bidirectional)
    library.load_state_dict(ours.state_dict())
    assert torch.equal(ours(40, 50), library(40, 50))
    assert torch.equal(ours(6), library(6))


def test_exercise_checkers_tell_right_from_wrong(nb, capsys):
    from course_utils.exercises import nb05

    nb05.check_sinusoidal_encoding(nb["sinusoidal_encoding"])
    with pytest.raises(AssertionError):  # sin and cos swapped
        nb05.check_sinusoidal_encoding(lambda n, d: nb["sinusoidal_encoding"](n, d).flip(-1))
    nb05.check_offset_rotation(nb["offset_rotation"])
    with pytest.raises(AssertionError):  # the inverse rotation: shifts by -k
        nb05.check_offset_rotation(lambda k, d: nb["offset_rotation"](k, d).T)
    nb05.check_apply_rotary(nb["apply_rotary"])
    with pytest.raises(AssertionError):  # ignores the positions it was given
        nb05.check_apply_rotary(lambda x, positions: nb["apply_rotary"](x))

    def cached(H, Lq, Lk):  # a right answer built from the notebook's alibi_bias
        future = torch.arange(Lk)[None, :] > torch.arange(Lk - Lq, Lk)[:, None]
        return nb["alibi_bias"](H, Lk)[:, Lk - Lq :].masked_fill(future, float("-inf"))

    nb05.check_cached_alibi_bias(cached)
    with pytest.raises(AssertionError):  # queries placed at the start, not the end, of the cache
        nb05.check_cached_alibi_bias(
            lambda H, Lq, Lk: nb["alibi_bias"](H, Lq, Lk).masked_fill(
                torch.ones(Lq, Lk, dtype=torch.bool).triu(1), float("-inf")
            )
        )
    with pytest.raises(AssertionError):  # no causal mask: future keys only penalised
        nb05.check_cached_alibi_bias(lambda H, Lq, Lk: nb["alibi_bias"](H, Lk)[:, Lk - Lq :])
    assert "FAILED" in capsys.readouterr().out

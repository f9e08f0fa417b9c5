"""Positional encodings against closed forms and the properties the course claims.

Sinusoids against the formula computed entry by entry with ``math``; the offset matrix
``M_k`` against shifted tables; rotary embeddings against multiplication by complex
exponentials; and self-attention's permutation equivariance, with and without positions.
"""

from __future__ import annotations

import cmath
import math

import pytest
import torch

from course_utils import attention, positional


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _closed_form(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """``PE[p, 2i] = sin(p / base^(2i/d))``, ``PE[p, 2i+1] = cos(...)``, one entry at a time."""
    rows = []
    for p in range(max_len):
        row = []
        for c in range(d_model):
            angle = p / base ** ((c - c % 2) / d_model)
            row.append(math.sin(angle) if c % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


# ---------------------------------------------------------------------------------------
# Sinusoidal encoding
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("max_len", "d_model"), [(1, 2), (7, 4), (50, 16), (30, 7), (200, 64)])
def test_sinusoidal_matches_the_closed_form(max_len, d_model):
    expected = _closed_form(max_len, d_model)
    got64 = positional.sinusoidal_encoding(max_len, d_model, dtype=torch.float64)
    assert got64.shape == (max_len, d_model)
    assert torch.allclose(got64, expected, atol=1e-12)
    got32 = positional.sinusoidal_encoding(max_len, d_model)
    assert got32.dtype == torch.get_default_dtype()
    assert torch.allclose(got32.double(), expected, atol=1e-6)


def test_sinusoidal_other_base_and_known_values():
    assert torch.allclose(
        positional.sinusoidal_encoding(9, 6, base=100.0, dtype=torch.float64),
        _closed_form(9, 6, base=100.0),
        atol=1e-12,
    )
    pe = positional.sinusoidal_encoding(4, 2, dtype=torch.float64)
    assert pe[2].tolist() == [math.sin(2.0), math.cos(2.0)]  # the first pair: 1 rad / step


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((0, 8), ValueError, "max_len must be positive"),
        ((5, -2), ValueError, "d_model must be positive"),
        ((5.0, 8), TypeError, "max_len must be an int"),
        ((5, True), TypeError, "d_model must be an int"),
    ],
)
def test_sinusoidal_rejects_bad_sizes(args, error, match):
    with pytest.raises(error, match=match):
        positional.sinusoidal_encoding(*args)


# ---------------------------------------------------------------------------------------
# The relative-offset property
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("d_model", [2, 8, 32])
@pytest.mark.parametrize("k", [0, 1, 5, 37, -3])
def test_offset_rotation_shifts_every_position_by_k(d_model, k):
    pe = positional.sinusoidal_encoding(120, d_model, dtype=torch.float64)
    M = positional.offset_rotation(k, d_model, dtype=torch.float64)
    assert M.shape == (d_model, d_model)
    lo, hi = max(0, -k), 120 - max(0, k)  # positions p with p + k inside the table
    for p in range(lo, hi):
        assert torch.allclose(M @ pe[p], pe[p + k], atol=1e-10), p


def test_offset_rotation_is_a_rotation_that_composes():
    M = {k: positional.offset_rotation(k, 16, dtype=torch.float64) for k in (0, 2, 3, 5, -5)}
    eye = torch.eye(16, dtype=torch.float64)
    assert torch.allclose(M[0], eye)
    assert torch.allclose(M[2] @ M[3], M[5])  # shifting by 2 then by 3 is shifting by 5
    assert torch.allclose(M[5] @ M[-5], eye)
    assert torch.allclose(M[5] @ M[5].T, eye) and torch.det(M[5]).item() == pytest.approx(1.0)
    blocks_only = M[3].clone()
    for i in range(0, 16, 2):
        blocks_only[i : i + 2, i : i + 2] = 0
    assert (blocks_only == 0).all()  # block-diagonal: frequencies never mix


def test_sinusoid_dot_product_depends_on_the_offset_only():
    pe = positional.sinusoidal_encoding(80, 16, dtype=torch.float64)
    sim = pe @ pe.T
    for k in range(0, 40):
        expected = sum(math.cos(k / 10000 ** (2 * i / 16)) for i in range(8))
        assert torch.allclose(torch.diagonal(sim, offset=k), torch.tensor(expected).double())


def test_offset_rotation_rejects_bad_input():
    with pytest.raises(ValueError, match="even"):
        positional.offset_rotation(1, 7)
    with pytest.raises(TypeError, match="k must be a number"):
        positional.offset_rotation("1", 8)
    with pytest.raises(TypeError, match="d_model must be an int"):
        positional.offset_rotation(1, 8.0)


def test_relative_positions_is_key_minus_query():
    got = positional.relative_positions(3, 5)
    assert got.tolist() == [[j - i for j in range(5)] for i in range(3)]
    assert torch.equal(positional.relative_positions(4), -positional.relative_positions(4).T)
    with pytest.raises(ValueError, match="Lq must be positive, got 0"):
        positional.relative_positions(0)


# ---------------------------------------------------------------------------------------
# Learned embeddings
# ---------------------------------------------------------------------------------------
def test_learned_embedding_adds_one_trainable_vector_per_position():
    torch.manual_seed(0)
    module = positional.LearnedPositionalEmbedding(max_len=6, d_model=4)
    x = torch.randn(3, 5, 4)
    out = module(x)
    assert torch.allclose(out - x, module.weight[:5].expand(3, 5, 4), atol=1e-6)
    out.sum().backward()
    assert torch.allclose(module.weight.grad[:5], torch.full((5, 4), 3.0))  # 3 sequences
    assert (module.weight.grad[5] == 0).all()  # position 5 was not used


def test_learned_embedding_refuses_to_extrapolate_and_bad_shapes():
    module = positional.LearnedPositionalEmbedding(max_len=6, d_model=4)
    with pytest.raises(ValueError, match="7 positions but only max_len=6"):
        module(torch.zeros(1, 7, 4))
    with pytest.raises(ValueError, match=r"\(\.\.\., L, 4\), got \(1, 3, 5\)"):
        module(torch.zeros(1, 3, 5))
    with pytest.raises(ValueError, match="max_len must be positive, got 0"):
        positional.LearnedPositionalEmbedding(0, 4)


# ---------------------------------------------------------------------------------------
# Rotary embeddings
# ---------------------------------------------------------------------------------------
def _rotary_by_complex(x: torch.Tensor, positions: list[int], base: float = 10000.0):
    """Each pair (x_2i, x_2i+1) as a complex number times exp(1j * p * base^(-2i/D))."""
    D = x.shape[-1]
    out = torch.empty(x.shape, dtype=torch.float64)
    flat_in, flat_out = x.reshape(-1, x.shape[-2], D), out.view(-1, x.shape[-2], D)
    for b in range(flat_in.shape[0]):
        for row, p in enumerate(positions):
            for i in range(D // 2):
                z = complex(flat_in[b, row, 2 * i], flat_in[b, row, 2 * i + 1])
                z *= cmath.exp(1j * p * base ** (-2 * i / D))
                flat_out[b, row, 2 * i], flat_out[b, row, 2 * i + 1] = z.real, z.imag
    return out


@pytest.mark.parametrize(
    ("shape", "positions"),
    [((5, 2), None), ((2, 6, 8), None), ((2, 3, 4, 6), [4, 0, 9, 2]), ((3, 16), [100, 7, 1])],
)
def test_apply_rotary_equals_complex_multiplication(shape, positions):
    x = torch.randn(*shape, generator=_gen(1))
    L = shape[-2]
    pos_list = list(range(L)) if positions is None else positions
    pos_tensor = None if positions is None else torch.tensor(positions)
    got = positional.apply_rotary(x, pos_tensor)
    assert got.shape == x.shape and got.dtype == x.dtype
    assert torch.allclose(got.double(), _rotary_by_complex(x, pos_list), atol=1e-5)
    assert torch.allclose(got.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # rotations keep length
    assert torch.allclose(positional.apply_rotary(x[..., :1, :], torch.tensor([0])), x[..., :1, :])


@pytest.mark.parametrize("D", [2, 8, 64])
def test_rotary_score_depends_only_on_the_offset(D):
    g = _gen(2)
    q, k = (
        torch.randn(D, generator=g, dtype=torch.float64),
        torch.randn(D, generator=g, dtype=torch.float64),
    )

    def score(m, n):
        qm = positional.apply_rotary(q[None], torch.tensor([m]))[0]
        kn = positional.apply_rotary(k[None], torch.tensor([n]))[0]
        return (qm @ kn).item()

    for m, n in [(0, 0), (3, 1), (1, 7), (20, 5)]:
        for shift in (1, 13, 250):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-9)
    # and it does depend on the offset
    assert abs(score(0, 1) - score(0, 0)) > 1e-3


def test_rotary_module_rotates_queries_and_keys_at_their_positions():
    g = _gen(3)
    q, k = torch.randn(2, 4, 5, 8, generator=g), torch.randn(2, 4, 7, 8, generator=g)
    rope = positional.RotaryEmbedding(dim=8)
    q_rot, k_rot = rope(q, k)
    assert torch.equal(q_rot, positional.apply_rotary(q))
    assert torch.equal(k_rot, positional.apply_rotary(k))
    # Decoding one new token: the query at position 6 against keys at 0..6
    q_last, _ = rope(q[..., -1:, :], k, q_positions=torch.tensor([6]))
    assert torch.allclose(q_last, positional.apply_rotary(q[..., -1:, :], torch.tensor([6])))
    assert list(rope.parameters()) == []


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: positional.apply_rotary(torch.zeros(3, 5)),
            ValueError,
            r"D even, got shape \(3, 5\)",
        ),
        (
            lambda: positional.apply_rotary(torch.zeros(3, dtype=torch.long)),
            TypeError,
            "floating-point",
        ),
        (
            lambda: positional.apply_rotary(torch.zeros(4, 6), torch.arange(3)),
            ValueError,
            r"positions must be \(4,\)",
        ),
        (lambda: positional.RotaryEmbedding(7), ValueError, "dim must be even"),
        (
            lambda: positional.RotaryEmbedding(8)(torch.zeros(3, 6), torch.zeros(3, 8)),
            ValueError,
            r"q must be \(\.\.\., L, 8\)",
        ),
    ],
)
def test_rotary_rejects_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ---------------------------------------------------------------------------------------
# Permutation equivariance: attention without positions cannot see order
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_self_attention_without_positions_is_permutation_equivariant(seed):
    g = _gen(seed)
    torch.manual_seed(seed)
    x = torch.randn(3, 9, 16, generator=g)
    perm = torch.randperm(9, generator=g)
    course = attention.MultiHeadAttention(16, 4).eval()
    torch_mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        out, w = course(x, x, x)
        out_p, w_p = course(x[:, perm], x[:, perm], x[:, perm])
        ref, _ = torch_mha(x, x, x)
        ref_p, _ = torch_mha(x[:, perm], x[:, perm], x[:, perm])
    assert torch.allclose(out_p, out[:, perm], atol=1e-5)
    assert torch.allclose(w_p, w[:, :, perm][..., perm], atol=1e-6)  # A(Px) = P A(x) P^T
    assert torch.allclose(ref_p, ref[:, perm], atol=1e-5)  # torch's own layer agrees


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "rotary"])
def test_positions_break_permutation_equivariance(encoding):
    g = _gen(4)
    torch.manual_seed(4)
    E, L = 16, 9
    x = torch.randn(2, L, E, generator=g)
    perm = torch.arange(L).roll(1)  # a permutation that moves every token
    if encoding == "rotary":

        def f(t):  # rotary attention: rotate queries and keys, not values
            q, k = positional.RotaryEmbedding(E)(t, t)
            return attention.scaled_dot_product_attention(q, k, t)[0]
    else:
        table = (
            positional.sinusoidal_encoding(L, E)
            if encoding == "sinusoidal"
            else torch.nn.init.normal_(torch.empty(L, E))
        )

        def f(t):
            t = t + table  # positions stay put when the tokens move
            return attention.scaled_dot_product_attention(t, t, t)[0]

    assert (f(x[:, perm]) - f(x)[:, perm]).abs().max() > 0.05
    # Without the positional part the same function is equivariant
    plain = attention.scaled_dot_product_attention
    assert torch.allclose(
        plain(x[:, perm], x[:, perm], x[:, perm])[0], plain(x, x, x)[0][:, perm], atol=1e-5
    )


def test_sizes_reject_bools_and_name_the_type():
    # True is an int to Python, never a size: _validate.check_positive says so
    with pytest.raises(TypeError, match="Lq must be an int, got bool True"):
        positional.relative_positions(True)
    with pytest.raises(TypeError, match="dim must be an int, got float 8.0"):
        positional.RotaryEmbedding(8.0)

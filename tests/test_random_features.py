"""course_utils.random_features: Performer's positive random features against closed forms.

The kernel estimate is checked for bias against ``exp(q . k / sqrt(D))`` over many draws,
with a tolerance of a few standard errors measured from the same draws; the attention
output against ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import efficient
from course_utils import random_features as rf


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _pairs(D=4, count=5, seed=0):
    """A few query/key pairs of moderate size, in float64: ``(count, D)`` each."""
    g = _gen(seed)
    return 0.7 * torch.randn(count, D, generator=g, dtype=torch.float64), 0.7 * torch.randn(
        count, D, generator=g, dtype=torch.float64
    )


def _estimates(q, k, num_features, draws, orthogonal, scale=True):
    """``phi(q_i) . phi(k_i)`` for each pair i and each of ``draws`` independent projections.

    One call draws all the rows at once: with ``num_features`` a multiple of D, each group
    of ``num_features`` rows is whole orthogonal blocks, independent of the other groups.
    Returns ``(draws, count)``.
    """
    D = q.shape[-1]
    assert num_features % D == 0
    W = rf.random_projection(D, num_features * draws, _gen(0), orthogonal).double()
    x, y = (q, k) if scale else (q * D**0.25, k * D**0.25)
    phi_x = rf.positive_random_features(x, W).reshape(-1, draws, num_features)  # (count, draws, m)
    phi_y = rf.positive_random_features(y, W).reshape(-1, draws, num_features)
    # each group's features were divided by sqrt(m * draws), not sqrt(m): undo the difference
    return (phi_x * phi_y).sum(-1).T * draws


def _z_scores(estimates, expected):
    """How many standard errors the mean over draws lies from ``expected``, per pair."""
    n = estimates.shape[0]
    standard_error = estimates.std(dim=0) / math.sqrt(n)
    return (estimates.mean(dim=0) - expected).abs() / standard_error


@pytest.mark.parametrize("orthogonal", [False, True])
def test_the_kernel_estimate_is_unbiased(orthogonal):
    q, k = _pairs()
    expected = torch.exp((q * k).sum(-1) / math.sqrt(q.shape[-1]))  # the closed form
    est = _estimates(q, k, num_features=8, draws=4000, orthogonal=orthogonal)
    # Five pairs, each mean over 4000 independent draws: a deviation beyond 4.5 standard
    # errors has probability < 1e-4 when the estimator is unbiased.
    assert _z_scores(est, expected).max() < 4.5
    assert torch.allclose(rf.softmax_kernel(q[:1], k[:1]).squeeze(), expected[0])


def test_the_same_test_rejects_a_biased_estimate():
    """Without the 1 / D^(1/4) scaling the features estimate exp(q . k), not softmax's kernel."""
    q, k = _pairs()
    expected = torch.exp((q * k).sum(-1) / math.sqrt(q.shape[-1]))
    est = _estimates(q, k, num_features=8, draws=4000, orthogonal=True, scale=False)
    assert _z_scores(est, expected).max() > 4.5


def test_orthogonal_rows_are_orthogonal_within_a_block_and_gaussian_in_length():
    W = rf.random_projection(8, 20, _gen(0))
    assert W.shape == (20, 8)
    for block in (W[:8], W[8:16]):
        gram = block @ block.T
        assert torch.allclose(gram - torch.diag(gram.diag()), torch.zeros(8, 8), atol=1e-4)
    # every row is N(0, I_D): its squared length has mean D and variance 2 D
    lengths = torch.cat([rf.random_projection(8, 64, _gen(s)) for s in range(50)]).pow(2).sum(-1)
    assert abs(lengths.mean() - 8) < 4 * math.sqrt(2 * 8 / len(lengths))


def _relative_error(out, exact):
    return ((out - exact).norm() / exact.norm()).item()


def test_the_attention_error_falls_as_the_number_of_features_grows():
    g = _gen(1)
    q, k, v = (torch.randn(2, 48, 16, generator=g) for _ in range(3))
    q, k = 0.5 * q, 0.5 * k  # entries of scale 0.5: the estimator's variance stays moderate
    exact = F.scaled_dot_product_attention(q, k, v)

    def mean_error(m):
        outs = [rf.performer_attention(q, k, v, m, generator=_gen(s)) for s in range(6)]
        return sum(_relative_error(out, exact) for out in outs) / len(outs)

    few, many, most = mean_error(16), mean_error(256), mean_error(4096)
    # Monte Carlo error ~ 1 / sqrt(m): x4 from 16 to 256, x4 again to 4096
    assert few > 2 * many > 4 * most
    assert most < 0.05


@pytest.mark.parametrize("orthogonal", [False, True])
def test_performer_is_linear_attention_on_the_random_features(orthogonal):
    q, k, v = (torch.randn(2, 3, 20, 8, generator=_gen(s)) for s in range(3))
    W = rf.random_projection(8, 32, _gen(7), orthogonal)
    phi_q, phi_k = rf.positive_random_features(q, W), rf.positive_random_features(k, W)
    for is_causal in (False, True):
        w = phi_q.double() @ phi_k.double().transpose(-2, -1)  # (2, 3, 20, 20)
        w = w.tril() if is_causal else w
        expected = (w / w.sum(-1, keepdim=True)) @ v.double()
        got = rf.performer_attention(
            q, k, v, 32, is_causal, generator=_gen(7), orthogonal=orthogonal, chunk_size=6
        )
        assert got.shape == (2, 3, 20, 8)
        assert torch.allclose(got.double(), expected, atol=1e-5)


def test_shapes_lengths_and_dtypes():
    q = torch.randn(3, 5, 6, dtype=torch.float64)
    k, v = torch.randn(3, 9, 6, dtype=torch.float64), torch.randn(3, 9, 2, dtype=torch.float64)
    out = rf.performer_attention(q, k, v, num_features=10, generator=_gen(0))
    assert out.shape == (3, 5, 2) and out.dtype == torch.float64
    assert rf.positive_random_features(q, rf.random_projection(6, 10)).shape == (3, 5, 10)
    assert (rf.positive_random_features(q, rf.random_projection(6, 10)) > 0).all()
    assert rf.softmax_kernel(q, k).shape == (3, 5, 9)
    # the same generator seed gives the same projection, hence the same output
    again = rf.performer_attention(q, k, v, num_features=10, generator=_gen(0))
    assert torch.equal(out, again)


def test_elu_linear_attention_is_unchanged_by_the_refactor():
    q, k, v = (torch.randn(2, 12, 4, generator=_gen(s)) for s in range(3))
    for is_causal in (False, True):
        phi = efficient.elu_feature_map
        via_features = efficient.feature_map_attention(phi(q), phi(k), v, is_causal=is_causal)
        got = efficient.linear_attention(q, k, v, is_causal=is_causal)
        assert torch.equal(got, via_features)
        # and phi is elu + 1, computed another way
        via_elu = efficient.feature_map_attention(
            F.elu(q) + 1, F.elu(k) + 1, v, is_causal=is_causal
        )
        assert torch.allclose(got, via_elu, atol=1e-6)


def test_bad_input_is_named():
    q, k, v = (torch.randn(1, 6, 4) for _ in range(3))
    with pytest.raises(ValueError, match="num_features must be positive, got 0"):
        rf.performer_attention(q, k, v, num_features=0)
    with pytest.raises(TypeError, match="num_features must be an int"):
        rf.performer_attention(q, k, v, num_features=2.5)
    with pytest.raises(TypeError, match="generator must be a torch.Generator, got int"):
        rf.performer_attention(q, k, v, 8, generator=3)
    with pytest.raises(ValueError, match=r"query and key must have the same feature size"):
        rf.performer_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match="same length N"):
        rf.performer_attention(q, k[:, :4], v[:, :4], is_causal=True)
    with pytest.raises(ValueError, match=r"D = projection's 5 columns, got x \(1, 6, 4\)"):
        rf.positive_random_features(q, torch.randn(8, 5))
    with pytest.raises(ValueError, match=r"projection must have 2 dims"):
        rf.positive_random_features(q, torch.randn(8))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        rf.positive_random_features(q.long(), torch.randn(8, 4))
    with pytest.raises(ValueError, match="D must be positive"):
        rf.random_projection(0, 4)

"""course_utils.attribution against closed forms, loops written out, and scipy's Spearman.

The gradient methods are checked on models whose gradients are known by hand (linear,
quadratic, tanh), and integrated gradients' completeness on a small self-attention model,
where nothing is known in closed form but the sum must still come out right.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from course_utils import attribution, interpret
from course_utils.attention import MultiHeadAttention


def _attention_model(seed: int = 0, E: int = 8):
    """x (B, L, E) -> (B,): one self-attention layer, mean-pooled, a tanh read-out."""
    torch.manual_seed(seed)
    mha = MultiHeadAttention(E, 2)
    read = torch.nn.Linear(E, 1)

    def f(x):
        out, _ = mha(x, x, x)  # (B, L, E)
        return torch.tanh(read(out.mean(1))).squeeze(-1) * 3  # (B,)

    return f


def test_gradient_x_input_is_w_times_x_on_a_linear_model():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(5, 4, generator=g)
    x = torch.randn(3, 5, 4, generator=g)
    got = attribution.gradient_x_input(lambda z: (z * w).sum((1, 2)) + 1.5, x)
    assert torch.allclose(got, w * x, atol=1e-6)
    # a nonlinear model: d/dx sum(w * tanh(x)) = w * (1 - tanh(x)^2)
    got = attribution.gradient_x_input(lambda z: (w * torch.tanh(z)).sum((1, 2)), x)
    assert torch.allclose(got, x * w * (1 - torch.tanh(x) ** 2), atol=1e-6)


def test_gradient_methods_work_inside_no_grad():
    x = torch.randn(2, 3, 4)
    with torch.no_grad():
        got = attribution.integrated_gradients(lambda z: (z**2).sum((1, 2)), x, steps=3)
    assert torch.allclose(got, x**2, atol=1e-5)


def test_integrated_gradients_closed_forms():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 3, generator=g)
    base = torch.randn(2, 4, 3, generator=g)
    w = torch.randn(4, 3, generator=g)
    # linear: the gradient is constant, so IG = (x - baseline) * w for any number of steps
    got = attribution.integrated_gradients(lambda z: (z * w).sum((1, 2)), x, base, steps=1)
    assert torch.allclose(got, (x - base) * w, atol=1e-6)
    # quadratic: the midpoint rule is exact for a linear gradient; IG = x^2 - baseline^2
    got = attribution.integrated_gradients(lambda z: (z**2).sum((1, 2)), x, base, steps=5)
    assert torch.allclose(got, x**2 - base**2, atol=1e-5)
    # a baseline of one embedding (E,) broadcasts over the batch and the tokens
    token = torch.randn(3, generator=g)
    got = attribution.integrated_gradients(lambda z: (z * w).sum((1, 2)), x, token, steps=2)
    assert torch.allclose(got, (x - token) * w, atol=1e-6)


def test_integrated_gradients_completeness_gap_shrinks_with_steps():
    f = _attention_model()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 6, 8, generator=g) * 2
    change = (f(x) - f(torch.zeros_like(x))).detach().abs()
    gaps = {}
    for steps in (2, 8, 64):
        ig = attribution.integrated_gradients(f, x, steps=steps)
        gaps[steps] = attribution.completeness_gap(f, x, ig)
    assert (gaps[8] < gaps[2]).all() and (gaps[64] < gaps[8]).all(), gaps
    # the stated tolerance: within 1 % of the output's change at 64 steps
    assert (gaps[64] <= 0.01 * change + 1e-4).all(), (gaps[64], change)
    # the gap is measured, not assumed: wrong attributions give a large one
    wrong = attribution.integrated_gradients(f, x, steps=64) * 0.5
    assert (attribution.completeness_gap(f, x, wrong) > 0.4 * change).all()


def test_occlusion_equals_a_loop():
    f = _attention_model(seed=3)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 8, generator=g)
    base = torch.randn(8, generator=g)
    got = attribution.occlusion(f, x, base)
    for b in range(2):
        for i in range(5):
            tokens = [base if j == i else x[b, j] for j in range(5)]
            occluded = torch.stack(tokens)[None]  # (1, L, E)
            expected = f(x[b : b + 1]) - f(occluded)
            assert torch.allclose(got[b, i], expected.squeeze(0), atol=1e-5)


def test_token_scores_sum_the_features():
    a = torch.randn(2, 3, 4)
    assert torch.allclose(attribution.token_scores(a), torch.stack([r.sum(1) for r in a]))


def test_attention_attribution_reads_the_last_layer_or_the_rollout():
    g = torch.Generator().manual_seed(4)
    A = [torch.softmax(torch.randn(2, 3, 5, 5, generator=g), -1) for _ in range(2)]
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    got = attribution.attention_attribution(A, query=0, attention_mask=mask)
    for b in range(2):
        row = sum(A[1][b, h, 0] for h in range(3)) / 3
        assert torch.allclose(got[b], row * mask[b], atol=1e-6)
    got = attribution.attention_attribution(A, attention_mask=mask)
    for b in range(2):
        real = [i for i in range(5) if mask[b, i]]
        rows = [A[1][b, :, i].mean(0) for i in real]
        assert torch.allclose(got[b], sum(rows) / len(rows) * mask[b], atol=1e-6)
    got = attribution.attention_attribution(A, query=2, rollout=True)
    assert torch.allclose(got, interpret.attention_rollout(A)[:, 2], atol=1e-6)


def _spearman_reference(a, b):
    """scipy's Spearman if installed, else 1 - 6 sum d^2 / (n (n^2 - 1)) on tie-free data."""
    try:
        from scipy.stats import spearmanr
    except ImportError:
        n = len(a)
        d = torch.tensor(a).argsort().argsort() - torch.tensor(b).argsort().argsort()
        return 1 - 6 * float((d.double() ** 2).sum()) / (n * (n * n - 1))
    return float(spearmanr(a, b).statistic)


@pytest.mark.parametrize("ties", [False, True])
def test_spearman_equals_the_reference(ties):
    g = torch.Generator().manual_seed(5)
    if ties:
        pytest.importorskip("scipy")
        a = torch.randint(0, 4, (6, 9), generator=g).double()
        b = torch.randint(0, 4, (6, 9), generator=g).double()
    else:
        a, b = torch.randn(6, 9, generator=g), torch.randn(6, 9, generator=g)
    got = attribution.spearman(a, b)
    assert got.shape == (6,)
    for r in range(6):
        expected = _spearman_reference(a[r].tolist(), b[r].tolist())
        assert abs(float(got[r]) - expected) < 1e-6, (r, float(got[r]), expected)
    assert torch.allclose(attribution.spearman(a, a), torch.ones(6, dtype=a.dtype))
    assert torch.allclose(attribution.spearman(a, -a), -torch.ones(6, dtype=a.dtype))


def test_precision_at_k_equals_sorting_by_hand():
    g = torch.Generator().manual_seed(6)
    scores = torch.randn(4, 7, generator=g)
    rationale = torch.rand(4, 7, generator=g) < 0.4
    for k in (1, 3, 7):
        got = attribution.precision_at_k(scores, rationale, k)
        for b in range(4):
            ranked = sorted(range(7), key=lambda i: -float(scores[b, i]))
            hits = sum(bool(rationale[b, i]) for i in ranked[:k])
            assert abs(float(got[b]) - hits / k) < 1e-6


def test_bad_input_gets_clear_errors():
    f = lambda z: z.sum((1, 2))  # noqa: E731
    x = torch.randn(2, 3, 4)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        attribution.gradient_x_input(f, [[1.0]])
    with pytest.raises(ValueError, match=r"x must be a floating-point .* \(2, 3\)"):
        attribution.gradient_x_input(f, torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"f must return one output per example .* \(2, 3\)"):
        attribution.gradient_x_input(lambda z: z.sum(2), x)
    with pytest.raises(TypeError, match="f must be a function"):
        attribution.occlusion(3, x)
    with pytest.raises(ValueError, match=r"baseline must broadcast to x \(2, 3, 4\), got \(5,\)"):
        attribution.integrated_gradients(f, x, torch.zeros(5))
    with pytest.raises(ValueError, match="steps must be positive"):
        attribution.integrated_gradients(f, x, steps=0)
    with pytest.raises(ValueError, match=r"attributions must have x's shape \(2, 3, 4\)"):
        attribution.completeness_gap(f, x, torch.zeros(2, 3))
    A = [torch.rand(2, 1, 4, 4)]
    with pytest.raises(ValueError, match=r"attention_mask must be \(B, L\) = \(2, 4\)"):
        attribution.attention_attribution(A, attention_mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="query must be an int position in 0..3"):
        attribution.attention_attribution(A, query=4)
    with pytest.raises(ValueError, match=r"a and b must have one shape .* \(3,\) and \(4,\)"):
        attribution.spearman(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match=r"rationale must be a boolean \(B, L\)"):
        attribution.precision_at_k(torch.zeros(2, 3), torch.zeros(2, 3), k=1)
    with pytest.raises(ValueError, match="k must be at most L = 3"):
        attribution.precision_at_k(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool), k=4)


# --- value_norms (Kobayashi et al. 2020) ---
@pytest.mark.parametrize("seed", range(2))
def test_value_norms_equal_a_loop_over_pairs(seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(6, 3)
    x = torch.randn(2, 4, 6)
    with torch.no_grad():
        _, weights = mha(x, x, x)
        got = attribution.value_norms(mha, x, weights)
        for b, i, j in itertools.product(range(2), range(4), range(4)):
            moved = torch.zeros(6)
            for h in range(3):
                rows = slice(2 * h, 2 * h + 2)
                value = x[b, j] @ mha.v_proj.weight[rows].T + mha.v_proj.bias[rows]  # (2,)
                moved += weights[b, h, i, j] * (mha.out_proj.weight[:, rows] @ value)
            assert got[b, i, j].item() == pytest.approx(moved.norm().item(), abs=1e-5)


def test_value_norms_of_a_head_that_writes_nothing_are_zero_and_bad_input_is_named():
    mha = MultiHeadAttention(4, 2)
    with torch.no_grad():
        mha.v_proj.weight.zero_()
        mha.v_proj.bias.zero_()
    x = torch.randn(1, 3, 4)
    weights = torch.softmax(torch.randn(1, 2, 3, 3), -1)
    assert (attribution.value_norms(mha, x, weights) == 0).all()
    with pytest.raises(ValueError, match=r"weights \(B, H, L, L\)"):
        attribution.value_norms(mha, x, weights[:, :1])
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        attribution.value_norms(torch.nn.Linear(4, 4), x, weights)

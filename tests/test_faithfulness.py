"""course_utils.faithfulness against scipy's Jensen-Shannon distance, loops written out, and
models whose answer is known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_utils import faithfulness as F


def _distributions(g, B=4, L=6, pad=(0, 1, 3, 0)):
    mask = torch.arange(L) < torch.tensor([L - p for p in pad])[:, None]  # (B, L)
    p = torch.softmax(torch.randn(B, L, generator=g).masked_fill(~mask, float("-inf")), -1)
    return p, mask


@pytest.mark.parametrize("seed", range(3))
def test_js_divergence_equals_scipy(seed):
    from scipy.spatial.distance import jensenshannon

    g = torch.Generator().manual_seed(seed)
    p, _ = _distributions(g)
    q, _ = _distributions(g)
    got = F.js_divergence(p.double(), q.double())
    for b in range(len(p)):  # scipy gives the distance: the square root of the divergence
        assert got[b].item() == pytest.approx(
            jensenshannon(p[b].double(), q[b].double()) ** 2, abs=1e-6
        )
    torch.testing.assert_close(F.js_divergence(q, p), F.js_divergence(p, q))
    assert torch.all(F.js_divergence(p, p) < 1e-6)


def test_js_divergence_of_disjoint_distributions_is_ln2():
    p, q = torch.tensor([0.3, 0.7, 0.0, 0.0]), torch.tensor([0.0, 0.0, 0.5, 0.5])
    assert F.js_divergence(p, q).item() == pytest.approx(math.log(2), abs=1e-6)


def _deletion_by_hand(f, mask, scores, steps):
    columns = []
    for k in range(steps + 1):
        keep = mask.clone()
        for b in range(len(mask)):
            real = [i for i in range(mask.shape[1]) if mask[b, i]]
            ranked = sorted(real, key=lambda i: (-float(scores[b, i]), i))  # ties: earlier first
            for i in ranked[: min(k, len(real) - 1)]:  # the last token always stays
                keep[b, i] = False
        columns.append(f(keep))
    return torch.stack(columns, 1)


@pytest.mark.parametrize("seed", range(3))
def test_deletion_curve_equals_a_loop(seed):
    g = torch.Generator().manual_seed(seed)
    _, mask = _distributions(g, pad=(0, 2, 4, 1))
    weights = torch.randn(mask.shape, generator=g)
    scores = torch.randint(0, 3, mask.shape, generator=g).float()  # many ties

    def f(keep):  # a nonlinear read of which tokens remain
        return torch.tanh((keep.float() * weights).sum(1))

    got = F.deletion_curve(f, mask, scores, steps=5)
    torch.testing.assert_close(got, _deletion_by_hand(f, mask, scores, 5))


def test_curve_area_equals_numpy_trapezoid():
    curve = torch.rand(5, 7, generator=torch.Generator().manual_seed(0))
    expected = np.trapezoid(curve.numpy(), axis=1) / 6
    np.testing.assert_allclose(F.curve_area(curve).numpy(), expected, rtol=1e-6)


def test_permuted_outputs_shuffle_only_the_real_weights():
    g = torch.Generator().manual_seed(0)
    alpha, mask = _distributions(g)
    seen = []

    def f(a):
        seen.append(a.clone())
        return a.sum(1)

    out = F.permuted_outputs(f, alpha, mask, permutations=50)
    assert out.shape == (50, 4)
    moved = 0
    for a in seen:
        assert torch.all(a[~mask] == 0)
        torch.testing.assert_close(a.sort(-1).values, alpha.sort(-1).values)  # the same values
        moved += int(not torch.equal(a, alpha))
    assert moved > 40  # and they do move


def _brute_force_adversary(f, alpha, epsilon, step=0.002):
    """Per row of alpha (B, 3): the largest JSD(alpha, a) over a grid on the simplex among the
    points a with |f(a) - f(alpha)| <= epsilon (alpha itself, JSD 0, is always one of them)."""
    k = torch.arange(0, round(1 / step) + 1, dtype=torch.float64) * step
    a0, a1 = torch.meshgrid(k, k, indexing="ij")
    keep = a0 + a1 <= 1 + 1e-9
    grid = torch.stack([a0[keep], a1[keep], (1 - a0[keep] - a1[keep]).clamp(min=0)], -1)  # (N, 3)
    best = []
    for row in alpha.double():
        near = (f(grid) - f(row[None])).abs() <= epsilon
        jsd = F.js_divergence(row.expand_as(grid), grid)
        best.append(max(jsd[near].max().item(), 0.0))
    return torch.tensor(best)


def _rows_of_three(seed, B=5):
    g = torch.Generator().manual_seed(seed)
    alpha = torch.softmax(2 * torch.randn(B, 3, generator=g), -1)
    return alpha, torch.ones(B, 3, dtype=torch.bool)


def test_adversarial_attention_against_a_brute_force_search():
    # a smooth output (a saturating read of the weights) on 15 sentences of three tokens. The
    # grid over the whole simplex bounds what any search can find: the adversary never goes
    # farther. Gradient ascent is a local search (the kept attentions form a strip across
    # the simplex, and it can climb to the nearer, lesser end of it), so it is asked to come
    # within 0.025 of the grid's farthest point on most sentences, not on all
    reads = torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)

    def f(a):
        return torch.sigmoid(3 * (a * reads.to(a.dtype)).sum(-1))

    reached = []
    for seed in range(3):
        alpha, mask = _rows_of_three(seed)
        alpha = alpha.double()
        adv = F.adversarial_attention(f, alpha, mask, epsilon=0.02, steps=400, seed=seed)
        reference = _brute_force_adversary(f, alpha, 0.02)
        assert torch.all(adv.found)
        assert torch.all(adv.jsd <= reference + 0.01)  # the grid misses at most a sliver
        reached += (adv.jsd >= reference - 0.025).tolist()
        torch.testing.assert_close(adv.jsd, F.js_divergence(alpha, adv.attention))
        torch.testing.assert_close(adv.moved, (f(adv.attention) - f(alpha)).abs())
        assert torch.all(adv.moved <= 0.02)
    assert sum(reached) >= 13, reached


def test_adversarial_attention_reports_a_loop_over_its_own_candidates():
    # what it returns, row by row, is what a loop over every candidate it tried would keep
    g = torch.Generator().manual_seed(3)
    alpha, mask = _distributions(g)
    reads = torch.randn(6, generator=g)
    tried = []

    def f(a):
        tried.append(a.detach().clone())
        return torch.tanh((a * reads).sum(1))

    adv = F.adversarial_attention(f, alpha, mask, epsilon=0.01, steps=60)
    candidates = tried[1:]  # the first call was alpha's own output
    assert len(candidates) == 60
    target = f(alpha)
    for b in range(len(alpha)):
        best, best_jsd = alpha[b], 0.0
        for candidate in candidates:
            moved = abs(f(candidate[b : b + 1]).item() - target[b].item())
            jsd = F.js_divergence(alpha[b], candidate[b]).item()
            if moved <= 0.01 and jsd > best_jsd:
                best, best_jsd = candidate[b], jsd
        torch.testing.assert_close(adv.attention[b], best)
        assert adv.jsd[b].item() == pytest.approx(best_jsd, abs=1e-6)
        assert bool(adv.found[b]) == (best_jsd > 0)


def test_adversarial_attention_keeps_the_output_and_moves_far_when_it_can():
    # the output reads only how much weight lies on tokens 0-2 together: moving weight
    # among them changes nothing, so a far attention with the same output exists
    g = torch.Generator().manual_seed(1)
    alpha, mask = _distributions(g, pad=(0, 0, 0, 0))
    reads = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])

    def f(a):
        return (a * reads).sum(1)

    adv = F.adversarial_attention(f, alpha, mask, epsilon=0.01, steps=300, seed=0)
    assert torch.all((f(adv.attention) - f(alpha)).abs() <= 0.01 + 1e-6)
    torch.testing.assert_close(adv.attention.sum(1), torch.ones(4))
    assert torch.all(adv.found)
    assert adv.jsd.min() > 0.15


def test_adversarial_attention_says_where_no_adversary_exists():
    # rows 1 and 3 have one real token: alpha is the only attention there is. Rows 0 and 2
    # have an output that grows with the distance from alpha, so every attention that keeps
    # it lies close to alpha: the grid agrees that none reaches a JSD of 0.05
    g = torch.Generator().manual_seed(4)
    alpha = torch.softmax(torch.randn(4, 3, generator=g), -1)
    mask = torch.ones(4, 3, dtype=torch.bool)
    mask[[1, 3], 1:] = False
    alpha[[1, 3]] = torch.tensor([1.0, 0.0, 0.0])
    centre = alpha.clone()

    def f(a):
        return 100 * ((a - centre) ** 2).sum(-1)

    adv = F.adversarial_attention(f, alpha, mask, epsilon=0.01, steps=200)
    assert adv.found.tolist() == [True, False, True, False]
    torch.testing.assert_close(adv.attention[[1, 3]], alpha[[1, 3]])
    assert adv.jsd[[1, 3]].tolist() == [0.0, 0.0]
    for b in (0, 2):
        (reference,) = _brute_force_adversary(
            lambda a, b=b: 100 * ((a - centre[b].double()) ** 2).sum(-1), alpha[b : b + 1], 0.01
        )
        assert reference < 0.05
        assert adv.jsd[b] <= reference + 0.005
    assert torch.all(adv.jsd < 0.05)


def test_adversarial_attention_returns_only_rows_that_keep_the_output():
    g = torch.Generator().manual_seed(2)
    alpha, mask = _distributions(g)

    def f(a):  # reads every weight sharply: little room to move
        return 50 * (a * torch.arange(6.0)).sum(1)

    adv = F.adversarial_attention(f, alpha, mask, epsilon=0.05, steps=100)
    assert torch.all((f(adv.attention) - f(alpha)).abs() <= 0.05 + 1e-5)
    assert torch.all(adv.attention[~mask] == 0)
    assert torch.all(adv.attention[~adv.found] == alpha[~adv.found])


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: F.js_divergence(torch.rand(3), torch.rand(4)), ValueError),
        (lambda: F.deletion_curve(lambda m: m.sum(1), torch.ones(2, 3), torch.rand(2, 3), 2), ValueError),
        (lambda: F.deletion_curve(lambda m: m, torch.ones(2, 3, dtype=torch.bool), torch.rand(2, 3), 2), ValueError),
        (lambda: F.deletion_curve("f", torch.ones(2, 3, dtype=torch.bool), torch.rand(2, 3), 2), TypeError),
        (lambda: F.curve_area(torch.rand(3, 1)), ValueError),
        (lambda: F.permuted_outputs(lambda a: a.sum(1), torch.rand(2, 3), torch.ones(2, 4, dtype=torch.bool)), ValueError),
        (lambda: F.adversarial_attention(lambda a: a.sum(1), torch.rand(2, 3), torch.ones(2, 3, dtype=torch.bool), epsilon=0), ValueError),
    ],
)  # fmt: skip
def test_bad_input_is_named(call, error):
    with pytest.raises(error, match="mask|p and q|f must|curve|epsilon|alpha"):
        call()

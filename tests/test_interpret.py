"""course_utils.interpret: head scores and attention rollout, against loops written out.

Random softmax weights stand in for a model's attention, so no model is loaded; the rollout
of all-MiniLM-L6-v2's own attention is tested in test_pretrained.py.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from course_utils import interpret


def _random_attention(g, N=3, B=2, H=4, L=6):
    return [torch.softmax(torch.randn(B, H, L, L, generator=g), -1) for _ in range(N)]


def test_offset_scores_equal_a_loop():
    g = torch.Generator().manual_seed(0)
    A = _random_attention(g)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    for offset in (-1, 1, -2):
        got = interpret.offset_scores(A, mask, offset)
        expected = torch.zeros(3, 4)
        for n in range(3):
            for h in range(4):
                vals = [
                    A[n][b, h, i, i + offset]
                    for b in range(2)
                    for i in range(6)
                    if 0 <= i + offset < 6 and mask[b, i] and mask[b, i + offset]
                ]
                expected[n, h] = torch.stack(vals).mean()
        assert torch.allclose(got, expected, atol=1e-6), offset


def test_attention_to_and_pair_scores_equal_loops():
    g = torch.Generator().manual_seed(1)
    A = _random_attention(g)
    keys = torch.zeros(2, 6, dtype=torch.bool)
    keys[:, 0] = True
    keys[1, 3] = True
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    got = interpret.attention_to_scores(A, keys, mask)
    for n in range(3):
        for h in range(4):
            vals = [A[n][b, h, i][keys[b]].sum() for b in range(2) for i in range(6) if mask[b, i]]
            assert torch.isclose(got[n, h], torch.stack(vals).mean(), atol=1e-6)
    pairs = [(0, 2, 1), (1, 3, 0), (1, 1, 2)]
    got = interpret.pair_scores(A, pairs)
    for n in range(3):
        expected = torch.stack([A[n][b, :, i, j] for b, i, j in pairs]).mean(0)
        assert torch.allclose(got[n], expected, atol=1e-6)


def test_rollout_equals_the_matrix_product_and_keeps_rows_stochastic():
    g = torch.Generator().manual_seed(2)
    A = _random_attention(g)
    got = interpret.attention_rollout(A)
    for b in range(2):
        expected = torch.eye(6)
        for layer in A:
            expected = (0.5 * torch.eye(6) + 0.5 * layer[b].mean(0)) @ expected
        assert torch.allclose(got[b], expected, atol=1e-6)
    assert torch.allclose(got.sum(-1), torch.ones(2, 6), atol=1e-5)
    # residual 1: attention is ignored, every token keeps only itself
    assert torch.allclose(
        interpret.attention_rollout(A, residual=1.0), torch.eye(6).expand(2, 6, 6)
    )


def test_score_functions_reject_bad_input():
    A = [torch.rand(1, 2, 4, 4)]
    with pytest.raises(ValueError, match="offset"):
        interpret.offset_scores(A, offset=0)
    with pytest.raises(ValueError, match="key_mask"):
        interpret.attention_to_scores(A, torch.ones(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="empty"):
        interpret.pair_scores(A, [])
    with pytest.raises(ValueError, match="attention_mask"):
        interpret.offset_scores(A, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="pairs"):
        interpret.pair_scores(A, [(0, 1, 4)])
    with pytest.raises(ValueError, match="residual"):
        interpret.attention_rollout(A, residual=1.5)
    with pytest.raises(ValueError, match=r"\(B, H, L, L\)"):
        interpret.attention_rollout([torch.rand(1, 2, 4, 4), torch.rand(1, 2, 3, 3)])


# --- head_pattern_scores (notebook 04) ---
def test_head_pattern_scores_by_loop():
    w = torch.softmax(torch.randn(3, 2, 6, 6, generator=torch.Generator().manual_seed(3)), -1)
    scores = interpret.head_pattern_scores(w)
    for h in range(2):
        prev = sum(w[b, h, t, t - 1] for b in range(3) for t in range(2, 6)) / 12
        first = sum(w[b, h, t, 0] for b in range(3) for t in range(2, 6)) / 12
        own = sum(w[b, h, t, t] for b in range(3) for t in range(2, 6)) / 12
        assert scores["previous"][h] == pytest.approx(prev.item(), abs=1e-6)
        assert scores["first"][h] == pytest.approx(first.item(), abs=1e-6)
        assert scores["self"][h] == pytest.approx(own.item(), abs=1e-6)


@pytest.mark.parametrize(
    ("weights", "match"),
    [(torch.ones(2, 3, 3), r"\(B, H, L, L\)"), (torch.ones(1, 1, 3, 4), "square")],
)
def test_head_pattern_scores_rejects_bad_weights(weights, match):
    with pytest.raises(ValueError, match=match):
        interpret.head_pattern_scores(weights)


# ---------------------------------------------------------------------------------------
# Linear probes
# ---------------------------------------------------------------------------------------
def _hoeffding_margin(n: int, delta: float = 1e-6) -> float:
    """``t`` with P(|mean of n Bernoulli draws - p| >= t) <= delta (Hoeffding's inequality)."""
    return math.sqrt(math.log(2 / delta) / (2 * n))


def test_probe_reads_linearly_separable_labels_perfectly():
    # class k sits at 10 * e_k plus noise of size 0.3: the linear rule argmax(x) is always
    # right, since noise never closes a gap of 10
    g = torch.Generator().manual_seed(0)
    K, R = 5, 8

    def sample(n):
        y = torch.randint(K, (n,), generator=g)
        x = 0.3 * torch.randn(n, R, generator=g)
        x[torch.arange(n), y] += 10.0
        return x, y

    (x, y), (x_test, y_test) = sample(400), sample(300)
    assert (x_test.argmax(1) == y_test).all()  # the rule the probe must find exists
    assert interpret.probe_accuracy(x, y, x_test, y_test, num_classes=K).item() == 1.0


def test_probe_of_labels_independent_of_features_stays_at_chance():
    # Held-out labels drawn independently of everything the probe saw: whatever it predicts,
    # each prediction is right with probability 1/K, so the accuracy is a binomial mean.
    g = torch.Generator().manual_seed(1)
    K, n_test = 10, 4000
    x, x_test = torch.randn(2000, 16, generator=g), torch.randn(n_test, 16, generator=g)
    y, y_test = torch.randint(K, (2000,), generator=g), torch.randint(K, (n_test,), generator=g)
    acc = interpret.probe_accuracy(x, y, x_test, y_test, num_classes=K).item()
    assert abs(acc - 1 / K) < _hoeffding_margin(n_test)


def test_probe_reaches_the_bayes_accuracy_of_two_gaussians():
    # Two classes N(+mu, I) and N(-mu, I): the best possible classifier is linear and right
    # with probability Phi(|mu|). A probe fitted on enough data gets within sampling error.
    g = torch.Generator().manual_seed(2)
    R, n, n_test = 4, 4000, 4000
    mu = torch.tensor([0.6, -0.3, 0.2, 0.0])

    def sample(m):
        y = torch.randint(2, (m,), generator=g)
        return torch.randn(m, R, generator=g) + (2 * y[:, None] - 1) * mu, y

    (x, y), (x_test, y_test) = sample(n), sample(n_test)
    bayes = 0.5 * (1 + math.erf(mu.norm().item() / math.sqrt(2)))  # Phi(|mu|)
    acc = interpret.probe_accuracy(x, y, x_test, y_test, num_classes=2, steps=300).item()
    assert acc <= bayes + _hoeffding_margin(n_test)  # nobody beats Bayes beyond sampling
    assert acc >= bayes - 2 * _hoeffding_margin(n_test)  # sampling plus estimation error


def test_probes_fitted_together_equal_probes_fitted_alone():
    g = torch.Generator().manual_seed(3)
    x, x_test = torch.randn(300, 6, generator=g), torch.randn(100, 6, generator=g)
    w = torch.randn(6, 3, generator=g)
    y = torch.stack([(x @ w[:, p] > 0).long() + (x[:, p] > 1).long() for p in range(3)], 1)
    y_test = torch.stack(
        [(x_test @ w[:, p] > 0).long() + (x_test[:, p] > 1).long() for p in range(3)], 1
    )
    together = interpret.probe_accuracy(x, y, x_test, y_test, num_classes=3, steps=50)
    assert together.shape == (3,)
    for p in range(3):
        alone = interpret.probe_accuracy(x, y[:, p], x_test, y_test[:, p], 3, steps=50)
        assert alone.shape == () and torch.isclose(together[p], alone, atol=1e-6), p


def test_probe_is_deterministic_and_works_under_no_grad():
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(200, 5, generator=g), torch.randint(4, (200,), generator=g)
    first = interpret.probe_accuracy(x[:150], y[:150], x[150:], y[150:], 4)
    with torch.no_grad():
        second = interpret.probe_accuracy(x[:150], y[:150], x[150:], y[150:], 4)
    assert first.item() == second.item()


@pytest.mark.parametrize(
    "change, error, words",
    [
        ({"train_features": [[0.0]]}, TypeError, "train_features must be a torch.Tensor"),
        ({"train_features": torch.zeros(8)}, ValueError, "train_features must have 2 dims"),
        ({"test_features": torch.zeros(4, 2, dtype=torch.long)}, TypeError, "floating point"),
        ({"train_labels": torch.zeros(8)}, TypeError, "train_labels must hold integer"),
        ({"train_labels": torch.zeros(7, dtype=torch.long)}, ValueError, "(8, 3) and (7,)"),
        ({"test_labels": torch.full((4,), 5)}, ValueError, "test_labels must lie in 0..2"),
        ({"test_features": torch.zeros(4, 2)}, ValueError, "same size R"),
        ({"test_labels": torch.zeros(4, 2, dtype=torch.long)}, ValueError, "number of probes"),
        ({"num_classes": 1}, ValueError, "num_classes must be at least 2"),
        ({"num_classes": 3.0}, TypeError, "num_classes must be an int"),
        ({"steps": 0}, ValueError, "steps must be positive"),
        ({"lr": -1.0}, ValueError, "lr must be a positive number"),
    ],
)
def test_probe_rejects_bad_inputs(change, error, words):
    args = {
        "train_features": torch.zeros(8, 3),
        "train_labels": torch.zeros(8, dtype=torch.long),
        "test_features": torch.zeros(4, 3),
        "test_labels": torch.zeros(4, dtype=torch.long),
        "num_classes": 3,
    } | change
    with pytest.raises(error, match=re.escape(words)):
        interpret.probe_accuracy(**args)


# --- attention_flow (Abnar & Zuidema) ---
def _min_cut(capacity: list[torch.Tensor], source: int, sink: int) -> float:
    """The smallest cut of the layered network by enumerating every cut (max-flow = min-cut)."""
    n, N = capacity[0].shape[-1], len(capacity)
    inner = [(layer, t) for layer in range(N + 1) for t in range(n)]
    inner = [v for v in inner if v not in ((0, source), (N, sink))]
    best = math.inf
    for bits in range(2 ** len(inner)):
        side = {v for k, v in enumerate(inner) if bits >> k & 1} | {(0, source)}
        cut = sum(
            capacity[layer - 1][to, src].item()
            for layer in range(1, N + 1)
            for to in range(n)
            for src in range(n)
            if (layer - 1, src) in side and (layer, to) not in side
        )
        best = min(best, cut)
    return best


def test_attention_flow_equals_the_minimum_cut_found_by_enumeration():
    g = torch.Generator().manual_seed(4)
    A = _random_attention(g, N=3, B=1, H=2, L=3)
    flow = interpret.attention_flow(A, residual=0.3)
    capacity = [0.3 * torch.eye(3) + 0.7 * layer[0].mean(0) for layer in A]
    for i in range(3):
        for j in range(3):
            assert abs(flow[0, i, j].item() - _min_cut(capacity, j, i)) < 1e-5


def test_attention_flow_through_two_layers_is_a_sum_of_bottlenecks():
    # paths j -> k -> i share no edge, so the flow is the sum over k of each path's narrower edge
    g = torch.Generator().manual_seed(5)
    A = _random_attention(g, N=2, B=2, H=3, L=5)
    flow = interpret.attention_flow(A)
    lower, upper = (0.5 * torch.eye(5) + 0.5 * layer.mean(1) for layer in A)  # (B, L, L) each
    expected = torch.minimum(upper[:, :, :, None], lower[:, None, :, :]).sum(2)  # [b, i, j]
    torch.testing.assert_close(flow, expected, atol=1e-5, rtol=0)
    # one layer: the only path is the edge itself
    torch.testing.assert_close(
        interpret.attention_flow(A[:1]), 0.5 * torch.eye(5) + 0.5 * A[0].mean(1), atol=1e-6, rtol=0
    )


def test_attention_flow_leaves_padding_out():
    g = torch.Generator().manual_seed(6)
    A = _random_attention(g, N=2, B=1, H=2, L=4)
    mask = torch.tensor([[True, True, True, False]])
    flow = interpret.attention_flow(A, attention_mask=mask)
    assert (flow[0, 3] == 0).all() and (flow[0, :, 3] == 0).all()
    real = [a[:, :, :3, :3] for a in A]  # the same network without token 3's node
    torch.testing.assert_close(flow[:, :3, :3], interpret.attention_flow(real), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="attention_mask"):
        interpret.attention_flow(A, attention_mask=torch.ones(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="residual"):
        interpret.attention_flow(A, residual=-0.1)

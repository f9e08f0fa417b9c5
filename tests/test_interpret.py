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
    from course_utils.attention import MultiHeadAttention
    from course_utils.interpret import ablate_heads

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
    from course_utils.interpret import ablate_heads, attention_modules

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
    from course_utils.interpret import ablate_heads

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
    from course_utils.interpret import ablate_heads

    with (
        pytest.raises(error, match="weight|heads|head"),
        ablate_heads(_two_layer_encoder(0), heads, weight),
    ):
        pass

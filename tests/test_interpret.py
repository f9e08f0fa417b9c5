"""course_utils.interpret: head scores and attention rollout, against loops written out.

Random softmax weights stand in for a model's attention, so no model is loaded; the rollout
of all-MiniLM-L6-v2's own attention is tested in test_pretrained.py.
"""

from __future__ import annotations

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

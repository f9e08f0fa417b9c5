"""The toy attention-only model: shapes, masks, what positions change, and its task."""

from __future__ import annotations

import pytest
import torch

from course_utils import toy_models
from course_utils.toy_models import AttentionOnlyTransformer, ToyConfig


def _ids(B: int, L: int, V: int = 10, seed: int = 0) -> torch.Tensor:
    return torch.randint(V, (B, L), generator=torch.Generator().manual_seed(seed))


def test_first_and_previous_targets_by_loop():
    ids, targets = toy_models.first_and_previous_batch(5, 7, 10, torch.Generator().manual_seed(1))
    assert ids.shape == (5, 7) and targets.shape == (5, 7, 2)
    for b in range(5):
        assert targets[b, 0].tolist() == [-100, -100]
        for t in range(1, 7):
            assert targets[b, t].tolist() == [ids[b, 0].item(), ids[b, t - 1].item()]


def test_batches_are_seeded_and_movable():
    a = next(toy_models.first_and_previous_batches(4, 6, 10, seed=3))
    b = next(toy_models.first_and_previous_batches(4, 6, 10, seed=3))
    c = next(toy_models.first_and_previous_batches(4, 6, 10, seed=4))
    assert torch.equal(a.ids, b.ids) and not torch.equal(a.ids, c.ids)
    assert torch.equal(a.to("cpu").targets, a.targets)


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "none"])
def test_forward_shapes_and_weights_are_distributions(num_layers, positions):
    torch.manual_seed(0)
    config = ToyConfig(num_layers=num_layers, num_heads=4, positions=positions, num_outputs=7)
    logits, weights = AttentionOnlyTransformer(config)(_ids(3, 9))
    assert logits.shape == (3, 9, 7) and len(weights) == num_layers
    for w in weights:
        assert w.shape == (3, 4, 9, 9)
        assert torch.allclose(w.sum(-1), torch.ones(3, 4, 9), atol=1e-6)
        assert (w.triu(diagonal=1) == 0).all()  # causal by default


def test_causal_model_ignores_future_tokens():
    torch.manual_seed(1)
    model = AttentionOnlyTransformer(ToyConfig(num_layers=2)).eval()
    ids = _ids(2, 10)
    changed = ids.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 10
    with torch.no_grad():
        a, b = model(ids)[0], model(changed)[0]
    assert torch.equal(a[:, :6], b[:, :6])
    assert (a[:, 6] - b[:, 6]).abs().max() > 1e-4


def test_without_positions_the_bidirectional_model_is_permutation_equivariant():
    torch.manual_seed(2)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(2))
    ids = _ids(3, 10)
    for positions, equivariant in [("none", True), ("sinusoidal", False), ("learned", False)]:
        model = AttentionOnlyTransformer(ToyConfig(positions=positions, causal=False)).eval()
        if positions == "learned":  # the default init is tiny; make the positions matter
            torch.nn.init.normal_(model.position.weight)
        with torch.no_grad():
            err = (model(ids[:, perm])[0] - model(ids)[0][:, perm]).abs().max().item()
        assert (err < 1e-5) == equivariant, (positions, err)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: ToyConfig(d_model=30, num_heads=4), ValueError, "divisible"),
        (lambda: ToyConfig(positions="rotary"), ValueError, "positions must be one of"),
        (lambda: ToyConfig(vocab_size=0), ValueError, "vocab_size must be positive, got 0"),
        (lambda: AttentionOnlyTransformer({"vocab_size": 5}), TypeError, "ToyConfig"),
        (lambda: AttentionOnlyTransformer(ToyConfig())(torch.zeros(2, 5)), ValueError, "integer"),
        (lambda: AttentionOnlyTransformer(ToyConfig())(_ids(1, 13)), ValueError, "max_len=12"),
        (lambda: toy_models.first_and_previous_batch(2, 1, 10), ValueError, "at least 2"),
    ],
)
def test_bad_input_raises_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_config_sizes_reject_bools():
    with pytest.raises(TypeError, match="num_heads must be an int, got bool True"):
        ToyConfig(num_heads=True)

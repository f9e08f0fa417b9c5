"""Notebook 18's hand-written cells equal the library: the induction training step
(induction.train_induction), the induction-head scores (course_utils.induction), and layer 0
replaced in one input of layer 1 (induction.path_patched_logits), on inputs the notebook does
not use."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import induction
from course_utils.circuits import patch_heads
from course_utils.toy_models import AttentionOnlyTransformer, ToyConfig

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "18_circuits.ipynb"
MARKED = {
    "induction_step",
    "prefix_matching_score",
    "ov_copying_score",
    "logits_with_layer0_replaced",
}


@pytest.fixture(scope="module")
def nb():
    namespace = {"torch": torch, "nn": nn, "F": F, "patch_heads": patch_heads}
    return run_from_scratch_cells(NOTEBOOK, namespace)


def test_marked_cells_are_the_ones_tested(nb):
    assert_marked_cells_define(NOTEBOOK, nb, MARKED)


def _model(seed: int, vocab: int = 20, seq_len: int = 12) -> AttentionOnlyTransformer:
    torch.manual_seed(seed)
    config = ToyConfig(vocab_size=vocab, max_len=seq_len, d_model=16, num_heads=2,
                       num_layers=2, num_outputs=vocab)  # fmt: skip
    return AttentionOnlyTransformer(config)


@pytest.mark.parametrize("seed", range(2))
def test_induction_step_repeated_equals_train_induction(nb, seed):
    by_hand, by_library = _model(seed), _model(seed)
    optimizer = torch.optim.Adam(by_hand.parameters(), lr=1e-2)
    draws = torch.Generator().manual_seed(seed)
    for _ in range(5):
        rows = induction.repeated_sequences(8, 12, 20, 3, "train", draws)
        nb["induction_step"](by_hand.train(), optimizer, rows.ids)
    induction.train_induction(by_library, 5, 8, 1e-2, 3, seed=seed, eval_every=5, eval_size=8, progress=False)  # fmt: skip
    for a, b in zip(by_hand.parameters(), by_library.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("seed", range(2))
def test_logits_with_layer0_replaced_equal_library(nb, seed):
    model = _model(seed).eval()
    rows = induction.repeated_sequences(4, 12, 20, 3, "test", torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed)
    values = {0: torch.randn(12, 8, generator=g), 1: torch.randn(8, generator=g)}
    with torch.no_grad():
        for paths in [("query",), ("key",), ("value", "direct"), induction.PATHS]:
            got = nb["logits_with_layer0_replaced"](model, rows.ids, values, paths)
            expected = induction.path_patched_logits(model, rows.ids, values, paths)
            torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("seed", range(4))
def test_prefix_matching_score_equals_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    B, H, L = 3 + seed, 1 + seed, 8 + 2 * seed
    half = torch.randint(2, L // 2 + 1, (B,), generator=g)
    weights = torch.rand(B, H, L, L, generator=g).tril().softmax(-1)
    expected = induction.prefix_matching_scores([weights], half)[0]  # (H,)
    torch.testing.assert_close(nb["prefix_matching_score"](weights, half), expected)


def test_prefix_matching_score_of_a_perfect_induction_head(nb):
    half, L = torch.tensor([3, 4]), 8
    weights = torch.zeros(2, 1, L, L)
    for b, n in enumerate(half.tolist()):
        for i in range(L):
            weights[b, 0, i, i - n + 1 if n <= i < 2 * n else 0] = 1.0
    assert nb["prefix_matching_score"](weights, half).tolist() == [1.0]


@pytest.mark.parametrize("seed", range(3))
def test_ov_copying_score_equals_library(nb, seed):
    torch.manual_seed(seed)
    config = ToyConfig(vocab_size=10 + 5 * seed, max_len=8, d_model=8 * (seed + 1),
                       num_heads=2 ** seed, num_layers=2, num_outputs=10 + 5 * seed)  # fmt: skip
    model = AttentionOnlyTransformer(config)
    with torch.no_grad():  # make some heads copy, so the score is not always near zero
        model.token_embedding.weight.copy_(model.readout.weight)
    expected = induction.copying_scores(induction.ov_circuits(model))  # (num_layers, H)
    for layer in range(2):
        for head in range(config.num_heads):
            got = nb["ov_copying_score"](model, layer, head)
            assert got == pytest.approx(expected[layer, head].item(), abs=1e-6)

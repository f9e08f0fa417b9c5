"""Notebook 15's hand-written question reader, stacked glimpses, co-attention block and whole
VQA model equal course_utils.apps.vqa; its CLIP loss equals course_utils.apps.contrastive's."""

import pytest
import torch
from torch import nn

from course_utils.apps import contrastive, vqa
from course_utils.apps.captioning import ConvEncoder
from course_utils.apps.questions import make_questions, question_vocab
from course_utils.attention import AdditiveScore, MultiHeadAttention, attend

from notebook_cells import (
    assert_marked_cells_define,
    assert_train_step_equals_fit,
    run_from_scratch_cells,
)

NOTEBOOK = "15_multimodal_attention.ipynb"
MARKED = {
    "QuestionReader",
    "stacked_attention",
    "CoAttentionBlock",
    "VQANet",
    "clip_loss",
    "train_step",
}
SIZES = dict(channels=16, d_model=12, emb_dim=6, attn_dim=10, num_heads=3)


@pytest.fixture(scope="module")
def nb():
    namespace = {
        "torch": torch,
        "nn": nn,
        "AdditiveScore": AdditiveScore,
        "MultiHeadAttention": MultiHeadAttention,
        "attend": attend,
    }
    return run_from_scratch_cells(NOTEBOOK, namespace)


@pytest.fixture(scope="module")
def data():
    torch.manual_seed(0)
    return make_questions(10, "val", seed=2).encode(ConvEncoder(SIZES["channels"]))


def test_marked_cells_are_the_ones_tested(nb):
    assert_marked_cells_define(NOTEBOOK, nb, MARKED)


@pytest.mark.parametrize("seed", range(3))
def test_question_reader_equals_library(nb, data, seed):
    v = question_vocab()
    torch.manual_seed(seed)
    ours = nb["QuestionReader"](len(v), 4 + seed, 5 + seed, v.pad_id)
    library = vqa.QuestionEncoder(len(v), 4 + seed, 5 + seed, v.pad_id)
    library.load_state_dict(ours.state_dict())
    questions = data.batch(list(range(len(data)))).questions
    for a, b in zip(ours(questions), library(questions), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("seed", range(4))
def test_stacked_attention_equals_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    B, P, E = 2 + seed, 5 + 4 * seed, 3 + seed
    query, regions = torch.randn(B, E, generator=g), torch.randn(B, P, E, generator=g)
    torch.manual_seed(seed)
    scores = nn.ModuleList(AdditiveScore(E, E, 4) for _ in range(1 + seed % 3))
    for a, b in zip(
        nb["stacked_attention"](query, regions, scores),
        vqa.stacked_glimpses(query, regions, scores),
        strict=True,
    ):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("seed", range(3))
def test_co_attention_block_equals_library(nb, seed):
    torch.manual_seed(seed)
    ours, library = nb["CoAttentionBlock"](12, 3), vqa.CoAttention(12, 3)
    library.load_state_dict(ours.state_dict())
    words, regions = torch.randn(3, 6, 12), torch.randn(3, 16, 12)
    mask = torch.arange(6) < torch.tensor([[6], [2 + seed], [1]])
    for a, b in zip(ours(words, regions, mask), library(words, regions, mask), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "kind, glimpses",
    [("blind", 1), ("mean", 1), ("grid", 1), ("stacked", 1), ("stacked", 3), ("coattention", 1)],
)
def test_vqa_net_equals_the_library_model(nb, data, kind, glimpses):
    v = question_vocab()
    torch.manual_seed(glimpses)
    ours = nb["VQANet"](len(v), v.pad_id, kind, glimpses, **SIZES).eval()
    library = vqa.build_model(kind in vqa.ATTENDING, kind, glimpses=glimpses, **SIZES).eval()
    library.load_state_dict(ours.state_dict())  # same parameters, same names
    batch = data.batch(list(range(len(data))))
    logits, weights = ours(batch.features, batch.questions)
    expected, expected_weights, _ = library.forward_with_attention(batch.features, batch.questions)
    torch.testing.assert_close(logits, expected)
    if kind not in vqa.ATTENDING:
        assert weights is None and expected_weights is None
    else:
        torch.testing.assert_close(weights, expected_weights)


@pytest.mark.parametrize("seed", range(3))
def test_clip_loss_equals_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    B, D, t = 2 + 5 * seed, 3 + seed, (0.07, 0.5, 2.0)[seed]
    x = nn.functional.normalize(torch.randn(B, D, generator=g), dim=-1)
    y = nn.functional.normalize(torch.randn(B, D, generator=g), dim=-1)
    torch.testing.assert_close(nb["clip_loss"](x, y, t), contrastive.clip_loss(x, y, t))


@pytest.mark.parametrize("kind", ["mean", "stacked", "coattention"])
def test_train_step_takes_fits_step(nb, data, kind):
    torch.manual_seed(5)
    assert_train_step_equals_fit(
        nb["train_step"],
        lambda: vqa.build_model(kind in vqa.ATTENDING, kind, glimpses=1, **SIZES),
        vqa.vqa_loss,
        data.batch(list(range(len(data)))),
        lr=3e-3,
    )

"""Notebook 09's hand-written encoder, attention reads, doubly stochastic term and captioner
equal course_utils.apps.captioning."""

import pytest
import torch
from torch import nn

from course_utils import attention
from course_utils.apps import captioning
from course_utils.apps.scenes import CaptionData, caption_vocab, make_scenes
from course_utils.attention import AdditiveScore

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "09_image_captioning.ipynb"
MARKED = {
    "GridEncoder",
    "spatial_attend",
    "channel_attend",
    "doubly_stochastic_penalty",
    "ShowAttendTell",
}


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(
        NOTEBOOK, {"torch": torch, "nn": nn, "AdditiveScore": AdditiveScore}
    )


@pytest.fixture(scope="module")
def data():
    return CaptionData(make_scenes(5, seed=4), caption_vocab())


def test_marked_cells_are_the_ones_tested(nb):
    assert_marked_cells_define(NOTEBOOK, nb, MARKED)


@pytest.mark.parametrize("seed", range(3))
def test_grid_encoder_equals_library(nb, data, seed):
    torch.manual_seed(seed)
    ours = nb["GridEncoder"](channels=8 * (seed + 1))
    library = captioning.ConvEncoder(channels=8 * (seed + 1))
    library.load_state_dict(ours.state_dict())
    for mode in (True, False):  # batch statistics in training, running ones in eval
        ours.train(mode), library.train(mode)
        torch.testing.assert_close(ours(data.images), library(data.images))


@pytest.mark.parametrize("seed", range(4))
def test_attention_reads_equal_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    B, P, C, R = 2 + seed, 4 + 3 * seed, 3 + seed, 5
    hidden, features = torch.randn(B, R, generator=g), torch.randn(B, P, C, generator=g)
    torch.manual_seed(seed)
    spatial, channel = AdditiveScore(R, C, 6), AdditiveScore(R, P, 6)
    library = {"spatial_attend": attention.attend, "channel_attend": captioning.channel_attend}
    for name, score in (("spatial_attend", spatial), ("channel_attend", channel)):
        ours = nb[name](hidden, features, score)
        theirs = library[name](hidden, features, score)
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("seed", range(4))
def test_doubly_stochastic_penalty_equals_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    weights = torch.softmax(torch.randn(3, 5, 7 + seed, generator=g), dim=-1)
    mask = torch.rand(3, 5, generator=g) > 0.4
    torch.testing.assert_close(
        nb["doubly_stochastic_penalty"](weights, mask),
        captioning.doubly_stochastic_penalty(weights, mask),
    )


@pytest.mark.parametrize("seed", range(2))
def test_show_attend_tell_equals_the_spatial_captioner(nb, data, seed):
    vocab = caption_vocab()
    sizes = dict(channels=16, emb_dim=8, rnn_dim=24, attn_dim=12)
    torch.manual_seed(seed)
    ours = nb["ShowAttendTell"](len(vocab), vocab.pad_id, **sizes).eval()
    library = captioning.build_model(True, **sizes).eval()
    library.load_state_dict(ours.state_dict())  # same parameters, same names
    batch = data.batch(list(range(len(data))))
    expected = library.forward_with_attention(batch.images, batch.tgt_in)
    for a, b in zip(ours(batch.images, batch.tgt_in), expected, strict=True):
        torch.testing.assert_close(a, b)

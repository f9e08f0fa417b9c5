"""Notebook 14's hand-written reads, recall reader and memory network equal
course_utils.apps.memory."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils.apps import memory
from course_utils.apps.stories import StoryData, make_stories, story_vocab
from course_utils.attention import masked_softmax

from notebook_cells import (
    assert_marked_cells_define,
    assert_train_step_equals_fit,
    run_from_scratch_cells,
)

NOTEBOOK = "14_attention_as_memory.ipynb"
MARKED = {"soft_read", "hard_lookup", "linear_read", "PairReader", "MemoryNetwork", "train_step"}


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(
        NOTEBOOK, {"torch": torch, "nn": nn, "F": F, "masked_softmax": masked_softmax}
    )


def test_marked_cells_are_the_ones_tested(nb):
    assert_marked_cells_define(NOTEBOOK, nb, MARKED)


@pytest.mark.parametrize("seed", range(4))
def test_reads_equal_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    B, N, D, Dv = 2 + seed, 3 + 2 * seed, 4, 5
    q, k, v = (torch.randn(B, D, generator=g), torch.randn(B, N, D, generator=g),
               torch.randn(B, N, Dv, generator=g))  # fmt: skip
    for a, b in zip(
        nb["soft_read"](q, k, v, 0.3 * seed), memory.memory_read(q, k, v, 0.3 * seed), strict=True
    ):
        torch.testing.assert_close(a, b)
    for a, b in zip(nb["hard_lookup"](q, k, v), memory.hard_read(q, k, v), strict=True):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(nb["linear_read"](q, k, v), memory.linear_read(q, k, v))


@pytest.mark.parametrize("num_pairs", [1, 5, 16])
def test_pair_reader_equals_library(nb, num_pairs):
    torch.manual_seed(num_pairs)
    ours, library = nb["PairReader"](d_model=24), memory.RecallAttention(d_model=24)
    library.load_state_dict(ours.state_dict())
    batch = memory.make_recall(6, num_pairs, seed=num_pairs)
    for a, b in zip(ours(batch), library(batch), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_memory_network_equals_library(nb, hops):
    vocab = story_vocab()
    data = StoryData(make_stories(12, "val", seed=hops), vocab)
    torch.manual_seed(hops)
    library = memory.build_model(True, hops=hops, d_model=16)
    ours = nb["MemoryNetwork"](len(vocab), d_model=16, hops=hops, pad_id=vocab.pad_id)
    ours.load_state_dict(library.state_dict())
    batch = data.batch(list(range(len(data))))
    for a, b in zip(ours(batch), library.forward_with_attention(batch), strict=True):
        torch.testing.assert_close(a, b)


def test_train_step_takes_fits_step(nb):
    data = StoryData(make_stories(10, "val", seed=7), story_vocab())
    torch.manual_seed(7)
    assert_train_step_equals_fit(
        nb["train_step"],
        lambda: memory.build_model(True, hops=2, d_model=16),
        memory.story_loss,
        data.batch(list(range(len(data)))),
        lr=1e-2,
    )

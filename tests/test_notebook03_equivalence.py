"""Notebook 03's hand-written attention read, decoder and model equal course_utils.bahdanau."""

import pytest
import torch
from torch import nn

from course_utils import attention, bahdanau, data
from course_utils.attention import AdditiveScore, masked_softmax
from course_utils.data import lengths_to_mask
from course_utils.seq2seq import GRUEncoder

from notebook_cells import from_scratch_cells, run_from_scratch_cells

NOTEBOOK = "03_bahdanau_attention.ipynb"


@pytest.fixture(scope="module")
def nb():
    namespace = {
        "torch": torch,
        "nn": nn,
        "AdditiveScore": AdditiveScore,
        "masked_softmax": masked_softmax,
        "GRUEncoder": GRUEncoder,
    }
    return run_from_scratch_cells(NOTEBOOK, namespace)


def test_marked_cells_are_the_ones_tested():
    assert set(from_scratch_cells(NOTEBOOK)) == {"attend", "AttentionDecoder", "AttentionSeq2Seq"}


@pytest.mark.parametrize("seed", range(3))
def test_attend_equals_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    score = AdditiveScore(5, 6, 4)
    query, states = torch.randn(3, 5, generator=g), torch.randn(3, 7, 6, generator=g)
    mask = lengths_to_mask(torch.tensor([7, 1, 4]), 7)
    ours = nb["attend"](query, states, mask, score)
    expected = attention.attend(query, states, score, mask)
    for a, b in zip(ours, expected, strict=True):
        torch.testing.assert_close(a, b)


def _batch(seed):
    vocab = data.letter_vocab(6)
    pairs = data.make_split("reverse", "train", n=5, lengths=range(2, 9), vocab=vocab, seed=seed)
    return vocab, data.make_batch([pairs[i] for i in range(5)], vocab)


@pytest.mark.parametrize("seed", range(3))
def test_notebook_model_equals_library_on_padded_batches(nb, seed):
    vocab, batch = _batch(seed)
    args = (len(vocab), 8, 12, vocab.pad_id, vocab.bos_id, vocab.eos_id, 5)
    torch.manual_seed(seed)
    ours = nb["AttentionSeq2Seq"](*args)
    lib = bahdanau.AttentionSeq2Seq(
        bahdanau.BahdanauConfig.from_vocab(vocab, emb_dim=8, rnn_dim=12, attn_dim=5)
    )
    lib.load_state_dict(ours.state_dict())  # strict: the parameter names must match too
    logits, weights = ours.forward_with_attention(batch.src, batch.src_len, batch.tgt_in)
    lib_logits, lib_weights = lib.forward_with_attention(batch.src, batch.src_len, batch.tgt_in)
    torch.testing.assert_close(logits, lib_logits)
    torch.testing.assert_close(weights, lib_weights)
    torch.testing.assert_close(ours(batch.src, batch.src_len, batch.tgt_in), lib_logits)


def test_notebook_decoder_step_equals_library_step(nb):
    vocab, batch = _batch(7)
    torch.manual_seed(7)
    ours = nb["AttentionDecoder"](len(vocab), 8, 12, vocab.pad_id, 5)
    lib = bahdanau.AttentionDecoder(len(vocab), 8, 12, vocab.pad_id, attn_dim=5)
    lib.load_state_dict(ours.state_dict())
    g = torch.Generator().manual_seed(7)
    states, hidden = torch.randn(5, 8, 12, generator=g), torch.randn(5, 12, generator=g)
    mask = lengths_to_mask(batch.src_len, 8)
    token = batch.tgt_in[:, 1]
    for a, b in zip(
        ours.step(token, hidden, states, mask), lib.step(token, hidden, states, mask), strict=True
    ):
        torch.testing.assert_close(a, b)

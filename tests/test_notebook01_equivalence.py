"""Notebook 01's hand-written GRU cell and encoder-decoder equal torch and the library."""

import pytest
import torch
from torch import nn

from course_utils import data, seq2seq

from notebook_cells import from_scratch_cells, run_from_scratch_cells

NOTEBOOK = "01_seq2seq_bottleneck.ipynb"


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(NOTEBOOK, {"torch": torch, "nn": nn})


def test_marked_cells_are_the_ones_tested():
    assert set(from_scratch_cells(NOTEBOOK)) == {"gru_cell", "Seq2Seq"}


@pytest.mark.parametrize("B, D, H", [(1, 1, 1), (3, 5, 4), (2, 16, 32)])
def test_gru_cell_equals_torch_grucell(nb, B, D, H):
    torch.manual_seed(B * 100 + D + H)
    cell = nn.GRUCell(D, H)
    x, h = torch.randn(B, D), torch.randn(B, H)
    ours = nb["gru_cell"](x, h, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    torch.testing.assert_close(ours, cell(x, h))


@pytest.mark.parametrize("seed", range(3))
def test_notebook_seq2seq_equals_library_on_padded_batches(nb, seed):
    vocab = data.letter_vocab(6)
    pairs = data.make_split("reverse", "train", n=5, lengths=range(2, 9), vocab=vocab, seed=seed)
    batch = data.make_batch([pairs[i] for i in range(5)], vocab)
    args = (len(vocab), 8, 12, vocab.pad_id, vocab.bos_id, vocab.eos_id)
    torch.manual_seed(seed)
    ours = nb["Seq2Seq"](*args)
    lib = seq2seq.Seq2Seq(seq2seq.Seq2SeqConfig.from_vocab(vocab, emb_dim=8, hidden_dim=12))
    lib.load_state_dict(ours.state_dict())  # strict: the parameter names must match too
    expected = lib(batch.src, batch.src_len, batch.tgt_in)
    torch.testing.assert_close(ours(batch.src, batch.src_len, batch.tgt_in), expected)
    states, final = ours.encoder(batch.src, batch.src_len)
    lib_states, lib_final = lib.encoder(batch.src, batch.src_len)
    torch.testing.assert_close(states, lib_states)
    torch.testing.assert_close(final, lib_final)

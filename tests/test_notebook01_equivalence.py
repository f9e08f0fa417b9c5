"""Notebook 01's hand-written GRU cell, encoder-decoder and training loop equal torch and the
library."""

import copy

import pytest
import torch
from torch import nn

from course_utils import data, seq2seq, training

from notebook_cells import from_scratch_cells, run_from_scratch_cells

NOTEBOOK = "01_seq2seq_bottleneck.ipynb"


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(NOTEBOOK, {"torch": torch, "nn": nn})


def test_marked_cells_are_the_ones_tested():
    assert set(from_scratch_cells(NOTEBOOK)) == {"gru_cell", "Seq2Seq", "train_loop"}


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
    lib = seq2seq.Seq2Seq(seq2seq.Seq2SeqConfig.from_vocab(vocab, emb_dim=8, rnn_dim=12))
    lib.load_state_dict(ours.state_dict())  # strict: the parameter names must match too
    expected = lib(batch.src, batch.src_len, batch.tgt_in)
    torch.testing.assert_close(ours(batch.src, batch.src_len, batch.tgt_in), expected)
    states, final = ours.encoder(batch.src, batch.src_len)
    lib_states, lib_final = lib.encoder(batch.src, batch.src_len)
    torch.testing.assert_close(states, lib_states)
    torch.testing.assert_close(final, lib_final)


@pytest.mark.parametrize("clip", [1.0, 0.01])  # 0.01: every step's gradient is clipped
@pytest.mark.parametrize("decay", [False, True])
def test_notebook_train_loop_equals_fit(nb, clip, decay):
    vocab = data.letter_vocab(6)
    pairs = data.make_split("reverse", "train", n=60, lengths=range(2, 9), vocab=vocab, seed=0)
    torch.manual_seed(int(clip * 100) + decay)
    ours = seq2seq.Seq2Seq(seq2seq.Seq2SeqConfig.from_vocab(vocab, emb_dim=8, rnn_dim=12))
    theirs = copy.deepcopy(ours)
    schedule = (lambda step: 1 - (step - 1) / 6) if decay else None
    losses = nb["train_loop"](
        ours, data.length_bucketed_batches(pairs, 8, seed=1), 6, 0.01, clip, schedule
    )
    history = training.fit(
        theirs,
        data.length_bucketed_batches(pairs, 8, seed=1),
        training.seq2seq_loss,
        steps=6,
        lr=0.01,
        clip_grad=clip,
        lr_schedule=schedule,
        eval_every=1,
        progress=False,
    )
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(history["train_loss"]))
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=name)
    assert not ours.training  # left in eval mode, as fit leaves it

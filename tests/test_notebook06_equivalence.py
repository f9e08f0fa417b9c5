"""Notebook 06's from-scratch definitions equal course_utils.transformer and PyTorch.

Only the cells whose first line is ``# from-scratch: <name>`` run here (in notebook order, in
one namespace holding what the notebook's import cell provides), so the test is fast and does
not depend on training, plots or widgets.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import decoding, training
from course_utils import transformer as lib
from course_utils import transformer_seq2seq as s2s
from course_utils.attention import MultiHeadAttention, causal_mask
from course_utils.data import letter_vocab, make_batch

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "06_transformer.ipynb"
pytestmark = [
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning"),
]
EXPECTED = {
    "layer_norm",
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "label_smoothed_loss",
    "noam_rate",
    "beam_search",
}


@pytest.fixture(scope="module")
def nb():
    namespace = {"math": math, "torch": torch, "nn": nn, "MultiHeadAttention": MultiHeadAttention}
    return run_from_scratch_cells(NOTEBOOK, namespace)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_marked_cells_define_what_they_name(nb):
    assert_marked_cells_define(NOTEBOOK, nb, EXPECTED)


@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 16)])
def test_layer_norm_equals_torch(nb, shape):
    g = _gen(0)
    x = 5 * torch.randn(*shape, generator=g) + 2
    w, b = torch.rand(shape[-1], generator=g) + 0.5, torch.randn(shape[-1], generator=g)
    expected = F.layer_norm(x, (shape[-1],), w, b, eps=1e-5)
    assert torch.allclose(nb["layer_norm"](x, w, b), expected, atol=1e-5)


def _copy_into_library(ours: nn.Module, library: nn.Module) -> None:
    library.load_state_dict(ours.state_dict())  # strict: the parameter names must agree


def _perturb_norms(module: nn.Module) -> None:
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


def test_feed_forward_equals_library(nb):
    torch.manual_seed(1)
    ours = nb["FeedForward"](8, 24)
    library = lib.FeedForward(8, 24)
    _copy_into_library(ours, library)
    x = torch.randn(2, 5, 8, generator=_gen(1))
    assert torch.allclose(ours(x), library(x), atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize(("E", "H"), [(16, 4), (24, 3)])
def test_layers_equal_library_and_torch(nb, norm_first, E, H):
    torch.manual_seed(2)
    g = _gen(2)
    enc = nb["EncoderLayer"](E, H, 2 * E, norm_first=norm_first).eval()
    dec = nb["DecoderLayer"](E, H, 2 * E, norm_first=norm_first).eval()
    _perturb_norms(enc)
    _perturb_norms(dec)
    lib_enc = lib.EncoderLayer(E, H, 2 * E, norm_first=norm_first).eval()
    lib_dec = lib.DecoderLayer(E, H, 2 * E, norm_first=norm_first).eval()
    _copy_into_library(enc, lib_enc)
    _copy_into_library(dec, lib_dec)
    src, tgt = torch.randn(2, 6, E, generator=g), torch.randn(2, 4, E, generator=g)
    keys = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, :]  # (B, 1, S)
    memory, w = enc(src, keys)
    lib_memory, lib_w = lib_enc(src, keys)
    assert torch.allclose(memory, lib_memory, atol=1e-6) and torch.allclose(w, lib_w, atol=1e-6)
    out, self_w, cross_w = dec(tgt, memory, causal_mask(4), keys)
    lib_out, lib_self, lib_cross = lib_dec(tgt, memory, causal_mask(4), keys)
    assert torch.allclose(out, lib_out, atol=1e-6)
    assert torch.allclose(self_w, lib_self, atol=1e-6)
    assert torch.allclose(cross_w, lib_cross, atol=1e-6)

    # ... and equal PyTorch's own layers, through the library's from_torch
    m = nn.Transformer(E, H, 1, 1, 2 * E, batch_first=True, norm_first=norm_first).eval()
    _perturb_norms(m)
    copy = lib.Transformer.from_torch(m)
    enc.load_state_dict(copy.encoder.layers[0].state_dict())
    dec.load_state_dict(copy.decoder.layers[0].state_dict())
    with torch.no_grad():
        torch_memory = m.encoder.layers[0](src, src_key_padding_mask=~keys[:, 0])
        torch_out = m.decoder.layers[0](
            tgt,
            torch_memory,
            tgt_mask=~causal_mask(4),
            memory_key_padding_mask=~keys[:, 0],
        )
        ours_memory, _ = enc(src, keys)
        ours_out, _, _ = dec(tgt, torch_memory, causal_mask(4), keys)
    real = keys[:, 0]  # torch may leave padded encoder outputs as they are or zero them
    assert torch.allclose(ours_memory[real], torch_memory[real], atol=1e-5)
    assert torch.allclose(ours_out, torch_out, atol=1e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.25])
def test_label_smoothed_loss_equals_library_and_torch(nb, smoothing):
    g = _gen(3)
    logits, targets = torch.randn(3, 6, 9, generator=g), torch.randint(1, 9, (3, 6), generator=g)
    targets[2, 4:] = 0
    got = nb["label_smoothed_loss"](logits, targets, 0, smoothing)
    expected = F.cross_entropy(
        logits.reshape(-1, 9), targets.reshape(-1), ignore_index=0, label_smoothing=smoothing
    )
    assert torch.isclose(got, expected, atol=1e-6)
    assert torch.isclose(got, training.sequence_loss(logits, targets, 0, smoothing), atol=1e-6)


def test_noam_rate_equals_library(nb):
    for step in (1, 10, 99, 100, 101, 4000, 12345):
        for d, w, f in ((512, 4000, 1.0), (64, 100, 2.0)):
            assert math.isclose(nb["noam_rate"](step, d, w, f), training.noam_rate(step, d, w, f))


@pytest.mark.parametrize("length_penalty", [0.0, 0.6])
@pytest.mark.parametrize("beam_size", [1, 2, 4])
def test_beam_search_equals_library(nb, beam_size, length_penalty):
    torch.manual_seed(4)
    vocab = letter_vocab(5)  # 8 tokens
    config = s2s.TransformerConfig.from_vocab(vocab, d_model=16, num_heads=2, d_ff=32, dropout=0.0)
    model = s2s.TransformerSeq2Seq(config).eval()
    with torch.no_grad():  # make <eos> likely enough that hypotheses finish at various lengths
        model.out.weight[model.eos_id] *= 3
    g = _gen(5)
    for n in (2, 4, 6):
        src = torch.randint(3, 8, (n,), generator=g)
        ours = nb["beam_search"](model, src, 7, beam_size, length_penalty)
        batch = make_batch([(src.tolist(), [])], vocab)
        theirs = decoding.beam_search(model, batch, 7, beam_size, length_penalty).ids[0]
        assert ours == theirs[: len(ours)].tolist()
        assert (theirs[len(ours) :] == model.pad_id).all()

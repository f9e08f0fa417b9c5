"""course_utils._validate: the shared checks, and token ids checked at every model's boundary.

``CheckedEmbedding`` must be ``nn.Embedding`` exactly (same parameters, same draws, same
output) except that an id outside the table gets a message naming the id and the size, where
torch raises a bare ``IndexError``; every model's token table is one.
"""

import pytest
import torch
from torch import nn

from course_utils._validate import CheckedEmbedding, check_positive
from course_utils.bahdanau import AttentionSeq2Seq, BahdanauConfig
from course_utils.data import letter_vocab
from course_utils.language_model import DecoderLM, LMConfig
from course_utils.seq2seq import Seq2Seq, Seq2SeqConfig
from course_utils.toy_models import AttentionOnlyTransformer, ToyConfig
from course_utils.transformer_seq2seq import TransformerConfig, TransformerSeq2Seq


def test_checked_embedding_is_nn_embedding_for_ids_inside_the_table():
    torch.manual_seed(0)
    ours = CheckedEmbedding(7, 3, padding_idx=0)
    torch.manual_seed(0)
    torchs = nn.Embedding(7, 3, padding_idx=0)
    ids = torch.tensor([[0, 6, 3], [1, 1, 2]])
    assert torch.equal(ours.weight, torchs.weight)
    assert torch.equal(ours(ids), torchs(ids))
    assert list(dict(ours.named_parameters())) == ["weight"]


@pytest.mark.parametrize("bad", [7, -1, 100])
def test_checked_embedding_names_the_id_and_the_size(bad):
    with pytest.raises(ValueError, match=rf"token id {bad} is outside the vocabulary of 7"):
        CheckedEmbedding(7, 3)(torch.tensor([[1, bad, 2]]))
    with pytest.raises(IndexError):  # what torch says instead
        nn.Embedding(7, 3)(torch.tensor([[1, bad, 2]]))


def test_checked_embedding_rejects_ids_that_are_not_integers():
    with pytest.raises(TypeError, match="integer tensor, got torch.float32"):
        CheckedEmbedding(7, 3)(torch.tensor([[1.0, 2.0]]))


def _models():
    vocab = letter_vocab(5)  # 5 letters and the specials
    size = len(vocab)
    yield "seq2seq", Seq2Seq(Seq2SeqConfig.from_vocab(vocab, emb_dim=4, rnn_dim=6)), size
    yield (
        "bahdanau",
        AttentionSeq2Seq(BahdanauConfig.from_vocab(vocab, emb_dim=4, rnn_dim=6)),
        size,
    )
    config = TransformerConfig.from_vocab(vocab, d_model=8, num_heads=2)
    yield "transformer", TransformerSeq2Seq(config), size


@pytest.mark.parametrize(
    "name, model, size", list(_models()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_seq2seq_models_name_a_source_id_beyond_their_vocabulary(name, model, size):
    src, src_len, tgt_in = torch.tensor([[5, size]]), torch.tensor([2]), torch.tensor([[1, 5]])
    with pytest.raises(ValueError, match=f"token id {size} is outside the vocabulary of {size}"):
        model(src, src_len, tgt_in)


def test_decoder_models_name_an_id_beyond_their_vocabulary():
    lm = DecoderLM(LMConfig(vocab_size=10, d_model=16, num_heads=2, max_len=8))
    with pytest.raises(ValueError, match=r"ids must lie in 0\.\.9, got 1\.\.10"):  # its own check
        lm(torch.tensor([[1, 10]]))
    toy = AttentionOnlyTransformer(ToyConfig(vocab_size=6, max_len=4, num_outputs=6))
    with pytest.raises(ValueError, match="token id -1 is outside the vocabulary of 6"):
        toy(torch.tensor([[1, -1]]))


def test_check_positive_rejects_bools_and_names_the_argument():
    check_positive("n", 3)
    with pytest.raises(TypeError, match="n must be an int, got bool True"):
        check_positive("n", True)
    with pytest.raises(ValueError, match="n must be positive, got 0"):
        check_positive("n", 0)
    with pytest.raises(TypeError, match="num_symbols must be an int, got NoneType None"):
        letter_vocab(None)


def test_token_masks_are_boolean_or_zeros_and_ones_of_the_right_shape():
    from course_utils import interpret
    from course_utils._validate import check_token_mask

    check_token_mask("mask", torch.tensor([[True, False]]), (1, 2))
    check_token_mask("mask", torch.tensor([[1, 0]]), (1, 2))  # as a tokenizer gives it
    with pytest.raises(TypeError, match="mask must be boolean or hold 0 and 1 only"):
        check_token_mask("mask", torch.tensor([[1.0, 0.0]]), (1, 2))
    with pytest.raises(TypeError, match="boolean or hold 0 and 1"):
        check_token_mask("mask", torch.tensor([[2, 0]]), (1, 2))
    with pytest.raises(ValueError, match=r"mask must be \(B, L\) = \(1, 2\), got \(2, 1\)"):
        check_token_mask("mask", torch.ones(2, 1, dtype=torch.bool), (1, 2))
    weights = [torch.softmax(torch.randn(1, 2, 3, 3), -1)]
    with pytest.raises(TypeError, match="attention_mask must be boolean"):
        interpret.offset_scores(weights, attention_mask=torch.ones(1, 3))

"""The GRU encoder-decoder without attention, its config and its loss."""

import doctest

import pytest
import torch
import torch.nn.functional as F

from course_utils import seq2seq
from course_utils.data import letter_vocab
from course_utils.seq2seq import GRUEncoder, Seq2Seq, Seq2SeqConfig
from course_utils.training import sequence_loss

VOCAB = letter_vocab(10)
PAD, BOS, EOS = VOCAB.pad_id, VOCAB.bos_id, VOCAB.eos_id
V = len(VOCAB)


def make_model(seed: int = 0, rnn_dim: int = 16) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(Seq2SeqConfig.from_vocab(VOCAB, emb_dim=8, rnn_dim=rnn_dim)).eval()


def random_ids(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Ids of real symbols only (no specials)."""
    return torch.randint(3, V, shape, generator=g)


def test_docstring_examples_run():
    result = doctest.testmod(seq2seq)
    assert result.attempted >= 1 and result.failed == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_encoder_ignores_padding(seed):
    """One example gives the same states alone as inside a batch of longer, padded ones."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    enc = GRUEncoder(V, 8, 16, PAD).eval()
    lengths = torch.tensor([3, 7, 5, 9])
    src = random_ids(g, 4, 9)
    src[torch.arange(9)[None, :] >= lengths[:, None]] = PAD
    states, final = enc(src, lengths)
    assert states.shape == (4, 9, 16) and final.shape == (4, 16)
    for i, n in enumerate(lengths.tolist()):
        alone_states, alone_final = enc(src[i : i + 1, :n], lengths[i : i + 1])
        torch.testing.assert_close(states[i, :n], alone_states[0])
        torch.testing.assert_close(final[i], alone_final[0])
        # The final state is the state after the last real token, and padding stays empty.
        torch.testing.assert_close(final[i], states[i, n - 1])
        assert torch.all(states[i, n:] == 0)


def test_model_logits_do_not_depend_on_what_fills_the_padding():
    g = torch.Generator().manual_seed(4)
    model = make_model(4)
    lengths = torch.tensor([2, 6, 4])
    src = random_ids(g, 3, 6)
    tgt_in = torch.cat([torch.full((3, 1), BOS), random_ids(g, 3, 5)], dim=1)
    other = src.clone()
    beyond = torch.arange(6)[None, :] >= lengths[:, None]
    src[beyond], other[beyond] = PAD, random_ids(g, int(beyond.sum()))
    logits = model(src, lengths, tgt_in)
    assert logits.shape == (3, 6, V)
    torch.testing.assert_close(logits, model(other, lengths, tgt_in))


def test_sequence_loss_is_cross_entropy_over_non_pad_positions():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(2, 4, V, generator=g)
    targets = torch.tensor([[5, 6, EOS, PAD], [7, 8, 9, EOS]])
    terms = [
        F.cross_entropy(logits[b, t][None], targets[b, t][None])
        for b in range(2)
        for t in range(4)
        if targets[b, t] != PAD
    ]
    expected = torch.stack(terms).mean()
    torch.testing.assert_close(sequence_loss(logits, targets, PAD), expected)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m: m(torch.zeros(2, 3), torch.tensor([3, 3]), torch.zeros(2, 2).long()), "src"),
        (lambda m: m(torch.zeros(3).long(), torch.tensor([3]), torch.zeros(1, 2).long()), "src"),
        (
            lambda m: m(torch.zeros(2, 3).long(), torch.tensor([3]), torch.zeros(2, 2).long()),
            "src_len",
        ),
        (
            lambda m: m(torch.zeros(2, 3).long(), torch.tensor([3, 4]), torch.zeros(2, 2).long()),
            "src_len",
        ),
        (
            lambda m: m(torch.zeros(2, 3).long(), torch.tensor([3, 3]), torch.zeros(3, 2).long()),
            "tgt_in",
        ),
        (lambda m: sequence_loss(torch.zeros(2, 3), torch.zeros(2, 3).long(), PAD), "logits"),
        (lambda m: sequence_loss(torch.zeros(2, 3, V), torch.zeros(2, 4).long(), PAD), "targets"),
    ],
)
def test_bad_input_errors_name_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call(make_model())


def test_config_takes_the_ids_from_the_vocabulary_and_checks_itself():
    other = letter_vocab(4)
    config = Seq2SeqConfig.from_vocab(VOCAB, other, emb_dim=4, rnn_dim=6)
    assert (config.src_vocab_size, config.tgt_vocab_size) == (V, len(other))
    assert (config.pad_id, config.bos_id, config.eos_id) == (PAD, BOS, EOS)
    assert Seq2Seq(config).decoder.out.out_features == len(other)
    for bad, error in [
        (dict(rnn_dim=0), ValueError),
        (dict(emb_dim=True), TypeError),
        (dict(rnn_dim=2.5), TypeError),
        (dict(eos_id=V + 3), ValueError),
        (dict(bos_id=PAD), ValueError),
    ]:
        with pytest.raises(error, match=next(iter(bad))):
            Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, **bad)
    with pytest.raises(TypeError, match="config"):
        Seq2Seq(V)

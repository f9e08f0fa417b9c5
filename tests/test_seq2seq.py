"""The GRU encoder-decoder without attention, its loss and its metrics."""

import doctest

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import seq2seq
from course_utils.data import letter_vocab, make_split
from course_utils.seq2seq import (
    Encoder,
    Seq2Seq,
    accuracy_by_length,
    exact_match,
    sequence_loss,
)

VOCAB = letter_vocab(10)
PAD, BOS, EOS = VOCAB.pad_id, VOCAB.bos_id, VOCAB.eos_id
V = len(VOCAB)


def make_model(seed: int = 0, hidden_dim: int = 16) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(V, 8, hidden_dim, PAD, BOS, EOS).eval()


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
    enc = Encoder(V, 8, 16, PAD).eval()
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


@pytest.mark.parametrize("seed", [0, 2])
def test_greedy_decode_is_argmax_of_forward_fed_its_own_output(seed):
    g = torch.Generator().manual_seed(seed)
    model = make_model(seed)
    with torch.no_grad():  # larger weights make the output depend more on the input
        for p in model.parameters():
            p.mul_(4.0)
    lengths = torch.tensor([5, 3, 8])
    src = random_ids(g, 3, 8)
    max_len = 10
    got = model.greedy_decode(src, lengths, max_len=max_len)
    assert got.dtype == torch.long and got.shape[0] == 3 and got.shape[1] <= max_len

    # Reference: run the full teacher-forced forward pass on the prefix decoded so far.
    prefix = torch.full((3, 1), BOS)
    with torch.no_grad():
        for _ in range(max_len):
            nxt = model(src, lengths, prefix)[:, -1].argmax(-1)  # (B,)
            prefix = torch.cat([prefix, nxt[:, None]], dim=1)
    expected = prefix[:, 1:]
    for i in range(3):
        row = expected[i].tolist()
        n = row.index(EOS) + 1 if EOS in row else max_len
        assert got[i, :n].tolist() == row[:n]
        assert torch.all(got[i, n:] == PAD)
    # Decoding stops as soon as every example has emitted <eos>.
    ends = [r.index(EOS) + 1 if EOS in r else max_len for r in expected.tolist()]
    assert got.shape[1] == max(ends)
    # The case is only a real test if some rows stop early and others do not.
    assert min(ends) < max_len and max(ends) == max_len


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


def test_exact_match_on_hand_made_cases():
    target = torch.tensor(
        [
            [5, 6, EOS, PAD],
            [5, 6, EOS, PAD],
            [5, 6, EOS, PAD],
            [5, 6, EOS, PAD],
            [5, 6, 7, EOS],
            [5, 6, 7, EOS],
        ]
    )
    pred = torch.tensor(
        [
            [5, 6, EOS, PAD, PAD],  # right, and wider than the target
            [5, 6, EOS, 9, 9],  # junk after <eos> does not count
            [5, 7, EOS, PAD, PAD],  # one wrong token
            [5, 6, 7, EOS, PAD],  # one token too many
            [5, 6, EOS, PAD, PAD],  # stopped too early
            [5, 6, 7, PAD, PAD],  # never emitted <eos>, but the tokens are right
        ]
    )
    got = exact_match(pred, target, EOS, PAD)
    assert got.dtype == torch.bool
    assert got.tolist() == [True, True, False, False, False, True]


class ReverseOnEvenLengths(nn.Module):
    """A fake model: decodes a perfect reversal for even lengths and garbage for odd ones."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.pad_id, self.eos_id = PAD, EOS

    def greedy_decode(self, src, src_len, max_len):
        out = torch.full((src.shape[0], max_len), PAD)
        for i, n in enumerate(src_len.tolist()):
            row = src[i, :n].flip(0) if n % 2 == 0 else torch.full((n,), 3)
            out[i, :n], out[i, n] = row, EOS
        return out


def test_accuracy_by_length_counts_per_length():
    data = make_split("reverse", "test", n=60, lengths=range(3, 9), vocab=VOCAB, seed=0)
    acc = accuracy_by_length(ReverseOnEvenLengths(), data, batch_size=7, device="cpu")
    assert list(acc) == sorted(set(data.lengths().tolist()))
    assert acc == {n: float(n % 2 == 0) for n in acc}


def test_accuracy_by_length_agrees_with_one_example_at_a_time():
    data = make_split("copy", "test", n=20, lengths=range(2, 6), vocab=VOCAB, seed=1)
    model = make_model(2)
    acc = accuracy_by_length(model, data, batch_size=6, device="cpu")
    hits: dict[int, list[bool]] = {}
    for src, tgt in zip(data.src, data.tgt, strict=True):
        pred = model.greedy_decode(torch.tensor([src]), torch.tensor([len(src)]), len(tgt) + 1)
        ok = exact_match(pred, torch.tensor([tgt + [EOS]]), EOS, PAD)
        hits.setdefault(len(src), []).append(bool(ok))
    assert acc == {n: sum(h) / len(h) for n, h in sorted(hits.items())}


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
        (lambda m: m.greedy_decode(torch.zeros(2, 3).long(), torch.tensor([3, 3]), 0), "max_len"),
        (lambda m: sequence_loss(torch.zeros(2, 3), torch.zeros(2, 3).long(), PAD), "logits"),
        (lambda m: sequence_loss(torch.zeros(2, 3, V), torch.zeros(2, 4).long(), PAD), "targets"),
        (
            lambda m: exact_match(torch.zeros(2, 3).long(), torch.zeros(3, 3).long(), EOS, PAD),
            "pred_ids",
        ),
        (
            lambda m: exact_match(torch.zeros(2, 3).long(), torch.zeros(2, 3), EOS, PAD),
            "target_ids",
        ),
        (lambda m: accuracy_by_length(m, [[1, 2]], 4, "cpu"), "data"),
    ],
)
def test_bad_input_errors_name_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call(make_model())

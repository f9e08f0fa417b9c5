"""Greedy and beam search over the start/step protocol, for every sequence model of the course.

The references are independent of course_utils.decoding: the model's own teacher-forced
forward pass fed the prefix decoded so far, and an exhaustive search over every output.
"""

import itertools

import pytest
import torch

from course_utils import decoding
from course_utils.bahdanau import AttentionSeq2Seq, BahdanauConfig
from course_utils.data import Batch, letter_vocab, make_batch, make_split
from course_utils.seq2seq import Seq2Seq, Seq2SeqConfig
from course_utils.transformer_seq2seq import TransformerConfig, TransformerSeq2Seq

VOCAB = letter_vocab(6)
PAD, BOS, EOS = VOCAB.pad_id, VOCAB.bos_id, VOCAB.eos_id
V = len(VOCAB)


def build(kind: str, seed: int = 0, scale: float = 1.0):
    torch.manual_seed(seed)
    if kind == "gru":
        model = Seq2Seq(Seq2SeqConfig.from_vocab(VOCAB, emb_dim=8, rnn_dim=16))
    elif kind == "bahdanau":
        model = AttentionSeq2Seq(BahdanauConfig.from_vocab(VOCAB, emb_dim=8, rnn_dim=16))
    else:
        config = TransformerConfig.from_vocab(VOCAB, d_model=16, num_heads=2, d_ff=32, dropout=0.0)
        model = TransformerSeq2Seq(config)
    with torch.no_grad():  # larger weights make the output depend more on the input
        for p in model.parameters():
            p.mul_(scale)
    return model.eval()


def source_batch(seed: int, lengths: list[int]) -> Batch:
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(3, V, (n,), generator=g).tolist() for n in lengths]
    return make_batch([(s, []) for s in src], VOCAB)


def teacher_forced(model, batch: Batch, prefix: torch.Tensor):
    """The model's own forward pass on ``<bos> + prefix``: (log-probs (B, t+1, V), weights)."""
    tgt_in = torch.cat([torch.full((prefix.shape[0], 1), BOS), prefix], dim=1)
    with torch.no_grad():
        logits, weights = model.forward_with_attention(batch.src, batch.src_len, tgt_in)
    return logits.log_softmax(-1), weights


KINDS = ["gru", "bahdanau", "transformer"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_is_argmax_of_forward_fed_its_own_output(kind, seed):
    model = build(kind, seed, scale=3.0)
    batch = source_batch(seed, [5, 3, 7, 2])
    max_steps = 9
    got = decoding.greedy_decode(model, batch, max_steps)
    prefix = torch.empty(4, 0, dtype=torch.long)
    for _ in range(max_steps):
        log_p, _ = teacher_forced(model, batch, prefix)
        prefix = torch.cat([prefix, log_p[:, -1].argmax(-1)[:, None]], dim=1)
    ends = [r.index(EOS) + 1 if EOS in r else max_steps for r in prefix.tolist()]
    assert got.ids.shape == (4, max(ends))  # stops once every row has emitted <eos>
    for i, n in enumerate(ends):
        assert got.ids[i, :n].tolist() == prefix[i, :n].tolist()
        assert torch.all(got.ids[i, n:] == PAD)
    # scores: the teacher-forced log-probability of each output, <eos> included
    log_p, weights = teacher_forced(model, batch, prefix[:, : max(ends)])
    picked = log_p[:, :-1].gather(-1, prefix[:, : max(ends), None])[..., 0]
    real = torch.arange(max(ends))[None] < torch.tensor(ends)[:, None]
    torch.testing.assert_close(got.scores, (picked * real).sum(1), atol=1e-4, rtol=1e-4)
    if kind == "gru":
        assert got.weights is None and weights is None
    else:  # the step weights equal the teacher-forced weights, zero after <eos>
        for i, n in enumerate(ends):
            torch.testing.assert_close(got.weights[i, :n], weights[i, :n], atol=1e-5, rtol=1e-4)
            assert torch.all(got.weights[i, n:] == 0)


@pytest.mark.parametrize("kind", KINDS)
def test_a_beam_of_one_is_greedy(kind):
    model = build(kind, 3, scale=3.0)
    batch = source_batch(3, [4, 6, 2])
    greedy = decoding.greedy_decode(model, batch, 8)
    for penalty in (0.0, 0.6):
        beam = decoding.beam_search(model, batch, 8, beam_size=1, length_penalty=penalty)
        assert torch.equal(beam.ids, greedy.ids)
        torch.testing.assert_close(beam.scores, greedy.scores)
        if greedy.weights is not None:
            torch.testing.assert_close(beam.weights, greedy.weights)


def all_outputs(length: int):
    """Every output of at most ``length`` tokens: symbols, then <eos> (or none, cut short)."""
    symbols = [i for i in range(V) if i not in (PAD, BOS)]
    for n in range(1, length + 1):
        for body in itertools.product(symbols, repeat=n - 1):
            if EOS not in body:
                yield [*body, EOS]
    for body in itertools.product([s for s in symbols if s != EOS], repeat=length):
        yield list(body)  # never finished within the step budget


@pytest.mark.parametrize("kind", KINDS)
def test_a_beam_as_wide_as_every_output_finds_the_most_probable_one(kind):
    model = build(kind, 5, scale=2.0)
    batch = source_batch(5, [3])
    L = 3
    outputs = list(all_outputs(L))
    scores = []
    for out in outputs:
        log_p, _ = teacher_forced(model, batch, torch.tensor([out]))
        scores.append(sum(log_p[0, t, tok].item() for t, tok in enumerate(out)))
    best = max(range(len(outputs)), key=scores.__getitem__)
    beam = decoding.beam_search(model, batch, L, beam_size=(V - 2) ** L)
    got = beam.ids[0].tolist()
    got = got[: got.index(EOS) + 1] if EOS in got else got
    assert got == outputs[best]
    assert beam.scores[0].item() == pytest.approx(scores[best], abs=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_beam_scores_are_the_teacher_forced_log_probability(kind):
    model = build(kind, 7, scale=3.0)
    batch = source_batch(7, [6, 4, 5])
    beam = decoding.beam_search(model, batch, 8, beam_size=3)
    greedy = decoding.greedy_decode(model, batch, 8)
    for i, row in enumerate(beam.ids.tolist()):
        n = row.index(EOS) + 1 if EOS in row else len(row)
        one = Batch(batch.src[i : i + 1], batch.src_len[i : i + 1], batch.src, batch.src)
        log_p, _ = teacher_forced(model, one, torch.tensor([row[:n]]))
        expected = sum(log_p[0, t, tok].item() for t, tok in enumerate(row[:n]))
        assert beam.scores[i].item() == pytest.approx(expected, abs=1e-4)
    # a beam keeps greedy's prefix while it is among the best: here it never scores lower
    assert torch.all(beam.scores >= greedy.scores - 1e-5)


def test_a_length_penalty_favours_longer_outputs():
    model = build("transformer", 11, scale=1.0)
    batch = source_batch(11, [5, 3, 6, 4, 2, 7])
    short = decoding.beam_search(model, batch, 10, beam_size=4, length_penalty=0.0)
    long = decoding.beam_search(model, batch, 10, beam_size=4, length_penalty=5.0)

    def lengths(ids):
        return [r.index(EOS) + 1 if EOS in r else len(r) for r in ids.tolist()]

    assert all(b >= a for a, b in zip(lengths(short.ids), lengths(long.ids), strict=True))
    assert sum(lengths(long.ids)) > sum(lengths(short.ids))
    assert torch.all(short.scores >= long.scores - 1e-5)  # no penalty: the best raw score


def test_decoding_puts_the_model_back_in_its_mode():
    model = build("transformer").train()
    decoding.greedy_decode(model, source_batch(0, [3]), 4)
    assert model.training
    decoding.beam_search(model.eval(), source_batch(0, [3]), 4)
    assert not model.training


def test_accuracy_on_a_real_split_runs_for_every_model():
    data = make_split("reverse", "test", n=12, lengths=range(2, 6), vocab=VOCAB, seed=0)
    batch = make_batch([data[i] for i in range(len(data))], VOCAB)
    for kind in KINDS:
        out = decoding.greedy_decode(build(kind), batch, batch.tgt_out.shape[1] + 1)
        assert out.ids.shape[0] == len(data) and out.scores.shape == (len(data),)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m, b: decoding.greedy_decode(m, b, 0), ValueError, "max_steps"),
        (lambda m, b: decoding.greedy_decode(m, b, True), TypeError, "max_steps"),
        (lambda m, b: decoding.beam_search(m, b, 4, beam_size=0), ValueError, "beam_size"),
        (lambda m, b: decoding.greedy_decode(torch.nn.Linear(2, 2), b, 3), TypeError, "start"),
        (
            lambda m, b: decoding.greedy_decode(
                m, Batch(b.src.float(), b.src_len, b.tgt_in, b.tgt_out), 3
            ),
            TypeError,
            "src",
        ),
    ],
)
def test_bad_input_errors_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call(build("bahdanau"), source_batch(0, [3, 2]))

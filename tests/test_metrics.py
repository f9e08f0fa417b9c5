"""Exact match, accuracy by length (through the decoding protocol), and BLEU through sacrebleu."""

import random

import pytest
import sacrebleu
import torch
from torch import nn

from course_utils.data import letter_vocab, make_batch, make_split
from course_utils.decoding import greedy_decode
from course_utils.exercises import nb07
from course_utils.metrics import accuracy_by_length, bleu_by_length, corpus_bleu, exact_match
from course_utils.seq2seq import Seq2Seq, Seq2SeqConfig

VOCAB = letter_vocab(10)
PAD, BOS, EOS = VOCAB.pad_id, VOCAB.bos_id, VOCAB.eos_id
WORDS = "miro kaba tulo pela dase gora nimi ena ki mira kesa".split()


def _random_corpus(seed, n=30):
    rng = random.Random(seed)
    refs, hyps = [], []
    for _ in range(n):
        ref = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
        hyp = [w if rng.random() < 0.7 else rng.choice(WORDS) for w in ref]
        hyp = hyp[: rng.randint(2, len(hyp))]
        refs.append(" ".join(ref))
        hyps.append(" ".join(hyp))
    return hyps, refs


@pytest.mark.parametrize("seed", range(4))
def test_corpus_bleu_equals_sacrebleu(seed):
    hyps, refs = _random_corpus(seed)
    assert corpus_bleu(hyps, refs) == sacrebleu.corpus_bleu(hyps, [refs]).score


def test_bleu_by_length_equals_sacrebleu_on_each_bucket():
    hyps, refs = _random_corpus(9, n=40)
    lengths = [len(r.split()) for r in refs]
    buckets = [(3, 6), (7, 9), (10, 12)]
    got = bleu_by_length(hyps, refs, lengths, buckets)
    for lo, hi in buckets:
        inside = [i for i, n in enumerate(lengths) if lo <= n <= hi]
        expected = sacrebleu.corpus_bleu([hyps[i] for i in inside], [[refs[i] for i in inside]])
        assert got[(lo, hi)] == expected.score


def test_bleu_bad_input():
    with pytest.raises(ValueError, match="one entry per sentence"):
        corpus_bleu(["a b"], ["a b", "c"])
    with pytest.raises(TypeError, match="hypotheses"):
        corpus_bleu("a b", "a b")
    with pytest.raises(ValueError, match="empty"):
        corpus_bleu([], [])
    with pytest.raises(ValueError, match="holds no sentence"):
        bleu_by_length(["a"], ["a"], [3], [(5, 9)])


# --- AER: hand-worked cases -------------------------------------------------------------
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
    """A fake decodable model: a perfect reversal for even lengths, garbage for odd ones."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.pad_id, self.bos_id, self.eos_id = PAD, BOS, EOS

    def start(self, batch):
        return batch.src, batch.src_len, torch.zeros(len(batch.src_len), dtype=torch.long)

    def step(self, tokens, state):
        src, src_len, t = state
        want = torch.full_like(t, EOS)
        for i, n in enumerate(src_len.tolist()):
            if t[i] < n:
                want[i] = src[i, n - 1 - t[i]] if n % 2 == 0 else 3
        log_probs = torch.full((len(t), len(VOCAB)), -30.0).scatter(1, want[:, None], 0.0)
        return log_probs, (src, src_len, t + 1), None


def test_accuracy_by_length_counts_per_length():
    data = make_split("reverse", "test", n=60, lengths=range(3, 9), vocab=VOCAB, seed=0)
    acc = accuracy_by_length(ReverseOnEvenLengths(), data, batch_size=7, device="cpu")
    assert list(acc) == sorted(set(data.lengths().tolist()))
    assert acc == {n: float(n % 2 == 0) for n in acc}


def test_accuracy_by_length_agrees_with_one_example_at_a_time():
    data = make_split("copy", "test", n=20, lengths=range(2, 6), vocab=VOCAB, seed=1)
    torch.manual_seed(2)
    model = Seq2Seq(Seq2SeqConfig.from_vocab(VOCAB, emb_dim=8, rnn_dim=16))
    acc = accuracy_by_length(model, data, batch_size=6, device="cpu")
    hits: dict[int, list[bool]] = {}
    for src, tgt in zip(data.src, data.tgt, strict=True):
        batch = make_batch([(src, tgt)], VOCAB)
        pred = greedy_decode(model, batch, len(tgt) + 1).ids
        ok = exact_match(pred, torch.tensor([tgt + [EOS]]), EOS, PAD)
        hits.setdefault(len(src), []).append(bool(ok))
    assert acc == {n: sum(h) / len(h) for n, h in sorted(hits.items())}


# --- the exercise references agree with sacrebleu's own statistics ----------------------
@pytest.mark.parametrize("seed", range(3))
def test_exercise_references_match_sacrebleu_statistics(seed):
    hyps, refs = _random_corpus(seed, n=1)
    stats = sacrebleu.corpus_bleu(hyps, [refs])
    h, r = hyps[0].split(), refs[0].split()
    for n in range(1, 5):
        assert nb07._modified_precision_reference(h, r, n) == (
            stats.counts[n - 1],
            stats.totals[n - 1],
        )
    assert nb07._brevity_penalty_reference(len(h), len(r)) == pytest.approx(stats.bp)


def test_exercise_checkers_accept_the_references_and_reject_a_wrong_answer(capsys):
    nb07.check_modified_precision(nb07._modified_precision_reference)
    nb07.check_brevity_penalty(nb07._brevity_penalty_reference)

    def unclipped(hyp, ref, n):
        grams = [tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1)]
        refs = {tuple(ref[i : i + n]) for i in range(len(ref) - n + 1)}
        return sum(g in refs for g in grams), len(grams)

    with pytest.raises(AssertionError):
        nb07.check_modified_precision(unclipped)
    assert "FAILED" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        nb07.check_brevity_penalty(lambda c, r: min(1.0, c / r))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: exact_match(torch.zeros(2, 3).long(), torch.zeros(3, 3).long(), EOS, PAD),
            ValueError,
            "pred_ids",
        ),
        (
            lambda: exact_match(torch.zeros(2, 3).long(), torch.zeros(2, 3), EOS, PAD),
            TypeError,
            "target_ids",
        ),
        (lambda: accuracy_by_length(ReverseOnEvenLengths(), [[1, 2]], 4, "cpu"), TypeError, "data"),
        (
            lambda: accuracy_by_length(
                ReverseOnEvenLengths(), make_split("copy", "test", 4, [3], VOCAB), 0
            ),
            ValueError,
            "batch_size",
        ),
    ],
)
def test_metric_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()

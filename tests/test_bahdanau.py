"""The encoder-decoder with additive (Bahdanau) attention, and its length-bucketed batches."""

import pytest
import torch
import torch.nn.functional as F

from course_utils import seq2seq
from course_utils.attention import attend
from course_utils.bahdanau import (
    AttentionDecoder,
    AttentionSeq2Seq,
    BahdanauConfig,
)
from course_utils.data import (
    Batch,
    length_bucketed_batches,
    lengths_to_mask,
    letter_vocab,
    make_batch,
    make_split,
)
from course_utils.decoding import greedy_decode
from course_utils.exercises import nb03
from course_utils.metrics import accuracy_by_length, exact_match
from course_utils.training import seq2seq_loss

VOCAB = letter_vocab(10)
PAD, BOS, EOS = VOCAB.pad_id, VOCAB.bos_id, VOCAB.eos_id
V = len(VOCAB)


def make_model(seed: int = 0, rnn_dim: int = 16, attn_dim: int | None = None):
    torch.manual_seed(seed)
    config = BahdanauConfig.from_vocab(VOCAB, emb_dim=8, rnn_dim=rnn_dim, attn_dim=attn_dim)
    return AttentionSeq2Seq(config).eval()


def random_ids(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Ids of real symbols only (no specials)."""
    return torch.randint(3, V, shape, generator=g)


def padded_source(g: torch.Generator, lengths: list[int], fill: torch.Tensor | None = None):
    src = random_ids(g, len(lengths), max(lengths))
    lengths = torch.tensor(lengths)
    beyond = torch.arange(src.shape[1])[None, :] >= lengths[:, None]
    src[beyond] = PAD
    return src, lengths, beyond


def reference_attend(query, enc_states, n, score):
    """Scores by the formula v^T tanh(W_q q + W_k k_j); a plain softmax over the first n."""
    w_q, w_k, v = score.w_q.weight, score.w_k.weight, score.v.weight[0]
    s = torch.stack([v @ torch.tanh(w_q @ query + w_k @ enc_states[j]) for j in range(n)])
    weights = torch.softmax(s, dim=0)  # (n,)
    return weights @ enc_states[:n], weights


# ---------------------------------------------------------------------------------------
# One attention read
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_attend_equals_the_formula_over_real_positions_only(seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    score = make_model(seed, rnn_dim=6, attn_dim=5).decoder.attention
    states = torch.randn(3, 7, 6, generator=g)
    query = torch.randn(3, 6, generator=g)
    lengths = torch.tensor([7, 2, 4])
    context, weights = attend(query, states, score, lengths_to_mask(lengths, 7))
    assert context.shape == (3, 6) and weights.shape == (3, 7)
    for b, n in enumerate(lengths.tolist()):
        ref_context, ref_weights = reference_attend(query[b], states[b], n, score)
        torch.testing.assert_close(weights[b, :n], ref_weights)
        torch.testing.assert_close(context[b], ref_context)
        assert torch.all(weights[b, n:] == 0)


def test_lengths_to_mask():
    mask = lengths_to_mask(torch.tensor([1, 3, 2]), 3)
    assert mask.dtype == torch.bool
    assert mask.tolist() == [[True, False, False], [True, True, True], [True, True, False]]


# ---------------------------------------------------------------------------------------
# The model: shapes, masks, padding, gradients
# ---------------------------------------------------------------------------------------


def test_shapes_and_weights_are_distributions_over_the_real_source():
    g = torch.Generator().manual_seed(1)
    model = make_model(1)
    src, lengths, beyond = padded_source(g, [5, 2, 7])
    tgt_in = torch.cat([torch.full((3, 1), BOS), random_ids(g, 3, 5)], dim=1)
    logits, weights = model.forward_with_attention(src, lengths, tgt_in)
    assert logits.shape == (3, 6, V) and weights.shape == (3, 6, 7)
    torch.testing.assert_close(model(src, lengths, tgt_in), logits)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6))
    assert torch.all(weights[beyond[:, None, :].expand_as(weights)] == 0)
    assert torch.all(weights[~beyond[:, None, :].expand_as(weights)] > 0)


def test_outputs_do_not_depend_on_what_fills_the_padding():
    g = torch.Generator().manual_seed(2)
    model = make_model(2)
    src, lengths, beyond = padded_source(g, [2, 6, 4])
    other = src.clone()
    other[beyond] = random_ids(g, int(beyond.sum()))
    tgt_in = torch.cat([torch.full((3, 1), BOS), random_ids(g, 3, 4)], dim=1)
    logits, weights = model.forward_with_attention(src, lengths, tgt_in)
    logits2, weights2 = model.forward_with_attention(other, lengths, tgt_in)
    torch.testing.assert_close(logits, logits2)
    torch.testing.assert_close(weights, weights2)


@pytest.mark.parametrize("seed", [0, 3])
def test_an_example_alone_equals_the_same_example_in_a_padded_batch(seed):
    g = torch.Generator().manual_seed(seed)
    model = make_model(seed)
    src, lengths, _ = padded_source(g, [3, 8, 5])
    tgt_in = torch.cat([torch.full((3, 1), BOS), random_ids(g, 3, 6)], dim=1)
    logits, weights = model.forward_with_attention(src, lengths, tgt_in)
    for b, n in enumerate(lengths.tolist()):
        alone, alone_w = model.forward_with_attention(
            src[b : b + 1, :n], lengths[b : b + 1], tgt_in[b : b + 1]
        )
        torch.testing.assert_close(logits[b], alone[0])
        torch.testing.assert_close(weights[b, :, :n], alone_w[0])


def test_teacher_forced_forward_equals_the_step_by_step_decoder():
    """The forward pass projects the keys once; each step must equal ``decoder.step``."""
    g = torch.Generator().manual_seed(4)
    model = make_model(4, rnn_dim=12, attn_dim=7)
    src, lengths, _ = padded_source(g, [4, 6])
    tgt_in = torch.cat([torch.full((2, 1), BOS), random_ids(g, 2, 5)], dim=1)
    logits, weights = model.forward_with_attention(src, lengths, tgt_in)
    states, hidden = model.encoder(src, lengths)
    mask = lengths_to_mask(lengths, src.shape[1])
    for t in range(tgt_in.shape[1]):
        step_logits, hidden, step_w = model.decoder.step(tgt_in[:, t], hidden, states, mask)
        torch.testing.assert_close(logits[:, t], step_logits)
        torch.testing.assert_close(weights[:, t], step_w)


def test_one_decoder_step_by_hand():
    """Query = previous state; GRU input = [embedding, context]; read-out from [state, context]."""
    g = torch.Generator().manual_seed(5)
    dec = make_model(5, rnn_dim=6, attn_dim=4).decoder
    states, hidden = torch.randn(2, 5, 6, generator=g), torch.randn(2, 6, generator=g)
    token, lengths = torch.tensor([3, 7]), torch.tensor([5, 3])
    logits, new_hidden, weights = dec.step(token, hidden, states, lengths_to_mask(lengths, 5))
    cell = torch.nn.GRUCell(8 + 6, 6)
    cell.load_state_dict(dec.rnn.state_dict())
    for b, n in enumerate(lengths.tolist()):
        context, w = reference_attend(hidden[b], states[b], n, dec.attention)
        x = torch.cat([dec.embedding.weight[token[b]], context])
        h = cell(x[None], hidden[b][None])[0]
        out = dec.out.weight @ torch.cat([h, context]) + dec.out.bias
        torch.testing.assert_close(weights[b, :n], w)
        torch.testing.assert_close(new_hidden[b], h)
        torch.testing.assert_close(logits[b], out)


def test_gradients_reach_every_parameter():
    model = make_model(6).train()
    data = make_split("reverse", "train", n=8, lengths=range(3, 9), vocab=VOCAB, seed=0)
    batch = make_batch([data[i] for i in range(8)], VOCAB)
    seq2seq_loss(model, batch).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert p.grad.abs().sum() > 0, f"{name} got a zero gradient"
    # ... but the embedding rows of <pad> get none.
    assert torch.all(model.encoder.embedding.weight.grad[PAD] == 0)


def test_encoder_is_the_seq2seq_encoder():
    model = make_model(0)
    assert type(model.encoder) is seq2seq.GRUEncoder
    plain = seq2seq.Seq2Seq(seq2seq.Seq2SeqConfig.from_vocab(VOCAB, emb_dim=8, rnn_dim=16))
    model.encoder.load_state_dict(plain.encoder.state_dict())  # strict: the same parameters


def test_separate_target_vocabulary():
    model = AttentionSeq2Seq(BahdanauConfig(V, V + 4, emb_dim=8, rnn_dim=16))
    src, lengths = torch.tensor([[3, 4, 5]]), torch.tensor([3])
    assert model(src, lengths, torch.tensor([[BOS, 12]])).shape == (1, 2, V + 4)


# ---------------------------------------------------------------------------------------
# Greedy decoding
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 3, 4])
def test_greedy_decode_equals_teacher_forcing_fed_its_own_output(seed):
    g = torch.Generator().manual_seed(seed)
    model = make_model(seed)
    with torch.no_grad():  # larger weights make the output depend more on the input
        for p in model.parameters():
            p.mul_(3.0)
    src, lengths, beyond = padded_source(g, [5, 3, 8])
    max_len = 10
    out = greedy_decode(model, Batch(src, lengths, src, src), max_steps=max_len)
    got, got_w = out.ids, out.weights
    assert got.dtype == torch.long and got_w.shape == (3, got.shape[1], 8)

    prefix = torch.full((3, 1), BOS)
    with torch.no_grad():
        for _ in range(max_len):
            nxt = model(src, lengths, prefix)[:, -1].argmax(-1)  # (B,)
            prefix = torch.cat([prefix, nxt[:, None]], dim=1)
        _, ref_w = model.forward_with_attention(src, lengths, prefix[:, :-1])  # (B, max_len, S)
    expected = prefix[:, 1:]
    ends = [r.index(EOS) + 1 if EOS in r else max_len for r in expected.tolist()]
    for i, n in enumerate(ends):
        assert got[i, :n].tolist() == expected[i, :n].tolist()
        assert torch.all(got[i, n:] == PAD)
        torch.testing.assert_close(got_w[i, :n], ref_w[i, :n])
        assert torch.all(got_w[i, n:] == 0)  # no weights after <eos>
    assert torch.all(got_w[beyond[:, None, :].expand_as(got_w)] == 0)  # never on padding
    assert got.shape[1] == max(ends)
    assert min(ends) < max_len and max(ends) == max_len  # some rows stop early, some not


def test_accuracy_by_length_accepts_the_attention_model():
    data = make_split("copy", "test", n=20, lengths=range(2, 6), vocab=VOCAB, seed=1)
    model = make_model(2)
    acc = accuracy_by_length(model, data, batch_size=6, device="cpu")
    hits: dict[int, list[bool]] = {}
    for src, tgt in zip(data.src, data.tgt, strict=True):
        pred = greedy_decode(model, make_batch([(src, tgt)], VOCAB), len(tgt) + 1).ids
        ok = exact_match(pred, torch.tensor([tgt + [EOS]]), EOS, PAD)
        hits.setdefault(len(src), []).append(bool(ok))
    assert acc == {n: sum(h) / len(h) for n, h in sorted(hits.items())}


def test_a_few_steps_of_training_lower_the_loss():
    data = make_split("reverse", "train", n=64, lengths=range(3, 7), vocab=VOCAB, seed=0)
    batch = make_batch([data[i] for i in range(64)], VOCAB)
    model = make_model(7, rnn_dim=32).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = seq2seq_loss(model, batch).item()
    for _ in range(30):
        loss = seq2seq_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.6 * first
    # cross-check the loss against a plain cross-entropy over the real target tokens
    logits = model(batch.src, batch.src_len, batch.tgt_in)
    real = batch.tgt_out != PAD
    torch.testing.assert_close(
        seq2seq_loss(model, batch), F.cross_entropy(logits[real], batch.tgt_out[real])
    )


# ---------------------------------------------------------------------------------------
# Length-bucketed batches
# ---------------------------------------------------------------------------------------


def test_bucketed_batches_cover_each_example_once_per_epoch_with_similar_lengths():
    data = make_split("reverse", "train", n=100, lengths=range(3, 12), vocab=VOCAB, seed=2)
    it = length_bucketed_batches(data, batch_size=16, seed=3)
    n_batches = -(-len(data) // 16)
    for _ in range(2):  # two epochs
        seen = []
        for _ in range(n_batches):
            batch = next(it)
            lengths = batch.src_len.tolist()
            assert max(lengths) - min(lengths) <= 2  # 100 inputs over 9 lengths
            assert batch.src.shape[1] == max(lengths)
            seen += [tuple(batch.src[i, :n].tolist()) for i, n in enumerate(lengths)]
        assert sorted(seen) == sorted(tuple(s) for s in data.src)


def test_bucketed_batches_are_seeded():
    data = make_split("reverse", "train", n=50, lengths=range(3, 12), vocab=VOCAB, seed=2)

    def first_sources(seed):
        it = length_bucketed_batches(data, batch_size=8, seed=seed)
        return [next(it).src.tolist() for _ in range(4)]

    assert first_sources(0) == first_sources(0)
    assert first_sources(0) != first_sources(1)


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------


def _dec_call(**override):
    dec = AttentionDecoder(V, 8, 6, PAD)
    args = {
        "tgt_in": torch.zeros(2, 3).long(),
        "hidden": torch.zeros(2, 6),
        "enc_states": torch.zeros(2, 4, 6),
        "src_mask": torch.ones(2, 4, dtype=torch.bool),
    }
    args.update(override)
    return dec(**args)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m: m(torch.zeros(2, 3), torch.tensor([3, 3]), torch.zeros(2, 2).long()), "src"),
        (
            lambda m: m(torch.zeros(2, 3).long(), torch.tensor([3, 4]), torch.zeros(2, 2).long()),
            "src_len",
        ),
        (
            lambda m: m(torch.zeros(2, 3).long(), torch.tensor([3, 3]), torch.zeros(3, 2).long()),
            "tgt_in",
        ),
        (
            lambda m: m.start(Batch(*[torch.zeros(2, 3).long()], torch.tensor([0, 3]), None, None)),
            "src_len",
        ),
        (lambda m: _dec_call(hidden=torch.zeros(3, 6)), "hidden"),
        (lambda m: _dec_call(hidden=torch.zeros(2, 5)), "hidden"),
        (lambda m: _dec_call(enc_states=torch.zeros(2, 4)), "enc_states"),
        (lambda m: _dec_call(src_mask=torch.ones(2, 4)), "src_mask"),
        (lambda m: _dec_call(src_mask=torch.ones(2, 5, dtype=torch.bool)), "src_mask"),
        (lambda m: next(length_bucketed_batches([[1, 2]], 4)), "data"),
        (
            lambda m: next(
                length_bucketed_batches(make_split("copy", "train", 4, [3], vocab=VOCAB, seed=0), 0)
            ),
            "batch_size",
        ),
    ],
)
def test_bad_input_errors_name_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call(make_model())


# ---------------------------------------------------------------------------------------
# Notebook 03's exercise checkers: an independent right answer passes, a classic slip fails
# ---------------------------------------------------------------------------------------


def _read(query, enc_states, src_mask, W_q, W_k, v, mask_padding=True):
    scores = torch.tanh((query @ W_q.T)[:, None, :] + enc_states @ W_k.T) @ v  # (B, S)
    if mask_padding:
        scores = scores.masked_fill(~src_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("bs,bsk->bk", weights, enc_states), weights


def _alignment(weights, gold):
    hits = [
        int(weights[b, t].argmax() == gold[b, t])
        for b in range(gold.shape[0])
        for t in range(gold.shape[1])
        if gold[b, t] >= 0
    ]
    return sum(hits) / len(hits)


@pytest.mark.parametrize(
    "checker, right, wrong",
    [
        (
            nb03.check_attention_read,
            _read,
            lambda *args: _read(*args, mask_padding=False),  # attends to the padding
        ),
        (
            nb03.check_alignment_accuracy,
            _alignment,
            lambda w, gold: (w.argmax(-1) == gold).float().mean().item(),  # counts -1 steps
        ),
    ],
)
def test_notebook03_checkers_tell_right_from_wrong(checker, right, wrong, capsys):
    checker(right)
    with pytest.raises(AssertionError):
        checker(wrong)
    assert "FAILED" in capsys.readouterr().out

"""course_utils.transformer against torch.nn.Transformer, closed forms, and its own claims."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import attention, decoding, training
from course_utils import transformer as tf
from course_utils import transformer_seq2seq as s2s
from course_utils.attention import causal_mask
from course_utils.data import batches, letter_vocab, make_split
from course_utils.exercises import nb06
from course_utils.training import count_parameters

# PyTorch notes when its inference fast path is off (pre-norm, odd head counts, no bias) and
# that nested tensors are a prototype: neither matters for these comparisons.
pytestmark = [
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning"),
]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _lengths_to_keys(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """(B,) lengths -> (B, width) boolean, True at real tokens (the course convention)."""
    return torch.arange(width)[None, :] < lengths[:, None]


# Random configurations: (d_model, num_heads, enc layers, dec layers, d_ff, activation, bias)
CONFIGS = [
    (16, 2, 1, 1, 32, "relu", True),
    (24, 3, 2, 3, 40, "gelu", True),
    (32, 8, 3, 2, 64, "relu", True),
    (12, 4, 2, 2, 20, "relu", False),
    (8, 1, 1, 2, 16, "gelu", True),
]


def _torch_transformer(config, norm_first: bool, seed: int) -> nn.Transformer:
    d, h, ne, nd, ff, act, bias = config
    torch.manual_seed(seed)
    m = nn.Transformer(
        d, h, ne, nd, ff, dropout=0.1, activation=act, batch_first=True,
        norm_first=norm_first, bias=bias,
    )  # fmt: skip
    with torch.no_grad():  # LayerNorm starts at (1, 0): make it non-trivial so it is tested
        for mod in m.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.weight.uniform_(0.5, 1.5)
                if mod.bias is not None:
                    mod.bias.uniform_(-0.5, 0.5)
    return m.eval()


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("grad", [False, True])
def test_from_torch_matches_with_padding_and_causal_masks(config, norm_first, grad):
    m = _torch_transformer(config, norm_first, seed=len(config) + config[0])
    ours = tf.Transformer.from_torch(m)
    assert not ours.training and ours.norm_first == norm_first
    assert count_parameters(ours) == count_parameters(m)
    g = _gen(config[0])
    d = config[0]
    B, S, T = 3, 7, 5
    src, tgt = torch.randn(B, S, d, generator=g), torch.randn(B, T, d, generator=g)
    src_len, tgt_len = torch.tensor([7, 4, 1]), torch.tensor([5, 2, 3])
    src_keys, tgt_keys = _lengths_to_keys(src_len, S), _lengths_to_keys(tgt_len, T)
    torch_causal = ~causal_mask(T)  # torch's boolean masks: True = blocked
    with torch.set_grad_enabled(grad):
        expected = m(
            src,
            tgt,
            tgt_mask=torch_causal,
            src_key_padding_mask=~src_keys,
            tgt_key_padding_mask=~tgt_keys,
            memory_key_padding_mask=~src_keys,
        )
        got = ours(
            src,
            tgt,
            tgt_mask=causal_mask(T),
            src_key_padding_mask=src_keys,
            tgt_key_padding_mask=tgt_keys,
            memory_key_padding_mask=src_keys,
        )
    assert got.shape == expected.shape == (B, T, d)
    err = (got - expected).abs().max().item()
    assert err < 1e-5, err


@pytest.mark.parametrize("norm_first", [False, True])
def test_from_torch_matches_with_full_attention_masks(norm_first):
    """Boolean (B*H-free) attention masks of every kind: src, tgt and memory masks."""
    config = (16, 4, 2, 2, 24, "relu", True)
    m = _torch_transformer(config, norm_first, seed=3)
    ours = tf.Transformer.from_torch(m)
    g = _gen(4)
    S, T = 6, 5
    src, tgt = torch.randn(2, S, 16, generator=g), torch.randn(2, T, 16, generator=g)
    src_mask = torch.rand(S, S, generator=g) > 0.3
    memory_mask = torch.rand(T, S, generator=g) > 0.3
    src_mask[:, 0] = memory_mask[:, 0] = True  # every query keeps a key: torch stays finite
    tgt_mask = causal_mask(T)
    expected = m(src, tgt, src_mask=~src_mask, tgt_mask=~tgt_mask, memory_mask=~memory_mask)
    got = ours(src, tgt, src_mask=src_mask, tgt_mask=tgt_mask, memory_mask=memory_mask)
    assert (got - expected).abs().max().item() < 1e-5


def test_causal_decoder_leaks_nothing_from_the_future():
    model = tf.Transformer(16, 2, 1, 2, 32, dropout=0.0).eval()
    g = _gen(5)
    src, tgt = torch.randn(1, 4, 16, generator=g), torch.randn(1, 6, 16, generator=g)
    changed = tgt.clone()
    changed[:, 4:] = torch.randn(1, 2, 16, generator=g)
    a = model(src, tgt, tgt_mask=causal_mask(6))
    b = model(src, changed, tgt_mask=causal_mask(6))
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:], atol=1e-3)


def test_padding_does_not_change_real_positions():
    model = tf.Transformer(16, 4, 2, 2, 32, dropout=0.0).eval()
    g = _gen(6)
    src, tgt = torch.randn(1, 3, 16, generator=g), torch.randn(1, 4, 16, generator=g)
    padded = torch.cat([src, 100 * torch.randn(1, 2, 16, generator=g)], dim=1)  # junk at end
    keys = torch.tensor([[True, True, True, False, False]])
    alone = model(src, tgt, tgt_mask=causal_mask(4))
    with_pad = model(
        padded, tgt, tgt_mask=causal_mask(4), src_key_padding_mask=keys,
        memory_key_padding_mask=keys,
    )  # fmt: skip
    assert torch.allclose(alone, with_pad, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_gradients_reach_every_parameter(norm_first):
    model = tf.Transformer(16, 4, 2, 2, 32, dropout=0.1, norm_first=norm_first)
    g = _gen(7)
    src, tgt = torch.randn(2, 5, 16, generator=g), torch.randn(2, 4, 16, generator=g)
    model(src, tgt, tgt_mask=causal_mask(4)).pow(2).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name

    config = s2s.TransformerConfig(12, 9, d_model=16, num_heads=2, norm_first=norm_first)
    seq = s2s.TransformerSeq2Seq(config)
    src_ids = torch.randint(3, 12, (3, 6), generator=g)
    tgt_in = torch.randint(3, 9, (3, 5), generator=g)
    tgt_in[:, 0] = 1
    logits = seq(src_ids, torch.tensor([6, 6, 6]), tgt_in)
    training.sequence_loss(logits, torch.randint(3, 9, (3, 5), generator=g), 0).backward()
    for name, p in seq.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="divisible"):
        tf.Transformer(d_model=10, num_heads=3)
    with pytest.raises(ValueError, match="divisible"):
        tf.EncoderLayer(10, 4, 20)
    model = tf.Transformer(8, 2, 1, 1, 16).eval()
    src, tgt = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\)"):
        model(src, tgt, src_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="src_key_padding_mask"):
        model(src, tgt, src_key_padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean"):
        model(src, tgt, tgt_mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"\(B, L, 8\)"):
        model(torch.randn(2, 5, 6), tgt)
    with pytest.raises(ValueError, match="batch size"):
        model(src, torch.randn(3, 3, 8))
    with pytest.raises(ValueError, match="activation"):
        tf.FeedForward(8, 16, activation="tanh")
    with pytest.raises(TypeError, match=r"torch.nn.Transformer"):
        tf.Transformer.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="batch_first"):
        tf.Transformer.from_torch(nn.Transformer(8, 2, 1, 1, 16))
    with pytest.raises(ValueError, match="-inf"):
        attention.mask_from_torch(torch.tensor([[0.0, -1.0]]))
    with pytest.raises(ValueError, match="share_embeddings"):
        s2s.TransformerSeq2Seq(s2s.TransformerConfig(10, 12, share_embeddings=True))
    seq = s2s.TransformerSeq2Seq(s2s.TransformerConfig(10, 10, d_model=8, num_heads=2))
    with pytest.raises(ValueError, match="src_len"):
        seq(torch.tensor([[4, 5]]), torch.tensor([3]), torch.tensor([[1]]))
    with pytest.raises(ValueError, match="targets"):
        training.sequence_loss(torch.randn(2, 3, 5), torch.zeros(2, 4, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="step"):
        training.noam_rate(0, 512, 4000)


def test_mask_from_torch_inverts_boolean_and_reads_float_masks():
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    assert torch.equal(attention.mask_from_torch(causal), causal_mask(5))
    assert torch.equal(attention.mask_from_torch(causal.isinf()), causal_mask(5))


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothing_is_cross_entropy_against_the_smoothed_distribution(smoothing):
    g = _gen(8)
    B, T, V, pad = 3, 4, 7, 0
    logits = torch.randn(B, T, V, generator=g)
    targets = torch.randint(1, V, (B, T), generator=g)
    targets[0, 2:] = pad
    # The closed form: q = (1 - eps) one_hot + eps / V; loss = -sum q log p, mean over real
    q = (1 - smoothing) * F.one_hot(targets, V).float() + smoothing / V
    per_token = -(q * logits.log_softmax(-1)).sum(-1)  # (B, T)
    real = targets != pad
    expected = per_token[real].mean()
    got = training.sequence_loss(logits, targets, pad, smoothing)
    assert torch.isclose(got, expected, atol=1e-6)


def test_noam_rate_rises_linearly_then_falls_as_inverse_sqrt():
    d, w = 512, 4000
    assert math.isclose(training.noam_rate(100, d, w) / training.noam_rate(50, d, w), 2.0)
    assert math.isclose(training.noam_rate(16000, d, w) / training.noam_rate(4000, d, w), 0.5)
    peak = max(range(1, 10000, 7), key=lambda s: training.noam_rate(s, d, w))
    assert abs(peak - w) <= 7
    assert math.isclose(training.noam_rate(w, d, w), d**-0.5 * w**-0.5)


def test_noam_optimizer_sets_the_rate_at_every_step():
    p = nn.Parameter(torch.zeros(3))
    opt, _ = training.noam_optimizer([p], d_model=64, warmup_steps=10, factor=2.0)
    seen = []
    for step in range(1, 30):
        seen.append(opt.param_groups[0]["lr"])
        p.grad = torch.ones(3)
        opt.step()
        assert math.isclose(seen[-1], training.noam_rate(step, 64, 10, 2.0), rel_tol=1e-9)


# --------------------------------------------------------------------------------------
# The seq2seq model and decoding
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    """A tiny model trained briefly on copy, so decoding has something non-random to find."""
    torch.manual_seed(0)
    vocab = letter_vocab(6)
    data = make_split("copy", "train", n=512, lengths=range(2, 6), vocab=vocab, seed=0)
    config = s2s.TransformerConfig(
        len(vocab), len(vocab), d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
        num_decoder_layers=1, dropout=0.0,
    )  # fmt: skip
    model = s2s.TransformerSeq2Seq(config)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = training.smoothed_seq2seq_loss(0.1)
    for epoch in range(10):
        for batch in batches(data, 64, shuffle=True, seed=epoch):
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
    test = make_split("copy", "test", n=40, lengths=range(2, 7), vocab=vocab, seed=0)
    return model.eval(), next(batches(test, 40))


def _sequence_logprob(model, batch, ids):
    """log p(ids | src) by teacher forcing, ids cut after their first <eos>."""
    tgt_in = torch.cat([torch.full_like(ids[:, :1], model.bos_id), ids[:, :-1]], dim=1)
    logp = model(batch.src, batch.src_len, tgt_in).log_softmax(-1)
    picked = logp.gather(-1, ids[..., None])[..., 0]  # (B, T)
    after_eos = (ids == model.eos_id).long().cumsum(1) - (ids == model.eos_id).long() > 0
    return picked.masked_fill(after_eos | (ids == model.pad_id), 0.0).sum(1)


def test_beam_size_one_equals_greedy(trained):
    model, batch = trained
    greedy = decoding.greedy_decode(model, batch, 10).ids
    for penalty in (0.0, 1.0):
        beam = decoding.beam_search(model, batch, 10, beam_size=1, length_penalty=penalty).ids
        assert torch.equal(beam, greedy)
    # and on an untrained model, whose outputs are long and random
    torch.manual_seed(1)
    fresh = s2s.TransformerSeq2Seq(s2s.TransformerConfig(9, 9, d_model=16, num_heads=2)).eval()
    assert torch.equal(
        decoding.beam_search(fresh, batch, 7, beam_size=1).ids,
        decoding.greedy_decode(fresh, batch, 7).ids,
    )


def test_greedy_output_format_and_score_by_teacher_forcing(trained):
    model, batch = trained
    greedy = decoding.greedy_decode(model, batch, 10).ids
    # Each greedy token is the argmax of the teacher-forced logits on its own prefix
    tgt_in = torch.cat([torch.full_like(greedy[:, :1], model.bos_id), greedy[:, :-1]], 1)
    argmax = model(batch.src, batch.src_len, tgt_in).argmax(-1)
    live = (greedy == model.eos_id).long().cumsum(1) - (greedy == model.eos_id).long() == 0
    assert torch.equal(greedy[live], argmax[live])
    assert (greedy[~live] == model.pad_id).all()


def test_beam_search_finds_at_least_the_greedy_probability(trained):
    model, batch = trained
    greedy = decoding.greedy_decode(model, batch, 10).ids
    out = decoding.beam_search(model, batch, 10, beam_size=4)
    beam, scores = out.ids, out.scores
    lp_greedy = _sequence_logprob(model, batch, greedy)
    lp_beam = _sequence_logprob(model, batch, beam)
    assert torch.allclose(scores, lp_beam, atol=1e-4)  # the returned score is log p(output)
    assert (lp_beam >= lp_greedy - 1e-4).all()


def test_beam_search_against_exhaustive_search():
    """With a beam as wide as every sequence, beam search is exact: compare with brute force."""
    torch.manual_seed(2)
    V, L = 5, 3  # tokens 3, 4 and <eos>; outputs of at most 3 tokens
    model = s2s.TransformerSeq2Seq(s2s.TransformerConfig(V, V, d_model=16, num_heads=2)).eval()
    src, src_len = torch.tensor([[3, 4, 4]]), torch.tensor([3])
    batch = SimpleNamespace(src=src, src_len=src_len)
    best, best_score = None, -math.inf
    for n in range(1, L + 1):
        for body in itertools.product([1, 3, 4], repeat=n - 1):  # any non-eos token, <bos> too
            ids = torch.tensor([[*body, 2] + [0] * (L - n)])
            s = _sequence_logprob(model, batch, ids).item()
            if s > best_score:
                best, best_score = ids, s
    out = decoding.beam_search(model, batch, L, beam_size=V**L)
    beam, score = out.ids, out.scores
    # sequences that never end are not in the brute force; here the best one ends
    assert math.isclose(score.item(), best_score, abs_tol=1e-4) or score.item() > best_score
    if math.isclose(score.item(), best_score, abs_tol=1e-4):
        n = int((best[0] == 2).nonzero()[0]) + 1
        assert torch.equal(beam[0, :n], best[0, :n])


def test_length_penalty_prefers_longer_outputs(trained):
    model, batch = trained
    short = decoding.beam_search(model, batch, 10, beam_size=4, length_penalty=0.0).ids
    long = decoding.beam_search(model, batch, 10, beam_size=4, length_penalty=5.0).ids

    def length(ids):
        return ((ids != model.pad_id) & (ids != model.eos_id)).sum(1)

    assert (length(long) >= length(short)).all()


def test_seq2seq_model_works_with_the_course_metrics(trained):
    from course_utils.metrics import accuracy_by_length
    from course_utils.training import seq2seq_loss

    model, batch = trained
    vocab = letter_vocab(6)
    test = make_split("copy", "test", n=30, lengths=range(2, 6), vocab=vocab, seed=1)
    acc = accuracy_by_length(model, test)
    assert set(acc) <= set(range(2, 6)) and all(0 <= a <= 1 for a in acc.values())
    assert seq2seq_loss(model, batch).item() > 0


def test_embeddings_are_scaled_and_shared_when_asked():
    config = s2s.TransformerConfig(11, 11, d_model=16, num_heads=2, share_embeddings=True)
    model = s2s.TransformerSeq2Seq(config)
    assert model.src_embed is model.tgt_embed and model.out.weight is model.src_embed.weight
    separate = s2s.TransformerSeq2Seq(s2s.TransformerConfig(11, 13, d_model=16, num_heads=2))
    assert separate.out.weight is separate.tgt_embed.weight
    assert count_parameters(model) == count_parameters(separate) - 13 * 16
    # The encoder input is embedding * sqrt(d_model) + position (dropout off in eval mode)
    model.eval()
    ids = torch.tensor([[3, 4, 5]])
    x = model._embed(model.src_embed, ids)
    expected = model.src_embed.weight[ids] * 4.0 + model.pe[:3]
    assert torch.allclose(x, expected)


# --------------------------------------------------------------------------------------
# Notebook 06's exercise checkers: a correct answer passes, a classic mistake fails
# --------------------------------------------------------------------------------------
def _ff(x, W1, b1, W2, b2):
    return torch.relu(x @ W1.T + b1) @ W2.T + b2


def _smoothed(logits, targets, pad_id, smoothing):
    V = logits.shape[-1]
    q = (1 - smoothing) * F.one_hot(targets, V).float() + smoothing / V
    per_token = -(q * logits.log_softmax(-1)).sum(-1)
    return per_token[targets != pad_id].mean()


def _noam(step, d_model, warmup, factor):
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize(
    ("checker", "right", "wrong"),
    [
        (nb06.check_feed_forward, _ff, lambda x, W1, b1, W2, b2: x @ W1.T @ W2.T + b2),
        (  # pads counted in the mean
            nb06.check_label_smoothing_loss,
            _smoothed,
            lambda lo, t, p, s: F.cross_entropy(lo.reshape(-1, lo.shape[-1]), t.reshape(-1)),
        ),
        (  # no warm-up: the decay alone
            nb06.check_noam_rate,
            _noam,
            lambda step, d, w, f: f * d**-0.5 * step**-0.5,
        ),
    ],
    ids=["feed_forward", "label_smoothing", "noam"],
)
def test_exercise_checkers_tell_right_from_wrong(checker, right, wrong, capsys):
    checker(right)
    with pytest.raises(AssertionError):
        checker(wrong)
    assert "FAILED" in capsys.readouterr().out


@pytest.mark.parametrize("share_embeddings", [False, True])
def test_a_seed_fixes_the_initial_weights(share_embeddings):
    # Built ten times from one seed, with other objects allocated in between (so the
    # modules land at other addresses), the model starts from the same weights every time.
    config = s2s.TransformerConfig(
        12,
        12,
        d_model=16,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=32,
        share_embeddings=share_embeddings,
    )
    first, keep = None, []
    for i in range(10):
        keep.append([object() for _ in range(i * 7)])
        torch.manual_seed(0)
        state = s2s.TransformerSeq2Seq(config).state_dict()
        if first is None:
            first = state
            continue
        for name, tensor in state.items():
            assert torch.equal(tensor, first[name]), f"build {i}: {name} differs"


def test_warmup_then_linear_rises_to_one_then_falls_to_zero_after_the_last_step():
    schedule = training.warmup_then_linear(4, 10)
    factors = [schedule(step) for step in range(1, 11)]
    # by the closed form: step / warmup while rising, (total - step + 1) / (total - warmup + 1)
    assert factors[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert factors[3:] == pytest.approx([(10 - s + 1) / 7 for s in range(4, 11)])
    assert max(factors) == factors[3] == 1.0 and factors[-1] > 0 and schedule(11) == 0
    for args, error in [((0, 10), ValueError), ((5, 4), ValueError), ((2.0, 10), TypeError)]:
        with pytest.raises(error, match="warmup_steps"):
            training.warmup_then_linear(*args)

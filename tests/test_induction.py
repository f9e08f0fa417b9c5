"""course_utils.induction against independent references: loops over rows and positions,
the model's forward pass rebuilt from torch ops, hand-built attention patterns and circuits."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils.circuits import ablate_heads, patch_heads, record_heads
from course_utils.data import split_of
from course_utils.induction import (
    Repeats,
    copying_scores,
    corrupt_segment,
    evaluate_induction,
    half_losses,
    half_masks,
    ov_circuits,
    path_patched_logits,
    prefix_matching_scores,
    repeated_sequences,
    train_induction,
)
from course_utils.toy_models import AttentionOnlyTransformer, ToyConfig


def small_model(seed: int = 0, vocab_size: int = 20, seq_len: int = 12) -> AttentionOnlyTransformer:
    torch.manual_seed(seed)
    config = ToyConfig(
        vocab_size=vocab_size,
        max_len=seq_len,
        d_model=16,
        num_heads=4,
        num_layers=2,
        num_outputs=vocab_size,
    )
    return AttentionOnlyTransformer(config).eval()


def data(batch_size: int, seq_len: int = 12, vocab_size: int = 20, seed: int = 0, **kw) -> Repeats:
    g = torch.Generator().manual_seed(seed)
    return repeated_sequences(batch_size, seq_len, vocab_size, generator=g, **kw)


# ---------------------------------------------------------------------------------------
# The data
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("split", ["train", "test"])
def test_second_half_repeats_the_first_and_nothing_else_repeats(seed, split):
    r = data(50, seq_len=14, vocab_size=16, seed=seed, min_half=3, split=split)
    assert r.ids.shape == (50, 14) and r.half.shape == (50,)
    assert r.ids.dtype == torch.long and 0 <= int(r.ids.min()) and int(r.ids.max()) < 16
    for row, n in zip(r.ids.tolist(), r.half.tolist(), strict=True):
        assert 3 <= n <= 7
        assert row[n : 2 * n] == row[:n]
        others = row[:n] + row[2 * n :]  # the segment and the filler: all distinct
        assert len(set(others)) == len(others) == 14 - n
        assert split_of(row) == split


def test_half_lengths_cover_their_range():
    r = data(400, seq_len=12, vocab_size=20, min_half=2)
    assert set(r.half.tolist()) == {2, 3, 4, 5, 6}


def test_seeds_reproduce_and_splits_never_share_a_row():
    a, b = data(64, seed=5), data(64, seed=5)
    assert torch.equal(a.ids, b.ids) and torch.equal(a.half, b.half)
    assert not torch.equal(a.ids, data(64, seed=6).ids)
    train = {tuple(r) for r in data(300, seed=1, split="train").ids.tolist()}
    test = {tuple(r) for r in data(300, seed=1, split="test").ids.tolist()}
    assert not train & test


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(batch_size=0), ValueError, "batch_size"),
        (dict(seq_len=2.5), TypeError, "seq_len"),
        (dict(min_half=1), ValueError, "min_half"),
        (dict(min_half=7), ValueError, "min_half"),
        (dict(vocab_size=5), ValueError, "vocab_size"),
        (dict(split="dev"), ValueError, "split"),
    ],
)
def test_generator_rejects_bad_input(kwargs, error, words):
    args = dict(batch_size=2, seq_len=12, vocab_size=20, min_half=4) | kwargs
    with pytest.raises(error, match=words):
        repeated_sequences(**args)


# ---------------------------------------------------------------------------------------
# Losses per half
# ---------------------------------------------------------------------------------------
def test_half_masks_equal_a_loop():
    half, L = torch.tensor([2, 3, 5, 6]), 12
    first, repeated = half_masks(half, L)
    for b, n in enumerate(half.tolist()):
        for p in range(L - 1):
            t = p + 1  # the target predicted at position p
            assert first[b, p] == (1 <= t <= n - 1)
            assert repeated[b, p] == (n + 1 <= t <= 2 * n - 1)


@pytest.mark.parametrize("seed", range(3))
def test_half_losses_equal_a_loop_over_targets(seed):
    r = data(6, seed=seed)
    logits = torch.randn(6, 12, 20, generator=torch.Generator().manual_seed(seed))
    first, repeated = half_losses(logits, r.ids, r.half)
    sums, counts = [0.0, 0.0], [0, 0]
    for b, n in enumerate(r.half.tolist()):
        for t in range(1, 12):
            nll = -torch.log_softmax(logits[b, t - 1], -1)[r.ids[b, t]].item()
            which = 0 if t < n else 1 if n < t < 2 * n else None
            if which is not None:
                sums[which] += nll
                counts[which] += 1
    assert math.isclose(first.item(), sums[0] / counts[0], rel_tol=1e-5)
    assert math.isclose(repeated.item(), sums[1] / counts[1], rel_tol=1e-5)


def test_half_losses_reject_bad_input():
    r = data(3)
    with pytest.raises(ValueError, match=r"logits .* and ids .* \(3, 12\)"):
        half_losses(torch.randn(3, 11, 20), r.ids, r.half)
    with pytest.raises(ValueError, match="half must be a"):
        half_losses(torch.randn(3, 12, 20), r.ids, r.half[:2])
    with pytest.raises(ValueError, match=r"half must lie in 2..L/2 = 2..6, got min 3 and max 7"):
        half_losses(torch.randn(3, 12, 20), r.ids, torch.tensor([3, 7, 4]))
    with pytest.raises(TypeError, match="logits must be a torch.Tensor"):
        half_losses([[0.0]], r.ids, r.half)


# ---------------------------------------------------------------------------------------
# Prefix matching and copying
# ---------------------------------------------------------------------------------------
def patterns(half: torch.Tensor, L: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Perfect induction and previous-token attention (B, 1, L, L) for rows of these halves."""
    B = len(half)
    induction, previous = torch.zeros(B, 1, L, L), torch.zeros(B, 1, L, L)
    previous[:, 0, 0, 0] = 1.0
    for i in range(1, L):
        previous[:, 0, i, i - 1] = 1.0
    for b, n in enumerate(half.tolist()):
        for i in range(L):
            key = i - n + 1 if n <= i < 2 * n else i  # elsewhere: attend to itself
            induction[b, 0, i, key] = 1.0
    return induction, previous


def test_prefix_matching_is_one_for_induction_and_zero_for_previous_token():
    half = torch.tensor([3, 4, 6, 5])
    induction, previous = patterns(half, 12)
    scores = prefix_matching_scores([induction, previous], half)
    assert scores.shape == (2, 1)
    assert scores[0, 0].item() == 1.0 and scores[1, 0].item() == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_prefix_matching_equals_a_loop(seed):
    g = torch.Generator().manual_seed(seed)
    half = torch.randint(2, 7, (5,), generator=g)
    A = [torch.rand(5, 3, 12, 12, generator=g).softmax(-1) for _ in range(2)]
    scores = prefix_matching_scores(A, half)
    for layer in range(2):
        for h in range(3):
            values = [
                A[layer][b, h, i, i - n + 1].item()
                for b, n in enumerate(half.tolist())
                for i in range(n, 2 * n)
            ]
            assert math.isclose(scores[layer, h].item(), sum(values) / len(values), rel_tol=1e-5)


def test_prefix_matching_rejects_bad_input():
    A = torch.rand(2, 1, 6, 6)
    with pytest.raises(ValueError, match=r"half must be a \(B,\) = \(2,\)"):
        prefix_matching_scores([A], torch.tensor([3]))
    with pytest.raises(ValueError, match="half must lie in"):
        prefix_matching_scores([A], torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="attentions must all be"):
        prefix_matching_scores([torch.rand(2, 1, 6, 5)], torch.tensor([3, 3]))


def test_copying_score_of_identity_permutation_and_a_loop():
    V = 7
    assert copying_scores(torch.eye(V)).item() == 1.0
    derangement = torch.eye(V)[torch.arange(V).roll(1)]  # token s -> s - 1, never itself
    assert copying_scores(derangement).item() == 0.0
    ov = torch.randn(2, 3, V, V, generator=torch.Generator().manual_seed(0))
    ov[0, 0] += 3 * torch.eye(V)  # a mostly copying head
    scores = copying_scores(ov)
    assert scores.shape == (2, 3)
    for i in range(2):
        for h in range(3):
            wins = sum(int(ov[i, h, s].argmax()) == s for s in range(V))
            assert scores[i, h].item() == pytest.approx(wins / V)


def test_copying_score_rejects_bad_input():
    with pytest.raises(ValueError, match=r"ov must be .* \(3, 4\)"):
        copying_scores(torch.rand(3, 4))
    with pytest.raises(TypeError, match="ov must be a torch.Tensor"):
        copying_scores([[1.0]])


@pytest.mark.parametrize("seed", range(2))
def test_ov_circuit_equals_the_head_run_on_one_token(seed):
    """With one token, a head attends only to it: its output, read out, is the OV row."""
    model = small_model(seed)
    with torch.no_grad():  # biases would add the same vector for every token: drop them
        for mha in model.layers:
            mha.v_proj.bias.zero_()
            mha.out_proj.bias.zero_()
        model.readout.bias.zero_()
    ov = ov_circuits(model)
    assert ov.shape == (2, 4, 20, 20)
    tokens = model.token_embedding.weight[:, None, :]  # (V, 1, E): V one-token sequences
    for layer, mha in enumerate(model.layers):
        for h in range(4):
            others = [(layer, k) for k in range(4) if k != h]
            with torch.no_grad(), ablate_heads(mha, [(0, k) for _, k in others]):
                out, _ = mha(tokens, tokens, tokens)  # (V, 1, E)
            torch.testing.assert_close(ov[layer, h], model.readout(out[:, 0]).detach())


def test_ov_circuits_reject_other_models():
    with pytest.raises(TypeError, match="AttentionOnlyTransformer"):
        ov_circuits(torch.nn.Linear(2, 2))


# ---------------------------------------------------------------------------------------
# The model: attention from torch ops, ablation of a silent head
# ---------------------------------------------------------------------------------------
def reference_forward(model: AttentionOnlyTransformer, ids: torch.Tensor):
    """The model's forward pass written with torch ops only."""
    B, L = ids.shape
    x = F.embedding(ids, model.token_embedding.weight) + model.position.weight[:L]
    blocked = torch.ones(L, L, dtype=torch.bool).triu(1)
    weights = []
    for mha in model.layers:
        H, D = mha.num_heads, mha.head_dim
        q, k, v = (
            F.linear(x, p.weight, p.bias).view(B, L, H, D).transpose(1, 2)
            for p in (mha.q_proj, mha.k_proj, mha.v_proj)
        )
        scores = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(blocked, float("-inf"))
        w = scores.softmax(-1)
        heads = (w @ v).transpose(1, 2).reshape(B, L, H * D)
        x = x + F.linear(heads, mha.out_proj.weight, mha.out_proj.bias)
        weights.append(w)
    return F.linear(x, model.readout.weight, model.readout.bias), weights


@pytest.mark.parametrize("seed", range(3))
def test_model_attention_is_causal_and_equals_torch_ops(seed):
    model, r = small_model(seed), data(4, seed=seed)
    with torch.no_grad():
        logits, weights = model(r.ids)
        ref_logits, ref_weights = reference_forward(model, r.ids)
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=1e-5)
    for w, ref in zip(weights, ref_weights, strict=True):
        assert w.shape == (4, 4, 12, 12)
        torch.testing.assert_close(w, ref, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(w.sum(-1), torch.ones(4, 4, 12))
        assert (w.triu(1) == 0).all()


def test_ablating_a_head_that_writes_nothing_changes_nothing():
    model, r = small_model(1), data(4)
    with torch.no_grad():
        model.layers[1].out_proj.weight[:, 4:8] = 0.0  # head 1 of layer 1 writes nothing
        before, _ = model(r.ids)
        with ablate_heads(model, [(1, 1)]):
            after, _ = model(r.ids)
        with ablate_heads(model, [(1, 2)]):
            other, _ = model(r.ids)
    torch.testing.assert_close(after, before, atol=0.0, rtol=0.0)
    assert not torch.allclose(other, before)  # a head that writes something does matter


# ---------------------------------------------------------------------------------------
# Interventions: the corrupted input, layer 0 patched into one path of layer 1
# ---------------------------------------------------------------------------------------
def test_corrupt_segment_replaces_only_the_first_segment_with_fresh_tokens():
    r = data(64, seed=3)
    c = corrupt_segment(r, 20, torch.Generator().manual_seed(0))
    assert torch.equal(c.half, r.half)
    for b in range(64):
        n = int(r.half[b])
        assert torch.equal(c.ids[b, n:], r.ids[b, n:])  # the repeat and the filler stay
        fresh = c.ids[b, :n].tolist()
        assert len(set(fresh)) == n and not set(fresh) & set(r.ids[b, n:].tolist())
    with pytest.raises(ValueError, match="unused"):
        corrupt_segment(r, 10)  # a 12-token row with 20 ids leaves too few of 10 unused
    with pytest.raises(TypeError, match="Repeats"):
        corrupt_segment(r.ids, 20)


@pytest.mark.parametrize("seed", range(2))
def test_path_patching_every_path_equals_patching_the_head(seed):
    model, r = small_model(seed), data(6, seed=seed)
    with torch.no_grad():
        with record_heads(model) as outputs:
            model(r.ids)
        mean = {h: outputs[0][:, h].mean(0) for h in (0, 2)}  # (L, D): mean per position
        with patch_heads(model, {(0, h): v for h, v in mean.items()}):
            expected, _ = model(r.ids)
        every = path_patched_logits(model, r.ids, mean, ("query", "key", "value", "direct"))
        torch.testing.assert_close(every, expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(path_patched_logits(model, r.ids, {}, ("key",)), model(r.ids)[0])


def test_path_patching_the_keys_changes_only_layer_1_keys():
    model, r = small_model(4), data(5, seed=4)
    with torch.no_grad():
        x0 = model.embed(r.ids)
        first, second = model.layers
        real = x0 + first(x0, x0, x0, is_causal=True)[0]
        with ablate_heads(model, [(0, 1)]):
            patched = x0 + first(x0, x0, x0, is_causal=True)[0]
        expected = model.readout(real + second(real, patched, real, is_causal=True)[0])
        got = path_patched_logits(model, r.ids, {1: torch.zeros(4)}, ("key",))
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="paths"):
        path_patched_logits(model, r.ids, {1: torch.zeros(4)}, ("keys",))
    with pytest.raises(ValueError, match="num_layers=2"):
        path_patched_logits(AttentionOnlyTransformer(ToyConfig(20, 12, 20)), r.ids, {}, ("key",))


# ---------------------------------------------------------------------------------------
# Training and evaluation
# ---------------------------------------------------------------------------------------
def test_training_records_its_history_and_is_seeded():
    histories = []
    for _ in range(2):
        model = small_model(3)
        histories.append(train_induction(model, 12, batch_size=8, seed=3, eval_every=5, eval_size=16, progress=False))  # fmt: skip
    h = histories[0]
    assert repr(h) == repr(histories[1])  # equal, NaN at step 0 included
    assert h["step"] == [0, 5, 10, 12]
    assert set(h) == {
        "step", "train_loss", "first_half_loss", "repeated_half_loss",
        "induction_score", "previous_token_score",
    }  # fmt: skip
    assert all(len(v) == 4 for v in h.values()) and math.isnan(h["train_loss"][0])
    test = repeated_sequences(16, 12, 20, 4, "test", torch.Generator().manual_seed(3))
    final = evaluate_induction(model, test)
    assert final["repeated_half_loss"] == pytest.approx(h["repeated_half_loss"][-1], rel=1e-6)


def test_training_rejects_bad_input():
    with pytest.raises(TypeError, match="AttentionOnlyTransformer"):
        train_induction(torch.nn.Linear(2, 2), 5)
    with pytest.raises(ValueError, match="steps must be positive"):
        train_induction(small_model(), 0)

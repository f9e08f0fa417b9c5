"""Listen, Attend and Spell: the pyramid against a loop, padding that changes nothing, masked
attention, teacher forcing equal to step-by-step decoding, the application protocol; CER and
WER against an edit distance; the monotonicity measure and its chance level by brute force;
the progress measure against scipy's Spearman correlation in a loop and constructed cases."""

import itertools
import random
from functools import cache

import pytest
import torch
from scipy import stats

from course_utils import alignment, metrics
from course_utils.apps import speech
from course_utils.apps.audio import SpeechBatch, load_speech
from course_utils.decoding import beam_search, greedy_decode


def small(attention=True, seed=0):
    torch.manual_seed(seed)
    return speech.build_model(attention, listener_dim=8, rnn_dim=12, attn_dim=6).eval()


@pytest.fixture(scope="module")
def val():
    return load_speech("val")


@pytest.mark.parametrize("lengths", [[5, 3, 1], [4, 4, 2], [7, 6, 5]])
def test_pyramid_reduce_equals_a_loop_and_halves_lengths_rounding_up(lengths):
    g = torch.Generator().manual_seed(len(lengths))
    F = max(lengths)
    x = torch.randn(3, F, 2, generator=g)
    y, n = speech.pyramid_reduce(x, torch.tensor(lengths))
    assert n.tolist() == [(k + 1) // 2 for k in lengths]
    assert y.shape == (3, (F + 1) // 2, 4)
    for b, k in enumerate(lengths):
        real = x[b, :k]
        for i in range((F + 1) // 2):
            first = real[2 * i] if 2 * i < k else torch.zeros(2)
            second = real[2 * i + 1] if 2 * i + 1 < k else torch.zeros(2)
            torch.testing.assert_close(y[b, i], torch.cat([first, second]))


def test_pyramid_reduce_rejects_bad_lengths():
    with pytest.raises(ValueError, match=r"lengths values must lie in 1\.\.4, got min 1 and max 5"):
        speech.pyramid_reduce(torch.zeros(2, 4, 3), torch.tensor([5, 1]))
    with pytest.raises(ValueError, match="x must have 3 dims"):
        speech.pyramid_reduce(torch.zeros(4, 3), torch.tensor([4]))


def test_listener_lengths_and_padding_change_nothing(val):
    model = small()
    batch = val.batch([0, 1, 2])
    states, lengths = model.listener(batch.feats, batch.feat_len)
    assert lengths.tolist() == [-(-int(n) // 8) for n in batch.feat_len]  # ceil(F / 2^3)
    for b in range(3):
        alone = val.batch([b])
        s, n = model.listener(alone.feats, alone.feat_len)
        torch.testing.assert_close(states[b, : int(n)], s[0], atol=1e-5, rtol=1e-4)
        assert (states[b, int(n) :] == 0).all()


def test_summary_reads_the_last_forward_and_the_first_backward_state():
    states = torch.arange(2 * 4 * 6.0).reshape(2, 4, 6)
    out = speech.summary(states, torch.tensor([2, 4]))
    torch.testing.assert_close(out[0], torch.cat([states[0, 1, :3], states[0, 0, 3:]]))
    torch.testing.assert_close(out[1], torch.cat([states[1, 3, :3], states[1, 0, 3:]]))


def test_attention_masks_padded_frames_and_padding_does_not_change_decoding(val):
    model = small()
    batch = val.batch([0, 1, 2, 3])
    decoded = greedy_decode(model, batch, max_steps=6)
    frames = (batch.feat_len + 7) // 8
    for b in range(4):
        assert (decoded.weights[b, :, int(frames[b]) :] == 0).all()
        alone = greedy_decode(model, val.batch([b]), max_steps=6)
        steps = alone.ids.shape[1]
        assert decoded.ids[b, :steps].tolist() == alone.ids[0].tolist()
        torch.testing.assert_close(
            decoded.weights[b, :steps, : int(frames[b])], alone.weights[0], atol=1e-5, rtol=1e-4
        )


@pytest.mark.parametrize("attention", [True, False])
def test_teacher_forcing_equals_step_by_step_and_beam_one_equals_greedy(val, attention):
    model = small(attention)
    batch = val.batch([4, 5])
    log_probs, weights = model.forward_with_attention(batch)
    state = model.start(batch)
    for t in range(batch.tgt_in.shape[1]):
        step, state, w = model.step(batch.tgt_in[:, t], state)
        torch.testing.assert_close(log_probs[:, t], step)
        if attention:
            torch.testing.assert_close(weights[:, t], w)
    assert (weights is None) != attention
    greedy = greedy_decode(model, batch, max_steps=8)
    beam = beam_search(model, batch, max_steps=8, beam_size=1)
    assert greedy.ids.tolist() == beam.ids.tolist()


def test_the_application_protocol(val):
    assert speech.build_model(True).config.attention
    assert not speech.build_model(False).config.attention
    with pytest.raises(TypeError, match="attention must be a bool"):
        speech.build_model("yes")
    with pytest.raises(TypeError, match="data must be SpeechData"):
        speech.evaluate(small(), [1, 2])
    with pytest.raises(ValueError, match="listener_dim"):
        speech.build_model(True, listener_dim=0)
    assert set(speech.evaluate(small(False), val)) == {"cer", "wer"}
    mute = small()  # an untrained speller can stop at once on every clip
    with torch.no_grad():
        mute.out.bias.fill_(-1e4)
        mute.out.bias[mute.eos_id] = 1e4
    scores = speech.evaluate(mute, val)
    assert scores["cer"] == pytest.approx(1.0) and scores["progress"] == 0.0
    assert scores["monotonic"] != scores["monotonic"] and not scores["chance"] >= 0  # NaN
    loss = speech.speech_loss(small(), val.batch([0, 1]))
    assert loss.item() == pytest.approx(torch.log(torch.tensor(30.0)).item(), rel=0.2)
    assert isinstance(val.batch([0]), SpeechBatch)


# ---------------------------------------------------------------------------------------
# CER and WER against an edit distance; monotonicity against brute force
# ---------------------------------------------------------------------------------------
def levenshtein(a, b):
    """The edit distance by plain recursion over both ends (slow, obviously right)."""

    @cache
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))


def test_edit_distance_hand_worked_and_random():
    assert metrics.edit_distance("kitten", "sitting") == 3
    assert metrics.edit_distance("", "abc") == 3
    assert metrics.edit_distance(["go", "left"], ["go", "right"]) == 1
    rng = random.Random(0)
    for _ in range(200):
        a = "".join(rng.choice("ab ") for _ in range(rng.randint(0, 8)))
        b = "".join(rng.choice("ab ") for _ in range(rng.randint(0, 8)))
        assert metrics.edit_distance(a, b) == levenshtein(a, b)


def test_error_rates_equal_summed_edit_distances():
    hyps, refs = ["tow five", "go lef", ""], ["two five", "go left", "nine"]
    assert metrics.error_rate(hyps, refs) == pytest.approx((2 + 1 + 4) / (8 + 7 + 4))
    assert metrics.error_rate(hyps, refs, "word") == pytest.approx((1 + 1 + 1) / (2 + 2 + 1))
    rng = random.Random(1)
    words = ["one", "two", "nine", "go", "left"]
    for _ in range(30):
        refs = [" ".join(rng.choices(words, k=rng.randint(1, 4))) for _ in range(5)]
        hyps = [" ".join(rng.choices(words, k=rng.randint(0, 4))) for _ in range(5)]
        chars = sum(levenshtein(h, r) for h, r in zip(hyps, refs, strict=True))
        tokens = sum(
            levenshtein(tuple(h.split()), tuple(r.split())) for h, r in zip(hyps, refs, strict=True)
        )
        assert metrics.error_rate(hyps, refs) == pytest.approx(chars / sum(map(len, refs)))
        assert metrics.error_rate(hyps, refs, "word") == pytest.approx(
            tokens / sum(len(r.split()) for r in refs)
        )


def test_error_rate_rejects_bad_input():
    with pytest.raises(ValueError, match="one entry per utterance"):
        metrics.error_rate(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="unit"):
        metrics.error_rate(["a"], ["a"], "phone")
    with pytest.raises(ValueError, match="blank"):
        metrics.error_rate(["a"], [" "])
    with pytest.raises(TypeError, match="hypothesis"):
        metrics.edit_distance(3, "a")


def test_monotonic_share_equals_a_loop():
    g = torch.Generator().manual_seed(0)
    weights = torch.rand(4, 6, 5, generator=g)
    steps = torch.tensor([6, 3, 1, 4])
    forward = total = 0
    for b in range(4):
        for t in range(1, int(steps[b])):
            forward += int(weights[b, t].argmax() >= weights[b, t - 1].argmax())
            total += 1
    assert alignment.monotonic_share(weights, steps) == pytest.approx(forward / total)
    diagonal = torch.eye(5).unsqueeze(0)
    assert alignment.monotonic_share(diagonal, torch.tensor([5])) == 1.0
    assert alignment.monotonic_share(diagonal.flip(1), torch.tensor([5])) == 0.0


@pytest.mark.parametrize("frames", [1, 2, 5])
def test_monotonic_chance_equals_enumeration_of_random_peaks(frames):
    pairs = list(itertools.product(range(frames), repeat=2))
    expected = sum(later >= earlier for earlier, later in pairs) / len(pairs)
    assert alignment.monotonic_chance(torch.tensor([frames]), torch.tensor([3])) == pytest.approx(
        expected
    )
    mixed = alignment.monotonic_chance(torch.tensor([2, 4]), torch.tensor([2, 4]))
    assert mixed == pytest.approx((1 * 3 / 4 + 3 * 5 / 8) / 4)  # steps - 1 pairs each


def one_hot_peaks(peaks, frames):
    """Attention (B, T, S) with all its weight on the given peak frames (B, T)."""
    return torch.nn.functional.one_hot(torch.tensor(peaks), frames).float()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_peak_progress_equals_scipy_spearman_in_a_loop(seed):
    g = torch.Generator().manual_seed(seed)
    B, T, S = 6, 9, 4  # few frames: many tied peaks
    weights = torch.rand(B, T, S, generator=g)
    steps = torch.tensor([9, 2, 5, 1, 7, 3])
    weights[4, :7] = one_hot_peaks([[1] * 7], S)[0]  # a frozen example among them
    rhos = alignment.peak_progress_per_example(weights, steps)
    expected = []
    for b in range(B):
        n = int(steps[b])
        peaks = weights[b, :n].argmax(-1).tolist()
        if n < 2:
            assert torch.isnan(rhos[b])
            continue
        rho = 0.0 if len(set(peaks)) == 1 else stats.spearmanr(range(n), peaks).statistic
        assert rhos[b].item() == pytest.approx(rho, abs=1e-12)
        expected.append(rho)
    assert alignment.peak_progress(weights, steps) == pytest.approx(sum(expected) / len(expected))


def test_peak_progress_on_constructed_alignments():
    steps = torch.tensor([6])
    diagonal = one_hot_peaks([[0, 1, 2, 3, 4, 5]], 6)
    staircase = one_hot_peaks([[0, 0, 1, 1, 2, 2]], 3)  # two steps per frame, never back
    frozen = one_hot_peaks([[2] * 6], 6)
    reversed_ = diagonal.flip(1)
    assert alignment.peak_progress(diagonal, steps) == pytest.approx(1.0)
    assert alignment.peak_progress(staircase, steps) == pytest.approx(
        stats.spearmanr(range(6), [0, 0, 1, 1, 2, 2]).statistic
    )
    assert alignment.peak_progress(staircase, steps) > 0.9
    assert alignment.peak_progress(frozen, steps) == 0.0
    assert alignment.peak_progress(reversed_, steps) == pytest.approx(-1.0)
    # the weakness of the monotonic share: frozen attention is "perfectly monotonic"
    assert alignment.monotonic_share(frozen, steps) == 1.0
    # padding rows after an example's last step change nothing
    padded = torch.cat([diagonal, one_hot_peaks([[0, 0, 0]], 6)], dim=1)  # (1, 9, 6)
    assert alignment.peak_progress(padded, steps) == pytest.approx(1.0)


def test_peak_progress_of_random_peaks_is_zero_on_average():
    g = torch.Generator().manual_seed(0)
    weights = torch.rand(4000, 12, 10, generator=g)
    rho = alignment.peak_progress(weights, torch.full((4000,), 12))
    assert abs(rho) < 0.02  # the mean of 4000 draws with standard deviation about 0.3


def test_monotonic_measures_reject_bad_input():
    with pytest.raises(ValueError, match=r"steps values must lie in 0\.\.3"):
        alignment.monotonic_share(torch.rand(2, 3, 4), torch.tensor([3, 5]))
    with pytest.raises(ValueError, match="no example has two"):
        alignment.monotonic_share(torch.rand(2, 3, 4), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="frames >= 1"):
        alignment.monotonic_chance(torch.tensor([0]), torch.tensor([3]))
    with pytest.raises(ValueError, match=r"steps values must lie in 0\.\.3"):
        alignment.peak_progress(torch.rand(2, 3, 4), torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="no example has two"):
        alignment.peak_progress(torch.rand(2, 3, 4), torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="weights must have 3 dims"):
        alignment.peak_progress(torch.rand(3, 4), torch.tensor([3]))
    with pytest.raises(TypeError, match="steps must be a torch.Tensor"):
        alignment.peak_progress(torch.rand(1, 3, 4), [3])

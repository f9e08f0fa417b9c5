"""The pointer-generator's final distribution, coverage, the summariser model and its metrics."""

import random

import numpy as np
import pytest
import torch
from rouge_score import rouge_scorer

from course_utils import metrics
from course_utils.apps import news
from course_utils.apps import summarisation as sm
from course_utils.apps.summary_trace import trace
from course_utils.decoding import beam_search, greedy_decode


def _random_inputs(seed, B=3, V=7, S=5):
    g = torch.Generator().manual_seed(seed)
    p_vocab = torch.softmax(torch.randn(B, V, generator=g), -1)
    attention = torch.softmax(torch.randn(B, S, generator=g), -1)
    src_ext = torch.randint(0, V + S, (B, S), generator=g)
    src_ext[:, 1] = src_ext[:, 3]  # a repeated source word in every row
    p_gen = torch.rand(B, generator=g)
    return p_vocab, attention, src_ext, p_gen


@pytest.mark.parametrize("seed", range(4))
def test_final_distribution_is_a_distribution_and_matches_a_loop(seed):
    p_vocab, attention, src_ext, p_gen = _random_inputs(seed)
    out = sm.final_distribution(p_vocab, attention, src_ext, p_gen)
    B, V = p_vocab.shape
    S = attention.shape[1]
    assert out.shape == (B, V + S) and (out >= 0).all()
    assert torch.allclose(out.sum(-1), torch.ones(B), atol=1e-6)
    expected = torch.zeros(B, V + S)
    for b in range(B):
        for w in range(V + S):
            copy = sum(float(attention[b, i]) for i in range(S) if int(src_ext[b, i]) == w)
            gen = float(p_vocab[b, w]) if w < V else 0.0
            expected[b, w] = p_gen[b] * gen + (1 - p_gen[b]) * copy
    assert torch.allclose(out, expected, atol=1e-6)


def test_final_distribution_at_the_extremes_of_p_gen():
    p_vocab, attention, src_ext, _ = _random_inputs(7)
    src_ext[0] = torch.tensor([7, 9, 8, 9, 10])  # one repeated word, the others distinct
    B, V = p_vocab.shape
    S = attention.shape[1]
    generate = sm.final_distribution(p_vocab, attention, src_ext, torch.ones(B))
    assert torch.equal(generate, torch.cat([p_vocab, torch.zeros(B, S)], -1))
    copy = sm.final_distribution(p_vocab, attention, src_ext, torch.zeros(B, 1))
    assert torch.allclose(copy, torch.zeros(B, V + S).scatter_add(1, src_ext, attention))
    # the repeated word collects both positions' weights
    assert torch.allclose(copy[0, src_ext[0, 1]], attention[0, 1] + attention[0, 3])


def test_final_distribution_rejects_bad_input():
    p_vocab, attention, src_ext, p_gen = _random_inputs(0)
    with pytest.raises(ValueError, match="must agree"):
        sm.final_distribution(p_vocab, attention[:2], src_ext, p_gen)
    with pytest.raises(ValueError, match="p_gen must have shape"):
        sm.final_distribution(p_vocab, attention, src_ext, p_gen[:2])
    with pytest.raises(ValueError, match="src_ext must hold int64 ids in 0..11"):
        sm.final_distribution(p_vocab, attention, src_ext + 12, p_gen)
    with pytest.raises(TypeError):
        sm.final_distribution(p_vocab.tolist(), attention, src_ext, p_gen)


def test_coverage_loss_by_hand_and_as_a_running_sum():
    a = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.2, 0.6]])
    c = torch.cumsum(a, 0) - a  # coverage before each step
    # step 0: nothing covered; step 1: min(.5, 1) + min(.5, 0); step 2: .2 + .2 + 0
    assert torch.allclose(sm.coverage_loss(a, c), torch.tensor([0.0, 0.5, 0.4]))
    with pytest.raises(ValueError, match="same shape"):
        sm.coverage_loss(a, c[:, :2])


@pytest.fixture(scope="module")
def data():
    vocab = news.news_vocab(news.make_reports(300, seed=0))
    return news.NewsData(news.make_reports(6, split="test", seed=2), vocab, split="test")


def _model(data, seed=0, **switches):
    torch.manual_seed(seed)
    return sm.build_model(True, data.vocab, emb_dim=8, rnn_dim=12, attn_dim=10, **switches)


@pytest.mark.parametrize("switches", [dict(pointer=False), dict(), dict(coverage=True)])
def test_teacher_forcing_equals_the_decoding_steps(data, switches):
    model = _model(data, **switches).eval()
    if switches.get("coverage"):
        torch.nn.init.normal_(model.w_c.weight)
    batch = news.make_news_batch(data.encoded[:3], data.vocab)
    log_probs, weights, p_gen, cov = model.forward_with_attention(batch)
    state = model.start(batch)
    coverage = torch.zeros_like(weights[:, 0])
    for t in range(batch.tgt_in.shape[1]):
        step_log_probs, state, step_weights = model.step(batch.tgt_in[:, t], state)
        assert torch.allclose(step_log_probs, log_probs[:, t], atol=1e-6)
        assert torch.allclose(step_weights, weights[:, t])
        assert torch.allclose(cov[:, t], sm.coverage_loss(weights[:, t], coverage), atol=1e-6)
        coverage = coverage + weights[:, t]
        assert torch.allclose(state[-1], coverage, atol=1e-6)  # coverage: the running sum
    width = len(data.vocab) + (batch.src.shape[1] if model.config.pointer else 0)
    assert log_probs.shape[-1] == width
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(log_probs.shape[:2]), atol=1e-5)
    assert (p_gen is None) == (not model.config.pointer)
    if p_gen is not None:
        assert ((p_gen > 0) & (p_gen < 1)).all()


def test_encoder_equals_a_packed_bidirectional_gru(data):
    # The two one-way GRUs over the padded batch give what torch's bidirectional GRU gives
    # over the packed batch, with the same weights
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    model = _model(data)
    batch = news.make_news_batch(data.encoded, data.vocab)
    assert len(set(batch.src_len.tolist())) > 1  # documents of different lengths: padding
    gru = torch.nn.GRU(8, 12, batch_first=True, bidirectional=True)
    with torch.no_grad():
        for name, p in model.encoder_forward.named_parameters():
            getattr(gru, name).copy_(p)
        for name, p in model.encoder_backward.named_parameters():
            getattr(gru, name + "_reverse").copy_(p)
        x = model.embedding(batch.src)
        packed = pack_padded_sequence(x, batch.src_len, batch_first=True, enforce_sorted=False)
        out, final = gru(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=batch.src.shape[1])
        hidden = torch.tanh(model.bridge(torch.cat([final[0], final[1]], dim=-1)))
        ours = model.encode(batch.src, batch.src_len)
    assert torch.allclose(ours[0], states, atol=1e-6)
    assert torch.allclose(ours[1], hidden, atol=1e-6)
    assert torch.equal(ours[3], batch.src_len.unsqueeze(1) > torch.arange(batch.src.shape[1]))


def test_coverage_starts_switched_off(data):
    pointer, covered = _model(data), _model(data, coverage=True)
    covered.load_state_dict(pointer.state_dict(), strict=False)
    batch = news.make_news_batch(data.encoded, data.vocab)
    assert torch.allclose(pointer(batch), covered(batch))


def test_loss_is_the_mean_nll_of_the_extended_targets(data):
    model = _model(data)
    batch = news.make_news_batch(data.encoded, data.vocab)
    with torch.no_grad():
        log_probs, _, _, cov = model.forward_with_attention(batch)
    picked, n = 0.0, 0
    for b in range(len(data)):
        for t, w in enumerate(batch.tgt_out_ext[b].tolist()):
            if w != data.vocab.pad_id:
                picked, n = picked - float(log_probs[b, t, w]), n + 1
    assert sm.summary_loss(model, batch).item() == pytest.approx(picked / n, rel=1e-5)
    real = batch.tgt_out != data.vocab.pad_id
    with_cov = sm.summary_loss(model, batch, coverage_weight=2.0).item()
    assert with_cov == pytest.approx(picked / n + 2 * float((cov * real).sum()) / n, rel=1e-5)
    assert any(w >= len(data.vocab) for row in batch.tgt_out_ext.tolist() for w in row)


def test_beam_of_one_is_greedy_and_copies_decode_to_words(data):
    model = _model(data, seed=3)
    batch = news.make_news_batch(data.encoded, data.vocab)
    greedy = greedy_decode(model, batch, max_steps=12)
    beam = beam_search(model, batch, max_steps=12, beam_size=1)
    T = beam.ids.shape[1]
    assert torch.equal(greedy.ids[:, :T], beam.ids)
    assert torch.allclose(greedy.scores, beam.scores, atol=1e-5)
    V = len(data.vocab)
    assert news.words([V + 1, data.vocab.eos_id], data.vocab, ["x", "Zed"]) == ["Zed"]


def test_trace_follows_greedy_decoding(data):
    model = _model(data, seed=1, coverage=True)
    torch.nn.init.normal_(model.w_c.weight)
    tr = trace(model, data, 2, max_steps=10)
    greedy = sm.summarise(model, data, max_steps=10)[2]
    assert [w for w in tr.words if w != "<eos>"] == greedy
    T = len(tr.words)
    assert tr.weights.shape == (T, len(data.reports[2].document)) and tr.p_gen.shape == (T,)
    assert torch.allclose(tr.coverage[1:], torch.cumsum(tr.weights, 0), atol=1e-5)
    for word, copied in zip(tr.words, tr.copied, strict=True):
        if word not in data.vocab.stoi:
            assert copied  # a rare word can only have been copied


def test_no_attention_model_and_bad_configs(data):
    model = sm.build_model(False, data.vocab, emb_dim=8, rnn_dim=12)
    batch = news.make_news_batch(data.encoded[:2], data.vocab)
    log_probs, weights, p_gen, _ = model.forward_with_attention(batch)
    assert weights is None and p_gen is None and log_probs.shape[-1] == len(data.vocab)
    assert greedy_decode(model, batch, max_steps=5).weights is None
    with pytest.raises(ValueError, match="need attention"):
        sm.build_model(False, data.vocab, pointer=True)
    with pytest.raises(TypeError, match="attention must be a bool"):
        sm.build_model(1, data.vocab)
    with pytest.raises(ValueError, match="unk_id"):
        sm.SummariserConfig(src_vocab_size=9, tgt_vocab_size=9, unk_id=9)
    with pytest.raises(ValueError, match="trace|index"):
        trace(model, data, len(data))


def test_evaluate_reports_every_measure(data):
    scores = sm.evaluate(_model(data), data, max_steps=6)
    assert set(scores) == {
        "rouge1",
        "rouge2",
        "rougeL",
        "oov_recall",
        "repeated_trigrams",
        "extra_repeats",
    }
    assert all(0 <= v <= 100 for v in scores.values())


def test_score_of_the_summaries_is_evaluate(data):
    model = _model(data)
    outputs = sm.summarise(model, data, max_steps=6)
    assert sm.score(outputs, data) == sm.evaluate(model, data, max_steps=6)
    with pytest.raises(ValueError, match="one summary per report"):
        sm.score(outputs[:-1], data)
    with pytest.raises(TypeError, match="data must be NewsData"):
        sm.score(outputs, data.reports)


# --- metrics ---------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_rouge_equals_rouge_score_called_directly(seed):
    rng = random.Random(seed)
    words = "the mayor said Ada won in Rome on monday 42 residents left".split()
    refs = [" ".join(rng.choices(words, k=rng.randint(4, 12))) for _ in range(20)]
    hyps = [" ".join(rng.choices(r.split() + words, k=rng.randint(3, 12))) for r in refs]
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    direct = [scorer.score(r, h) for h, r in zip(hyps, refs, strict=True)]
    ours = metrics.rouge(hyps, refs)
    for name in ("rouge1", "rouge2", "rougeL"):
        assert ours[name] == pytest.approx(100 * sum(d[name].fmeasure for d in direct) / 20)


def test_oov_recall_and_repeats_by_hand():
    vocab = {"won", "in", "."}
    outs = [["Ada", "won", "in", "Rome", "Rome"], ["Bo", "won"], ["won"]]
    refs = [["Ada", "won", "in", "Oslo"], ["Bo", "won", "in", "Bo"], ["won", "."]]
    # rare reference words: {Ada, Oslo}, {Bo}, {}: Ada and Bo found -> 2 of 3
    assert metrics.oov_recall(outs, refs, vocab) == pytest.approx(2 / 3)
    assert metrics.oov_recall([["x"]], [["won"]], vocab) == 0.0
    same = ["a", "b", "c", "a", "b", "c", "a", "b", "c"]  # 7 trigrams: abc bca cab abc bca cab abc
    assert metrics.repeated_trigram_rate([same]) == pytest.approx(4 / 7)
    once = ["a", "b", "c", "x", "a", "b", "c"]  # the reference says "a b c" twice: free
    assert metrics.repeated_trigram_rate([same], [once]) == pytest.approx(3 / 7)
    assert metrics.repeated_trigram_rate([["a", "b"]]) == 0.0
    assert metrics.repeated_trigrams([same, ["a", "b"], same], [once, [], same]) == [3, 0, 0]


@pytest.mark.parametrize("seed", range(3))
def test_repeated_trigrams_count_what_the_rate_shares(seed):
    rng = random.Random(seed)
    outs = [rng.choices("abc", k=rng.randint(0, 12)) for _ in range(30)]
    refs = [rng.choices("abc", k=rng.randint(0, 12)) for _ in range(30)]
    for references in (None, refs):
        counts = metrics.repeated_trigrams(outs, references)
        trigrams = sum(max(0, len(o) - 2) for o in outs)
        assert metrics.repeated_trigram_rate(outs, references) == pytest.approx(
            sum(counts) / trigrams
        )
    # a loop over the trigrams: a repeat is one more occurrence than the reference allows
    for out, ref, count in zip(outs, refs, metrics.repeated_trigrams(outs, refs), strict=True):
        seen, allowed, expected = [], [tuple(ref[i : i + 3]) for i in range(len(ref) - 2)], 0
        for i in range(len(out) - 2):
            g = tuple(out[i : i + 3])
            seen.append(g)
            expected += seen.count(g) > max(1, allowed.count(g))
        assert count == expected


def test_summary_metrics_reject_bad_input():
    with pytest.raises(ValueError, match="one entry per summary"):
        metrics.rouge(["a"], ["a", "b"])
    with pytest.raises(TypeError, match="list of strings"):
        metrics.rouge("a b", "a b")
    with pytest.raises(TypeError, match=r"outputs\[0\] must be a list of tokens"):
        metrics.oov_recall(["a b"], [["a"]], set())
    with pytest.raises(ValueError, match="one entry per summary"):
        metrics.repeated_trigram_rate([["a"]], [["a"], ["b"]])


# --- the paired bootstrap -----------------------------------------------------------
def _linear_quantile(sorted_values, q):
    # numpy's default quantile (linear interpolation between order statistics), by hand
    h = (len(sorted_values) - 1) * q
    lo = int(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


@pytest.mark.parametrize("seed", range(3))
def test_paired_bootstrap_equals_a_loop_over_resamples(seed):
    rng = np.random.default_rng(100 + seed)
    x, y = rng.poisson(1.0, 57), rng.poisson(1.3, 57)
    draws = np.random.default_rng(seed)  # one resample at a time, as the helper documents
    means = []
    for _ in range(2000):
        picked = draws.integers(0, 57, size=57)
        means.append(sum(x[k] - y[k] for k in picked) / 57)
    means.sort()
    ours = metrics.paired_bootstrap(x, y, n_resamples=2000, confidence=0.9, seed=seed)
    assert ours.mean == pytest.approx((x - y).mean())
    assert ours.low == pytest.approx(_linear_quantile(means, 0.05))
    assert ours.high == pytest.approx(_linear_quantile(means, 0.95))


def test_paired_bootstrap_matches_the_normal_closed_form():
    # For many examples the resampled means are close to normal with the plug-in standard
    # error sd(x - y) / sqrt(n) (ddof 0): the interval is mean -+ 1.96 of them
    rng = np.random.default_rng(0)
    y = rng.normal(size=3000)
    x = y + rng.exponential(0.5, size=3000) - 0.1  # paired: y cancels in x - y
    d = x - y
    half = 1.959964 * d.std() / np.sqrt(len(d))
    ours = metrics.paired_bootstrap(x, y, n_resamples=20_000)
    assert ours.low == pytest.approx(d.mean() - half, abs=0.06 * half)
    assert ours.high == pytest.approx(d.mean() + half, abs=0.06 * half)


def test_paired_bootstrap_exact_ends_of_a_tiny_sample():
    # Differences 0, 1, 3: of the 27 equally likely resamples, one has mean 0 and one mean 3
    # (1/27 = 3.7 % each, more than 2.5 %), so the 95 % interval is exactly [0, 3]
    ours = metrics.paired_bootstrap([0, 1, 3], [0, 0, 0])
    assert (ours.mean, ours.low, ours.high) == (4 / 3, 0.0, 3.0)
    # a constant difference has no spread; swapping the systems mirrors the interval
    assert metrics.paired_bootstrap([2, 3, 4], [1, 2, 3]) == (1.0, 1.0, 1.0)
    a, b = [1, 0, 2, 5, 1], [0, 0, 3, 1, 1]
    there, back = metrics.paired_bootstrap(a, b), metrics.paired_bootstrap(b, a)
    assert there.mean == -back.mean
    assert there.low == pytest.approx(-back.high) and there.high == pytest.approx(-back.low)


def test_paired_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="same examples"):
        metrics.paired_bootstrap([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 2"):
        metrics.paired_bootstrap([1], [1])
    with pytest.raises(ValueError, match=r"y must be 1-D"):
        metrics.paired_bootstrap([1, 2], [[1, 2]])
    with pytest.raises(ValueError, match="finite"):
        metrics.paired_bootstrap([1, float("nan")], [1, 2])
    with pytest.raises(TypeError, match="x must be a 1-D sequence"):
        metrics.paired_bootstrap("12", [1, 2])
    with pytest.raises(TypeError, match="x must hold numbers"):
        metrics.paired_bootstrap(["a", "b"], [1, 2])
    with pytest.raises(ValueError, match="confidence"):
        metrics.paired_bootstrap([1, 2], [1, 2], confidence=1.0)
    with pytest.raises(TypeError, match="n_resamples"):
        metrics.paired_bootstrap([1, 2], [1, 2], n_resamples=10.0)


# --- the two summary plots -------------------------------------------------------------
def test_pointer_and_coverage_plots_draw_and_check_shapes():
    import matplotlib.pyplot as plt

    from course_utils.plotting import plot_coverage, plot_pointer_attention

    w = torch.softmax(torch.randn(3, 5), -1)
    fig = plot_pointer_attention(
        w, list("abcde"), ["x", "y", "<eos>"], torch.tensor([0.1, 0.9, 0.5])
    )
    labels = [t.get_text() for t in fig.axes[1].get_xticklabels()]  # the heatmap under the strip
    assert labels == ["x", "y", "<eos>"] and fig.axes[0].get_title()
    plt.close(fig)
    with pytest.raises(ValueError, match=r"weights must be \(T, S\) = \(3, 4\)"):
        plot_pointer_attention(w, list("abcd"), ["x", "y", "<eos>"], torch.ones(3))
    cov = torch.cat([torch.zeros(1, 5), torch.cumsum(w, 0)])
    fig = plot_coverage({"a": cov, "b": cov}, list("abcde"))
    assert len([ax for ax in fig.axes if ax.get_title().endswith("earlier steps)")]) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="S=4"):
        plot_coverage({"a": cov}, list("abcd"))

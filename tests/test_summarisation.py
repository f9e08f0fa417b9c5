"""The pointer-generator's final distribution, coverage, the summariser model and its metrics."""

import random

import pytest
import torch
from rouge_score import rouge_scorer

from course_utils import metrics
from course_utils.apps import news
from course_utils.apps import summarisation as sm
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
    return sm.build_model(True, data.vocab, emb_dim=8, hidden_dim=12, attn_dim=10, **switches)


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
    assert sm.words([V + 1, data.vocab.eos_id], data.vocab, ["x", "Zed"]) == ["Zed"]


def test_trace_follows_greedy_decoding(data):
    model = _model(data, seed=1, coverage=True)
    torch.nn.init.normal_(model.w_c.weight)
    tr = sm.trace(model, data, 2, max_steps=10)
    greedy = sm.summarise(model, data, max_steps=10)[2]
    assert [w for w in tr.words if w != "<eos>"] == greedy
    T = len(tr.words)
    assert tr.weights.shape == (T, len(data.reports[2].document)) and tr.p_gen.shape == (T,)
    assert torch.allclose(tr.coverage[1:], torch.cumsum(tr.weights, 0), atol=1e-5)
    for word, copied in zip(tr.words, tr.copied, strict=True):
        if word not in data.vocab.stoi:
            assert copied  # a rare word can only have been copied


def test_no_attention_model_and_bad_configs(data):
    model = sm.build_model(False, data.vocab, emb_dim=8, hidden_dim=12)
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
        sm.trace(model, data, len(data))


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


def test_summary_metrics_reject_bad_input():
    with pytest.raises(ValueError, match="one entry per summary"):
        metrics.rouge(["a"], ["a", "b"])
    with pytest.raises(TypeError, match="list of strings"):
        metrics.rouge("a b", "a b")
    with pytest.raises(TypeError, match=r"outputs\[0\] must be a list of tokens"):
        metrics.oov_recall(["a b"], [["a"]], set())
    with pytest.raises(ValueError, match="one entry per summary"):
        metrics.repeated_trigram_rate([["a"]], [["a"], ["b"]])


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

"""course_utils.apps.similarity: explaining MiniLM's similarities and ablating its heads.

References: ``model.embed`` (itself tested against sentence-transformers in
test_pretrained.py) for the forward pass from word vectors and the similarity; a brute-force
loop of ``model.embed`` inside ``circuits.ablate_heads`` for the sweep; scipy's spearmanr
for the benchmark score. The model loads once per module.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr

from course_utils import attribution, pretrained
from course_utils.apps import similarity
from course_utils.circuits import ablate_heads, patch_heads, record_heads

SENTENCES = [
    "The cat sat on the mat.",
    "Hi!",
    "A much longer sentence, with commas and unusual words such as photosynthesis.",
]
REFERENCES = ["A kitten rests on a rug.", "Hello there.", "Plants turn light into sugar."]


@pytest.fixture(scope="module")
def model():
    return pretrained.load_minilm("cpu")


@pytest.fixture(scope="module")
def task(model):
    return similarity.similarity_task(model, SENTENCES, REFERENCES)


# -- the benchmark ----------------------------------------------------------------------
def test_benchmark_pairs_are_well_formed():
    pairs = similarity.PAIRS
    assert len(pairs) >= 30
    for a, b, grade in pairs:
        assert isinstance(a, str) and isinstance(b, str) and a != b
        assert a.strip() == a and b.strip() == b and a.endswith(".") and b.endswith(".")
        assert isinstance(grade, int) and 0 <= grade <= 5
    unordered = [frozenset((a, b)) for a, b, _ in pairs]
    assert len(set(unordered)) == len(pairs), "a pair appears twice"
    assert {g for _, _, g in pairs} == set(range(6)), "every grade is used"


def test_unique_sentences_keep_first_appearance_order():
    pairs = [("x.", "y.", 1), ("y.", "z.", 2), ("x.", "z.", 0)]
    assert similarity.unique_sentences(pairs) == ["x.", "y.", "z."]


@pytest.mark.parametrize("seed", range(3))
def test_similarity_score_equals_scipy_with_ties(seed):
    g = torch.Generator().manual_seed(seed)
    sims = torch.rand(25, generator=g)
    grades = torch.randint(0, 6, (25,), generator=g).tolist()  # many ties, as in the benchmark
    expected = spearmanr(sims.numpy(), grades).statistic
    assert similarity.similarity_score(sims, grades) == pytest.approx(expected, abs=1e-9)


def test_pair_similarities_are_the_cosines_of_each_pair(model):
    pairs = similarity.PAIRS[:8]
    sentences = similarity.unique_sentences(pairs)
    emb = model.embed(sentences)
    got = similarity.pair_similarities(emb, pairs)
    for k, (a, b, _) in enumerate(pairs):
        ea, eb = model.embed([a]), model.embed([b])
        assert got[k].item() == pytest.approx(F.cosine_similarity(ea, eb).item(), abs=1e-5)


def test_benchmark_score_is_the_spearman_of_the_cosines(model):
    pairs = similarity.PAIRS
    cosines = [F.cosine_similarity(model.embed([a]), model.embed([b])).item() for a, b, _ in pairs]
    expected = spearmanr(cosines, [g for _, _, g in pairs]).statistic
    assert similarity.benchmark_score(model) == pytest.approx(expected, abs=1e-6)


# -- the forward pass from word vectors and the explained similarity ---------------------
def test_embed_word_vectors_equals_embed(model):
    batch = model.tokenize(SENTENCES)  # padded unevenly
    words = model.embeddings.word(batch.input_ids)
    with torch.no_grad():
        got = similarity.embed_word_vectors(model, words, batch.attention_mask)
    assert torch.equal(got, model.embed(SENTENCES))


def test_task_f_is_the_cosine_to_each_reference(model, task):
    expected = F.cosine_similarity(model.embed(SENTENCES), model.embed(REFERENCES))
    with torch.no_grad():
        assert torch.allclose(task.f(task.x), expected, atol=1e-5)


def test_baseline_masks_the_words_and_keeps_cls_sep_and_padding(model, task):
    mask_vector = model.embeddings.word.weight[model.tokenizer.token_to_id("[MASK]")]
    for b, tokens in enumerate(task.tokens):
        L = len(tokens)
        assert task.words[b].tolist() == [False] + [True] * (L - 2) + [False] * (
            task.x.shape[1] - L + 1
        )
        assert torch.equal(task.baseline[b][task.words[b]], mask_vector.expand(L - 2, -1))
        assert torch.equal(task.baseline[b][~task.words[b]], task.x[b][~task.words[b]])


def test_gradient_methods_run_and_leave_padding_and_specials_alone(task):
    for scores in (
        attribution.gradient_x_input(task.f, task.x),
        attribution.integrated_gradients(task.f, task.x, task.baseline, steps=4),
    ):
        assert scores.shape == task.x.shape
        assert torch.isfinite(scores).all()
        assert (scores[~task.attention_mask] == 0).all()  # padding cannot change the output
    occluded = attribution.occlusion(task.f, task.x, task.baseline)
    assert occluded.shape == task.words.shape
    assert (occluded[~task.words] == 0).all()  # [CLS], [SEP], padding: nothing to remove


def test_integrated_gradients_completeness_gap_shrinks_with_steps(task):
    with torch.no_grad():
        change = (task.f(task.x) - task.f(task.baseline)).abs()
    gaps = []
    for steps in (2, 8):
        ig = attribution.integrated_gradients(task.f, task.x, task.baseline, steps=steps)
        gaps.append(attribution.completeness_gap(task.f, task.x, ig, task.baseline))
    assert (gaps[1] < gaps[0]).all()
    assert (gaps[1] / change).max() < 0.05


# -- head ablation ----------------------------------------------------------------------
def test_ablating_every_head_of_a_layer_with_weight_one_changes_nothing(model):
    expected = model.embed(SENTENCES)
    for layer in range(model.config.num_layers):
        with ablate_heads(model, [(layer, h) for h in range(12)], weight=1.0):
            assert torch.equal(model.embed(SENTENCES), expected)


@pytest.fixture(scope="module")
def small_sweep(model):
    pairs = similarity.PAIRS[:6]
    return pairs, similarity.head_ablation_sweep(model, pairs, progress=False)


def test_sweep_equals_brute_force_ablation(model, small_sweep):
    pairs, sweep = small_sweep
    sentences = similarity.unique_sentences(pairs)
    grades = [g for _, _, g in pairs]
    base = model.embed(sentences)

    def brute(heads):
        with ablate_heads(model, heads):
            emb = model.embed(sentences)
        cos = [F.cosine_similarity(emb[[sentences.index(a)]], emb[[sentences.index(b)]]).item()
               for a, b, _ in pairs]  # fmt: skip
        shift = (1 - F.cosine_similarity(emb, base)).mean().item()
        return shift, spearmanr(cos, grades).statistic

    assert sweep.score == pytest.approx(spearmanr(
        [F.cosine_similarity(model.embed([a]), model.embed([b])).item() for a, b, _ in pairs],
        grades).statistic, abs=1e-6)  # fmt: skip
    for layer, head in itertools.product((0, 3, 5), (0, 7, 11)):
        shift, score = brute([(layer, head)])
        assert sweep.shift[layer, head].item() == pytest.approx(shift, abs=1e-5)
        assert sweep.score_change[layer, head].item() == pytest.approx(score - sweep.score, abs=1e-6)  # fmt: skip
    for layer in (0, 5):
        shift, score = brute([(layer, h) for h in range(12)])
        assert sweep.layer_shift[layer].item() == pytest.approx(shift, abs=1e-5)
        assert sweep.layer_score_change[layer].item() == pytest.approx(score - sweep.score, abs=1e-6)  # fmt: skip
    assert sweep.shift.shape == sweep.score_change.shape == (6, 12)
    assert (sweep.shift > 0).all()  # every head writes something


def test_sweep_keeps_the_similarities_behind_its_scores(small_sweep):
    pairs, sweep = small_sweep
    grades = [g for _, _, g in pairs]
    assert sweep.similarities.shape == (6, 12, 6) and sweep.layer_similarities.shape == (6, 6)
    assert similarity.similarity_score(sweep.base_similarities, grades) == pytest.approx(
        sweep.score
    )
    for layer, head in ((0, 0), (4, 9)):
        score = similarity.similarity_score(sweep.similarities[layer, head], grades)
        assert score - sweep.score == pytest.approx(
            sweep.score_change[layer, head].item(), abs=1e-6
        )


def test_mean_ablation_sweep_equals_patching_each_head_with_its_mean(model):
    pairs = similarity.PAIRS[:4]
    sweep = similarity.head_ablation_sweep(model, pairs, progress=False, replacement="mean")
    sentences = similarity.unique_sentences(pairs)
    batch = model.tokenize(sentences)
    with record_heads(model) as outputs:
        base = model.embed(sentences)
    real = batch.attention_mask.bool()
    for layer, head in ((1, 3), (5, 10)):
        mean = outputs[layer][:, head][real].mean(0)  # (D,): over every real token
        with patch_heads(model, {(layer, head): mean}):
            emb = model.embed(sentences)
        shift = (1 - F.cosine_similarity(emb, base)).mean().item()
        assert sweep.shift[layer, head].item() == pytest.approx(shift, abs=1e-5)
    with pytest.raises(ValueError, match="replacement"):
        similarity.head_ablation_sweep(model, pairs, progress=False, replacement="resample")


def fake_sweep(base, heads, layers):
    """An AblationSweep holding only what bootstrap_score_change reads."""
    zeros = torch.zeros(heads.shape[:2])
    return similarity.AblationSweep(
        zeros, zeros, zeros[:, 0], zeros[:, 0], 0.0, heads, layers, base
    )


def test_bootstrap_interval_equals_a_loop_with_scipy():
    g = torch.Generator().manual_seed(3)
    grades = [0, 1, 1, 2, 3, 3, 4, 5, 5, 2]
    base = torch.tensor(grades, dtype=torch.float32) + torch.randn(10, generator=g)
    heads = base + 1.5 * torch.randn(2, 3, 10, generator=g)  # (num_layers, H, P)
    layers = base + 3.0 * torch.randn(2, 10, generator=g)
    sweep = fake_sweep(base, heads, layers)
    got = similarity.bootstrap_score_change(sweep, grades, resamples=200, level=0.9, seed=5)
    draws = torch.randint(10, (200, 10), generator=torch.Generator().manual_seed(5))
    for layer, h in itertools.product(range(2), range(3)):
        changes = [spearmanr(heads[layer, h][d].numpy(), np.array(grades)[d.numpy()]).statistic
                   - spearmanr(base[d].numpy(), np.array(grades)[d.numpy()]).statistic
                   for d in draws]  # fmt: skip
        expected = np.nanquantile(np.array(changes), [0.05, 0.95])
        np.testing.assert_allclose(got.head[layer, h].numpy(), expected, atol=1e-6)
    assert got.layer.shape == (2, 2) and (got.layer[:, 0] <= got.layer[:, 1]).all()
    same = similarity.bootstrap_score_change(
        fake_sweep(base, base.expand(1, 1, 10), base[None]), grades
    )
    assert (
        same.head.abs().max() == 0 and same.layer.abs().max() == 0
    )  # nothing removed, nothing moves
    with pytest.raises(ValueError, match=r"one grade per pair \(10\), got 3"):
        similarity.bootstrap_score_change(sweep, [1, 2, 3])
    with pytest.raises(ValueError, match="level must lie strictly between 0 and 1"):
        similarity.bootstrap_score_change(sweep, grades, level=95)
    with pytest.raises(ValueError, match="resamples must be an int >= 2"):
        similarity.bootstrap_score_change(sweep, grades, resamples=1)


# -- bad input --------------------------------------------------------------------------
def test_bad_input_gets_clear_errors(model, task):
    with pytest.raises(TypeError, match="model must be a pretrained.MiniLM"):
        similarity.benchmark_score(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"word_vectors must be \(B, L, 384\).*\(2, 5, 10\)"):
        similarity.embed_word_vectors(model, torch.zeros(2, 5, 10), torch.ones(2, 5, dtype=torch.bool))  # fmt: skip
    with pytest.raises(ValueError, match=r"attention_mask \(B, L\), got \(2, 5, 384\) and \(2, 4\)"):  # fmt: skip
        similarity.embed_word_vectors(model, torch.zeros(2, 5, 384), torch.ones(2, 4, dtype=torch.bool))  # fmt: skip
    with pytest.raises(ValueError, match="references must be a list of one str per sentence"):
        similarity.similarity_task(model, SENTENCES, REFERENCES[:2])
    with pytest.raises(ValueError, match="pairs must be a list of at least 2"):
        similarity.unique_sentences([("a.", "b.", 7), ("c.", "d.", 1)])
    with pytest.raises(ValueError, match="pairs must be a list of at least 2"):
        similarity.unique_sentences([("a.", "b.", 2.0), ("c.", "d.", True)])
    with pytest.raises(ValueError, match=r"one row per unique sentence \(3\), got shape \(2, 384\)"):  # fmt: skip
        similarity.pair_similarities(torch.zeros(2, 384), [("x.", "y.", 1), ("y.", "z.", 2)])
    with pytest.raises(ValueError, match="one grade per similarity"):
        similarity.similarity_score(torch.zeros(3), [1, 2])

"""Notebook 16's hand-written cells equal the library: attributions, deletion and the
Jensen-Shannon divergence (course_utils.attribution, faithfulness), MiniLM's forward pass from
word vectors (apps.similarity and the model's own embed, values and gradients), and the
induction-head scores (course_utils.induction), on inputs the notebook does not use."""

import pytest
import torch
from torch import nn

from course_utils import attribution, faithfulness, induction, pretrained
from course_utils.apps import rationales, similarity
from course_utils.toy_models import AttentionOnlyTransformer, ToyConfig

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "16_interpretability.ipynb"
MARKED = {
    "gradient_times_input",
    "integrated_gradients",
    "leave_one_out",
    "delete_top_k",
    "jensen_shannon",
    "embed_from_word_vectors",
    "prefix_matching_score",
    "ov_copying_score",
}


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(NOTEBOOK, {"torch": torch, "nn": nn})


def test_marked_cells_are_the_ones_tested(nb):
    assert_marked_cells_define(NOTEBOOK, nb, MARKED)


def _classifier(seed):
    torch.manual_seed(seed)
    model = rationales.build_model(num_layers=1, d_model=16, dim_feedforward=16).eval()
    data = rationales.encode(rationales.make_examples(6, "val", seed=seed))
    x = model.words(data.ids).detach()

    def f(words):
        return model.forward_from_words(words, data.mask)[0]

    return f, x, data


@pytest.mark.parametrize("seed", range(3))
def test_attributions_equal_library(nb, seed):
    f, x, _ = _classifier(seed)
    g = torch.Generator().manual_seed(seed)
    baseline = torch.randn(x.shape, generator=g) * 0.1
    torch.testing.assert_close(nb["gradient_times_input"](f, x), attribution.gradient_x_input(f, x))
    torch.testing.assert_close(
        nb["integrated_gradients"](f, x, baseline, 8 + seed),
        attribution.integrated_gradients(f, x, baseline, steps=8 + seed),
    )
    torch.testing.assert_close(
        nb["leave_one_out"](f, x, baseline), attribution.occlusion(f, x, baseline)
    )


@pytest.mark.parametrize("seed", range(3))
def test_delete_top_k_matches_the_deletion_curve(nb, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(7) < torch.tensor([[7], [5], [2], [4]])
    scores = torch.randint(0, 3, (4, 7), generator=g).float()  # ties included
    weights = torch.randn(4, 7, generator=g)

    def f(kept):
        return (kept.float() * weights).sum(1)

    curve = faithfulness.deletion_curve(f, mask, scores, steps=5)
    for k in range(6):
        torch.testing.assert_close(f(nb["delete_top_k"](mask, scores, k)), curve[:, k])


def test_jensen_shannon_equals_library(nb):
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, 6, generator=g), -1)
    q = torch.softmax(torch.randn(4, 6, generator=g), -1)
    q[0] = torch.tensor([1.0, 0, 0, 0, 0, 0])  # a zero entry: 0 log 0 counts as 0
    torch.testing.assert_close(nb["jensen_shannon"](p, q), faithfulness.js_divergence(p, q))


# -- MiniLM --------------------------------------------------------------------------------
SENTENCES = [
    "The cat is sleeping on the sofa.",
    "Hi!",
    "A longer sentence, with commas and rare words such as photosynthesis, pads the others.",
]


@pytest.fixture(scope="module")
def model():
    return pretrained.load_minilm("cpu")


@pytest.mark.parametrize("count", [1, 2, 3])
def test_embed_from_word_vectors_equals_library_and_embed(nb, model, count):
    sentences = SENTENCES[:count]  # one unpadded sentence, then uneven padding
    batch = model.tokenize(sentences)
    words = model.embeddings.word(batch.input_ids).detach()
    with torch.no_grad():
        ours = nb["embed_from_word_vectors"](model, words, batch.attention_mask)
        library = similarity.embed_word_vectors(model, words, batch.attention_mask)
    assert ours.shape == (count, 384)
    torch.testing.assert_close(ours, library, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours, model.embed(sentences), atol=1e-5, rtol=0)


def test_embed_from_word_vectors_has_the_library_gradient(nb, model):
    batch = model.tokenize(SENTENCES)
    g = torch.Generator().manual_seed(0)
    direction = torch.randn(len(SENTENCES), 384, generator=g)
    grads = []
    for fn in (nb["embed_from_word_vectors"], similarity.embed_word_vectors):
        words = model.embeddings.word(batch.input_ids).detach().requires_grad_(True)
        (fn(model, words, batch.attention_mask) * direction).sum().backward()
        grads.append(words.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)
    assert (grads[0][~batch.attention_mask] == 0).all()  # padding never reaches the output


# -- induction heads -----------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_prefix_matching_score_equals_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    B, H, L = 3 + seed, 1 + seed, 8 + 2 * seed
    half = torch.randint(2, L // 2 + 1, (B,), generator=g)
    weights = torch.rand(B, H, L, L, generator=g).tril().softmax(-1)
    expected = induction.prefix_matching_scores([weights], half)[0]  # (H,)
    torch.testing.assert_close(nb["prefix_matching_score"](weights, half), expected)


def test_prefix_matching_score_of_a_perfect_induction_head(nb):
    half, L = torch.tensor([3, 4]), 8
    weights = torch.zeros(2, 1, L, L)
    for b, n in enumerate(half.tolist()):
        for i in range(L):
            weights[b, 0, i, i - n + 1 if n <= i < 2 * n else 0] = 1.0
    assert nb["prefix_matching_score"](weights, half).tolist() == [1.0]


@pytest.mark.parametrize("seed", range(3))
def test_ov_copying_score_equals_library(nb, seed):
    torch.manual_seed(seed)
    config = ToyConfig(vocab_size=10 + 5 * seed, max_len=8, d_model=8 * (seed + 1),
                       num_heads=2 ** seed, num_layers=2, num_outputs=10 + 5 * seed)  # fmt: skip
    model = AttentionOnlyTransformer(config)
    with torch.no_grad():  # make some heads copy, so the score is not always near zero
        model.token_embedding.weight.copy_(model.readout.weight)
    expected = induction.copying_scores(induction.ov_circuits(model))  # (num_layers, H)
    for layer in range(2):
        for head in range(config.num_heads):
            got = nb["ov_copying_score"](model, layer, head)
            assert got == pytest.approx(expected[layer, head].item(), abs=1e-6)

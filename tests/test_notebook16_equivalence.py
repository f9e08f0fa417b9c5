"""Notebook 16's hand-written cells equal the library: the training step (training.fit),
attributions, deletion and the Jensen-Shannon divergence (course_utils.attribution,
faithfulness), MiniLM's forward pass from word vectors (apps.similarity and the model's own
embed, values and gradients), and attention flow (interpret.attention_flow), on inputs the
notebook does not use."""

import numpy as np
import pytest
import torch
from torch import nn

from course_utils import attribution, faithfulness, interpret, pretrained
from course_utils.apps import rationales, similarity

from notebook_cells import (
    assert_marked_cells_define,
    assert_train_step_equals_fit,
    run_from_scratch_cells,
)

NOTEBOOK = "16_interpretability.ipynb"
MARKED = {
    "gradient_times_input",
    "integrated_gradients",
    "leave_one_out",
    "delete_top_k",
    "jensen_shannon",
    "embed_from_word_vectors",
    "train_step",
    "attention_flow_one",
}


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(NOTEBOOK, {"torch": torch, "nn": nn, "np": np})


def test_marked_cells_are_the_ones_tested(nb):
    assert_marked_cells_define(NOTEBOOK, nb, MARKED)


def _classifier(seed):
    torch.manual_seed(seed)
    model = rationales.build_model(num_layers=1, d_model=16, d_ff=16).eval()
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


# -- the training step and attention flow ----------------------------------------------------
@pytest.mark.parametrize("learned", [True, False])
def test_train_step_takes_fits_step(nb, learned):
    data = rationales.encode(rationales.make_examples(40, "train", seed=3))
    batch = next(rationales.batches(data, 16, seed=1))

    def build():
        torch.manual_seed(0)
        return rationales.build_model(learned, num_layers=1, d_model=16, d_ff=16)

    assert_train_step_equals_fit(nb["train_step"], build, rationales.loss, batch, lr=3e-3)


@pytest.mark.parametrize("seed", range(3))
def test_attention_flow_one_equals_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    L, layers = 4 + seed, 2 + seed
    attentions = [torch.softmax(torch.randn(2, L, L, generator=g), -1) for _ in range(layers)]
    expected = interpret.attention_flow([a[None] for a in attentions])[0]  # (L, L)
    got = nb["attention_flow_one"](attentions)
    torch.testing.assert_close(got, expected.double(), atol=1e-6, rtol=0)

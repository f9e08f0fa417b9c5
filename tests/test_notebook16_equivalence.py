"""Notebook 16's hand-written attributions, deletion and Jensen-Shannon divergence equal
course_utils.attribution and course_utils.faithfulness, on models the notebook does not use."""

import pytest
import torch

from course_utils import attribution, faithfulness
from course_utils.apps import rationales

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "16_interpretability.ipynb"
MARKED = {
    "gradient_times_input",
    "integrated_gradients",
    "leave_one_out",
    "delete_top_k",
    "jensen_shannon",
}


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(NOTEBOOK, {"torch": torch})


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

"""Notebook 12's hand-written recipe run and Welch comparison equal course_utils.apps.protocol."""

import math
import statistics

import pytest
import torch

from course_utils.apps import captioning, protocol, registry
from course_utils.apps.registry import APPLICATIONS
from course_utils.training import fit, set_seed

from notebook_cells import assert_marked_cells_define, run_from_scratch_cells

NOTEBOOK = "12_with_and_without_attention.ipynb"
MARKED = {"train_with_recipe", "welch_compare"}


@pytest.fixture(scope="module")
def nb():
    return run_from_scratch_cells(NOTEBOOK, {"fit": fit, "math": math, "statistics": statistics})


def test_marked_cells_are_the_ones_tested(nb):
    assert_marked_cells_define(NOTEBOOK, nb, MARKED)


@pytest.mark.parametrize("name", ["reverse", "speech", "vqa"])  # decay, its own batches, grid
def test_training_with_the_recipe_equals_the_library(nb, name, monkeypatch):
    monkeypatch.setitem(registry._ENCODERS, "small", captioning.ConvEncoder(64).eval())
    app = APPLICATIONS[name]
    splits = app.make_splits(1, "small")
    splits = {s: app.subset(d, list(range(min(len(d), 128)))) for s, d in splits.items()}
    # three steps of the small recipe: the schedule's decay runs over the recipe's steps
    short = {"small": protocol.Recipe(3, 16, app.recipes["small"].lr, app.recipes["small"].decay)}
    app = type(app)(**{**app.__dict__, "recipes": short})
    models = []
    for _ in range(2):
        set_seed(1)
        models.append(app.build_model(True, splits))
    nb["train_with_recipe"](app, models[0], splits, 1, "small")
    app.train(models[1], splits, 1, "small")
    for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.parametrize("seed", range(6))
def test_welch_compare_equals_the_library(nb, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(3 + seed, generator=g, dtype=torch.float64).tolist()
    b = (torch.rand(5, generator=g, dtype=torch.float64) * 2).tolist()
    higher = seed % 2 == 0
    assert nb["welch_compare"](a, b, higher) == protocol.compare_runs(a, b, higher)

"""The training loop, seeding and device choice."""

import itertools

import pytest
import torch

from course_utils import training


class Regression:
    """A batch for a linear model: y = 3x - 1 plus noise, with the .to() that fit() calls."""

    def __init__(self, g):
        self.x = torch.randn(32, 1, generator=g)
        self.y = 3 * self.x - 1 + 0.01 * torch.randn(32, 1, generator=g)

    def to(self, device):
        self.x, self.y = self.x.to(device), self.y.to(device)
        return self


def mse(model, batch):
    return torch.nn.functional.mse_loss(model(batch.x), batch.y)


def stream(seed):
    g = torch.Generator().manual_seed(seed)
    return (Regression(g) for _ in itertools.count())


def test_fit_learns_a_line_and_records_history():
    training.set_seed(0)
    model = torch.nn.Linear(1, 1)
    calls = []

    def evaluate(m):
        calls.append(m.training)
        return {"slope_error": abs(m.weight.item() - 3), "grad_enabled": torch.is_grad_enabled()}

    history = training.fit(
        model, stream(0), mse, steps=250, lr=0.05, eval_fn=evaluate, eval_every=100, progress=False
    )
    assert history["step"] == [100, 200, 250]
    assert len(history["train_loss"]) == 3 and history["train_loss"][-1] < 0.01
    assert history["slope_error"][-1] < 0.05
    assert calls == [False, False, False]  # evaluated in eval mode ...
    assert history["grad_enabled"] == [0.0, 0.0, 0.0]  # ... with gradients off
    assert abs(model.bias.item() + 1) < 0.05


def test_same_seed_same_training():
    results = []
    for _ in range(2):
        training.set_seed(3)
        model = torch.nn.Linear(1, 1)
        training.fit(model, stream(1), mse, steps=20, progress=False)
        results.append(model.weight.detach().clone())
    assert torch.equal(results[0], results[1])


def test_fit_rejects_zero_steps():
    with pytest.raises(ValueError, match="steps"):
        training.fit(torch.nn.Linear(1, 1), stream(0), mse, steps=0)


def test_set_seed_reseeds_every_generator():
    import random

    import numpy as np

    training.set_seed(5)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    training.set_seed(5)
    assert first == (random.random(), np.random.rand(), torch.rand(1).item())


def test_device_choice():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert training.get_device().type == expected
    assert training.get_device("cpu") == torch.device("cpu")


def test_count_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2, bias=False))
    assert training.count_parameters(model) == 3 * 4 + 4 + 4 * 2

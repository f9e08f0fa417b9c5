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


# --------------------------------------------------------------------------------------
# The cache of trained weights
# --------------------------------------------------------------------------------------
def build(seed=0, width=4):
    training.set_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(1, width), torch.nn.Linear(width, 1))


def trainer(model, steps=30, seed=0, calls=None):
    def train():
        if calls is not None:
            calls.append(1)
        return training.fit(model, stream(seed), mse, steps=steps, lr=0.05, progress=False)

    return train


CONFIG = {"task": "line", "steps": 30, "seed": 0}


def test_cache_hit_returns_identical_weights_and_history(tmp_path, capsys):
    first = build()
    run = training.train_or_load(first, trainer(first), CONFIG, folder=tmp_path)
    assert not run.from_cache and run.path.exists() and run.seconds > 0

    calls = []
    second = build()
    again = training.train_or_load(second, trainer(second, calls=calls), CONFIG, folder=tmp_path)
    assert again.from_cache and calls == []  # the training code never ran
    assert "RETRAIN = True" in capsys.readouterr().out
    for (name, a), (_, b) in zip(
        first.state_dict().items(), second.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    assert again.history == run.history
    assert not second.training  # ready to evaluate, as after fit()


def test_retrain_ignores_the_cache(tmp_path):
    model = build()
    training.train_or_load(model, trainer(model), CONFIG, folder=tmp_path)
    calls = []
    model = build()
    run = training.train_or_load(
        model, trainer(model, calls=calls), CONFIG, folder=tmp_path, retrain=True
    )
    assert calls == [1] and not run.from_cache


@pytest.mark.parametrize(
    "change",
    ["config", "seed", "width", "module source", "threads"],
)
def test_anything_that_changes_the_result_changes_the_key(change, monkeypatch):
    base = training.cache_key(build(), CONFIG)
    assert training.cache_key(build(), CONFIG) == base  # the same inputs, the same key
    if change == "config":
        key = training.cache_key(build(), {**CONFIG, "steps": 31})
    elif change == "seed":
        key = training.cache_key(build(seed=1), CONFIG)
    elif change == "width":
        key = training.cache_key(build(width=5), CONFIG)
    elif change == "module source":
        monkeypatch.setattr(training.inspect, "getsource", lambda m: "edited source")
        key = training.cache_key(build(), CONFIG)
    else:
        threads = torch.get_num_threads()
        torch.set_num_threads(1 if threads != 1 else 2)
        try:
            key = training.cache_key(build(), CONFIG)
        finally:
            torch.set_num_threads(threads)
    assert key != base


def test_a_model_from_course_utils_brings_its_modules_source(monkeypatch):
    from course_utils import attention

    model = attention.MultiHeadAttention(8, 2)
    base = training.cache_key(model, CONFIG)
    real = training.inspect.getsource

    def edited(module):  # as if attention.py had been edited
        return "edited" if module is attention else real(module)

    monkeypatch.setattr(training.inspect, "getsource", edited)
    assert training.cache_key(model, CONFIG) != base


def test_modules_named_by_the_notebook_count_too(monkeypatch):
    model = build()
    base = training.cache_key(model, CONFIG, modules=["course_utils.data"])
    assert training.cache_key(model, CONFIG) != base  # the data module is part of the key
    from course_utils import data

    assert training.cache_key(model, CONFIG, modules=[data]) == base  # a name or the module
    real = training.inspect.getsource
    monkeypatch.setattr(training.inspect, "getsource", lambda m: "edited" if m is data else real(m))
    assert training.cache_key(model, CONFIG, modules=["course_utils.data"]) != base


@pytest.mark.parametrize("damage", ["truncated", "garbage", "another model's entry"])
def test_a_damaged_cache_file_is_retrained_over_with_a_warning(tmp_path, damage):
    model = build()
    run = training.train_or_load(model, trainer(model), CONFIG, folder=tmp_path)
    good = run.path.read_bytes()
    if damage == "truncated":
        run.path.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        run.path.write_bytes(b"not a torch file at all")
    else:
        other = build(seed=5)
        entry = torch.load(run.path, weights_only=True)
        entry["key"] = "0" * 32
        entry["state_dict"] = other.state_dict()
        torch.save(entry, run.path)
    calls = []
    fresh = build()
    with pytest.warns(UserWarning, match="could not be used"):
        again = training.train_or_load(fresh, trainer(fresh, calls=calls), CONFIG, folder=tmp_path)
    assert calls == [1] and not again.from_cache
    assert torch.load(again.path, weights_only=True)["key"] != "0" * 32  # rewritten whole
    reference = build()
    trainer(reference)()
    for a, b in zip(fresh.state_dict().values(), reference.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # the retrained weights, not the damaged file's


def test_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(training.CACHE_ENV_VAR, str(tmp_path / "run"))
    assert training.cache_dir() == tmp_path / "run"
    model = build()
    run = training.train_or_load(model, trainer(model), CONFIG)
    assert run.path.parent == tmp_path / "run"
    monkeypatch.delenv(training.CACHE_ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert training.cache_dir() == tmp_path / "xdg" / "attention-from-scratch" / "models"


def test_cache_rejects_bad_arguments(tmp_path):
    model = build()
    with pytest.raises(TypeError, match="config must hold only JSON"):
        training.cache_key(model, {"fn": print})
    with pytest.raises(TypeError, match="config must be a dict"):
        training.cache_key(model, [1, 2])
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        training.cache_key("model", CONFIG)
    with pytest.raises(TypeError, match="modules must hold modules or their names"):
        training.cache_key(model, CONFIG, modules=[3])
    with pytest.raises(ModuleNotFoundError):
        training.cache_key(model, CONFIG, modules=["course_utils.no_such_module"])
    with pytest.raises(TypeError, match="train must be a function"):
        training.train_or_load(model, None, CONFIG, folder=tmp_path)


def test_fit_lr_schedule_scales_the_learning_rate_of_each_step():
    training.set_seed(0)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    original_step = optimizer.step

    def step(*args, **kwargs):
        seen.append(optimizer.param_groups[0]["lr"])
        return original_step(*args, **kwargs)

    optimizer.step = step
    schedule = lambda step: 1 - (step - 1) / 4  # noqa: E731
    training.fit(
        model, stream(0), mse, steps=4, optimizer=optimizer, lr_schedule=schedule, progress=False
    )
    assert seen == pytest.approx([0.1, 0.075, 0.05, 0.025])


def test_fit_can_evaluate_before_the_first_step_and_train_without_clipping():
    training.set_seed(0)
    model = torch.nn.Linear(1, 1)
    start = model.weight.item()
    seen = []
    history = training.fit(
        model,
        stream(2),
        mse,
        steps=30,
        lr=0.05,
        eval_fn=lambda m: seen.append(m.weight.item()) or {"weight": m.weight.item()},
        eval_every=10,
        clip_grad=None,
        eval_at_start=True,
        progress=False,
    )
    assert history["step"] == [0, 10, 20, 30]
    assert history["weight"][0] == start and seen[0] == start  # step 0: before any training
    assert history["train_loss"][0] != history["train_loss"][0]  # NaN: no step taken yet
    # without clipping, the first step is Adam's on the raw gradient: the same as by hand
    training.set_seed(0)
    by_hand, by_fit = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    by_fit.load_state_dict(by_hand.state_dict())
    batch = next(stream(5))
    optimizer = torch.optim.Adam(by_hand.parameters(), lr=0.5)
    mse(by_hand, batch).backward()
    optimizer.step()
    training.fit(by_fit, iter([batch]), mse, 1, lr=0.5, clip_grad=None, progress=False)
    assert torch.equal(by_hand.weight, by_fit.weight)

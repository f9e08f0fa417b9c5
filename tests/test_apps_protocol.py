"""Every application of the course holds the protocol notebook 12 loops over
(``course_utils.apps.registry``), run for real at a tiny size: a few examples, two steps."""

import math
import re

import pytest
import torch

import course_utils.apps as apps
from course_utils.apps import captioning, protocol, registry
from course_utils.apps.registry import APPLICATIONS


@pytest.fixture(scope="module", autouse=True)
def untrained_scene_encoder():
    # VQA reads features from notebook 09's trained CNN; an untrained one is enough here
    torch.manual_seed(0)
    registry._ENCODERS.setdefault("small", captioning.ConvEncoder(64).eval())


@pytest.fixture(scope="module")
def tiny():
    """Each application's small splits cut to a few examples (256 to train on, 12 in the
    others), cached per application and seed."""
    cache = {}

    def get(name, seed=0):
        if (name, seed) not in cache:
            app = APPLICATIONS[name]
            splits = app.make_splits(seed, "small")
            keep = {"train": 256, "val": 12, "test": 12}
            cache[name, seed] = {
                s: app.subset(d, list(range(min(len(d), keep[s])))) for s, d in splits.items()
            }
        return cache[name, seed]

    return get


def test_every_application_module_is_registered():
    # the table in course_utils/apps/__init__.py says which modules are applications
    table = re.findall(r"^\| (\w+)\s+\| application\s+\|", apps.__doc__, flags=re.M)
    assert len(table) == 7
    modules = {app.evaluate_fn.__module__.rsplit(".", 1)[-1] for app in APPLICATIONS.values()}
    assert set(table) <= modules | {"translation"}  # translation's evaluate is its module's
    assert "reverse" in APPLICATIONS  # the task of notebooks 01 and 03, which has no module
    assert len(APPLICATIONS) == 8


@pytest.mark.parametrize("name", sorted(APPLICATIONS))
def test_an_application_holds_the_protocol(name, tiny):
    app = APPLICATIONS[name]
    splits = tiny(name)
    assert set(splits) == {"train", "val", "test"} and all(len(d) > 0 for d in splits.values())
    models = {}
    for attention in (True, False, *app.variants):
        torch.manual_seed(0)
        model = app.build_model(attention, splits)
        history = app.train(model, splits, seed=0, size="small", steps=2)
        assert len(history["train_loss"]) == 2 and all(map(math.isfinite, history["train_loss"]))
        scores = app.evaluate(model.eval(), splits["test"])
        assert next(iter(scores)) == app.metric, "the primary measure comes first"
        assert all(isinstance(v, float) for v in scores.values()), scores
        assert math.isfinite(scores[app.metric])
        models[attention] = model
    batch = next(app.batches_fn(splits["test"], 4, 0))
    losses = {a: app.loss_fn(m, batch).item() for a, m in models.items()}
    assert len(set(losses.values())) == len(losses), f"one model built twice? {losses}"


@pytest.mark.parametrize("name", sorted(APPLICATIONS))
def test_difficulty_and_subset_agree(name, tiny):
    app = APPLICATIONS[name]
    test = tiny(name)["test"]
    levels = app.difficulty(test)
    assert len(levels) == len(test) and all(isinstance(v, int) and v > 0 for v in levels)
    rows = [len(test) - 1, 0, 2]
    part = app.subset(test, rows)
    assert len(part) == 3 and app.difficulty(part) == [levels[i] for i in rows]


@pytest.mark.parametrize("name", sorted(APPLICATIONS))
def test_the_same_seed_trains_the_same_model_and_another_seed_does_not(name, tiny):
    app = APPLICATIONS[name]
    splits = tiny(name)

    def trained(seed):
        torch.manual_seed(0)
        model = app.build_model(True, splits)
        app.train(model, splits, seed=seed, size="small", steps=2)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    a, b, c = trained(0), trained(0), trained(1)
    assert torch.equal(a, b)
    assert not torch.equal(a, c), "the seed must move the batches"


@pytest.mark.parametrize("name", ["reverse", "captioning", "memory"])
def test_the_seed_draws_the_data(name):
    app = APPLICATIONS[name]
    a, b = app.make_splits(0, "small")["test"], app.make_splits(1, "small")["test"]
    assert app.difficulty(a) != app.difficulty(b) or repr(a.__dict__) != repr(b.__dict__)


def test_bad_sizes_and_variants_are_named():
    app = APPLICATIONS["captioning"]
    with pytest.raises(ValueError, match="size must be one of"):
        app.make_splits(0, "medium")
    with pytest.raises(ValueError, match=r"attention must be True, False or one of \('grid',\)"):
        app.build_model("spatial", {})
    with pytest.raises(ValueError, match="attention must be True, False or one of"):
        APPLICATIONS["reverse"].build_model(1, {})
    with pytest.raises(ValueError, match="attention must be True, False or one of"):
        APPLICATIONS["reverse"].build_model("grid", {})


def test_run_reports_the_measures_the_size_and_the_time():
    out = protocol.run(APPLICATIONS["memory"], False, seed=0, size="small", steps=2)
    assert next(iter(out["metrics"])) == "accuracy"
    assert out["parameters"] == sum(p.numel() for p in out["model"].parameters())
    assert out["seconds"] > 0 and len(out["history"]["train_loss"]) == 2  # a point a step
    assert not out["model"].training


@pytest.mark.parametrize("seed", range(20))
def test_difficulty_groups_cover_every_level_once_in_order(seed):
    g = torch.Generator().manual_seed(seed)
    levels = torch.randint(1, 1 + int(torch.randint(1, 30, (1,), generator=g)), (50,), generator=g)
    levels, max_groups = levels.tolist(), int(torch.randint(1, 7, (1,), generator=g))
    groups = protocol.difficulty_groups(levels, max_groups)
    assert 1 <= len(groups) <= max_groups
    assert groups[0][0] == min(levels) and groups[-1][1] == max(levels)
    for (lo, hi), (next_lo, _) in zip(groups[:-1], groups[1:], strict=True):
        assert lo <= hi < next_lo
    for v in levels:  # every level in exactly one group
        assert sum(lo <= v <= hi for lo, hi in groups) == 1
    if len(set(levels)) <= max_groups:
        assert len(groups) == len(set(levels))


def test_by_difficulty_measures_each_group_on_its_own_examples(tiny):
    app = APPLICATIONS["memory"]
    splits = tiny("memory")
    torch.manual_seed(0)
    model = app.build_model(True, splits).eval()
    test = splits["test"]
    rows = protocol.by_difficulty(app, model, test, max_groups=2)
    levels = app.difficulty(test)
    assert sum(r["examples"] for r in rows) == len(test)
    for r in rows:
        picked = [i for i, v in enumerate(levels) if r["lo"] <= v <= r["hi"]]
        assert r["accuracy"] == app.evaluate(model, app.subset(test, picked))["accuracy"]


@pytest.mark.parametrize("seed", range(5))
def test_compare_runs_uses_welchs_standard_error(seed):
    from scipy import stats

    g = torch.Generator().manual_seed(seed)
    a = (torch.rand(5, generator=g) + 0.5).tolist()
    b = torch.rand(4, generator=g).tolist()
    out = protocol.compare_runs(a, b)
    t = stats.ttest_ind(a, b, equal_var=False).statistic  # t = difference / standard error
    assert out["difference"] == pytest.approx(sum(a) / 5 - sum(b) / 4)
    assert out["standard_error"] == pytest.approx(out["difference"] / t)
    assert out["beyond_spread"] == (abs(t) > 2)
    flipped = protocol.compare_runs(b, a, higher_is_better=False)
    assert flipped["attention_better"] == out["attention_better"]
    with pytest.raises(ValueError, match="without must hold a number per seed"):
        protocol.compare_runs(a, [0.5])


def test_reference_groups_come_from_seed_0_and_hold_for_other_seeds():
    app = APPLICATIONS["memory"]
    groups = protocol.reference_groups(app, "small")
    seed0 = app.difficulty(app.make_splits(0, "small")["test"])
    assert groups == protocol.difficulty_groups(seed0)
    assert protocol.reference_groups(app, "small") is groups  # computed once
    other = app.difficulty(app.make_splits(3, "small")["test"])
    inside = sum(any(lo <= v <= hi for lo, hi in groups) for v in other)
    assert inside >= 0.95 * len(other)  # the same generator: nearly every level is covered


def test_a_record_is_the_run_measured_and_json_ready():
    import json

    app = APPLICATIONS["memory"]
    out = protocol.run(app, False, seed=2, size="small", steps=2)
    rec = protocol.record(app, out)
    assert json.loads(json.dumps(rec)) == rec  # nothing but JSON
    assert (rec["app"], rec["model"], rec["seed"], rec["size"]) == ("memory", "none", 2, "small")
    assert rec["value"] == out["metrics"]["accuracy"] == rec["metrics"]["accuracy"]
    groups = protocol.reference_groups(app, "small")
    assert [(g["lo"], g["hi"]) for g in rec["by_difficulty"]] == [
        (lo, hi)
        for lo, hi in groups
        if any(lo <= v <= hi for v in app.difficulty(out["splits"]["test"]))
    ]
    with pytest.raises(ValueError, match="not of 'reverse'"):
        protocol.record(APPLICATIONS["reverse"], out)
    assert [protocol.label(a) for a in (True, False, "grid")] == ["attention", "none", "grid"]
    with pytest.raises(TypeError, match="attention must be a bool"):
        protocol.label(1)


def _fake(app, model, seed, value, groups):
    # a record as protocol.record writes it, with chosen figures
    return {"app": app.name, "model": model, "seed": seed, "value": value,
            "metrics": {app.metric: value, "other": 2 * value}, "parameters": 10 + len(model),
            "train_seconds": float(seed + 1),
            "by_difficulty": [{"lo": lo, "hi": hi, app.metric: v} for lo, hi, v in groups]}  # fmt: skip


def test_summarise_averages_over_seeds_and_compares_with_attention():
    import statistics

    app = APPLICATIONS["speech"]  # lower is better: the comparison must know
    att = [_fake(app, "attention", s, v, [(1, 2, v), (3, 4, 2 * v)])
           for s, v in [(2, 0.1), (0, 0.2), (1, 0.15)]]  # fmt: skip
    none = [_fake(app, "none", s, v, [(1, 2, v)]) for s, v in [(0, 0.4), (1, 0.5), (2, 0.3)]]
    rows = protocol.summarise(app, {"attention": att, "none": none})
    a, n = rows["attention"], rows["none"]
    assert a["seeds"] == [0, 1, 2] and a["values"] == [0.2, 0.15, 0.1]  # in seed order
    assert a["mean"] == pytest.approx(0.15) and a["std"] == pytest.approx(0.05)
    assert a["train_seconds"] == 2.0 and n["parameters"] == 14
    assert a["by_difficulty"] == [
        {"lo": 1, "hi": 2, "mean": pytest.approx(0.15), "runs": 3},
        {"lo": 3, "hi": 4, "mean": pytest.approx(0.3), "runs": 3},
    ]
    assert a["all_metrics"]["other"] == pytest.approx(0.3)
    assert "difference" not in a
    assert n["difference"] == pytest.approx(0.15 - 0.4)
    assert n["attention_better"]  # a lower error rate
    assert n["standard_error"] == pytest.approx(
        (statistics.variance(a["values"]) / 3 + statistics.variance(n["values"]) / 3) ** 0.5
    )
    one = protocol.summarise(app, {"attention": att[:1], "none": none})
    assert one["attention"]["std"] == 0.0 and "difference" not in one["none"]
    with pytest.raises(ValueError, match=r"runs\['none'\] must hold one or more records"):
        protocol.summarise(app, {"attention": att, "none": []})
    with pytest.raises(ValueError, match="of 'speech'"):
        protocol.summarise(app, {"none": [_fake(APPLICATIONS["memory"], "none", 0, 0.5, [])]})

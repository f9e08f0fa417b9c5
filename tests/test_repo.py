"""Repository rules: pinned environments agree, notebooks are stored clean."""

import json
import re
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10: pytest brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge name -> PyPI name, where they differ


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(specs, source):
    pins = {}
    for spec in specs:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", spec.strip())
        assert match, f"{source}: {spec!r} is not pinned with =="
        name = normalise(CONDA_NAMES.get(match[1], match[1]))
        pins[name] = match[2]
    return pins


def pyproject_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [
        s for group in project["optional-dependencies"].values() for s in group
    ]
    return parse_pins(specs, "pyproject.toml")


def conda_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    specs = [
        d for d in env["dependencies"] if isinstance(d, str) and not d.startswith(("python", "pip"))
    ]
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip_section[-1] == "-e .", "environment.yml installs the course itself with pip"
    return parse_pins(specs + pip_section[:-1], "environment.yml")


def test_environment_yml_and_pyproject_agree():
    py, conda = pyproject_pins(), conda_pins()
    assert set(py) == set(conda), (
        f"only in pyproject: {set(py) - set(conda)}; only in environment.yml: {set(conda) - set(py)}"
    )
    differ = {name: (py[name], conda[name]) for name in py if py[name] != conda[name]}
    assert not differ, f"versions differ (pyproject, environment.yml): {differ}"


def test_torch_is_pinned_to_the_local_cpu_wheel():
    assert pyproject_pins()["torch"] == "2.13.0"


def test_pin_parser_catches_disagreement():
    """The agreement test above must be able to fail: a drifted copy is caught."""
    py = pyproject_pins()
    drifted = parse_pins(["pytorch==2.14.0"], "drifted")
    assert drifted["torch"] != py["torch"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} carry outputs or execution counts; run nbstripout"
    )
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    budget = nb["metadata"].get("course", {}).get("budget_seconds")
    assert isinstance(budget, int) and budget > 0, (
        f"{path.name}: metadata.course.budget_seconds (COURSE_MAP.md) is missing"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_imports_course_utils_without_path_hacks(path):
    source = "\n".join(
        "".join(c["source"])
        for c in json.loads(path.read_text())["cells"]
        if c["cell_type"] == "code"
    )
    assert "sys.path" not in source and "pip install" not in source
    assert "import course_utils" in source or "from course_utils" in source


def test_readme_lists_every_notebook_and_both_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    for path in NOTEBOOKS:
        assert path.stem in readme, f"README.md does not list {path.name}"


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_pre_commit_hooks_use_the_pinned_tool_versions():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert {hook["id"] for hook in hooks} >= {"nbstripout", "ruff"}
    py = pyproject_pins()
    for hook in hooks:
        for name, version in parse_pins(
            hook.get("additional_dependencies", []), hook["id"]
        ).items():
            assert py[name] == version, (
                f"{hook['id']} pins {name}=={version}, pyproject has {py[name]}"
            )


def test_every_notebook_with_widgets_is_tested_in_the_browser():
    import ast

    tree = ast.parse((ROOT / "tests" / "test_browser_widgets.py").read_text())
    listed = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "WIDGET_NOTEBOOKS" for t in node.targets)
    )
    with_widgets = []
    for path in NOTEBOOKS:
        source = "\n".join(
            "".join(c["source"])
            for c in json.loads(path.read_text())["cells"]
            if c["cell_type"] == "code"
        )
        if re.search(r"\bipywidgets\b|\bheatmap_explorer\b", source):
            with_widgets.append(path.name)
    assert with_widgets, "no notebook with widgets found: is the pattern still right?"
    missing = sorted(set(with_widgets) - set(listed))
    assert not missing, f"{missing} have widgets but are not in WIDGET_NOTEBOOKS"


@pytest.mark.parametrize(
    "path", sorted((ROOT / "course_utils").rglob("*.py")), ids=lambda p: p.name
)
def test_no_module_is_much_over_400_lines(path):
    # One concern per module (COURSE_MAP's layout); a module that grows past this is split.
    lines = len(path.read_text().splitlines())
    assert lines <= 420, f"{path.relative_to(ROOT)} has {lines} lines: split it by concern"

"""Repository rules: pinned environments agree, notebooks are stored clean, and the package
keeps its structure (no private names across modules, building blocks below apps, exercises
and widgets, a glossary that lists every module, every exercise checked)."""

import ast
import json
import re
from pathlib import Path

import pytest
import yaml
from packaging.markers import Marker  # packaging: pytest brings it
from packaging.specifiers import SpecifierSet

try:
    import tomllib
except ImportError:  # Python 3.10: pytest brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge name -> PyPI name, where they differ
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# The Pythons the course supports and CI tests: pyproject.toml's classifiers say which.
SUPPORTED = [
    c.rsplit(" :: ", 1)[1]
    for c in PROJECT["classifiers"]
    if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(specs, source, python=None):
    """``{name: version}`` from ``name==version`` lines, each with an optional environment
    marker (``; python_version < '3.11'``); with ``python`` ("3.10"), only the lines whose
    marker holds on that Python. A name pinned twice for one Python is an error."""
    pins = {}
    for spec in specs:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)\s*(?:;\s*(.+))?", spec.strip())
        assert match, f"{source}: {spec!r} is not pinned with =="
        if match[3] and python is None:
            raise AssertionError(f"{source}: {spec!r} has a marker; say which Python")
        if match[3] and not Marker(match[3]).evaluate({"python_version": python}):
            continue
        name = normalise(CONDA_NAMES.get(match[1], match[1]))
        assert name not in pins, f"{source}: {name} is pinned twice for Python {python}"
        pins[name] = match[2]
    return pins


def pyproject_pins(python, leave_out=()):
    specs = PROJECT["dependencies"] + [
        s
        for name, group in PROJECT["optional-dependencies"].items()
        if name not in leave_out
        for s in group
    ]
    return parse_pins(specs, "pyproject.toml", python)


def conda_env():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    return env


def conda_pins():
    env = conda_env()
    specs = [
        d for d in env["dependencies"] if isinstance(d, str) and not d.startswith(("python", "pip"))
    ]
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip_section[-1] == "-e .", "environment.yml installs the course itself with pip"
    return parse_pins(specs + pip_section[:-1], "environment.yml")


def conda_pythons():
    """The supported Pythons that environment.yml's ``python`` line admits."""
    line = next(d for d in conda_env()["dependencies"] if str(d).startswith("python"))
    allowed = SpecifierSet(",".join(re.findall(r"[<>=!]=?\s*[\d.]+", line)))
    return [v for v in SUPPORTED if allowed.contains(v)]


def test_supported_pythons_are_contiguous_and_required():
    minors = [int(v.split(".")[1]) for v in SUPPORTED]
    assert minors and minors == list(range(minors[0], minors[-1] + 1)), SUPPORTED
    requires = SpecifierSet(PROJECT["requires-python"])
    assert all(requires.contains(v) for v in SUPPORTED), (PROJECT["requires-python"], SUPPORTED)
    assert not requires.contains(f"3.{minors[0] - 1}"), "requires-python admits an older Python"


@pytest.mark.parametrize("python", SUPPORTED)
def test_every_package_is_pinned_once_on_every_supported_python(python):
    # parse_pins fails on a name pinned twice; here every Python gets the same names, except
    # the site group on 3.10 (Sphinx 9 and the book theme need 3.11; make site says so).
    leave_out = {"site"} if python == "3.10" else set()
    here = set(pyproject_pins(python, leave_out))
    newest = set(pyproject_pins(SUPPORTED[-1], leave_out))
    assert not set(pyproject_pins("3.10")) - set(pyproject_pins("3.10", {"site"})), (
        "the site group pins nothing for Python 3.10"
    )
    assert here == newest, (
        f"Python {python} lacks {newest - here} and has {here - newest} beside {SUPPORTED[-1]}"
    )


def test_environment_yml_and_pyproject_agree():
    pythons = conda_pythons()
    assert pythons, "environment.yml admits none of the supported Pythons"
    conda = conda_pins()
    for python in pythons:
        # environment.yml is the learners' environment: the instructors' nbgrader and RISE,
        # and the site's Sphinx, stay out
        py = pyproject_pins(python, leave_out={"instructor", "site"})
        assert set(py) == set(conda), (
            f"Python {python}: only in pyproject: {set(py) - set(conda)}; "
            f"only in environment.yml: {set(conda) - set(py)}"
        )
        differ = {name: (py[name], conda[name]) for name in py if py[name] != conda[name]}
        assert not differ, (
            f"Python {python}: versions differ (pyproject, environment.yml): {differ}"
        )


@pytest.mark.parametrize("python", SUPPORTED)
def test_torch_is_pinned_to_the_local_cpu_wheel(python):
    # One torch for every Python; the local CPU wheel serves 3.11 (README: what each gets).
    assert pyproject_pins(python)["torch"] == "2.13.0"


def test_pin_parser_catches_disagreement():
    """The agreement test above must be able to fail: a drifted copy is caught, markers
    choose by Python, and a second pin for one Python is refused."""
    drifted = parse_pins(["pytorch==2.14.0"], "drifted")
    assert drifted["torch"] != pyproject_pins(SUPPORTED[-1])["torch"]
    specs = ["numpy==2.4.6; python_version >= '3.11'", "numpy==2.2.6; python_version < '3.11'"]
    assert parse_pins(specs, "markers", "3.10") == {"numpy": "2.2.6"}
    assert parse_pins(specs, "markers", "3.13") == {"numpy": "2.4.6"}
    with pytest.raises(AssertionError, match="pinned twice"):
        parse_pins(["numpy==2.4.6", "numpy==2.2.6; python_version < '3.11'"], "twice", "3.10")
    with pytest.raises(AssertionError, match="not pinned"):
        parse_pins(["numpy>=2"], "loose", "3.10")


def test_ci_tests_the_oldest_and_newest_supported_python():
    ci = (ROOT / ".ci" / "run").read_text()
    for python in (SUPPORTED[0], SUPPORTED[-1]):
        assert re.search(rf"\b{re.escape(python)}\b", ci), f".ci/run does not test Python {python}"


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


# Markdown links: [text](target) and ![alt](target), the target without a title
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    to hyphens (code spans and fenced blocks aside)."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    anchors = set()
    for line in text.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def broken_links(page: Path) -> list[str]:
    """Relative links of a Markdown page whose file, or heading within it, does not exist."""
    text = page.read_text(encoding="utf-8")
    bad = []
    for target in MARKDOWN_LINK.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"[a-z]+:", target):
            continue  # a web address: not ours to check offline
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and anchor not in heading_anchors(linked.read_text(encoding="utf-8")):
            bad.append(f"{target} (no heading #{anchor} in {linked.name})")
    return bad


DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: p.name)
def test_the_pages_links_and_pictures_resolve(page):
    assert broken_links(page) == [], f"{page.name}: broken links"


def test_the_link_checker_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "b.md").write_text("# Real heading\n\n## With `code`, and commas\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md) [ok](b.md#real-heading) [ok](b.md#with-code-and-commas) [web](https://x.org)\n"
        "[gone](c.md) ![gone](img/x.png) [bad](b.md#nowhere)\n```\n[in code](z.md)\n```\n"
    )
    assert broken_links(page) == [
        "c.md (no such file)",
        "img/x.png (no such file)",
        "b.md#nowhere (no heading #nowhere in b.md)",
    ]


def test_the_readme_opens_with_a_picture_of_a_widget():
    first_screen = (ROOT / "README.md").read_text().split("## ")[0]
    pictures = re.findall(r"!\[[^\]]+\]\((docs/images/[^)]+\.png)\)", first_screen)
    assert pictures and all((ROOT / p).stat().st_size > 10_000 for p in pictures)


def test_the_teachers_guide_has_a_section_per_notebook_naming_its_checkers():
    guide = (ROOT / "docs" / "teaching.md").read_text()
    sections = dict(re.findall(r"(?m)^### (\d\d) · .*\n((?:(?!^#).*\n)*)", guide))
    assert sorted(sections) == [p.name[:2] for p in NOTEBOOKS]
    for number, text in sections.items():
        for field in ("Goals", "Needs", "Time", "Where learners stumble", "Discuss", "Exercises"):
            assert f"- **{field}.**" in text, f"teaching.md, notebook {number}: no {field}"
        module = ROOT / "course_utils" / "exercises" / f"nb{number}.py"
        checkers = (
            re.findall(r"(?m)^def (check_\w+)", module.read_text()) if module.exists() else []
        )
        named = re.findall(r"`(check_\w+)`", text)
        assert named == checkers, f"teaching.md, notebook {number}: names {named}, has {checkers}"


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_pre_commit_hooks_use_the_pinned_tool_versions():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert {hook["id"] for hook in hooks} >= {"nbstripout", "ruff"}
    for python in SUPPORTED:
        py = pyproject_pins(python)
        for hook in hooks:
            for name, version in parse_pins(
                hook.get("additional_dependencies", []), hook["id"]
            ).items():
                assert py[name] == version, (
                    f"{hook['id']} pins {name}=={version}, pyproject has {py[name]} "
                    f"for Python {python}"
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


# ---------------------------------------------------------------------------------------
# The package's structure: imports between modules, the glossary, exercises with checkers
# ---------------------------------------------------------------------------------------
PACKAGE = ROOT / "course_utils"
# Modules a building block (a top-level module) must never import: they sit above it.
ABOVE_BUILDING_BLOCKS = ("course_utils.apps", "course_utils.exercises", "course_utils.widgets")


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """``course_utils/exercises/nb02.py`` -> ``course_utils.exercises.nb02``; a package's
    ``__init__.py`` -> the package's name."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module and subpackage of ``package`` by dotted name (the package itself excluded)."""
    modules = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    modules.pop(package.name, None)
    return modules


def course_imports(source: str, module: str, is_package: bool, known: set[str]):
    """``(imported module, imported name or None, line)`` for each import from the package.

    Relative imports are resolved against ``module``; ``from course_utils import x`` counts
    as importing the module ``course_utils.x`` when that module exists (``known``).
    ``module._name`` attribute reads of a module imported whole count as importing ``_name``.
    """
    top = module.split(".")[0]
    found, whole = [], {}  # whole: local name -> module imported as a whole
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    found.append((alias.name, None, node.lineno))
                    if alias.asname:
                        whole[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            if base.split(".")[0] != top:
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.append((f"{base}.{alias.name}", None, node.lineno))
                    whole[alias.asname or alias.name] = f"{base}.{alias.name}"
                else:
                    found.append((base, alias.name, node.lineno))
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in whole
        ):
            found.append((whole[node.value.id], node.attr, node.lineno))
    return found


def private_imports(modules: dict[str, Path]) -> list[str]:
    """Where a module takes a private (``_name``) name from another module of the package.

    ``course_utils._validate`` is private to the package as a whole: its names are public
    inside it, so importing from it is allowed.
    """
    problems = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for imported, attr, line in course_imports(
            path.read_text(), name, is_package, set(modules)
        ):
            if imported in (name, "course_utils._validate") or attr is None:
                continue
            if attr.startswith("_") and not attr.startswith("__"):
                problems.append(f"{name}:{line} uses {imported}.{attr}")
    return problems


def building_block_violations(modules: dict[str, Path]) -> list[str]:
    """Where a top-level module (a building block) imports apps, exercises or widgets."""
    problems = []
    for name, path in modules.items():
        if name.count(".") != 1 or path.name == "__init__.py" or name == "course_utils.widgets":
            continue  # subpackage modules, and widgets itself, are not building blocks
        for imported, _, line in course_imports(path.read_text(), name, False, set(modules)):
            if any(imported == m or imported.startswith(m + ".") for m in ABOVE_BUILDING_BLOCKS):
                problems.append(f"{name}:{line} imports {imported}")
    return problems


def glossary_modules(docstring: str) -> list[str]:
    """The module column of the glossary's table (``| concept | module | notebooks |``)."""
    rows = [line.strip() for line in docstring.splitlines() if line.strip().startswith("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert cells and cells[0][1] == "module", "no '| concept | module | notebooks |' table"
    return [c[1].strip("`") for c in cells[1:] if not set(c[1]) <= set("-: ")]


def glossary_notebooks(docstring: str) -> dict[str, str]:
    """The notebooks column of the glossary's table, by module: ``{module: "02-06"}``."""
    rows = [line.strip() for line in docstring.splitlines() if line.strip().startswith("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert cells and cells[0][2] == "notebooks", "no '| concept | module | notebooks |' table"
    return {c[1].strip("`"): c[2] for c in cells[1:] if not set(c[1]) <= set("-: ")}


def notebook_numbers(text: str, existing: list[str]) -> set[str]:
    """``"01, 03-06"``, ``"every notebook"``, ``"all but 05, 10"`` or ``"-"`` as the set of
    notebook numbers it names, read against the notebooks that ``existing`` holds."""
    text = text.strip()
    if text == "-":
        return set()
    if text == "every notebook":
        return set(existing)
    if text.startswith("all but "):
        return set(existing) - notebook_numbers(text.removeprefix("all but "), existing)
    named = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        assert re.fullmatch(r"\d\d", first) and re.fullmatch(r"(\d\d)?", last), (
            f"cannot read {text!r}"
        )
        named |= {n for n in existing if first <= n <= (last or first)}
    return named


def notebook_imports(source: str, modules: set[str]) -> set[str]:
    """The ``course_utils`` modules a notebook's code imports (a subpackage's module counts
    for the subpackage too)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course_utils"):
            base = node.module.removeprefix("course_utils").lstrip(".")
            for alias in node.names:
                name = f"{base}.{alias.name}" if base else alias.name
                found.add(name if name in modules else base)
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("course_utils.") for a in node.names
                      if a.name.startswith("course_utils.")}  # fmt: skip
    return found | {name.split(".")[0] for name in found if "." in name}


def notebook_code(path: Path) -> str:
    """A notebook's code cells as one Python source, IPython magics blanked."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines = [
        line for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).split("\n")
    ]
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)


def test_glossary_notebook_column_names_the_notebooks_that_import_each_module():
    import course_utils

    modules = {name.removeprefix("course_utils.") for name in package_modules()}
    existing = [p.name[:2] for p in NOTEBOOKS]
    importers: dict[str, set[str]] = {}
    for path in NOTEBOOKS:
        for name in notebook_imports(notebook_code(path), modules):
            importers.setdefault(name, set()).add(path.name[:2])
    wrong = []
    for module, text in glossary_notebooks(course_utils.__doc__).items():
        listed, actual = notebook_numbers(text, existing), importers.get(module, set())
        if listed != actual:
            wrong.append(f"{module}: the table says {text!r}, notebooks {sorted(actual)} import it")
    assert not wrong, "course_utils/__init__.py's notebooks column:\n" + "\n".join(wrong)


def test_glossary_notebook_column_reader_and_its_catch():
    existing = ["00", "01", "02", "03", "05", "17"]
    assert notebook_numbers("01, 03-05", existing) == {"01", "03", "05"}
    assert notebook_numbers("every notebook", existing) == set(existing)
    assert notebook_numbers("all but 00, 02-03", existing) == {"01", "05", "17"}
    assert notebook_numbers("-", existing) == set()
    with pytest.raises(AssertionError, match="cannot read"):
        notebook_numbers("notebook two", existing)
    source = "from course_utils import attention, plotting\nfrom course_utils.apps import memory\n"
    found = notebook_imports(source, {"attention", "plotting", "apps", "apps.memory"})
    assert found == {"attention", "plotting", "apps", "apps.memory"}
    doc = "| concept | module | notebooks |\n|---|---|---|\n| masks | attention | 02-06 |\n"
    assert glossary_notebooks(doc) == {"attention": "02-06"}


# A positive-int check written by hand instead of _validate.check_positive: an isinstance(x,
# int) test and a comparison of x with 0 or 1 in one statement.
HAND_ROLLED_POSITIVE = re.compile(
    r"isinstance\((?P<x>\w+), int\).*(?P=x) *(<= *0|< *1)\b|(?P<y>\w+) *(<= *0|< *1)\b.*isinstance\((?P=y), int\)"
)


def hand_rolled_positive_checks(source: str) -> list[int]:
    """Line numbers of positive-int checks in ``source`` that bypass ``check_positive``."""
    return [i for i, line in enumerate(source.splitlines(), 1) if HAND_ROLLED_POSITIVE.search(line)]


def test_positive_int_checks_go_through_check_positive():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "course_utils").rglob("*.py"))
        if path.name != "_validate.py"
        for line in hand_rolled_positive_checks(path.read_text())
    ]
    assert not found, (
        "use _validate.check_positive (it rejects True and names the type):\n" + "\n".join(found)
    )


def test_one_home_for_the_hash_split():
    # every data set splits through data.split_by_hash; no module hashes for itself
    homes = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "course_utils").rglob("*.py"))
        if "crc32(" in path.read_text() and path.name != "data.py"
    ]
    assert not homes, f"call data.split_by_hash instead of hashing here: {homes}"


def test_one_home_for_moving_a_batch():
    # every batch dataclass inherits data.TensorBatch.to; none writes its own
    homes = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in sorted((ROOT / "course_utils").rglob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"\s+def to\(self", line) and path.name != "data.py"
    ]
    assert not homes, f"derive the batch from data.TensorBatch instead: {homes}"


def endless_shuffles(source: str) -> list[str]:
    """Functions in ``source`` that loop forever over random orders (``while True`` around a
    ``randperm``): a training-batch iterator of their own."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef):
            continue
        forever = any(
            isinstance(n, ast.While) and isinstance(n.test, ast.Constant) and n.test.value is True
            for n in ast.walk(fn)
        )
        shuffles = any(isinstance(n, ast.Attribute) and n.attr == "randperm" for n in ast.walk(fn))
        if forever and shuffles:
            found.append(fn.name)
    return found


def test_one_home_for_shuffled_training_batches():
    homes = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "course_utils").rglob("*.py"))
        if path.name != "data.py"
        for name in endless_shuffles(path.read_text())
    ]
    assert not homes, f"use data.shuffled_batches instead: {homes}"
    sample = "def f(n):\n    while True:\n        yield torch.randperm(n)\n"
    assert endless_shuffles(sample) == ["f"]
    assert endless_shuffles("def g(n):\n    return torch.randperm(n)\n") == []


def test_hand_rolled_positive_check_finder_catches_each_form():
    assert hand_rolled_positive_checks("if not isinstance(n, int) or n < 1:\n    raise") == [1]
    assert hand_rolled_positive_checks("x = 1\nif n <= 0 or not isinstance(n, int): pass") == [2]
    assert (
        hand_rolled_positive_checks("check_positive('n', n)\nif isinstance(k, int) and m < 1:")
        == []
    )


def misnamed_sizes(source: str) -> list[int]:
    """Lines of ``source`` that name a size ``hidden_dim`` (any case) anywhere but in
    ``AdditiveScore``'s own parameter, the public API's one exception: the glossary names
    the recurrent state ``rnn_dim`` (R) and the additive-attention size ``attn_dim`` (A)."""
    tree = ast.parse(source)
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "AdditiveScore":
            allowed |= {id(n) for n in ast.walk(node)}
        elif isinstance(node, ast.Call):
            func = node.func
            if getattr(func, "attr", getattr(func, "id", None)) == "AdditiveScore":
                allowed |= {id(k) for k in node.keywords}
    found = set()
    for node in ast.walk(tree):
        name = (
            getattr(node, "arg", None) or getattr(node, "id", None) or getattr(node, "attr", None)
        )
        if isinstance(name, str) and name.lower() == "hidden_dim" and id(node) not in allowed:
            found.add(node.lineno)
    return sorted(found)


def test_one_name_for_the_recurrent_state_and_the_additive_size():
    sources = [(p, p.read_text()) for p in sorted((ROOT / "course_utils").rglob("*.py"))]
    sources += [(p, p.read_text()) for p in sorted((ROOT / "tests").glob("*.py"))]
    sources += [(p, notebook_code(p)) for p in NOTEBOOKS]
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path, source in sources
        for line in misnamed_sizes(source)
    ]
    assert not found, "R is rnn_dim and A is attn_dim (glossary):\n" + "\n".join(found)


def test_misnamed_size_finder_catches_each_form():
    assert misnamed_sizes("def f(hidden_dim):\n    return hidden_dim") == [1, 2]
    assert misnamed_sizes("HIDDEN_DIM = 64\nConfig(hidden_dim=HIDDEN_DIM)") == [1, 2]
    assert misnamed_sizes("x = self.config.hidden_dim") == [1]
    exception = (
        "class AdditiveScore:\n    def __init__(self, hidden_dim):\n        self.hidden_dim = hidden_dim\n"
        "s = attention.AdditiveScore(query_dim=4, key_dim=4, hidden_dim=8)\n"
    )
    assert misnamed_sizes(exception) == []


def test_no_module_takes_a_private_name_from_another():
    problems = private_imports(package_modules())
    assert not problems, "make the name public (and document it), or move it:\n" + "\n".join(
        problems
    )


def test_private_import_check_catches_each_form(tmp_path):
    package = tmp_path / "course_utils"
    (package / "exercises").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_validate.py").write_text("def check_x(): ...\n")
    (package / "plotting.py").write_text("def _to_numpy(x): ...\ndef _own(): ...\n")
    (package / "widgets.py").write_text(
        "from course_utils.plotting import _to_numpy\n"  # 1: absolute
        "from .plotting import _to_numpy as f\n"  # 2: relative
        "from course_utils import plotting\n"
        "plotting._to_numpy(1)\n"  # 4: through the module
        "from course_utils._validate import check_x\n"  # allowed
        "print(plotting.__name__)\n"  # a dunder is not private
    )
    (package / "exercises" / "__init__.py").write_text("")
    (package / "exercises" / "nb02.py").write_text("from ..plotting import _own\n")
    problems = private_imports(package_modules(package))
    lines = sorted(p.split(" uses ")[0].rsplit(":", 1)[1] for p in problems if "widgets" in p)
    assert lines == ["1", "2", "4"], problems
    assert "course_utils.exercises.nb02:1 uses course_utils.plotting._own" in problems
    assert len(problems) == 4


def test_building_blocks_never_import_apps_exercises_or_widgets():
    problems = building_block_violations(package_modules())
    assert not problems, "a building block must not depend on what is built from it:\n" + "\n".join(
        problems
    )


def test_building_block_check_catches_imports_from_above(tmp_path):
    package = tmp_path / "course_utils"
    for sub in ("exercises", "apps"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "apps" / "translation.py").write_text("from course_utils import widgets\n")
    (package / "widgets.py").write_text("from course_utils import plotting\n")
    (package / "plotting.py").write_text("import numpy\n")
    (package / "attention.py").write_text(
        "from course_utils.exercises import check_function\n"
        "from course_utils.apps import translation\n"
        "import course_utils.widgets\n"
        "from . import plotting\n"  # a building block: allowed
    )
    problems = building_block_violations(package_modules(package))
    assert sorted(p.split(" imports ")[1] for p in problems) == [
        "course_utils.apps.translation",
        "course_utils.exercises",
        "course_utils.widgets",
    ], problems  # apps.translation may import widgets: it is not a building block


def test_glossary_lists_every_module_and_nothing_else():
    import course_utils

    listed = glossary_modules(course_utils.__doc__)
    assert len(listed) == len(set(listed)), f"listed twice: {sorted(listed)}"
    existing = {name.removeprefix("course_utils.") for name in package_modules()}
    missing, stale = sorted(existing - set(listed)), sorted(set(listed) - existing)
    assert not missing, f"course_utils/__init__.py's table does not list {missing}"
    assert not stale, f"course_utils/__init__.py's table lists modules that do not exist: {stale}"


def test_glossary_parser_reads_the_module_column():
    doc = (
        "Words.\n\n| concept | module | notebooks |\n|---|---|---|\n"
        "| masks | ``attention`` | 02 |\n| checks | exercises.nb02 | 02 |\nMore words.\n"
    )
    assert glossary_modules(doc) == ["attention", "exercises.nb02"]
    with pytest.raises(AssertionError, match="no '| concept"):
        glossary_modules("a docstring without a table")


# Exercises: a solution block is checked by the notebook's own checker module
def notebook_checker_names(sources: list[str], number: str) -> tuple[set[str], set[str]]:
    """Names bound to ``course_utils.exercises.nbNN`` (module aliases) and to its functions."""
    own = f"course_utils.exercises.nb{number}"
    modules, functions = set(), set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module == own:
                functions |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module == "course_utils.exercises":
                modules |= {a.asname or a.name for a in node.names if a.name == f"nb{number}"}
            elif isinstance(node, ast.Import):
                modules |= {a.asname for a in node.names if a.name == own and a.asname}
    return modules, functions


def unchecked_solutions(sources: list[str], number: str) -> list[str]:
    """Solution blocks (``# BEGIN SOLUTION`` ... ``# END SOLUTION``, in the code cells
    ``sources``) not followed, before the next block, by a call to a checker of
    ``course_utils.exercises.nbNN``."""
    sources = [
        "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in s.split("\n"))
        for s in sources
    ]  # IPython magics are no Python: blank them, keeping line numbers
    modules, functions = notebook_checker_names(sources, number)
    events = []  # (cell, line, kind)
    for cell, source in enumerate(sources):
        for line, text in enumerate(source.split("\n"), start=1):
            if text.strip() in ("# BEGIN SOLUTION", "# END SOLUTION"):
                events.append((cell, line, text.strip()[2:5]))  # "BEG" or "END"
        for node in ast.walk(ast.parse(source)):
            func = getattr(node, "func", None) if isinstance(node, ast.Call) else None
            by_module = (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in modules
                and not func.attr.startswith("_")
            )
            if by_module or (isinstance(func, ast.Name) and func.id in functions):
                events.append((cell, node.lineno, "check"))
    events.sort()
    problems, open_block, checked = [], None, True
    for cell, line, kind in events:
        if kind == "BEG":
            if open_block is not None and not checked:
                problems.append(f"cell {open_block[0]}, line {open_block[1]}")
            open_block, checked = (cell, line), None  # None: inside the block
        elif kind == "END" and open_block is not None:
            checked = False
        elif kind == "check" and checked is False:
            checked = True
    if open_block is not None and not checked:
        problems.append(f"cell {open_block[0]}, line {open_block[1]}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_solution_is_checked_by_the_notebook_checkers(path):
    cells = json.loads(path.read_text())["cells"]
    # markdown cells count as empty code, so that problems name the notebook's cell numbers
    sources = ["".join(c["source"]) if c["cell_type"] == "code" else "" for c in cells]
    number = path.name[:2]
    problems = unchecked_solutions(sources, number)
    assert not problems, (
        f"{path.name}: the solution blocks at {problems} are not followed by a call to a "
        f"checker from course_utils.exercises.nb{number} before the next exercise"
    )


CHECKER_CALL = re.compile(r"(?m)^\s*(?:\w+\.)?(check_\w+)\(")


def nbgrader_problems(cells: list[dict]) -> list[str]:
    """Where a notebook's exercise cells break nbgrader's conventions: every cell with a
    ``# BEGIN SOLUTION`` region is an autograded answer (``solution``, not ``grade``, not
    locked), every cell that calls a checker is a locked autograder test worth its points,
    grade ids are unique, and no other cell claims to be either."""
    problems, ids = [], []
    for i, c in enumerate(cells):
        meta = c.get("metadata", {}).get("nbgrader")
        source = "".join(c["source"]) if c["cell_type"] == "code" else ""
        if "# BEGIN SOLUTION" in source:
            want = {"solution": True, "grade": False, "locked": False}
        elif CHECKER_CALL.search(source):
            want = {"solution": False, "grade": True, "locked": True}
        else:
            if meta:
                problems.append(f"cell {i}: nbgrader metadata on a cell that is not an exercise")
            continue
        if not meta:
            problems.append(f"cell {i}: no nbgrader metadata")
            continue
        got = {k: meta.get(k) for k in want}
        if got != want or meta.get("schema_version") != 3 or not meta.get("grade_id"):
            problems.append(f"cell {i}: nbgrader metadata {meta}, expected {want}")
        if want["grade"] and not meta.get("points", 0) > 0:
            problems.append(f"cell {i}: a grade cell without points")
        ids.append(meta.get("grade_id"))
    repeated = sorted({g for g in ids if ids.count(g) > 1})
    if repeated:
        problems.append(f"grade ids used twice: {repeated}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercise_cells_carry_nbgraders_metadata(path):
    problems = nbgrader_problems(json.loads(path.read_text())["cells"])
    assert not problems, f"{path.name}: {problems}"


def test_the_nbgrader_check_catches_missing_wrong_and_stray_metadata():
    def code(source, **nbgrader):
        meta = {"nbgrader": {"schema_version": 3, **nbgrader}} if nbgrader else {}
        return {"cell_type": "code", "source": [source], "metadata": meta}

    solution = "def f(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
    good_solution = dict(solution=True, grade=False, locked=False, grade_id="f")
    good_check = dict(solution=False, grade=True, locked=True, grade_id="check_f", points=1)
    right = [code(solution, **good_solution), code("nb02.check_f(f)", **good_check)]
    assert nbgrader_problems(right) == []
    assert nbgrader_problems([code(solution), right[1]]) == ["cell 0: no nbgrader metadata"]
    unlocked = code("nb02.check_f(f)", **{**good_check, "locked": False})
    assert "expected" in nbgrader_problems([right[0], unlocked])[0]
    pointless = code("nb02.check_f(f)", **{**good_check, "points": 0})
    assert nbgrader_problems([right[0], pointless]) == ["cell 1: a grade cell without points"]
    stray = code("x = 1", **good_solution)
    assert "not an exercise" in nbgrader_problems([*right, stray])[0]
    twice = code("nb02.check_f(f)", **{**good_check, "grade_id": "f"})
    assert nbgrader_problems([right[0], twice]) == ["grade ids used twice: ['f']"]


def test_unchecked_solution_finder_catches_missing_and_foreign_checks():
    solution = "def my_f(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
    imports = "from course_utils.exercises import nb02\nfrom course_utils.exercises import nb04\n"
    checked = [imports, solution, "nb02.check_f(my_f)\n"]
    assert unchecked_solutions(checked, "02") == []
    assert unchecked_solutions([imports, solution + "nb02.check_f(my_f)\n"], "02") == []
    by_name = "from course_utils.exercises.nb01 import check_f as cf\n"
    assert unchecked_solutions([by_name, solution, "cf(my_f)\n"], "01") == []
    # no check at all; another notebook's checker; a private helper; a check that comes
    # only after the next exercise's solution
    assert unchecked_solutions([imports, solution], "02") == ["cell 1, line 2"]
    assert unchecked_solutions([imports, solution, "nb04.check_f(my_f)\n"], "02") != []
    assert unchecked_solutions([imports, solution, "nb02._cases(my_f)\n"], "02") != []
    late = [imports, solution, solution, "nb02.check_f(my_f)\n"]
    assert unchecked_solutions(late, "02") == ["cell 1, line 2"]
    # a call inside the solution block does not count as its check
    inside = "def my_f(x):\n    # BEGIN SOLUTION\n    nb02.check_f(x)\n    # END SOLUTION\n"
    assert unchecked_solutions([imports, inside], "02") == ["cell 1, line 2"]

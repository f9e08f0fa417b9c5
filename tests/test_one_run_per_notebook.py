"""Each notebook runs once in ``make test`` (conftest.py): where its browser widget test is
selected and Chromium is found, that test runs every cell in JupyterLab and the notebook's
nbval cells are deselected; without Chromium, or with ``-m "not browser"``, nbval runs it.

A small stand-in course in a temporary folder: the course's conftest.py, two notebooks that
note in a file that they ran, and a ``tests/test_browser_widgets.py`` whose browser test only
reports a wall time (Chromium's presence is an environment variable here)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]

STAND_IN = """
import os

import pytest


def _missing_browser():
    return os.environ.get("STAND_IN_NO_BROWSER") or None


@pytest.mark.browser
@pytest.mark.parametrize("notebook", ["with_widgets.ipynb"])
def test_widgets_in_browser(notebook, request):
    if _missing_browser():
        pytest.skip("no Chromium")
    request.node.user_properties.append(("course_walltime", (notebook, 1.5)))
"""


@pytest.fixture
def course(tmp_path):
    (tmp_path / "notebooks").mkdir()
    for name in ("with_widgets", "plain"):
        cells = [
            nbformat.v4.new_code_cell("import os"),
            nbformat.v4.new_code_cell(
                f"with open(os.environ['STAND_IN_LOG'], 'a') as f:\n    f.write('{name}\\n')"
            ),
        ]
        nb = nbformat.v4.new_notebook(cells=cells)
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        nb.metadata["course"] = {"budget_seconds": 10}
        nbformat.write(nb, tmp_path / "notebooks" / f"{name}.ipynb")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_browser_widgets.py").write_text(STAND_IN)
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    browser: a browser test\n")
    return tmp_path


def run(course: Path, *options: str, browser: bool = True) -> tuple[list[str], str]:
    """(the notebooks nbval ran, in order; pytest's output)"""
    log = course / "ran.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "STAND_IN_LOG": str(log)}
    env.pop("STAND_IN_NO_BROWSER", None)
    env.pop("COURSE_EXECUTED_DIR", None)
    if not browser:
        env["STAND_IN_NO_BROWSER"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "notebooks", "tests/test_browser_widgets.py",
         "--nbval-lax", "-p", "no:cacheprovider", *options],
        cwd=course, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    ran = log.read_text().split() if log.exists() else []
    return sorted(ran), done.stdout


def table_line(output: str, notebook: str) -> list[str]:
    table = output.split("notebook wall times")[1]
    return next(line.split() for line in table.splitlines() if line.startswith(notebook))


def test_with_chromium_the_browser_test_is_the_notebooks_run(course):
    ran, output = run(course)
    assert ran == ["plain"]  # nbval ran only the notebook without a browser test
    assert "3 passed, 2 deselected" in output, output  # 2 nbval cells, 1 browser test
    assert table_line(output, "with_widgets.ipynb")[1:3] == ["JupyterLab", "1.5"]
    assert table_line(output, "plain.ipynb")[1] == "nbval"


def test_without_chromium_nbval_runs_every_notebook(course):
    ran, output = run(course, browser=False)
    assert ran == ["plain", "with_widgets"]
    assert "4 passed, 1 skipped" in output and "deselected" not in output, output
    assert table_line(output, "with_widgets.ipynb")[1] == "nbval"


def test_without_the_browser_tests_nbval_runs_every_notebook(course):
    ran, output = run(course, "-m", "not browser")
    assert ran == ["plain", "with_widgets"]
    assert "4 passed, 1 deselected" in output, output  # the browser test itself
    assert table_line(output, "with_widgets.ipynb")[1] == "nbval"

"""The test run keeps executed copies of the notebooks (conftest.py, ``COURSE_EXECUTED_DIR``):
a small notebook run under nbval, as ``make test`` runs the course's, comes back with every
cell's outputs, valid, and the stored notebook is left as it was."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def test_nbval_run_writes_each_notebook_with_its_outputs(tmp_path):
    cells = [
        nbformat.v4.new_markdown_cell("# A title"),
        nbformat.v4.new_code_cell("print('hello')"),
        nbformat.v4.new_code_cell("x = 6 * 7\nx"),
        nbformat.v4.new_code_cell("from IPython.display import HTML\nHTML('<b>bold</b>')"),
        nbformat.v4.new_code_cell("y = 1  # no output"),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    (tmp_path / "notebooks").mkdir()
    for name in ("first.ipynb", "second.ipynb"):
        nbformat.write(nb, tmp_path / "notebooks" / name)
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the course's own settings
    executed = tmp_path / "executed"
    env = {**os.environ, "COURSE_EXECUTED_DIR": str(executed)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "notebooks/first.ipynb", "notebooks/second.ipynb", "--nbval-lax",
         "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    for name in ("first.ipynb", "second.ipynb"):
        out = nbformat.read(executed / name, as_version=4)
        nbformat.validate(out)
        code = [c for c in out.cells if c.cell_type == "code"]
        assert [c.execution_count for c in code] == [1, 2, 3, 4]
        assert code[0].outputs[0]["text"] == "hello\n"
        assert code[1].outputs[0]["data"]["text/plain"] == "42"
        assert code[2].outputs[0]["data"]["text/html"] == "<b>bold</b>"
        assert code[3].outputs == []
        assert out.cells[0].source == "# A title"
        stored = json.loads((tmp_path / "notebooks" / name).read_text())
        assert all(c.get("outputs", []) == [] for c in stored["cells"])  # the source untouched


def test_without_the_variable_nothing_is_written(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, tmp_path / "notebooks" / "only.ipynb")
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k != "COURSE_EXECUTED_DIR"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "notebooks/only.ipynb", "--nbval-lax", "-p", "no:cacheprovider",
         "-q"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    # nothing but what the test wrote (and Python's bytecode cache of conftest.py, where the
    # environment lets Python write one)
    written = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")
    assert written == ["conftest.py", "notebooks", "pytest.ini"]

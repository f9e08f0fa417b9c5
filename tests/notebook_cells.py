"""Run a notebook's from-scratch cells (those whose first line is ``# from-scratch: NAME``).

Tests use it to check that what a notebook builds in the open equals the library version,
without running the notebook's training, plots or widgets.
"""

from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
MARKER = "# from-scratch:"


def from_scratch_cells(notebook: str) -> dict[str, str]:
    """``{name: source}`` of the marked code cells of ``notebooks/<notebook>``, in order."""
    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    cells = {}
    for cell in nb.cells:
        lines = cell.source.lstrip().splitlines()
        if cell.cell_type == "code" and lines and lines[0].startswith(MARKER):
            cells[lines[0][len(MARKER) :].strip()] = cell.source
    return cells


def run_from_scratch_cells(notebook: str, namespace: dict) -> dict:
    """Execute the marked cells, in notebook order, in ``namespace``; return it."""
    for source in from_scratch_cells(notebook).values():
        exec(compile(source, str(NOTEBOOKS / notebook), "exec"), namespace)
    return namespace


def assert_marked_cells_define(notebook: str, namespace: dict, expected: set[str]) -> None:
    """The marked cells are exactly ``expected``, and the cell marked NAME defines NAME."""
    cells = from_scratch_cells(notebook)
    assert set(cells) == set(expected)
    for name in expected:
        assert callable(namespace[name]), name
        source = cells[name]
        assert f"def {name}(" in source or f"class {name}(" in source, (
            f"cell marked {name} does not define it"
        )

"""Run a notebook's from-scratch cells (those whose first line is ``# from-scratch: NAME``).

Tests use it to check that what a notebook builds in the open equals the library version,
without running the notebook's training, plots or widgets.
"""

from pathlib import Path

import nbformat
import pytest
import torch

from course_utils.training import fit

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


def assert_train_step_equals_fit(train_step, build, loss_fn, batch, lr: float) -> None:
    """A notebook's written-out ``train_step(model, optimizer, batch)``, taken once from the
    weights ``build()`` makes, returns the loss ``loss_fn`` gives and leaves the weights that
    one step of ``training.fit`` (Adam at ``lr``, gradients clipped at 1) leaves."""
    by_hand, by_fit = build(), build()
    by_fit.load_state_dict(by_hand.state_dict())
    expected_loss = loss_fn(by_fit, batch).item()
    loss = train_step(by_hand, torch.optim.Adam(by_hand.parameters(), lr=lr), batch)
    fit(by_fit, iter([batch]), loss_fn, 1, lr=lr, progress=False)
    assert loss == pytest.approx(expected_loss, rel=1e-5)
    for a, b in zip(by_hand.parameters(), by_fit.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)

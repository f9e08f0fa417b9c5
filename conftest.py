"""How ``make test`` runs: notebooks spread over the cores, and what it reports at the end.

- **One run per notebook**: nbval runs a notebook as one test item per cell. A notebook with
  widgets also has a browser test (``tests/test_browser_widgets.py``), which opens it in
  JupyterLab in headless Chromium and runs every cell there, as a learner does, failing on
  any error, before it moves the widgets. Where that test is selected and Chromium is found,
  it is the notebook's run and the notebook's nbval items are deselected; without Chromium
  (the browser test then skips) or with ``-m "not browser"``, nbval runs the notebook. (Each
  xdist worker deselects them; pytest's summary counts them only in a run without workers.)
- **Scheduling** (pytest-xdist): all the cells of a notebook form one group that one worker
  runs in order, with the notebook's browser test after them. Groups are handed out longest
  budget first; the unit tests fill the gaps. (xdist's own ``loadgroup`` mode marks groups by
  renaming node ids, which pytest 9 no longer allows, so the scheduler below groups by the
  node id itself.)
- **Wall times**: one line per notebook (kernel start to last cell, under nbval or in
  JupyterLab) against its budget, ``metadata["course"]["budget_seconds"]`` (COURSE_MAP.md's
  time budget on a 2-core CPU). Timings are reported, not asserted: machines differ, and a
  slow CI runner is no bug.
- **Executed copies**: with ``COURSE_EXECUTED_DIR`` set (``make test`` sets ``build/executed``),
  each notebook is written there with the outputs of its run, so that the course site is
  built from the test run instead of executing the notebooks a second time: nbval's copy
  (below; it keeps what a cell printed and displayed, but not what a widget draws into its
  output area after the cell has run, a comm message), or the browser test's, which JupyterLab
  saves once every cell has run (what the learner's page shows).
- **Notes**: lines that tests attach as ``("course_note", text)`` user properties (where the
  browser tests saved their screenshots, what each widget did) are printed at the end; a
  worker's own output is not shown under xdist.
"""

import json
import time
from pathlib import Path

import pytest

_started: dict[str, float] = {}
_finished: dict[str, float] = {}


def _notebook_of(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    return path if path.endswith(".ipynb") else None


# nbval waits only 5 s for a cell's output messages once the kernel has said the cell is
# done; after a long training cell on a busy 2-core machine that wait can run out and fail a
# cell that worked (seen in CI on notebook 03). Give the messages a minute.
NBVAL_OUTPUT_TIMEOUT_S = 60


def _budget(path: Path) -> int:
    meta = json.loads(path.read_text()).get("metadata", {})
    return meta.get("course", {}).get("budget_seconds", 0)


BROWSER_TEST = "tests/test_browser_widgets.py::test_widgets_in_browser["


def _group_of(nodeid: str) -> str | None:
    """The notebook a test item belongs to (one of its cells, or its browser widget test)."""
    path = nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        return Path(path).name
    if nodeid.startswith(BROWSER_TEST) and nodeid.endswith(".ipynb]"):
        return nodeid[len(BROWSER_TEST) : -1]
    return None


def pytest_xdist_make_scheduler(config, log):
    """Whole notebooks to one worker, in collection order (see the module docstring)."""
    from xdist.scheduler import LoadScopeScheduling

    class NotebookScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return _group_of(nodeid) or nodeid  # every other test is a unit of its own

    config.option.loadscopereorder = False  # keep the order chosen in modifyitems
    return NotebookScheduling(config, log)


# After pytest's own selection (-m, -k): only a browser test that is still selected replaces
# its notebook's nbval run.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    for item in items:
        if hasattr(item, "output_timeout"):  # nbval's notebook cells
            item.output_timeout = NBVAL_OUTPUT_TIMEOUT_S
    # One group per notebook: its cells in order, then its browser test; longest budget first.
    groups: dict[str, list] = {}
    rest = []
    for item in items:
        name = _group_of(item.nodeid)
        if name is None:
            rest.append(item)
        else:
            groups.setdefault(name, []).append(item)
    budgets = {name: _budget(Path(config.rootpath, "notebooks", name)) for name in groups}
    ordered, replaced = [], []
    for name in sorted(groups, key=lambda n: (-budgets[n], n)):
        cells = [i for i in groups[name] if i.path.suffix == ".ipynb"]
        browser = [i for i in groups[name] if i.path.suffix != ".ipynb"]
        # the browser test runs (Chromium found) rather than skips
        if browser and all(i.module._missing_browser() is None for i in browser):
            replaced += cells  # the browser test runs every cell: the notebook's one run
            cells = []
        ordered += cells + browser
    items[:] = ordered + rest
    if replaced:
        config.hook.pytest_deselected(items=replaced)


EXECUTED_DIR_VARIABLE = "COURSE_EXECUTED_DIR"


def pytest_runtest_teardown(item, nextitem):
    """Keep an nbval cell's outputs in its notebook; write the notebook after its last cell."""
    import os

    folder = os.environ.get(EXECUTED_DIR_VARIABLE)
    if not folder or not hasattr(item, "test_outputs") or not hasattr(item.parent, "nb"):
        return
    item.cell.outputs = list(item.test_outputs or [])
    item.cell.execution_count = item.cell_num + 1
    if nextitem is None or getattr(nextitem, "parent", None) is not item.parent:
        import nbformat

        out = Path(folder) / Path(str(item.parent.path)).name
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(item.parent.nb, out)


_notes: dict[str, None] = {}  # insertion-ordered set


_in_jupyterlab: dict[str, float] = {}  # notebook path -> seconds, when the browser test ran it


def pytest_runtest_logreport(report):
    for key, value in getattr(report, "user_properties", []):
        if key == "course_note":
            _notes.setdefault(value)
        elif key == "course_walltime":
            name, seconds = value
            _in_jupyterlab[f"notebooks/{name}"] = seconds


def pytest_runtest_logstart(nodeid, location):
    nb = _notebook_of(nodeid)
    if nb is not None:
        _started.setdefault(nb, time.perf_counter())


def pytest_runtest_logfinish(nodeid, location):
    nb = _notebook_of(nodeid)
    if nb is not None:
        _finished[nb] = time.perf_counter()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _notes:
        terminalreporter.section("notes from the tests")
        for line in _notes:
            terminalreporter.write_line(line)
    times = {nb: _finished.get(nb, start) - start for nb, start in _started.items()}
    ran_in = {nb: "nbval" for nb in times}
    for nb, seconds in _in_jupyterlab.items():
        if nb not in times:  # the browser test was the notebook's run
            times[nb], ran_in[nb] = seconds, "JupyterLab"
    if not times:
        return
    terminalreporter.section("notebook wall times (budget from COURSE_MAP.md, 2-core CPU)")
    for nb in sorted(times):
        seconds = times[nb]
        meta = json.loads(Path(config.rootpath, nb).read_text()).get("metadata", {})
        budget = meta.get("course", {}).get("budget_seconds")
        verdict = (
            ""
            if budget is None
            else f"  budget {budget:>4} s  {'ok' if seconds <= budget else 'OVER BUDGET'}"
        )
        terminalreporter.write_line(
            f"{Path(nb).name:<36} {ran_in[nb]:>10} {seconds:7.1f} s{verdict}"
        )

"""Report each notebook's wall time (kernel start to last cell) against its budget.

nbval runs a notebook as one test item per cell; this adds the items of a notebook up and
prints one line per notebook at the end of the run. The budget is the notebook's
``metadata["course"]["budget_seconds"]`` (COURSE_MAP.md's time budget on a 2-core CPU).
Timings are reported, not asserted: machines differ, and a slow CI runner is no bug.
"""

import json
import time
from pathlib import Path

_started: dict[str, float] = {}
_finished: dict[str, float] = {}


def _notebook_of(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    return path if path.endswith(".ipynb") else None


# nbval waits only 5 s for a cell's output messages once the kernel has said the cell is
# done; after a long training cell on a busy 2-core machine that wait can run out and fail a
# cell that worked (seen in CI on notebook 03). Give the messages a minute.
NBVAL_OUTPUT_TIMEOUT_S = 60


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        if hasattr(item, "output_timeout"):  # nbval's notebook cells
            item.output_timeout = NBVAL_OUTPUT_TIMEOUT_S


def pytest_runtest_logstart(nodeid, location):
    nb = _notebook_of(nodeid)
    if nb is not None:
        _started.setdefault(nb, time.perf_counter())


def pytest_runtest_logfinish(nodeid, location):
    nb = _notebook_of(nodeid)
    if nb is not None:
        _finished[nb] = time.perf_counter()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _started:
        return
    terminalreporter.section("notebook wall times (budget from COURSE_MAP.md, 2-core CPU)")
    for nb in sorted(_started):
        seconds = _finished.get(nb, _started[nb]) - _started[nb]
        meta = json.loads(Path(config.rootpath, nb).read_text()).get("metadata", {})
        budget = meta.get("course", {}).get("budget_seconds")
        verdict = (
            ""
            if budget is None
            else f"  budget {budget:>4} s  {'ok' if seconds <= budget else 'OVER BUDGET'}"
        )
        terminalreporter.write_line(f"{Path(nb).name:<40} {seconds:7.1f} s{verdict}")

"""Every notebook's asserted targets against its recorded runs (benchmarks/results/NN.json).

The audit in ``benchmarks/robustness.py`` fails where a target has no recorded values, where
its threshold differs from the recorded one, where a recorded run failed, or where the
threshold rule does not hold (benchmarks/README.md: every run meets the threshold, which sits
at least half the spread beyond the worst run). ``tests/test_robustness.py`` shows that the
audit catches each of these cases.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("robustness", ROOT / "benchmarks" / "robustness.py")
robustness = importlib.util.module_from_spec(spec)
sys.modules.setdefault("robustness", robustness)
spec.loader.exec_module(robustness)

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_targets_are_recorded_and_keep_the_rule(path):
    problems = robustness.audit(path)
    assert not problems, "\n".join(problems)


def test_every_results_file_belongs_to_a_notebook():
    numbers = {p.name[:2] for p in NOTEBOOKS}
    stray = [
        p.name for p in (ROOT / "benchmarks" / "results").glob("*.json") if p.stem not in numbers
    ]
    assert not stray, f"results files without a notebook: {stray}"


def test_the_measurements_page_shows_the_recorded_files_as_they_are():
    page = (ROOT / "docs" / "measurements.md").read_text(encoding="utf-8")
    assert robustness.README_START in page and robustness.README_END in page
    assert robustness.readme_with_results(page) == page, (
        "docs/measurements.md's recorded-targets section is stale: run "
        ".venv/bin/python benchmarks/robustness.py --readme docs/measurements.md"
    )

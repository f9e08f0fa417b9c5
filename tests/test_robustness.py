"""benchmarks/robustness.py: reruns a notebook with other seeds and reads back its targets."""

import importlib.util
import json
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("robustness", ROOT / "benchmarks" / "robustness.py")
robustness = importlib.util.module_from_spec(spec)
sys.modules["robustness"] = robustness  # dataclasses look their module up there
spec.loader.exec_module(robustness)


def write_notebook(path: Path, with_parameters: bool = True) -> Path:
    parameters = nbformat.v4.new_code_cell("SEED = 0\nTHREADS = 1")
    if with_parameters:
        parameters.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell(
        "import torch\n"
        "from course_utils.targets import target\n"
        "torch.set_num_threads(THREADS)\n"
        "assert target('seed plus one', SEED + 1, '>=', 1)\n"
        "assert target('threads', torch.get_num_threads(), '<=', 1)\n"
        "assert target('seed is zero', SEED, '<=', 0)"  # fails for seed 1: the run stops here
    )
    nb = nbformat.v4.new_notebook(cells=[parameters, body])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def test_two_seeds_of_a_small_notebook(tmp_path, capsys):
    path = write_notebook(tmp_path / "tiny.ipynb")
    status = robustness.main(
        [str(path), "--seeds", "0", "1", "--threads", "1", "--json", str(tmp_path / "out.json")]
    )
    out = capsys.readouterr().out
    assert status == 1  # seed 1 failed its last target, and the script says so
    assert "FAILED seed 1, threads 1" in out
    rows = {
        r["name"]: r
        for r in json.loads((tmp_path / "out.json").read_text())["summary"]["tiny.ipynb"]
    }
    assert (rows["seed plus one"]["min"], rows["seed plus one"]["max"]) == (1.0, 2.0)
    assert rows["seed plus one"]["median"] == 1.5 and rows["seed plus one"]["met"] == 2
    assert rows["threads"]["values"] == [1.0, 1.0]  # THREADS reached the kernel
    assert rows["seed is zero"]["met"] == 1 and rows["seed is zero"]["runs"] == 2
    assert "seed plus one" in out and ">= 1" in out


def test_a_notebook_without_a_parameters_cell_is_refused_before_any_run(tmp_path):
    path = write_notebook(tmp_path / "plain.ipynb", with_parameters=False)
    with pytest.raises(ValueError, match="plain.ipynb: expected one cell tagged 'parameters'"):
        robustness.main([str(path), "--seeds", "0"])


def test_every_training_notebook_can_be_rerun():
    names = {p.name for p in robustness.default_notebooks()}
    for stem in ["01", "03", "04", "05", "06", "07", "13"]:
        assert any(n.startswith(stem) for n in names), f"notebook {stem} has no parameters cell"


def test_runs_never_hold_more_threads_than_the_cores_given(monkeypatch, tmp_path):
    # Stand-in runs record how many threads were in flight when each started.
    import threading
    import time

    lock, in_flight, seen = threading.Lock(), [0, 0], []  # threads, runs

    def fake_run(path, seed, threads, workdir, timeout, run_timeout):
        with lock:
            in_flight[0] += threads
            in_flight[1] += 1
            seen.append((threads, in_flight[0], in_flight[1]))
        time.sleep(0.05)
        with lock:
            in_flight[0] -= threads
            in_flight[1] -= 1
        return robustness.Run(path.name, seed, threads)

    monkeypatch.setattr(robustness, "run_one", fake_run)
    path = write_notebook(tmp_path / "tiny.ipynb")
    args = [str(path), "--seeds", "0", "1", "2", "--threads", "1", "2", "3", "--jobs", "2"]
    assert robustness.main(args) == 0
    assert len(seen) == 9
    # one-thread runs share the two cores; a wider run goes alone (a 3-thread run on 2 cores)
    assert all(total <= max(2, threads) for threads, total, _ in seen)
    assert max(runs for _, _, runs in seen) == 2  # two one-thread runs did go together


def test_a_run_that_hangs_is_killed_and_tried_once_more(tmp_path, capsys):
    # The first try waits forever (as papermill did once for a widget cell); the second
    # finds the marker file and finishes.
    marker = tmp_path / "tried"
    parameters = nbformat.v4.new_code_cell("SEED = 0\nTHREADS = 1")
    parameters.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell(
        "import pathlib, time\n"
        "from course_utils.targets import target\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    marker.touch()\n"
        "    time.sleep(600)\n"
        "assert target('finished', 1, '>=', 1)"
    )
    nb = nbformat.v4.new_notebook(cells=[parameters, body])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = tmp_path / "hangs.ipynb"
    nbformat.write(nb, path)
    out_json = tmp_path / "out.json"
    args = [str(path), "--seeds", "0", "--threads", "1", "--run-timeout", "25"]
    assert robustness.main([*args, "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "no result after 25 s: killed; again" in out
    assert "second try (the first hung)" in out
    (run,) = json.loads(out_json.read_text())["runs"]
    assert run["attempts"] == 2 and not run["hung"] and not run["error"]
    assert [t["name"] for t in run["targets"]] == ["finished"]  # only the second try's


def test_a_run_may_take_ten_times_its_notebooks_budget(tmp_path):
    path = write_notebook(tmp_path / "tiny.ipynb")
    assert robustness.run_timeout_of(path, None) == 1200  # no budget: as if 120 s
    nb = nbformat.read(path, as_version=4)
    nb.metadata["course"] = {"budget_seconds": 45}
    nbformat.write(nb, path)
    assert robustness.run_timeout_of(path, None) == 450
    assert robustness.run_timeout_of(path, 20) == 20  # --run-timeout wins
    nb.metadata["course"] = {"budget_seconds": 10}
    nbformat.write(nb, path)
    assert robustness.run_timeout_of(path, None) == 300  # never under five minutes

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
        "from course_utils.claims import target\n"
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
        [str(path), "--seeds", "0", "1", "--machines", "native"]
        + ["--json", str(tmp_path / "out.json"), "--slots-dir", str(tmp_path / "slots")]
    )
    out = capsys.readouterr().out
    assert status == 1  # seed 1 failed its last target, and the script says so
    assert "FAILED seed 1, native, threads 1" in out
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
        robustness.main([str(path), "--seeds", "0", "--slots-dir", str(tmp_path)])


def test_every_training_notebook_can_be_rerun():
    names = {p.name for p in robustness.default_notebooks()}
    for stem in ["01", "03", "04", "05", "06", "07", "13"]:
        assert any(n.startswith(stem) for n in names), f"notebook {stem} has no parameters cell"


def test_runs_never_hold_more_threads_than_the_cores_given(monkeypatch, tmp_path):
    # Stand-in runs record how many threads were in flight when each started.
    import threading
    import time

    lock, in_flight, seen = threading.Lock(), [0, 0], []  # threads, runs
    # The runs go threads first, so the first two are one-thread runs that should share the
    # two cores: each waits at this barrier until the other has started. Run one at a time,
    # the first would wait alone and the barrier would break (BrokenBarrierError) after 60 s.
    pair = threading.Barrier(2, timeout=60)

    def fake_run(path, seed, threads, machine, workdir, timeout, run_timeout):
        with lock:
            in_flight[0] += threads
            in_flight[1] += 1
            seen.append((threads, in_flight[0], in_flight[1]))
            first_pair = threads == 1 and len(seen) <= 2
        if first_pair:
            pair.wait()
        time.sleep(0.05)  # gives a run that breaks the core limit time to be seen
        with lock:
            in_flight[0] -= threads
            in_flight[1] -= 1
        return robustness.Run(path.name, seed, threads, machine)

    monkeypatch.setattr(robustness, "run_one", fake_run)
    path = write_notebook(tmp_path / "tiny.ipynb")
    args = [str(path), "--seeds", "0", "1", "2", "--threads", "1", "2", "3", "--jobs", "2"]
    args += ["--machines", "native", "--slots-dir", str(tmp_path / "slots")]
    assert robustness.main(args) == 0
    assert len(seen) == 9
    # one-thread runs share the two cores; a wider run goes alone (a 3-thread run on 2 cores)
    assert all(total <= max(2, threads) for threads, total, _ in seen)
    assert max(runs for _, _, runs in seen) == 2  # two one-thread runs went together


def test_a_run_that_hangs_is_killed_and_tried_once_more(tmp_path, capsys):
    # The first try waits forever (as papermill did once for a widget cell); the second
    # finds the marker file and finishes.
    marker = tmp_path / "tried"
    parameters = nbformat.v4.new_code_cell("SEED = 0\nTHREADS = 1")
    parameters.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell(
        "import pathlib, time\n"
        "from course_utils.claims import target\n"
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
    args = [str(path), "--seeds", "0", "--machines", "native", "--run-timeout", "25"]
    args += ["--slots-dir", str(tmp_path / "slots")]
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


def test_each_machine_runs_other_kernels_and_native_ignores_the_callers_caps(tmp_path, monkeypatch):
    # The kernel reports which ATen kernels it dispatches to; the caller's shell exports an
    # AVX2 cap, which the "native" machine must drop.
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    parameters = nbformat.v4.new_code_cell("SEED = 0\nTHREADS = 1")
    parameters.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell(
        "import os, torch\n"
        "from course_utils.claims import target\n"
        "capability = torch.backends.cpu.get_cpu_capability()\n"
        "target('default kernels', int(capability == 'DEFAULT'), '>=', 0)\n"
        "target('avx2 kernels', int(capability == 'AVX2'), '>=', 0)\n"
        "target('aten cap set', int('ATEN_CPU_CAPABILITY' in os.environ), '>=', 0)"
    )
    nb = nbformat.v4.new_notebook(cells=[parameters, body])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = tmp_path / "98_machines.ipynb"
    nbformat.write(nb, path)
    results = tmp_path / "results"
    args = [str(path), "--seeds", "0", "--machines", "native", "avx2", "portable", "--record"]
    args += ["--results-dir", str(results), "--slots-dir", str(tmp_path / "slots"), "--jobs", "2"]
    assert robustness.main(args) == 0
    recorded = json.loads((results / "98.json").read_text())
    assert [r["machine"] for r in recorded["runs"]] == ["native", "avx2", "portable"]
    t = recorded["targets"]
    assert t["aten cap set"]["values"] == [0.0, 1.0, 1.0]  # native dropped the caller's cap
    assert t["default kernels"]["values"] == [0.0, 0.0, 1.0]
    assert t["avx2 kernels"]["values"][1] == 1.0
    assert t["default kernels"]["op"] == ">=" and t["default kernels"]["threshold"] == 0


def test_record_keeps_run_order_and_marks_values_a_failed_run_never_reached(tmp_path):
    path = write_notebook(tmp_path / "97_tiny.ipynb")  # seed 1 fails at its last target
    results = tmp_path / "results"
    args = [str(path), "--seeds", "0", "1", "2", "--machines", "native", "--record"]
    args += ["--results-dir", str(results), "--slots-dir", str(tmp_path / "slots")]
    assert robustness.main(args) == 1
    recorded = json.loads((results / "97.json").read_text())
    assert [r["seed"] for r in recorded["runs"]] == [0, 1, 2]
    assert recorded["runs"][1]["error"] and not recorded["runs"][0]["error"]
    assert recorded["targets"]["seed plus one"]["values"] == [1.0, 2.0, 3.0]
    # target() still records a figure that misses its threshold, then the assert stops the run
    assert recorded["targets"]["seed is zero"]["values"] == [0.0, 1.0, 2.0]
    assert set(recorded["recorded"]) >= {"date", "commit", "cpu", "torch", "python"}


# -- the audit: notebooks' target(...) calls against the recorded files ----------------------


def audit_case(tmp_path, calls: str, targets: dict, runs: int = 3, errors=()):
    """A notebook 96 with the given target calls, and a results file with the given targets."""
    cell = nbformat.v4.new_code_cell("from course_utils.claims import target\n" + calls)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# tiny"), cell])
    (tmp_path / "notebooks").mkdir(exist_ok=True)
    path = tmp_path / "notebooks" / "96_tiny.ipynb"
    nbformat.write(nb, path)
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    run_list = [
        dict(seed=s, machine="native", threads=1, seconds=1.0, error="", attempts=1)
        for s in range(runs)
    ]
    for i in errors:
        run_list[i]["error"] = "AssertionError"
    (results / "96.json").write_text(json.dumps({"runs": run_list, "targets": targets}))
    return robustness.audit(path, results)


def recorded(op, threshold, values):
    return dict(op=op, threshold=threshold, values=values)


def test_audit_passes_a_notebook_whose_targets_keep_the_rule(tmp_path):
    calls = (
        "for k in (1, 2):\n"
        "    assert target(f'accuracy at {k}', 0.9, '>=', 0.7)\n"
        "assert target('error', 0.1, '<=', 0.5)\n"
        "assert target('gap', -1.0, '>=', -3)\n"
    )
    targets = {
        "accuracy at 1": recorded(">=", 0.7, [0.8, 0.9, 1.0]),  # limit 0.7: just allowed
        "accuracy at 2": recorded(">=", 0.7, [0.9, 0.9, 0.9]),
        "error": recorded("<=", 0.5, [0.1, 0.2, 0.3]),
        "gap": recorded(">=", -3, [-1.0, -1.5, -2.0]),
    }
    assert audit_case(tmp_path, calls, targets) == []


@pytest.mark.parametrize(
    "calls, targets, caught",
    [
        # a target nobody recorded
        (
            "target('a', 1, '>=', 0.5)\ntarget('b', 1, '>=', 0.5)",
            {"a": recorded(">=", 0.5, [1] * 3)},
            "target /b/ has no recorded values",
        ),
        # the notebook's threshold moved after the runs were recorded
        (
            "target('a', 1, '>=', 0.6)",
            {"a": recorded(">=", 0.5, [1] * 3)},
            "'>= 0.6' in the notebook but '>= 0.5'",
        ),
        # every run meets it, but it sits closer than half the spread to the worst run
        (
            "target('a', 1, '>=', 0.75)",
            {"a": recorded(">=", 0.75, [0.8, 0.9, 1.0])},
            "too close to the worst recorded run",
        ),
        (
            "target('a', 1, '<=', 0.35)",
            {"a": recorded("<=", 0.35, [0.1, 0.2, 0.3])},
            "the rule allows at most <= 0.4",
        ),
        # a run that missed the threshold
        (
            "target('a', 1, '>=', 0.85)",
            {"a": recorded(">=", 0.85, [0.8, 0.9, 1.0])},
            "failed in 1 of 3 recorded runs",
        ),
        # a run that stopped before the target
        (
            "target('a', 1, '>=', 0.5)",
            {"a": recorded(">=", 0.5, [1.0, None, 1.0])},
            "no value from 1 recorded run",
        ),
        # a threshold computed in the cell cannot be compared
        (
            "c = 2\ntarget('a', 1, '>=', 0.5 * c)",
            {"a": recorded(">=", 1.0, [1] * 3)},
            "not a number literal",
        ),
        # the file records a target the notebook no longer makes
        (
            "target('a', 1, '>=', 0.5)",
            {"a": recorded(">=", 0.5, [1] * 3), "old": recorded(">=", 0.5, [1] * 3)},
            "records 'old', which no target",
        ),
    ],
)
def test_audit_catches_each_broken_case(tmp_path, calls, targets, caught):
    problems = audit_case(tmp_path, calls, targets)
    assert any(caught in p for p in problems), problems


def test_audit_catches_a_failed_run_and_a_missing_file(tmp_path):
    problems = audit_case(
        tmp_path, "target('a', 1, '>=', 0.5)", {"a": recorded(">=", 0.5, [1] * 3)}, errors=[2]
    )
    assert any("seed 2, native, threads 1 failed" in p for p in problems), problems
    (tmp_path / "results" / "96.json").unlink()
    problems = robustness.audit(tmp_path / "notebooks" / "96_tiny.ipynb", tmp_path / "results")
    assert any("no recorded runs" in p for p in problems), problems


def test_cores_are_shared_first_come_first_served_across_invocations(tmp_path):
    # Two Cores objects on one folder stand for two invocations of the script. B starts
    # waiting while A holds the only core; when A gives it back and asks again at once, B
    # must get it first.
    import threading
    import time

    a = robustness.Cores(1, tmp_path)
    b = robustness.Cores(1, tmp_path)
    order = []
    held_a = a.take(1)

    def b_waits():
        held = b.take(1)
        order.append("b")
        time.sleep(0.3)
        b.give(held)

    waiter = threading.Thread(target=b_waits)
    waiter.start()
    time.sleep(0.5)  # B's ticket is in the queue
    a.give(held_a)
    held_a = a.take(1)  # queued behind B
    order.append("a")
    a.give(held_a)
    waiter.join(timeout=10)
    assert order == ["b", "a"]
    assert not list(tmp_path.glob("ticket-*"))  # every ticket removed


def test_audit_gives_a_literal_name_to_its_own_call_not_to_a_matching_f_string(tmp_path):
    calls = (
        "assert target('accuracy, uniform', 0.5, '<=', 0.7)\n"
        "for name in ('learned',):\n"
        "    assert target(f'accuracy, {name}', 1.0, '>=', 0.9)\n"
    )
    targets = {
        "accuracy, uniform": recorded("<=", 0.7, [0.5] * 3),
        "accuracy, learned": recorded(">=", 0.9, [1.0] * 3),
    }
    assert audit_case(tmp_path, calls, targets) == []

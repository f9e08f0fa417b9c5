"""course_utils.measure: the peak extra memory of a call, against allocations of known size."""

import json
import os
import subprocess
import sys

import pytest

from course_utils import measure

linux = pytest.mark.skipif(
    not os.path.exists("/proc/self/clear_refs"), reason="reads Linux's /proc/self/status"
)
MiB = 2**20


# Measured in a fresh interpreter, as notebook 13's kernel and the benchmark's child
# processes measure: inside a long test session, memory that earlier tests freed can be
# reused and hide part of a call's peak.
CHILD = """
import json, torch
from course_utils.measure import peak_extra_memory
MiB = 2**20

def temporary():
    x = torch.ones(32 * MiB // 4)  # 32 MiB, freed before the call returns
    return float(x.sum())

result, kept = peak_extra_memory(torch.ones, 64 * MiB // 4)  # 64 MiB, every page written
print(json.dumps({
    "numel": result.numel(),
    "kept": kept,
    "temporary": peak_extra_memory(temporary)[1],
    "no_op": peak_extra_memory(lambda: None)[1],
}))
"""


@pytest.fixture(scope="module")
def fresh_process_readings():
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@linux
def test_a_touched_allocation_shows_in_the_peak(fresh_process_readings):
    r = fresh_process_readings
    assert r["numel"] == 64 * MiB // 4
    assert 60 * MiB <= r["kept"] <= 80 * MiB, f"{r['kept'] / MiB:.1f} MiB for a 64 MiB tensor"


@linux
def test_a_freed_temporary_still_counts_and_a_no_op_does_not(fresh_process_readings):
    r = fresh_process_readings
    assert 28 * MiB <= r["temporary"] <= 48 * MiB, f"{r['temporary'] / MiB:.1f} MiB"
    assert r["no_op"] < 4 * MiB, f"{r['no_op'] / MiB:.1f} MiB for a call that does nothing"


def test_without_proc_the_call_still_runs_and_the_bytes_are_none(monkeypatch):
    def no_proc(*args, **kwargs):
        raise OSError("no /proc here")

    monkeypatch.setattr(measure, "open", no_proc, raising=False)
    assert measure.peak_extra_memory(lambda a, b: a + b, 2, b=3) == (5, None)


@linux
def test_resident_kib_reads_both_fields():
    assert measure.resident_kib("VmHWM") >= measure.resident_kib("VmRSS") > 0


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        measure.peak_extra_memory(3)
    with pytest.raises(ValueError, match="field must be 'VmRSS' or 'VmHWM', got 'VmPeak'"):
        measure.resident_kib("VmPeak")

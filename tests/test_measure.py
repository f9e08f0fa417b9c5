"""course_utils.measure: the peak extra memory of a call, against allocations of known size."""

import json
import math
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
    # Resident memory first: it can grow between two reads, the high-water mark never falls,
    # so a mark read later is at least the resident size read before it.
    resident = measure.resident_kib("VmRSS")
    assert measure.resident_kib("VmHWM") >= resident > 0


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        measure.peak_extra_memory(3)
    with pytest.raises(ValueError, match="field must be 'VmRSS' or 'VmHWM', got 'VmPeak'"):
        measure.resident_kib("VmPeak")


# --- Vaswani et al.'s Table 1 and the multiply-add counter that checks it ---
def test_layer_costs_follow_table_1_and_cross_over_at_n_equal_d():
    for n in (1, 7, 64, 512, 3000):
        for d in (8, 64, 512):
            costs = measure.layer_costs(n, d, kernel_size=3, neighbourhood=5)
            attn, rnn = costs["self-attention"], costs["recurrent"]
            assert attn["operations"] / rnn["operations"] == pytest.approx(n / d)
            # self-attention is cheaper per layer exactly when n < d
            assert (attn["operations"] < rnn["operations"]) == (n < d)
            assert rnn["sequential"] == rnn["path"] == n and attn["path"] == 1
            dilated = costs["convolutional (dilated)"]["path"]
            assert 3**dilated == pytest.approx(max(n, 3))  # log_3 n layers, at least one
            assert costs["convolutional (contiguous)"]["path"] == pytest.approx(max(n / 3, 1))
            restricted = costs["self-attention (restricted)"]
            assert restricted["operations"] == min(5, n) * n * d  # r keys, or all n if fewer
            assert restricted["path"] == pytest.approx(max(n / 5, 1))
            assert all(row["path"] >= 1 for row in costs.values())
            assert all(row["sequential"] == 1 for name, row in costs.items() if name != "recurrent")


def test_layer_costs_reject_bad_sizes():
    with pytest.raises(TypeError, match="n must be an int"):
        measure.layer_costs(10.0, 8)
    with pytest.raises(ValueError, match="d must be positive"):
        measure.layer_costs(10, 0)
    with pytest.raises(ValueError, match="kernel_size must be at least 2"):
        measure.layer_costs(10, 8, kernel_size=1)
    with pytest.raises(TypeError, match="fn must be callable"):
        measure.count_multiply_adds(3)


def test_counted_multiply_adds_match_each_layers_formula():
    import torch
    from torch import nn

    from course_utils.attention import scaled_dot_product_attention

    n, d, k = 12, 8, 3
    x = torch.randn(1, n, d)
    # attention: Q K^T is n x n outputs of d products, weights V is n x d outputs of n products
    _, macs = measure.count_multiply_adds(scaled_dot_product_attention, x, x, x)
    assert macs == 2 * n * n * d
    # a GRU: three gates, each with a (d x d) input and a (d x d) recurrent matrix, per step
    _, macs = measure.count_multiply_adds(nn.GRU(d, d, batch_first=True), x)
    assert macs == 6 * n * d * d
    # a same-length convolution: n outputs of d channels, each k * d products
    conv = nn.Conv1d(d, d, k, padding=k // 2)
    result, macs = measure.count_multiply_adds(conv, x.transpose(1, 2))
    assert macs == k * n * d * d and result.shape == (1, d, n)
    # element-wise work is not counted
    assert measure.count_multiply_adds(torch.softmax, x, -1)[1] == 0


# ---------------------------------------------------------------------------------------
# Bytes moved between HBM and SRAM: counted, against a loop over Algorithm 1 and by hand
# ---------------------------------------------------------------------------------------
def _flash_io_by_loops(N, d, M):
    """Walk Dao et al.'s Algorithm 1 block by block, counting numbers read and written."""
    Bc = math.ceil(M / (4 * d))
    Br = min(Bc, d)
    reads, writes = 0, N * d + 2 * N  # line 2: O, l, m initialised in HBM
    for k0 in range(0, N, Bc):
        cols = min(Bc, N - k0)
        reads += 2 * cols * d  # line 6: K_j, V_j
        for q0 in range(0, N, Br):
            rows = min(Br, N - q0)
            reads += 2 * rows * d + 2 * rows  # line 8: Q_i, O_i, l_i, m_i
            writes += rows * d + 2 * rows  # lines 12-13: O_i, l_i, m_i
    return reads, writes


@pytest.mark.parametrize(("N", "d", "M"), [(4, 2, 16), (7, 3, 40), (100, 8, 200), (33, 16, 64)])
def test_tiled_io_equals_a_walk_over_the_algorithm(N, d, M):
    for nbytes in (1, 2, 4):
        reads, writes = _flash_io_by_loops(N, d, M)
        got = measure.tiled_attention_io(N, d, sram_bytes=M * nbytes, bytes_per_number=nbytes)
        assert got == (reads * nbytes, writes * nbytes)


def test_io_counts_by_hand():
    # N=4, d=2, M=16: Bc = ceil(16/8) = 2, Br = min(2, 2) = 2, two key blocks.
    # reads: K, V (2*4*2 = 16) + per key block Q, O (2*4*2) and l, m (2*4): 2 * 24 = 48
    # writes: O, l, m at start (4*2 + 8 = 16) + per key block O, l, m (8 + 8): 2 * 16 = 32
    assert measure.flash_block_sizes(2, 16, bytes_per_number=1) == (2, 2)
    assert measure.tiled_attention_io(4, 2, 16, bytes_per_number=1) == (64, 48)
    # naive: reads Q, K (16), S (16), P (16), V (8); writes S (16), P (16), O (8)
    assert measure.naive_attention_io(4, 2, bytes_per_number=4) == (56 * 4, 40 * 4)
    assert measure.flash_block_sizes(64, 100 * 1024) == (64, 200)  # Br capped at d


def _total(io):
    return sum(io)


def test_io_scales_as_the_analysis_says():
    d, sram = 64, 96 * 1024  # M = 49152 fp16 numbers, Bc = 192
    naive = [_total(measure.naive_attention_io(N, d)) for N in (2**14, 2**15)]
    tiled = [_total(measure.tiled_attention_io(N, d, sram)) for N in (2**14 * 3, 2**15 * 3)]
    assert naive[1] / naive[0] == pytest.approx(4, rel=0.01)  # the N^2 term dominates
    assert tiled[1] / tiled[0] == pytest.approx(4, rel=0.01)  # N^2 d^2 / M
    N = 3 * 2**16  # large: leading terms only

    def ratio(d, sram):
        return _total(measure.tiled_attention_io(N, d, sram)) / _total(
            measure.naive_attention_io(N, d)
        )

    # tiled / naive ~ d^2 / M: x4 when d doubles (M fixed), x1/2 when M doubles (d fixed)
    assert ratio(128, sram) / ratio(64, sram) == pytest.approx(4, rel=0.05)
    assert ratio(64, 2 * sram) / ratio(64, sram) == pytest.approx(0.5, rel=0.05)
    # and it is the constant d (3d + 4) / M of the count, per number moved
    assert ratio(64, sram) == pytest.approx(64 * (3 * 64 + 4) / (sram / 2), rel=0.05)


def test_io_bad_input_is_named():
    with pytest.raises(ValueError, match=r"sram_bytes must hold at least 4 d = 256 numbers"):
        measure.tiled_attention_io(10, 64, sram_bytes=256)
    with pytest.raises(ValueError, match="N must be positive, got 0"):
        measure.naive_attention_io(0, 64)
    with pytest.raises(TypeError, match="d must be an int"):
        measure.tiled_attention_io(10, 6.4, sram_bytes=1024)

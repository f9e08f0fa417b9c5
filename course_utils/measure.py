"""What a call costs: the extra memory it touches (measured) and the bytes it moves (counted).

Notebook 13 and ``benchmarks/attention.py`` measure memory here, one way for both.
:func:`peak_extra_memory` reads the resident-memory high-water mark that Linux keeps for
every process, so it counts every byte a call touched (torch's tensors, autograd's saved
tensors and its libraries' scratch buffers alike), which ``tracemalloc`` (Python objects
only) and torch's CPU allocator statistics do not. :func:`naive_attention_io` and
:func:`tiled_attention_io` count, for a GPU, the bytes that standard attention and
FlashAttention move between slow memory (HBM) and fast on-chip memory (SRAM): the IO
analysis of Dao et al. (2022) that explains FlashAttention's speed.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from course_utils._validate import check_positive


def resident_kib(field: str = "VmRSS") -> int:
    """One memory figure of this process from ``/proc/self/status``, in KiB (Linux).

    ``field`` is ``"VmRSS"`` (resident now) or ``"VmHWM"`` (the resident high-water mark).
    Raises ``OSError`` where ``/proc`` is missing (macOS, Windows).

    >>> import os
    >>> os.path.exists("/proc/self/status") is False or resident_kib() > 0
    True
    """
    if field not in ("VmRSS", "VmHWM"):
        raise ValueError(f"field must be 'VmRSS' or 'VmHWM', got {field!r}")
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} is not in /proc/self/status")


def peak_extra_memory(fn: Callable[..., Any], *args, **kwargs) -> tuple[Any, int | None]:
    """Call ``fn(*args, **kwargs)``; return ``(result, peak extra bytes or None)``.

    The peak is the process's resident-memory high-water mark during the call minus its
    resident memory just before (Linux: ``/proc/self/clear_refs`` resets the mark). It counts
    every byte the call touched, torch's tensors and its libraries' scratch buffers alike,
    the result included. It first returns freed heap memory to the system (glibc's
    ``malloc_trim``), so that reused memory hides little; still, compare sizes that differ
    by more than a few MiB. Returns ``None`` for the bytes where
    ``/proc`` is missing (macOS, Windows); it does not see CUDA device memory (use
    ``torch.cuda.max_memory_allocated`` there).

    >>> import torch
    >>> result, extra = peak_extra_memory(torch.ones, 1000)
    >>> result.shape, extra is None or extra >= 0
    (torch.Size([1000]), True)
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    try:
        # Hand memory that earlier calls freed back to the system, so that this call has to
        # touch fresh pages (and shows up in the peak) instead of quietly reusing them.
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: the reading may then hide reused memory
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM (the peak) to the current resident size
        before = resident_kib("VmRSS")
    except OSError:
        return fn(*args, **kwargs), None
    result = fn(*args, **kwargs)
    return result, max(resident_kib("VmHWM") - before, 0) * 1024


# ---------------------------------------------------------------------------------------
# Counting, not measuring: the bytes attention moves between slow and fast memory
# ---------------------------------------------------------------------------------------
def flash_block_sizes(d: int, sram_bytes: int, bytes_per_number: int = 2) -> tuple[int, int]:
    """``(Br, Bc)`` of FlashAttention's Algorithm 1 (Dao et al., 2022) for fast memory ``M``.

    ``M = sram_bytes // bytes_per_number`` numbers; ``Bc = ceil(M / (4 d))`` keys per block
    and ``Br = min(ceil(M / (4 d)), d)`` queries per block, so that the blocks of K, V, Q and
    O (``4 d`` numbers per row) fit in ``M``. ``M`` must hold at least ``4 d`` numbers.

    >>> flash_block_sizes(64, 100 * 1024)  # 100 KB of fp16 numbers: M = 51200
    (64, 200)
    """
    for name, value in (
        ("d", d),
        ("sram_bytes", sram_bytes),
        ("bytes_per_number", bytes_per_number),
    ):
        check_positive(name, value)
    M = sram_bytes // bytes_per_number
    if M < 4 * d:
        raise ValueError(
            f"sram_bytes must hold at least 4 d = {4 * d} numbers of {bytes_per_number} bytes, "
            f"got sram_bytes={sram_bytes} (M = {M} numbers)"
        )
    Bc = -(-M // (4 * d))
    return min(Bc, d), Bc


def naive_attention_io(N: int, d: int, bytes_per_number: int = 2) -> tuple[int, int]:
    """``(bytes read, bytes written)`` in slow memory (HBM) by standard attention.

    The three steps of Dao et al.'s Algorithm 0 for ``N`` queries and keys of size ``d``:
    read Q, K, write ``S = Q K^T``; read S, write ``P = softmax(S)``; read P, V, write
    ``O = P V``. Reads ``3 N d + 2 N^2`` numbers, writes ``2 N^2 + N d``: ``Theta(N d + N^2)``.

    >>> naive_attention_io(4, 2, bytes_per_number=1)  # reads 24 + 32, writes 32 + 8
    (56, 40)
    """
    for name, value in (("N", N), ("d", d), ("bytes_per_number", bytes_per_number)):
        check_positive(name, value)
    reads = 3 * N * d + 2 * N * N  # Q, K, V; S; P
    writes = 2 * N * N + N * d  # S, P; O
    return reads * bytes_per_number, writes * bytes_per_number


def tiled_attention_io(
    N: int, d: int, sram_bytes: int, bytes_per_number: int = 2
) -> tuple[int, int]:
    """``(bytes read, bytes written)`` in slow memory by FlashAttention's forward pass.

    Dao et al.'s Algorithm 1 with the blocks of :func:`flash_block_sizes`: write O, l, m
    once (initialised); for each of the ``Tc = ceil(N / Bc)`` key blocks read ``K_j, V_j``
    once, and for each query block inside it read ``Q_i, O_i, l_i, m_i`` and write back
    ``O_i, l_i, m_i``. Every key block thus streams all of Q and O through fast memory:
    ``Theta(N^2 d^2 / M)`` in all.

    >>> tiled_attention_io(4, 2, sram_bytes=16, bytes_per_number=1)  # Bc = Br = 2, Tc = 2
    (64, 48)
    """
    Br, Bc = flash_block_sizes(d, sram_bytes, bytes_per_number)  # checks d, sram, bytes
    check_positive("N", N)
    Tc = -(-N // Bc)
    # the inner loop over query blocks covers all N rows once per key block
    reads = 2 * N * d + Tc * N * (2 * d + 2)  # K_j, V_j; then Q_i, O_i, l_i, m_i
    writes = N * (d + 2) + Tc * N * (d + 2)  # O, l, m initialised; then O_i, l_i, m_i
    return reads * bytes_per_number, writes * bytes_per_number

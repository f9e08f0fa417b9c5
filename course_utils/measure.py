"""Measuring what a call costs: the extra memory it touches.

Notebook 13 and ``benchmarks/attention.py`` measure memory here, one way for both.
:func:`peak_extra_memory` reads the resident-memory high-water mark that Linux keeps for
every process, so it counts every byte a call touched (torch's tensors, autograd's saved
tensors and its libraries' scratch buffers alike), which ``tracemalloc`` (Python objects
only) and torch's CPU allocator statistics do not.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any


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

"""What a call costs: the extra memory it touches, the multiply-adds it does (measured),
and the bytes attention moves between GPU memories (counted).

Notebook 13 and ``benchmarks/attention.py`` measure memory here, one way for both.
:func:`peak_extra_memory` reads the resident-memory high-water mark that Linux keeps for
every process, so it counts every byte a call touched (torch's tensors, autograd's saved
tensors and its libraries' scratch buffers alike), which ``tracemalloc`` (Python objects
only) and torch's CPU allocator statistics do not. :func:`naive_attention_io` and
:func:`tiled_attention_io` count, for a GPU, the bytes that standard attention and
FlashAttention move between slow memory (HBM) and fast on-chip memory (SRAM): the IO
analysis of Dao et al. (2022) that explains FlashAttention's speed.

Notebook 04 asks what a layer costs before running it: :func:`layer_costs` holds Vaswani et
al.'s (2017) Table 1 for recurrent, convolutional and self-attention layers, and
:func:`count_multiply_adds` counts what a call actually does, to check the formulas.

Notebook 17 counts what generating text costs a decoder (:class:`~course_utils.language_model.
LMConfig`): :func:`kv_cache_bytes`, the memory its KV cache takes, and
:func:`generation_multiply_adds`, the products of generating ``n`` tokens with the cache and
without.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

from course_utils._validate import check_positive
from course_utils.language_model import LMConfig


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


def layer_costs(
    n: int, d: int, kernel_size: int = 3, neighbourhood: int = 16
) -> dict[str, dict[str, float]]:
    """Vaswani et al. (2017), Table 1, for ``n`` tokens of width ``d``: one row per layer type.

    Each row holds ``operations`` (per layer), ``sequential`` (operations that must run one
    after another) and ``path`` (the most layers or steps a signal takes between two
    positions). The values are the table's growth rates without their constants: a
    self-attention layer's ``n^2 d`` counts the products ``Q K^T`` and ``weights V`` once,
    not their 2 n^2 d multiply-adds, nor the projections every layer type pays in some form.
    Convolutions have ``kernel_size`` k; a contiguous stack needs ``n / k`` layers to connect
    all positions, a dilated one ``log_k n``. Restricted self-attention looks at a
    ``neighbourhood`` of r keys (all n if r > n). A path is at least one layer long.

    >>> costs = layer_costs(n=100, d=512)
    >>> costs["self-attention"]["operations"] < costs["recurrent"]["operations"]  # n < d
    True
    >>> costs["recurrent"]["path"], costs["self-attention"]["path"]
    (100.0, 1.0)
    """
    for name, value in (("n", n), ("d", d), ("kernel_size", kernel_size)):
        check_positive(name, value)
    check_positive("neighbourhood", neighbourhood)
    if kernel_size < 2:
        raise ValueError(f"kernel_size must be at least 2 (log_k n needs k > 1), got {kernel_size}")
    k, r = kernel_size, min(neighbourhood, n)
    conv_ops = float(k * n * d * d)
    return {  # Table 1: operations per layer, sequential operations, maximum path length
        "self-attention": dict(operations=float(n * n * d), sequential=1.0, path=1.0),
        "recurrent": dict(operations=float(n * d * d), sequential=float(n), path=float(n)),
        "convolutional (contiguous)": dict(
            operations=conv_ops, sequential=1.0, path=max(1.0, n / k)
        ),
        "convolutional (dilated)": dict(
            operations=conv_ops, sequential=1.0, path=max(1.0, math.log(n, k))
        ),
        "self-attention (restricted)": dict(
            operations=float(r * n * d), sequential=1.0, path=max(1.0, n / r)
        ),
    }


def count_multiply_adds(fn: Callable[..., Any], *args, **kwargs) -> tuple[Any, int]:
    """Call ``fn(*args, **kwargs)``; return ``(result, multiply-adds it did)``.

    Counted by ``torch.utils.flop_counter.FlopCounterMode`` from the shapes of every matrix
    product and convolution the call runs (``nn.Linear``, ``@``, ``nn.GRU``'s gates ...):
    an exact count, the same on every machine and thread count. Element-wise work (softmax,
    activations, bias additions) is not counted; in a layer it is the smaller part.

    >>> import torch
    >>> _, macs = count_multiply_adds(torch.matmul, torch.ones(2, 3), torch.ones(3, 4))
    >>> macs  # 2 x 4 outputs, each a sum of 3 products
    24
    """
    from torch.utils.flop_counter import FlopCounterMode

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with FlopCounterMode(display=False) as counter:
        result = fn(*args, **kwargs)
    return result, counter.get_total_flops() // 2  # a multiply-add is two floating-point ops


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


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    tokens: int,
    batch: int = 1,
    bytes_per_value: int = 2,
) -> int:
    """Bytes a KV cache takes: keys and values, per layer, sequence, KV head, token, feature.

    ``2 * num_layers * batch * num_kv_heads * tokens * head_dim * bytes_per_value``
    (2 bytes for float16 / bfloat16, 4 for float32).

    >>> kv_cache_bytes(32, 8, 128, 8192) / 2**30  # Llama-3-8B's shape at 8k tokens, bf16
    1.0
    """
    for name, value in (
        ("num_layers", num_layers),
        ("num_kv_heads", num_kv_heads),
        ("head_dim", head_dim),
        ("tokens", tokens),
        ("batch", batch),
        ("bytes_per_value", bytes_per_value),
    ):
        check_positive(name, value)
    return 2 * num_layers * batch * num_kv_heads * tokens * head_dim * bytes_per_value


def generation_multiply_adds(config: LMConfig, n: int, use_cache: bool, batch: int = 1) -> int:
    """Multiply-adds of the matrix products that generate ``n`` tokens one at a time.

    Step ``t = 1 .. n`` either feeds one new token against ``t`` cached keys
    (``use_cache=True``) or runs the whole prefix of ``t`` tokens again (``False``), as a
    model without a cache must. Per token and layer the projections cost ``2 d (H D) +
    2 d (Hkv D)`` and the feed-forward ``2 d d_ff``, and the tied output layer ``d V``; a
    query attending over ``T`` keys costs ``2 T (H D)`` (``Q K^T`` and ``weights V``). A full
    pass over ``T`` tokens computes all ``T x T`` scores, as masked dense attention does.
    Sums: ``Theta(n d^2 + n^2 d)`` with the cache, ``Theta(n^2 d^2 + n^3 d)`` without.
    Element-wise work (softmax, norms, rotations) is not counted.

    >>> c = LMConfig(vocab_size=97)  # d = 128, 2 layers, d_ff = 384
    >>> generation_multiply_adds(c, 1, True) == generation_multiply_adds(c, 1, False)
    True
    >>> generation_multiply_adds(c, 512, False) // generation_multiply_adds(c, 512, True)
    280
    """
    if not isinstance(config, LMConfig):
        raise TypeError(f"config must be an LMConfig, got {type(config).__name__}")
    check_positive("n", n)
    check_positive("batch", batch)
    if not isinstance(use_cache, bool):
        raise TypeError(f"use_cache must be a bool, got {type(use_cache).__name__} {use_cache!r}")
    c = config
    q_width, kv_width = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    per_token = c.num_layers * (2 * c.d_model * q_width + 2 * c.d_model * kv_width)
    per_token += c.num_layers * 2 * c.d_model * c.d_ff + c.d_model * c.vocab_size
    attention = 2 * c.num_layers * q_width  # per query and key
    total = 0
    for t in range(1, n + 1):  # step t: the prefix holds t tokens
        if use_cache:
            total += per_token + attention * t  # one token, one query over t keys
        else:
            total += per_token * t + attention * t * t  # t tokens, t queries over t keys
    return batch * total

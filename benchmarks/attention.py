"""Time and memory of naive, tiled, linear and sliding-window attention against SDPA.

A script, not a test: it prints a table of each method's median time as a ratio to
``torch.nn.functional.scaled_dot_product_attention`` (SDPA) at the same point, and the
peak extra memory of one call, for sequence lengths N from 256 to 16384 (B=2, H=8, D=64;
B=1 from N=8192 on so the full sweep stays short), forward and forward+backward, causal and
not. It writes everything, with the machine's settings, to JSON when asked.

    .venv/bin/python benchmarks/attention.py --quick          # reduced sweep, under a minute
    .venv/bin/python benchmarks/attention.py --json out.json  # the full sweep
    .venv/bin/python benchmarks/attention.py --block-sizes    # how DEFAULT_BLOCK_SIZE was chosen

How it measures:
- Time: in one process, the methods run interleaved (A B C A B C ...), so a change in the
  machine's load hits all of them alike; each point is the median of ``--repeats`` calls
  after one warm-up call. Ratios to SDPA are what to compare between machines.
- Memory: each point runs in a fresh subprocess. It allocates the inputs, warms the method up
  at a small N (so libraries and thread pools are loaded), resets the kernel's RSS
  high-water mark (``/proc/self/clear_refs``), makes one call, and reports
  ``VmHWM - VmRSS before the call - output size`` (for forward+backward, minus the three
  input gradients too): the working memory the method needs beyond what any method must
  return. RSS sees every byte the process touched (torch's CPU allocator, MKL/oneDNN scratch
  buffers, autograd's saved tensors), which ``tracemalloc`` (Python objects only) and torch's
  profiler (torch allocations only) do not. On CUDA it uses
  ``torch.cuda.max_memory_allocated`` in the same fresh-process way.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

from course_utils import efficient as eff
from course_utils import sparse_attention as sparse
from course_utils.measure import peak_extra_memory

WINDOW = 256  # sliding-window attention: each query sees keys within 256 positions
METHODS = ("sdpa", "naive", "tiled", "linear", "sliding")
FULL_SIZES = (256, 512, 1024, 2048, 4096, 8192, 16384)
QUICK_SIZES = (1024, 2048)
BLAS_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "OMP_PROC_BIND",
    "MKL_DYNAMIC",
    "ATEN_CPU_CAPABILITY",
)


def attend(method: str, q, k, v, is_causal: bool, block_size: int | None = None):
    if method == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    if method == "naive":
        return eff.naive_attention(q, k, v, is_causal=is_causal)
    if method == "tiled":
        return eff.tiled_attention(q, k, v, is_causal=is_causal, block_size=block_size)
    if method == "tiled_autograd":  # the textbook way: autograd records every tile
        return eff.tiled_attention(q, k, v, is_causal=is_causal, recompute_backward=False)
    if method == "linear":
        return eff.linear_attention(q, k, v, is_causal=is_causal)
    if method == "sliding":
        return sparse.sliding_window_attention(q, k, v, window=WINDOW, is_causal=is_causal)
    raise ValueError(f"unknown method {method!r}; choose from {METHODS + ('tiled_autograd',)}")


def batch_for(N: int, batch: int | None) -> int:
    """B=2 up to N=4096, B=1 beyond (unless --batch says otherwise)."""
    return batch if batch is not None else (2 if N <= 4096 else 1)


def naive_bytes(B: int, H: int, N: int, backward: bool) -> int:
    """(B, H, N, N) float32 scores, masked scores and weights; autograd keeps a fourth."""
    return (4 if backward else 3) * B * H * N * N * 4


def make_inputs(B, H, N, D, device, requires_grad, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    qkv = [torch.randn(B, H, N, D, generator=g).to(device) for _ in range(3)]
    return [t.requires_grad_(requires_grad) for t in qkv]


def call(method, q, k, v, is_causal, backward, block_size=None):
    out = attend(method, q, k, v, is_causal, block_size)
    if backward:
        out.backward(torch.ones_like(out))
        for t in (q, k, v):
            t.grad = None
    return out


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------
# Time: interleaved medians in this process
# ---------------------------------------------------------------------------------------
def time_point(methods, B, H, N, D, is_causal, backward, repeats, device, block_size=None):
    q, k, v = make_inputs(B, H, N, D, device, requires_grad=backward)
    small = make_inputs(B, H, 256, D, device, requires_grad=backward)
    times = {m: [] for m in methods}
    grad_context = torch.enable_grad() if backward else torch.no_grad()
    with grad_context:
        for m in methods:  # warm-up at a small size: load kernels and thread pools cheaply
            call(m, *small, is_causal, backward, block_size)
        for r in range(repeats):
            order = methods[r % len(methods) :] + methods[: r % len(methods)]  # rotate
            for m in order:
                sync(device)
                start = time.perf_counter()
                call(m, q, k, v, is_causal, backward, block_size)
                sync(device)
                times[m].append(time.perf_counter() - start)
    return {m: statistics.median(ts) for m, ts in times.items()}


# ---------------------------------------------------------------------------------------
# Memory: one call in a fresh process
# ---------------------------------------------------------------------------------------
def memory_child(spec: dict) -> dict:
    """Runs in the subprocess: peak extra bytes of one call described by ``spec``."""
    torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    B, H, N, D = spec["B"], spec["H"], spec["N"], spec["D"]
    method, causal, backward = spec["method"], spec["causal"], spec["backward"]
    with torch.enable_grad() if backward else torch.no_grad():
        small = make_inputs(1, H, 256, D, device, requires_grad=backward)
        call(method, *small, causal, backward)  # load code paths at a small size
        del small
        q, k, v = make_inputs(B, H, N, D, device, requires_grad=backward)
        must_return = B * H * N * D * 4 * (4 if backward else 1)  # output (+ 3 gradients)
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            out = attend(method, q, k, v, causal)
            if backward:
                out.backward(torch.ones_like(out))
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - before
        else:

            def run():
                out = attend(method, q, k, v, causal)
                if backward:
                    out.backward(torch.ones_like(out))
                return out

            out, peak = peak_extra_memory(run)  # the notebook's measurement, in this process
            if peak is None:
                raise RuntimeError("CPU memory is read from /proc/self/status: Linux only")
    return {"extra_bytes": max(peak - must_return, 0), "raw_peak_bytes": peak}


def measure_memory(spec: dict) -> dict | None:
    """Run :func:`memory_child` in a fresh interpreter; None if it failed."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        print(f"  memory point {spec} failed:\n{result.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------
def environment() -> dict:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl": torch.backends.mkl.is_available(),
        "blas_env": {name: os.environ.get(name) for name in BLAS_ENV},
        "load_average": os.getloadavg(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "default_block_size": eff.DEFAULT_BLOCK_SIZE,
        "window": WINDOW,
    }


def sweep(args, device: torch.device) -> list[dict]:
    rows = []
    H, D = args.heads, args.dim
    for backward in args.modes:
        sizes = [N for N in args.sizes if not backward or N <= args.max_backward_n]
        for N in sizes:
            B = batch_for(N, args.batch)
            methods = list(args.methods) + (["tiled_autograd"] if backward else [])
            too_big = [
                m
                for m in ("naive", "tiled_autograd")
                if m in methods and naive_bytes(B, H, N, backward) > args.max_quadratic_gib * 2**30
            ]
            methods = [m for m in methods if m not in too_big]
            # big points take seconds per call: 3 repeats are enough there
            repeats = args.repeats if (args.repeats_given or N <= 2048) else 3
            for causal in args.causal:
                start = time.perf_counter()
                times = time_point(methods, B, H, N, D, causal, backward, repeats, device)
                row = {
                    "device": device.type,
                    "mode": "fwd+bwd" if backward else "fwd",
                    "causal": causal,
                    "N": N,
                    "B": B,
                    "H": H,
                    "D": D,
                    "seconds": times,
                    "ratio_to_sdpa": {m: t / times["sdpa"] for m, t in times.items()},
                    "skipped": {
                        m: f"would need {naive_bytes(B, H, N, backward) / 2**30:.1f} GiB"
                        for m in too_big
                    },
                    "extra_mib": {},
                }
                # memory once per (mode, N), not causal too; --quick: at the largest N only
                memory_here = not args.no_memory and causal == args.causal[0]
                if memory_here and (not args.quick or N == max(sizes)):
                    specs = [
                        dict(method=m, B=B, H=H, N=N, D=D, causal=causal, backward=backward)
                        | dict(device=device.type, threads=args.threads)
                        for m in methods
                    ]
                    # each call in its own process, a few at once (memory is read per
                    # process, so they do not disturb each other; no timing runs meanwhile)
                    with ThreadPoolExecutor(args.memory_jobs) as pool:
                        for m, got in zip(methods, pool.map(measure_memory, specs), strict=True):
                            if got is not None:
                                row["extra_mib"][m] = got["extra_bytes"] / 2**20
                row["wall_seconds"] = time.perf_counter() - start
                rows.append(row)
                print_row(row)
    return rows


COLUMNS = ("naive", "tiled", "tiled_autograd", "linear", "sliding")


def print_header():
    names = "".join(f"{m:>16}" for m in COLUMNS)
    print(f"\n{'dev':<5}{'mode':<8}{'causal':<7}{'N':>6}{'B':>3}{'SDPA ms':>10}{names}")
    print(" " * 39 + "".join(f"{'x SDPA | MiB':>16}" for _ in COLUMNS))


def print_row(row):
    cells = []
    for m in COLUMNS:
        if m in row["skipped"]:
            cells.append(f"{'skip':>16}")
        elif m in row["ratio_to_sdpa"]:
            mem = row["extra_mib"].get(m)
            mem_text = f"{mem:6.0f}" if mem is not None else f"{'-':>6}"
            cells.append(f"{row['ratio_to_sdpa'][m]:7.2f} |{mem_text}")
        else:
            cells.append(f"{'':>16}")
    sdpa_mem = row["extra_mib"].get("sdpa")
    sdpa = f"{1e3 * row['seconds']['sdpa']:10.1f}"
    print(
        f"{row['device']:<5}{row['mode']:<8}{('yes' if row['causal'] else 'no'):<7}{row['N']:>6}"
        f"{row['B']:>3}{sdpa}{''.join(cells)}"
        + (f"   SDPA {sdpa_mem:.0f} MiB" if sdpa_mem is not None else ""),
        flush=True,
    )


def block_size_sweep(args, device):
    """Tiled attention's time at several block sizes (the numbers behind the default)."""
    N, B = args.block_n, 2
    print(f"\ntiled attention, B={B} H={args.heads} N={N} D={args.dim}: time / SDPA's")
    for causal in (False, True):
        sizes = (64, 128, 256, 512, 1024)
        q, k, v = make_inputs(B, args.heads, N, args.dim, device, requires_grad=False)
        results = {b: [] for b in sizes}
        with torch.no_grad():
            for r in range(args.repeats):
                t0 = time.perf_counter()
                attend("sdpa", q, k, v, causal)
                sdpa = time.perf_counter() - t0
                for b in sizes[r % len(sizes) :] + sizes[: r % len(sizes)]:
                    t0 = time.perf_counter()
                    attend("tiled", q, k, v, causal, block_size=b)
                    results[b].append((time.perf_counter() - t0) / sdpa)
        text = "  ".join(f"{b}: {statistics.median(x):.2f}" for b, x in results.items())
        print(f"  causal={causal!s:<5}  {text}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="reduced sweep: N 1024 and 2048, memory at the largest N of each mode",
    )
    p.add_argument("--sizes", type=int, nargs="+", help="sequence lengths N")
    p.add_argument("--batch", type=int, help="B (default: 2 up to N=4096, then 1)")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument(
        "--repeats", type=int, help="timed calls per point (default 5, 3 above N=2048; quick 3)"
    )
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--modes", nargs="+", default=["fwd", "fwd+bwd"], choices=["fwd", "fwd+bwd"])
    p.add_argument("--causal", nargs="+", default=["no", "yes"], choices=["no", "yes"])
    p.add_argument("--max-backward-n", type=int, help="largest N timed with backward")
    p.add_argument("--max-quadratic-gib", type=float, default=4.0, help="skip naive above this")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    p.add_argument(
        "--memory-jobs", type=int, default=os.cpu_count() or 1, help="memory processes at once"
    )
    p.add_argument("--json", help="write results and environment to this file")
    p.add_argument("--block-sizes", action="store_true", help="only time tiled block sizes")
    p.add_argument("--block-n", type=int, default=4096)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if "sdpa" not in args.methods:
        args.methods = ["sdpa", *args.methods]  # ratios need SDPA at every point
    args.sizes = args.sizes or list(QUICK_SIZES if args.quick else FULL_SIZES)
    args.repeats_given = args.repeats is not None
    args.repeats = args.repeats or (3 if args.quick else 5)
    args.max_backward_n = args.max_backward_n or (1024 if args.quick else 4096)
    args.modes = [m == "fwd+bwd" for m in args.modes]
    args.causal = [c == "yes" for c in args.causal]
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        print(json.dumps(memory_child(json.loads(args.child))))
        return
    torch.set_num_threads(args.threads)
    devices = [torch.device("cpu")]
    if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()):
        devices = (
            [torch.device("cuda")] if args.device == "cuda" else devices + [torch.device("cuda")]
        )
    env = environment()
    print(json.dumps(env, indent=1))
    if args.block_sizes:
        for device in devices:
            block_size_sweep(args, device)
        return
    start = time.perf_counter()
    rows = []
    print_header()
    for device in devices:
        rows += sweep(args, device)
    total = time.perf_counter() - start
    print(f"\ntotal {total:.0f} s; load average now {os.getloadavg()}")
    print(
        "x SDPA = median time / SDPA's median time at the same point (lower is faster); "
        "MiB = peak working memory of one call beyond inputs, output and gradients; "
        f"sliding window = {WINDOW}; skip = naive would exceed --max-quadratic-gib."
    )
    if args.json:
        env["load_average_after"] = os.getloadavg()
        with open(args.json, "w") as f:
            json.dump({"environment": env, "total_seconds": total, "rows": rows}, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

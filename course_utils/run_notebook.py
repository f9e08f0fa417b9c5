"""Run a notebook top to bottom in a fresh kernel, without the rare endless wait after a widget cell.

Why this exists
---------------
nbclient (the engine under papermill, nbconvert ``--execute``, nbgrader's autograder and
the usual site builders) waits for a cell's ``execute_reply`` on the kernel's shell socket.
It mimics a browser's Output widget: when a cell displays into an ``ipywidgets.Output``
(every explorer in :mod:`course_utils.widgets` does, through ``interactive``), nbclient
sends a ``comm_msg`` back to the kernel on that same shell socket while it is waiting for
the reply there. Now and then the reply arrives but the event loop is never woken for it:
the kernel is idle, nbclient sleeps, and it only finds the reply when its per-cell timeout
expires and pyzmq polls the socket one last time. With no timeout (papermill's and
nbclient's default) that wait never ends; with a 900 s timeout the notebook simply takes
900 s longer, which is how a 9 s notebook once took 909 s. Measured on a busy 2-core machine
(2026-12-05, nbclient 0.11.0, pyzmq 27.3.0, ipykernel 7.4.0): 6 of 30 plain nbclient runs of
notebook 02 had one explorer cell wait exactly its 120 s limit and then succeed (1 of 6 of
notebook 05), against 0 of 10 (and 0 of 6 of 05) through :func:`run_notebook`; in a notebook
of 50 widget cells, 10 of 150 cells waited with plain nbclient, and none of 100 each with
nbclient's Output-widget mimic switched off or with :class:`PromptKernelClient`.
nbval (a blocking client, without asyncio) and JupyterLab have not shown it.

What this module does about it
------------------------------
- :class:`PromptKernelClient` is nbclient's usual asynchronous kernel client, except that
  its shell and IOPub channels wait in slices of at most ``poll_interval`` seconds. Each
  slice ends with a real poll of the socket, so a missed wake-up costs at most one slice
  instead of the whole timeout. Any nbclient-based tool can use it through configuration::

      # nbgrader_config.py, or a jupyter_nbconvert_config.py for a site build
      c.AsyncKernelManager.client_class = "course_utils.run_notebook.PromptKernelClient"
      c.ExecutePreprocessor.timeout = 600  # nbgrader / nbconvert: seconds per cell

  Tools that take a kernel manager class instead (papermill's Python API) can pass
  :class:`PromptKernelManager`.

- :func:`run_notebook` executes a notebook with that client and a per-cell limit, and turns
  a cell that runs past the limit into :class:`NotebookTimeoutError`, whose message names
  the notebook, the cell's index and the seconds waited. A hang in class is worse than an
  error.
- ``python -m course_utils.run_notebook notebooks/02_query_key_value.ipynb`` does the same
  from a shell (``--help`` for the options) and exits non-zero when a notebook fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from queue import Empty

import nbformat
from jupyter_client import AsyncKernelManager
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError
from traitlets import DottedObjectName, Type
from traitlets.config import Config

DEFAULT_CELL_TIMEOUT_S = 600  # the slowest cell takes under 2 minutes on a 2-core CPU
POLL_INTERVAL_S = 0.5


class PromptChannel(AsyncZMQSocketChannel):
    """A ZMQ channel whose ``get_msg`` waits in slices of at most ``poll_interval`` seconds.

    The result is the same as the parent's (the next message, or ``queue.Empty`` once
    ``timeout`` seconds have passed; ``timeout=None`` waits for ever), but a message that
    arrived without waking the event loop is found at the end of the current slice.
    """

    poll_interval = POLL_INTERVAL_S

    async def get_msg(self, timeout: float | None = None) -> dict:
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be None or >= 0 seconds, got {timeout}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = self.poll_interval
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            # pyzmq's asyncio poll polls the socket itself once more when its timeout fires,
            # so a message whose wake-up was lost is seen here at the latest.
            ready = await self.socket.poll(int(wait * 1000))
            if ready:
                return await self._recv()
            if deadline is not None and time.monotonic() >= deadline:
                raise Empty


class PromptKernelClient(AsyncKernelClient):
    """jupyter_client's ``AsyncKernelClient`` with :class:`PromptChannel` for shell and IOPub."""

    shell_channel_class = Type(PromptChannel)
    iopub_channel_class = Type(PromptChannel)


class PromptKernelManager(AsyncKernelManager):
    """jupyter_client's ``AsyncKernelManager`` whose clients are :class:`PromptKernelClient`.

    For tools that take a kernel manager class rather than configuration, e.g. papermill's
    Python API: ``papermill.execute_notebook(..., kernel_manager_class=PromptKernelManager)``.
    """

    client_class = DottedObjectName(f"{__name__}.PromptKernelClient")
    client_factory = Type(PromptKernelClient)


class NotebookTimeoutError(RuntimeError):
    """A cell ran past its limit; the message names the notebook, the cell and the wait."""


def _first_line(source: str) -> str:
    lines = [line for line in source.splitlines() if line.strip()]
    return lines[0][:80] if lines else ""


def run_notebook(
    path: str | Path,
    timeout: float = DEFAULT_CELL_TIMEOUT_S,
    output: str | Path | None = None,
    cwd: str | Path | None = None,
    kernel_name: str = "python3",
) -> nbformat.NotebookNode:
    """Execute the notebook at ``path`` in a fresh kernel and return it with its outputs.

    ``timeout`` limits each cell, in seconds (a cell that runs longer raises
    :class:`NotebookTimeoutError`, and the kernel is shut down). The kernel starts in
    ``cwd``, by default the notebook's own folder, as Jupyter starts it. ``output``, if
    given, is where the executed notebook is written. A cell that raises stops the run
    with nbclient's ``CellExecutionError``, as under nbconvert.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: no notebook at {str(path)!r}")
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    nb = nbformat.read(path, as_version=4)
    workdir = Path(cwd) if cwd is not None else path.resolve().parent
    # The same setting as the nbgrader / site-build configuration in the module docstring
    config = Config({"AsyncKernelManager": {"client_class": f"{__name__}.PromptKernelClient"}})
    client = NotebookClient(
        nb,
        config=config,
        timeout=timeout,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(workdir)}},
        # After a cell's reply, wait up to a minute (not nbclient's 4 s) for its last
        # outputs, and fail rather than silently keep a cell with outputs missing.
        iopub_timeout=60,
        raise_on_iopub_timeout=True,
    )
    started: dict[str, float | int] = {}

    def on_cell_execute(cell: nbformat.NotebookNode, cell_index: int) -> None:
        started.update(index=cell_index, at=time.monotonic())

    client.on_cell_execute = on_cell_execute
    try:
        client.execute()
    except CellTimeoutError as err:
        index = started.get("index", -1)
        waited = time.monotonic() - started.get("at", time.monotonic())
        source = nb.cells[index].source if 0 <= index < len(nb.cells) else ""
        raise NotebookTimeoutError(
            f"{path}: cell {index} ({_first_line(source)!r}) gave no result within its "
            f"limit of {timeout:g} s; the kernel was stopped {waited:.0f} s after the cell "
            "started. The cell may loop for ever, or need more time on this machine: raise "
            "the limit with timeout=... (--timeout on the command line)."
        ) from err
    if output is not None:
        nbformat.write(nb, output)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.run_notebook",
        description="Run notebooks top to bottom, each in a fresh kernel, with a limit per "
        "cell; a cell past its limit fails with the notebook, the cell and the seconds waited.",
    )
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_CELL_TIMEOUT_S,
        help=f"seconds per cell (default {DEFAULT_CELL_TIMEOUT_S})",
    )
    parser.add_argument(
        "--output-dir", type=Path, help="write each executed notebook here, under its own name"
    )
    args = parser.parse_args(argv)
    if args.output_dir is not None:
        args.output_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for path in args.notebooks:
        output = args.output_dir / path.name if args.output_dir is not None else None
        start = time.perf_counter()
        try:
            run_notebook(path, timeout=args.timeout, output=output)
        except Exception as err:  # report every notebook, then fail
            failed += 1
            message = str(err).strip().splitlines()
            print(f"FAILED {path} after {time.perf_counter() - start:.1f} s: {type(err).__name__}")
            print("\n".join("    " + line for line in message[-20:]), file=sys.stderr)
        else:
            print(f"ok     {path} in {time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

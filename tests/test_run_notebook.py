"""course_utils.run_notebook: no endless wait for a reply whose wake-up was lost, and a cell
past its limit fails fast, naming the notebook, the cell and the seconds waited."""

import asyncio
import json
import threading
import time
from queue import Empty

import nbformat
import pytest
import zmq
import zmq.asyncio
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.session import Session
from nbformat.v4 import new_code_cell, new_notebook

from course_utils import run_notebook as rn


class LostWakeupSocket(zmq.asyncio.Socket):
    """A real asyncio socket whose event loop is never woken for an arriving message.

    This is what nbclient met after a widget cell: ``poll(timeout)`` resolves only when its
    timeout fires, with what pyzmq's last real poll of the socket finds (the message was
    there all along); with no timeout it never resolves.
    """

    def poll(self, timeout=None, flags=zmq.POLLIN):
        real_poll = super().poll

        async def woken_only_by_the_timeout():
            if timeout is None or timeout < 0:
                await asyncio.Event().wait()  # never set: waits for ever
            await asyncio.sleep(timeout / 1000)
            return await real_poll(0, flags)

        return asyncio.ensure_future(woken_only_by_the_timeout())


async def _timed_get(channel_class, timeout, send_first=True):
    """(seconds get_msg took, the message or the exception) on a PAIR with a lost wake-up."""
    ctx = zmq.asyncio.Context()
    receiver = ctx.socket(zmq.PAIR, socket_class=LostWakeupSocket)
    sender = ctx.socket(zmq.PAIR)
    receiver.bind("inproc://reply")
    sender.connect("inproc://reply")
    session = Session(key=b"")
    try:
        if send_first:
            session.send(sender, "execute_reply", content={"status": "ok"})
            await asyncio.sleep(0.05)  # delivered before the wait starts
        channel = channel_class(receiver, session)
        start = time.monotonic()
        try:
            got = await channel.get_msg(timeout=timeout)
        except Empty as err:
            got = err
        return time.monotonic() - start, got
    finally:
        sender.close(linger=0)
        receiver.close(linger=0)
        ctx.term()


def run_coroutine(coro):
    """asyncio.run in a thread of its own: a test before this one in the same worker (the
    browser tests' Playwright) may have left an event loop running on the main thread."""
    outcome = {}

    def target():
        try:
            outcome["value"] = asyncio.run(coro)
        except BaseException as err:  # re-raised on the test's thread
            outcome["error"] = err

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_stock_channel_sees_a_reply_with_a_lost_wakeup_only_when_its_timeout_expires():
    # The mechanism behind the 909 s run: the reply is found when the timeout fires
    took, msg = run_coroutine(_timed_get(AsyncZMQSocketChannel, timeout=1.5))
    assert took >= 1.5 and msg["msg_type"] == "execute_reply"


def test_prompt_channel_finds_it_within_one_poll_interval_even_with_no_timeout():
    took, msg = run_coroutine(_timed_get(rn.PromptChannel, timeout=None))
    assert msg["msg_type"] == "execute_reply" and msg["content"] == {"status": "ok"}
    assert took < rn.PromptChannel.poll_interval + 0.5, took


def test_prompt_channel_still_times_out_on_schedule_when_nothing_comes():
    took, got = run_coroutine(_timed_get(rn.PromptChannel, timeout=1.2, send_first=False))
    assert isinstance(got, Empty)
    assert 1.2 <= took < 1.2 + rn.PromptChannel.poll_interval + 0.5, took


def test_prompt_channel_rejects_a_negative_timeout():
    with pytest.raises(ValueError, match="timeout must be None or >= 0 seconds, got -1"):
        run_coroutine(_timed_get(rn.PromptChannel, timeout=-1))


def test_prompt_kernel_client_uses_the_prompt_channel_for_shell_and_iopub():
    client = rn.PromptKernelClient()
    assert client.shell_channel_class is rn.PromptChannel
    assert client.iopub_channel_class is rn.PromptChannel


def test_prompt_kernel_manager_and_the_documented_setting_give_prompt_clients():
    from jupyter_client import AsyncKernelManager
    from traitlets.config import Config

    assert isinstance(rn.PromptKernelManager().client(), rn.PromptKernelClient)
    # The line the module docstring gives for nbgrader / nbconvert configuration
    config = Config()
    config.AsyncKernelManager.client_class = "course_utils.run_notebook.PromptKernelClient"
    assert isinstance(AsyncKernelManager(config=config).client(), rn.PromptKernelClient)


def _write(tmp_path, name, sources):
    nb = new_notebook(
        cells=[new_code_cell(s) for s in sources],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_run_notebook_runs_widget_cells_and_writes_the_result(tmp_path):
    # An explorer cell and one that moves its slider: where nbclient's wait used to get lost
    path = _write(
        tmp_path,
        "explore.ipynb",
        [
            "import numpy as np\nfrom course_utils.widgets import heatmap_explorer\n"
            "explorer = heatmap_explorer(lambda t: np.eye(3) / t, t=(0.5, 2.0, 0.5))\nexplorer",
            "explorer.children[0].value = 2.0\nprint(explorer.result.max())",
        ],
    )
    out = tmp_path / "out" / "explore.ipynb"
    out.parent.mkdir()
    nb = rn.run_notebook(path, timeout=120, output=out)
    assert nb.cells[1].outputs[0]["text"].strip() == "0.5"
    written = json.loads(out.read_text())
    assert "".join(written["cells"][1]["outputs"][0]["text"]).strip() == "0.5"
    assert "application/vnd.jupyter.widget-state+json" in written["metadata"]["widgets"]


def test_a_cell_past_its_limit_fails_fast_naming_notebook_cell_and_wait(tmp_path):
    path = _write(tmp_path, "sleepy.ipynb", ["x = 1", "import time\ntime.sleep(300)"])
    start = time.monotonic()
    with pytest.raises(rn.NotebookTimeoutError) as info:
        rn.run_notebook(path, timeout=3)
    assert time.monotonic() - start < 120  # kernel start and shutdown included
    message = str(info.value)
    assert "sleepy.ipynb: cell 1 ('import time')" in message
    assert "gave no result within its limit of 3 s; the kernel was stopped" in message
    waited = int(message.split("stopped ")[1].split(" s after")[0])
    assert 3 <= waited < 60


def test_run_notebook_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="path: no notebook at"):
        rn.run_notebook(tmp_path / "missing.ipynb")
    path = _write(tmp_path, "a.ipynb", ["1"])
    for bad in (0, -5, "600", True):
        with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
            rn.run_notebook(path, timeout=bad)


def test_command_line_reports_each_notebook_and_fails_if_any_failed(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_run(path, timeout, output):
        calls.append((path.name, timeout, output))
        if path.name == "bad.ipynb":
            raise rn.NotebookTimeoutError(f"{path}: cell 4 ('loop()') gave no result within 9 s")

    monkeypatch.setattr(rn, "run_notebook", fake_run)
    good, bad = tmp_path / "good.ipynb", tmp_path / "bad.ipynb"
    status = rn.main([str(good), str(bad), "--timeout", "9", "--output-dir", str(tmp_path / "o")])
    assert status == 1
    assert calls == [
        ("good.ipynb", 9.0, tmp_path / "o" / "good.ipynb"),
        ("bad.ipynb", 9.0, tmp_path / "o" / "bad.ipynb"),
    ]
    captured = capsys.readouterr()
    assert f"ok     {good}" in captured.out
    assert f"FAILED {bad}" in captured.out and "NotebookTimeoutError" in captured.out
    assert "cell 4 ('loop()') gave no result within 9 s" in captured.err
    assert rn.main([str(good)]) == 0

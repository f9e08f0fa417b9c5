"""The notebooks' widgets as a learner sees them: JupyterLab in headless Chromium.

For each notebook in ``WIDGET_NOTEBOOKS`` the test starts JupyterLab from the course's
``.venv`` on a free loopback port, in a temporary copy of ``notebooks/`` with its own Jupyter
settings, runtime and workspace folders, opens the notebook in Chromium through Playwright
(one JupyterLab page per test process, which opens each notebook in turn and closes it after),
runs all cells from the Run menu and waits for the kernel to go idle. It fails on any
traceback in the page and on "Error displaying widget". Then, in every heatmap widget (an
``interactive`` that draws an image) with a slider or a dropdown, it moves the first such
control as a learner would (drags the slider, picks another entry) and checks that the
control shows its new value and that the heatmap's colours changed. Screenshots of each
widget before and after go to a folder the test prints, with one line per notebook saying
what moved.

Where Chromium is found, this run is the notebook's only run in ``make test``: conftest.py
deselects the notebook's nbval cells, so every cell runs once, in JupyterLab, training into
the run's fresh cache folder. With ``COURSE_EXECUTED_DIR`` set, JupyterLab saves the notebook
once every cell has run and the test copies it there for the course site.

Chromium is the system one (Debian/Ubuntu package ``chromium``, or the binary named by the
``CHROMIUM`` variable); Playwright never downloads a browser here. Without Chromium the tests
skip with a message; with ``COURSE_REQUIRE_BROWSER=1`` (set by ``.ci/run``) they fail instead.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

# Notebooks whose widgets are tested in the browser. A new notebook with widgets joins with
# one line; every heatmap widget in it with a slider or dropdown is moved and compared.
WIDGET_NOTEBOOKS = [
    "00_welcome.ipynb",
    "02_query_key_value.ipynb",
    "03_bahdanau_attention.ipynb",
    "04_self_attention_multihead.ipynb",
    "05_positional_encoding.ipynb",
    "06_transformer.ipynb",
    "07_machine_translation.ipynb",
    "08_summarisation.ipynb",
    "09_image_captioning.ipynb",
    "10_speech_recognition.ipynb",
    "11_visualising_attention.ipynb",
    "12_with_and_without_attention.ipynb",
    "13_efficient_attention.ipynb",
    "14_attention_as_memory.ipynb",
    "15_multimodal_attention.ipynb",
    "16_interpretability.ipynb",
    "17_language_models.ipynb",
    "18_circuits.ipynb",
]

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
REQUIRE = os.environ.get("COURSE_REQUIRE_BROWSER", "") not in ("", "0")
# On a closed network Chromium's own background connections only fail; turn them off.
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Jupyter settings for the test server: no news or update checks (they would pop up a
# notification over the page), every cell attached to the page so all outputs render, and
# no autosave: the notebook is saved once, when every cell has run.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
}
SERVER_START_S = 90  # JupyterLab's first start on a busy 2-core machine
WIDGET_REDRAW_S = 60  # one widget redraw after a control moves
STDERR = "application/vnd.jupyter.stderr"  # JupyterLab renders tracebacks with this type


# --------------------------------------------------------------------------------------
# Chromium present, or a clear skip


def _missing_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package playwright is not installed (pip install -e '.[dev]')"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return (
            f"Chromium not found at {CHROMIUM}. Install it (Debian/Ubuntu: "
            "apt-get install chromium) or set CHROMIUM=/path/to/chromium-or-chrome"
        )
    return None


def _require_browser() -> None:
    reason = _missing_browser()
    if reason is None:
        return
    message = f"browser widget tests need Chromium: {reason}"
    if REQUIRE:
        pytest.fail(f"{message} (COURSE_REQUIRE_BROWSER is set, so this is a failure)")
    pytest.skip(f"{message}. Skipped; CI sets COURSE_REQUIRE_BROWSER=1 and runs them.")


# --------------------------------------------------------------------------------------
# JupyterLab on loopback, in a temporary folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """A JupyterLab server in its own process group, with everything under ``workdir``."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.root = workdir / "notebooks"
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "jupyterlab.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        shutil.copytree(
            ROOT / "notebooks", self.root, ignore=shutil.ignore_patterns(".ipynb_checkpoints")
        )
        settings = self.workdir / "lab-settings"
        for name, values in LAB_SETTINGS.items():
            path = settings / f"{name}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
        env.update(
            JUPYTER_CONFIG_DIR=str(self.workdir / "config"),
            JUPYTER_DATA_DIR=str(self.workdir / "data"),
            JUPYTER_RUNTIME_DIR=str(self.workdir / "runtime"),
            JUPYTERLAB_SETTINGS_DIR=str(settings),
            JUPYTERLAB_WORKSPACES_DIR=str(self.workdir / "workspaces"),
            IPYTHONDIR=str(self.workdir / "ipython"),
            # Progress bars redraw every 5 s rather than 10 times a second: each redraw is a
            # message through the server and a repaint in Chromium, beside a training kernel.
            TQDM_MININTERVAL="5",
        )
        command = [  # the Python running the tests (.venv's, or .venv-3.10's in CI)
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={self.root}",
            f"--IdentityProvider.token={self.token}",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            # window.jupyterapp: one page opens each notebook in turn (LabPage)
            "--LabApp.expose_app_in_browser=True",
        ]
        if os.getuid() == 0:
            command.append("--allow-root")  # CI machines and containers run as root
        log = self.log_path.open("w")
        # A new session makes the server a process-group leader, so stop() can end it all.
        self.proc = subprocess.Popen(
            command,
            cwd=self.root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited at start:\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status")
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.3)
        raise RuntimeError(f"JupyterLab did not answer in {SERVER_START_S} s:\n{self.log_tail()}")

    def api(self, method: str, path: str):
        request = urllib.request.Request(
            self.url + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def session(self, notebook: str) -> dict | None:
        for session in self.api("GET", "/api/sessions"):
            if session["path"] == notebook:
                return session
        return None

    def shutdown_kernel(self, notebook: str) -> None:
        session = self.session(notebook)
        if session is not None:
            self.api("DELETE", f"/api/sessions/{session['id']}")

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        """End the server and every kernel it started, whatever state the test left."""
        if self.proc is None:
            return
        import psutil

        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        try:  # kernels run in process groups of their own: ask the server to end them
            self.api("POST", "/api/shutdown")
            self.proc.wait(timeout=15)
        except Exception:
            pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(timeout=10)
        for child in children:  # anything the server started and left behind
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(children, timeout=10)


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    _require_browser()
    server = JupyterLab(tmp_path_factory.mktemp("jupyterlab"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


# Chromium itself: the session fixture ``browser`` of tests/conftest.py, shared with the
# slides and site tests.


class LabPage:
    """One JupyterLab page per test process, which opens each notebook in turn and closes it
    afterwards, as a learner moves from notebook to notebook in one tab. Loading JupyterLab
    costs Chromium several seconds of CPU; this way a process pays it once, not once per
    notebook. After a failed test the page is thrown away and the next test loads a new one."""

    def __init__(self, browser, lab: JupyterLab):
        self.browser, self.lab = browser, lab
        self.context = self.page = None

    def open(self, notebook: str):
        if self.page is None:
            self.context = self.browser.new_context(viewport={"width": 1400, "height": 1000})
            self.page = self.context.new_page()
            # a workspace of its own, reset: no tab of an earlier run is restored
            self.page.goto(
                f"{self.lab.url}/lab/workspaces/course-tests?reset&token={self.lab.token}"
            )
            self.page.wait_for_function(
                "() => window.jupyterapp && window.jupyterapp.commands.hasCommand('docmanager:open')",
                timeout=SERVER_START_S * 1000,
            )
            self.page.evaluate("() => window.jupyterapp.restored")
        self.page.evaluate(
            "path => window.jupyterapp.commands.execute('docmanager:open', {path})", notebook
        )
        return self.page

    def close_notebooks(self) -> None:
        """Close every open notebook without the unsaved-changes dialog (the test saved what
        it needed; the widgets it moved afterwards need not be kept)."""
        self.page.evaluate(
            """() => {
              for (const w of [...window.jupyterapp.shell.widgets('main')]) {
                if (w.context) { w.context.model.dirty = false; }
                w.dispose();
              }
            }"""
        )
        self.page.locator(".jp-Notebook").first.wait_for(state="detached", timeout=30_000)

    def discard(self) -> None:
        if self.context is not None:
            with contextlib.suppress(Exception):
                self.context.close()
        self.context = self.page = None


@pytest.fixture(scope="session")
def lab_page(browser, lab):
    holder = LabPage(browser, lab)
    try:
        yield holder
    finally:
        holder.discard()


def _say(node, text: str) -> None:
    """A line printed at the end of the run even when the test passes (conftest.py collects
    these notes; print() would be captured, and a pytest-xdist worker's output is not shown)."""
    node.user_properties.append(("course_note", text))


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory):
    folder = tmp_path_factory.mktemp("widget_screenshots")
    return folder


# The course site (scripts/build_site.py) shows each interactive widget as this test saw it
# once the notebook had run: with the variable set (make test sets build/widget_screenshots),
# every widget box goes to <folder>/<notebook stem>/interact<i>.png, in page order.
SCREENSHOT_DIR_VARIABLE = "COURSE_SCREENSHOT_DIR"


def _keep_for_the_site(boxes, stem: str) -> None:
    folder = os.environ.get(SCREENSHOT_DIR_VARIABLE)
    if not folder:
        return
    target = Path(folder) / stem
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for i in range(boxes.count()):
        box = boxes.nth(i)
        box.scroll_into_view_if_needed()
        box.screenshot(path=target / f"interact{i}.png")


# The notebook as this run executed it: with the variable set (make test sets build/executed),
# the test saves the notebook from JupyterLab once every cell has run, before any control
# moves, and copies it to <folder>/<notebook>. When the browser test is a notebook's run
# (conftest.py), the course site is built from this copy.
EXECUTED_DIR_VARIABLE = "COURSE_EXECUTED_DIR"
SAVE_S = 30  # JupyterLab writing one notebook of figures


def _save_executed_copy(page, lab: JupyterLab, notebook: str, n_code: int) -> None:
    folder = os.environ.get(EXECUTED_DIR_VARIABLE)
    if not folder:
        return
    page.get_by_role("menuitem", name="File", exact=True).click()
    page.locator('[role="menuitem"][data-command="docmanager:save"]').click()
    # The copy on disk had no outputs (autosave is off, LAB_SETTINGS): wait until it has a
    # result for every code cell. (Plain JSON while waiting: nbformat's validation of a
    # notebook full of figures takes a good part of a second each time.)
    deadline = time.monotonic() + SAVE_S
    while True:
        with contextlib.suppress(ValueError):  # not JSON yet: read it again
            text = (lab.root / notebook).read_text()
            cells = json.loads(text)["cells"]
            ran = [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]
            if len(ran) == n_code and all(c.get("execution_count") for c in ran):
                break
        assert time.monotonic() < deadline, f"{notebook}: JupyterLab did not save it in {SAVE_S} s"
        time.sleep(0.3)
    nb = nbformat.reads(text, as_version=4)
    out = Path(folder) / notebook
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)


# --------------------------------------------------------------------------------------
# What the page shows


def _tracebacks(page) -> list[str]:
    """Text of every traceback in the page, cells and widget outputs alike."""
    texts = page.eval_on_selector_all(
        f'.jp-OutputArea-output[data-mime-type="{STDERR}"]', "els => els.map(e => e.innerText)"
    )
    return [t for t in texts if "Traceback" in t or "Error" in t]


def _check_page(page, notebook: str, when: str) -> None:
    errors = _tracebacks(page)
    assert not errors, f"{notebook}: error output {when}:\n" + "\n---\n".join(
        e[-3000:] for e in errors
    )
    shown = page.evaluate("() => document.body.textContent.includes('Error displaying widget')")
    assert not shown, f"{notebook}: 'Error displaying widget' {when}"


def _prompts(page) -> list[str]:
    return page.eval_on_selector_all(
        ".jp-Notebook .jp-CodeCell .jp-InputArea-prompt",
        "els => els.map(e => e.innerText.trim())",
    )


def _wait_for_kernel_idle(lab: JupyterLab, notebook: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        session = lab.session(notebook)
        if session and session["kernel"]["execution_state"] == "idle":
            return
        time.sleep(0.3)
    raise AssertionError(f"{notebook}: the kernel was not idle within {timeout:.0f} s")


def _run_all_cells(page, lab: JupyterLab, notebook: str, n_code: int, timeout: float) -> None:
    """Run > Run All Cells, then wait until every code cell ran (or one failed) and idle."""
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        prompts = _prompts(page)
        done = sum(p.startswith("[") and p[1:-2].isdigit() for p in prompts)
        busy = any("*" in p for p in prompts)
        if not busy and (done == n_code or (done and _tracebacks(page))):
            _wait_for_kernel_idle(lab, notebook, timeout=max(deadline - time.monotonic(), 5))
            return
        time.sleep(0.5)
    raise AssertionError(
        f"{notebook}: cells still running after {timeout:.0f} s; prompts {_prompts(page)}"
    )


# The page state of one interactive widget: its image, its first slider or dropdown, and
# whether it shows a traceback.
WIDGET_STATE_JS = """
(box) => {
  const img = box.querySelector('.widget-output img');
  const control = box.querySelector('.widget-slider, .widget-dropdown');
  let kind = null, value = null;
  if (control && control.classList.contains('widget-slider')) {
    kind = 'slider';
    value = control.querySelector('.widget-readout').innerText.trim();
  } else if (control) {
    kind = 'dropdown';
    const select = control.querySelector('select');
    value = select.options[select.selectedIndex].text;
  }
  const errors = [...box.querySelectorAll('.jp-OutputArea-output')]
    .filter(e => e.dataset.mimeType === 'application/vnd.jupyter.stderr')
    .map(e => e.innerText)
    .filter(t => t.includes('Traceback') || t.includes('Error'));
  // the image as its length and an FNV-1a hash, not the whole data URL: the test reads this
  // every 0.2 s while it waits for a redraw
  let src = null;
  if (img) {
    let h = 0x811c9dc5;
    for (let i = 0; i < img.src.length; i++) {
      h = Math.imul(h ^ img.src.charCodeAt(i), 0x01000193) >>> 0;
    }
    src = img.src.length + ':' + h.toString(16);
  }
  return {src, kind, value, errors};
}
"""


def _move_control(page, box, kind: str) -> None:
    """Change the first slider or dropdown the way a learner does: drag it, or pick another."""
    if kind == "dropdown":
        select = box.locator(".widget-dropdown select").first
        n = select.locator("option").count()
        current = select.evaluate("s => s.selectedIndex")
        select.select_option(index=(current + 1) % n)
        return
    track = box.locator(".widget-slider .noUi-target").first.bounding_box()
    handle = box.locator(".widget-slider .noUi-handle").first.bounding_box()
    x = handle["x"] + handle["width"] / 2
    y = handle["y"] + handle["height"] / 2
    # Drag to a quarter of the track from the far end: a clear change, never past an end.
    left_half = x < track["x"] + track["width"] / 2
    target = track["x"] + track["width"] * (0.75 if left_half else 0.25)
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(target, y, steps=4)
    page.mouse.up()


def _png_pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int)


def heatmap_change(before: bytes, after: bytes) -> float:
    """Fraction of the coloured pixels (heatmap cells, colour bar) that changed colour.

    Text (title, tick labels) is black or grey, so a redraw that only changes the title, with
    the same weights, scores 0.
    """
    a, b = _png_pixels(before), _png_pixels(after)
    if a.shape != b.shape:
        return 1.0  # the heatmap changed size: other labels, other shape

    def coloured(x):
        return (x.max(axis=-1) - x.min(axis=-1)) > 12

    mask = coloured(a) | coloured(b)
    changed = (np.abs(a - b).max(axis=-1) > 16) & mask
    return float(changed.sum() / max(mask.sum(), 1))


def test_heatmap_change_ignores_text_and_sees_colour():
    """The image comparison the browser test relies on, on figures drawn here."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils.plotting import plot_attention

    def png(weights, title):
        fig = plot_attention(np.asarray(weights), list("ab"), list("xy"), title=title)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        return buf.getvalue()

    w = [[0.9, 0.1], [0.2, 0.8]]
    assert heatmap_change(png(w, "T = 1"), png(w, "T = 1")) == 0.0
    assert heatmap_change(png(w, "T = 1"), png(w, "T = 2")) == 0.0  # title only
    assert heatmap_change(png(w, "T = 1"), png([[0.5, 0.5], [0.5, 0.5]], "T = 2")) > 0.1


# --------------------------------------------------------------------------------------
# The test


def _code_cells(path: Path) -> tuple[int, int]:
    nb = nbformat.read(path, as_version=4)
    n_code = sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())
    return n_code, nb.metadata.get("course", {}).get("budget_seconds", 60)


@pytest.mark.browser
@pytest.mark.parametrize("notebook", WIDGET_NOTEBOOKS)
def test_widgets_in_browser(notebook, lab, lab_page, screenshots, request):
    assert (ROOT / "notebooks" / notebook).exists(), f"{notebook} is listed but missing"
    n_code, budget = _code_cells(lab.root / notebook)
    shots = screenshots / Path(notebook).stem
    shots.mkdir()
    page = None
    passed = False
    try:
        started = time.monotonic()
        page = lab_page.open(notebook)
        page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=SERVER_START_S * 1000)
        _wait_for_kernel_idle(lab, notebook, timeout=SERVER_START_S)
        # Generous but bounded: four times the notebook's budget, plus start-up.
        _run_all_cells(page, lab, notebook, n_code, timeout=4 * budget + 60)
        ran = time.monotonic() - started
        # conftest.py's table of wall times, when this run is the notebook's only run
        request.node.user_properties.append(("course_walltime", (notebook, ran)))
        _check_page(page, notebook, "after Run All Cells")
        _save_executed_copy(page, lab, notebook, n_code)

        boxes = page.locator(".widget-interact")
        _keep_for_the_site(boxes, Path(notebook).stem)
        moved = []
        for i in range(boxes.count()):
            box = boxes.nth(i)
            before = box.evaluate(WIDGET_STATE_JS)
            if before["src"] is None or before["kind"] is None:
                continue  # not a heatmap, or no slider or dropdown to move
            box.scroll_into_view_if_needed()
            box.screenshot(path=shots / f"widget{i}_before.png")
            image_before = box.locator(".widget-output img").first.screenshot()
            _move_control(page, box, before["kind"])
            after = before
            deadline = time.monotonic() + WIDGET_REDRAW_S
            while time.monotonic() < deadline:
                after = box.evaluate(WIDGET_STATE_JS)
                if after["errors"] or (after["src"] and after["src"] != before["src"]):
                    break
                time.sleep(0.2)
            # A drag sends several values; let the kernel draw the last one.
            _wait_for_kernel_idle(lab, notebook, timeout=WIDGET_REDRAW_S)
            after = box.evaluate(WIDGET_STATE_JS)
            box.screenshot(path=shots / f"widget{i}_after.png")
            label = (
                f"{notebook} widget {i} ({before['kind']} {before['value']} -> {after['value']})"
            )
            assert not after["errors"], f"{label}: the redraw failed:\n{after['errors'][0][-3000:]}"
            assert after["value"] != before["value"], f"{label}: the control shows no new value"
            assert after["src"] and after["src"] != before["src"], f"{label}: no new image"
            image_after = box.locator(".widget-output img").first.screenshot()
            change = heatmap_change(image_before, image_after)
            assert change > 0.02, (
                f"{label}: only {change:.1%} of the heatmap's coloured pixels changed (> 2% "
                "expected); is the control passed on to the computation?"
            )
            moved.append(
                f"widget {i} ({before['kind']} {before['value']} -> {after['value']}): "
                f"{change:.0%} of coloured pixels changed"
            )
        _check_page(page, notebook, "after moving the widgets")
        assert moved, f"{notebook}: no heatmap widget with a slider or dropdown was found"
        page.screenshot(path=shots / "page.png")
        _say(
            request.node,
            f"{notebook}: ran all cells in {ran:.0f} s; " + "; ".join(moved) + f"; widget "
            f"screenshots (before / after): {shots}",
        )
        passed = True
    except Exception:
        with contextlib.suppress(Exception):  # the test's own error is the one to report
            page.screenshot(path=shots / "failure.png")
        print(f"screenshot of the failure: {shots / 'failure.png'}\n{lab.log_tail()}")
        raise
    finally:
        if passed:
            try:
                lab_page.close_notebooks()
            except Exception:
                lab_page.discard()
        else:
            lab_page.discard()  # a failed test leaves the page as it was: the next gets a new one
        with contextlib.suppress(Exception):  # lab.stop() ends whatever is left
            lab.shutdown_kernel(notebook)

"""Slides for lectures: every notebook carries slide metadata, and a notebook opens as slides.

- **The metadata**: every cell of every notebook has ``metadata.slideshow.slide_type`` as
  scripts/slide_metadata.py's rule gives it (a ``#``/``##`` heading starts a slide, any other
  markdown cell a subslide, a code cell continues the page). A new cell without it, or with
  another type, fails with the notebook and the cell's index; the script fixes it.
- **In the browser**: JupyterLab with RISE (``jupyterlab-rise``, the ``instructor`` group)
  opens ``SLIDES_NOTEBOOK`` at ``/rise/<notebook>`` in headless Chromium, with RISE's settings
  from ``jupyter-config/`` as ``make slides`` passes them. The test checks that reveal.js shows
  one slide per ``slide`` cell and one page per slide or subslide, that the first slide is the
  notebook's title with its formulas typeset, that the right arrow goes to the next section,
  and that no request leaves the machine (reveal.js, its theme and MathJax are all served by
  JupyterLab). A screenshot of the first slide goes to the test's tmp folder; its path is
  printed at the end of the run.

The server and its skip rule are tests/test_browser_widgets.py's, imported; Chromium is the
session's (tests/conftest.py). Without Chromium the browser test skips, or fails under
``COURSE_REQUIRE_BROWSER=1``. Without jupyterlab-rise it skips (``make lab`` installs the
``dev`` group only), or fails under ``COURSE_REQUIRE_RISE=1``, which ``make instructor-test``
sets once it has installed the instructor group (CI installs the group before ``make test``
and sets it for that run).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import test_browser_widgets as widgets

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "slide_metadata", ROOT / "scripts" / "slide_metadata.py"
)
slide_metadata = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slide_metadata)

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SLIDES_NOTEBOOK = "05_positional_encoding.ipynb"  # short, with formulas on its title slide
# RISE's defaults for the course (make slides sets JUPYTER_CONFIG_PATH to this folder): the
# white theme (RISE's own default, simple, asks a web font service for two fonts) and pages
# that scroll when taller than the screen.
RISE_CONFIG = ROOT / "jupyter-config"
REQUIRE_RISE = os.environ.get("COURSE_REQUIRE_RISE", "") not in ("", "0")
LOOPBACK = {"localhost", "::1"}
MATH_S = 30  # MathJax typesets the title slide's formulas after the deck is built


# --------------------------------------------------------------------------------------
# The metadata


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_cell_carries_the_rules_slide_type(path):
    problems = slide_metadata.disagreements(json.loads(path.read_text())["cells"])
    assert not problems, (
        f"{path.name}: cells without the slide type scripts/slide_metadata.py's rule gives "
        f"them (run .venv/bin/python scripts/slide_metadata.py):\n" + "\n".join(problems)
    )


def _cell(kind: str, source: str, **metadata) -> dict:
    return {"cell_type": kind, "source": [source], "metadata": metadata}


def test_the_slide_check_catches_a_missing_and_a_wrong_type():
    cells = [
        _cell("markdown", "# 99 · Title\n\nWhat this notebook does."),
        _cell("markdown", "## 1. A section"),
        _cell("code", "x = 1", nbgrader={"grade_id": "x"}),
        _cell("markdown", "### A subsection"),
        _cell("markdown", "An explanation, with #hashtag and no heading."),
        _cell("code", "#notaheading = 2"),
    ]
    assert [slide_metadata.slide_type(c) for c in cells] == [
        "slide",
        "slide",
        "-",
        "subslide",
        "subslide",
        "-",
    ]
    assert slide_metadata.apply(cells) == 6
    assert slide_metadata.apply(cells) == 0, "a second run changes nothing"
    assert cells[2]["metadata"]["nbgrader"] == {"grade_id": "x"}, "other metadata is kept"
    assert slide_metadata.disagreements(cells) == []

    cells.insert(3, _cell("code", "y = 2"))  # a new cell, added without the script
    cells[1]["metadata"]["slideshow"]["slide_type"] = "subslide"  # a section made a subslide
    assert slide_metadata.disagreements(cells) == [
        "cell 1 (markdown, '## 1. A section'): slide_type 'subslide', the rule says 'slide'",
        "cell 3 (code, 'y = 2'): slide_type missing, the rule says '-'",
    ]


def test_the_script_leaves_a_notebook_that_agrees_untouched(tmp_path, capsys):
    path = tmp_path / "99_example.ipynb"
    nb = {
        "cells": [_cell("markdown", "# 99 · Title"), _cell("code", "x = 1")],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    slide_metadata.write_notebook(path, nb)
    assert slide_metadata.main(["--check", str(path)]) == 1
    assert "cell 0 (markdown, '# 99 · Title'): slide_type missing" in capsys.readouterr().out
    assert slide_metadata.main([str(path)]) == 0
    written = path.read_bytes()
    assert slide_metadata.main([str(path)]) == 0
    assert "0 cell(s) already right" in capsys.readouterr().out
    assert path.read_bytes() == written
    assert slide_metadata.main(["--check", str(path)]) == 0


# --------------------------------------------------------------------------------------
# Nothing from outside the machine


def leaving_the_machine(urls: list[str]) -> list[str]:
    """The URLs that go to a host other than this machine's loopback (data: and blob: URLs
    stay inside the page)."""
    outside = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about"):
            continue
        host = parts.hostname or ""
        if not (host in LOOPBACK or re.fullmatch(r"127(\.\d{1,3}){3}", host)):
            outside.append(url)
    return outside


def test_the_request_check_flags_every_outside_host():
    urls = [
        "http://127.0.0.1:8888/rise/05.ipynb",
        "ws://127.0.0.1:8888/api/kernels/abc/channels",
        "http://localhost:8888/static/rise/bundle.js",
        "http://[::1]:8888/files/rise.css",
        "data:image/png;base64,iVBORw0",
        "blob:http://127.0.0.1:8888/1234",
        "https://fonts.example.com/css?family=Lato",
        "http://127.0.0.1.example.com/x.js",
        "//cdn.example.org/reveal.js",
        "http://10.0.0.5/x.css",
    ]
    assert leaving_the_machine(urls) == urls[-4:]


# --------------------------------------------------------------------------------------
# The slides in the browser


def _require_rise() -> None:
    if importlib.util.find_spec("jupyterlab_rise") is not None:
        return
    message = (
        "jupyterlab-rise is not installed: it comes with the instructor group "
        "(.venv/bin/python -m pip install -e '.[instructor]')"
    )
    if REQUIRE_RISE:
        pytest.fail(f"{message} (COURSE_REQUIRE_RISE is set, so this is a failure)")
    pytest.skip(f"{message}. Skipped; make instructor-test installs it and runs this test.")


def _heading_text(cell: dict) -> str:
    """The text of a markdown cell's first heading line, as the page shows it."""
    line = "".join(cell["source"]).lstrip().split("\n", 1)[0]
    return re.sub(r"[`*_]", "", line.lstrip("#")).strip()


# The heading text of the present slide (its first page), without JupyterLab's anchor link.
PRESENT_HEADING_JS = """() => {
  const h = document.querySelector('.reveal .slides > section.present h1, '
                                   + '.reveal .slides > section.present h2');
  if (!h) return null;
  const copy = h.cloneNode(true);
  copy.querySelectorAll('.jp-InternalAnchorLink').forEach(a => a.remove());
  return copy.textContent.trim();
}"""


def _wait_for(page, script: str, want, timeout: float):
    deadline = time.monotonic() + timeout
    got = page.evaluate(script)
    while got != want and time.monotonic() < deadline:
        time.sleep(0.2)
        got = page.evaluate(script)
    return got


@pytest.mark.browser
def test_a_notebook_opens_as_slides(tmp_path, monkeypatch, request):
    _require_rise()
    chromium = request.getfixturevalue("browser")  # tests/conftest.py; skips without Chromium

    cells = json.loads((ROOT / "notebooks" / SLIDES_NOTEBOOK).read_text())["cells"]
    types = [slide_metadata.slide_type(c) for c in cells]
    n_slides, n_pages = types.count("slide"), types.count("slide") + types.count("subslide")
    headings = [_heading_text(c) for c, t in zip(cells, types, strict=True) if t == "slide"]

    extra = os.environ.get("JUPYTER_CONFIG_PATH")
    monkeypatch.setenv(
        "JUPYTER_CONFIG_PATH", os.pathsep.join(filter(None, [str(RISE_CONFIG), extra]))
    )
    started = time.monotonic()
    lab = widgets.JupyterLab(tmp_path / "jupyterlab")
    shot = tmp_path / f"{Path(SLIDES_NOTEBOOK).stem}_slides.png"
    urls: list[str] = []
    errors: list[str] = []
    try:
        lab.start()
        context = chromium.new_context(viewport={"width": 1280, "height": 800})
        try:
            page = context.new_page()
            page.on("request", lambda r: urls.append(r.url))
            page.on("websocket", lambda ws: urls.append(ws.url))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{lab.url}/rise/{SLIDES_NOTEBOOK}?token={lab.token}")
            slides = page.locator(".reveal .slides > section")
            slides.first.wait_for(timeout=widgets.SERVER_START_S * 1000)
            typeset = _wait_for(
                page,
                "() => document.querySelectorAll('.reveal section.present mjx-container').length > 0",
                True,
                MATH_S,
            )
            page.screenshot(path=shot)
            shown = page.evaluate(PRESENT_HEADING_JS)
            pages = page.locator(".reveal .slides > section > section").count()
            assert slides.count() == n_slides and pages == n_pages, (
                f"{SLIDES_NOTEBOOK}: reveal.js shows {slides.count()} slides and {pages} pages; "
                f"the slide metadata makes {n_slides} and {n_pages}"
            )
            assert shown == headings[0], f"the first slide shows {shown!r}, not the title"
            assert typeset, f"no typeset formula on the first slide within {MATH_S} s"
            page.keyboard.press("ArrowRight")
            after = _wait_for(page, PRESENT_HEADING_JS, headings[1], timeout=10)
            assert after == headings[1], f"after the right arrow the slide shows {after!r}"
        finally:
            context.close()
    except Exception:
        print(f"screenshot: {shot}\n{lab.log_tail()}")
        raise
    finally:
        with contextlib.suppress(Exception):
            lab.stop()
    seconds = time.monotonic() - started
    outside = leaving_the_machine(urls)
    assert not outside, f"the slides loaded {len(outside)} thing(s) from outside: {outside}"
    assert not errors, f"uncaught errors in the page: {errors}"
    widgets._say(
        request.node,
        f"{SLIDES_NOTEBOOK} as RISE slides: {n_slides} slides, {n_pages} pages, "
        f"{len(urls)} requests, all to this machine, in {seconds:.0f} s; screenshot of the "
        f"first slide: {shot}",
    )

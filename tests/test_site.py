"""The course site (scripts/build_site.py, ``make site``).

The first tests check how the site's source is assembled, on small notebooks made here.
The rest check a built site, the folder named by ``COURSE_SITE_DIR`` (``make site`` sets it
after building ``build/site``; without it they skip): a page for every notebook, every
internal link and anchor resolves, no page shows a Python traceback, nothing is loaded from
outside the site, and in headless Chromium a notebook page renders its heatmaps and MathJax
its formulas with no request leaving the site. A screenshot of that page is kept in
``build/site-screenshots/``.
"""

from __future__ import annotations

import base64
import functools
import http.server
import importlib.util
import os
import re
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("build_site", ROOT / "scripts" / "build_site.py")
build_site = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_site)

NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PNG = base64.b64decode(  # a 1x1 picture
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def widget_output(text: str):
    data = {build_site.WIDGET: {"model_id": "abc", "version_major": 2}, "text/plain": text}
    return nbformat.v4.new_output("display_data", data=data)


def notebook_with_widgets():
    nb = nbformat.v4.new_notebook()
    first = nbformat.v4.new_code_cell("interact(...)")
    first.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="before\n"),
        widget_output("interactive(children=(IntSlider(value=3),))"),
        widget_output("train:  0%|          | 0/250 [00:00<?, ?it/s]"),
    ]
    second = nbformat.v4.new_code_cell("display(box)")
    second.outputs = [
        widget_output("VBox(children=(Button(),))"),
        widget_output("interactive(children=(Dropdown(),))"),
        nbformat.v4.new_output("display_data", data={"image/png": "aGk=", "text/plain": "fig"}),
    ]
    nb.cells = [nbformat.v4.new_markdown_cell("# A title"), first, second]
    return nb


# --------------------------------------------------------------------------------------
# Assembling the source


def test_widgets_become_their_screenshots_or_a_note_and_progress_bars_go(tmp_path):
    nb = notebook_with_widgets()
    kinds = [kind for _, _, kind in build_site.widget_outputs(nb)]
    assert kinds == ["interact", "progress", "other", "interact"]
    (tmp_path / "interact0.png").write_bytes(PNG)  # the second interact has no screenshot
    assert build_site.static_widgets(nb, tmp_path) == (1, 2)

    first, second = nb.cells[1].outputs, nb.cells[2].outputs
    assert first[0]["text"] == "before\n"
    assert base64.b64decode(first[1]["data"]["image/png"]) == PNG
    assert (
        "as JupyterLab showed it once the whole notebook had run"
        in first[2]["data"]["text/markdown"]
    )
    assert len(first) == 3, "the progress bar is dropped"
    assert "static page cannot show it" in second[0]["data"]["text/markdown"]
    assert "static page cannot show it" in second[1]["data"]["text/markdown"]
    assert second[2]["data"]["text/plain"] == "fig", "other outputs are left as they are"
    assert not any(
        build_site.WIDGET in out.get("data", {}) for c in nb.cells[1:] for out in c.outputs
    )


def test_without_screenshots_every_widget_is_a_note(tmp_path):
    nb = notebook_with_widgets()
    assert build_site.static_widgets(nb, tmp_path / "missing") == (0, 3)


def test_the_front_page_links_every_notebook_and_lists_the_pages():
    readme = "# Course\n\n| notebook | what |\n|---|---|\n| `00_a` | x |\n| `01_b` | y |\n"
    page = build_site.front_page(readme, ["00_a", "01_b"], ["setup"])
    assert "| [00_a](notebooks/00_a.ipynb) | x |" in page
    assert "| [01_b](notebooks/01_b.ipynb) | y |" in page
    toc = page[page.index("```{toctree}") :]
    assert toc.index("notebooks/00_a") < toc.index("notebooks/01_b") < toc.index("docs/setup")
    with pytest.raises(ValueError, match=r"differ in \['02_c'\]"):
        build_site.front_page(readme, ["00_a", "01_b", "02_c"], [])


def test_the_readme_table_matches_the_notebooks():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    page = build_site.front_page(readme, NOTEBOOKS, [])
    for name in NOTEBOOKS:
        assert f"(notebooks/{name}.ipynb)" in page


def test_links_to_repository_files_outside_the_site_become_code(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "setup.md").write_text("x")
    text = (
        "[scripts/a.py](../scripts/a.py), [the script](../scripts/a.py#L3), "
        "[setup](setup.md#layout), ![a picture](images/x.png), [web](https://example.org)"
    )
    assert build_site.local_links(text, "docs/teaching.md", tmp_path) == (
        "`scripts/a.py`, the script (`scripts/a.py`), [setup](setup.md#layout), "
        "![a picture](images/x.png), [web](https://example.org)"
    )


def test_a_missing_executed_copy_stops_the_build_and_says_what_to_run(tmp_path):
    with pytest.raises(SystemExit, match="run make test first"):
        build_site.assemble(tmp_path, tmp_path, tmp_path / "src")


# --------------------------------------------------------------------------------------
# A built site

SITE = os.environ.get("COURSE_SITE_DIR")
built = pytest.mark.skipif(not SITE, reason="COURSE_SITE_DIR is not set (make site sets it)")


class Page(HTMLParser):
    """The ids, links (tag, attribute, value) and visible text of an HTML page."""

    def __init__(self, path: Path):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[tuple[str, str, str]] = []
        self.text: list[str] = []
        self._skip = 0
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for name in ("href", "src"):
            if attrs.get(name):
                self.links.append((tag, name, attrs[name]))
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


@functools.cache
def pages() -> dict[Path, Page]:
    site = Path(SITE)
    return {p: Page(p) for p in sorted(site.rglob("*.html")) if "_static" not in p.parts}


@built
def test_every_notebook_and_guide_has_a_page():
    site = Path(SITE)
    missing = [n for n in NOTEBOOKS if not (site / "notebooks" / f"{n}.html").is_file()]
    missing += [
        g.stem
        for g in (ROOT / "docs").glob("*.md")
        if not (site / "docs" / f"{g.stem}.html").is_file()
    ]
    assert not missing, f"no page for {missing}"
    for name in NOTEBOOKS:
        nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        title = next(c.source for c in nb.cells if c.cell_type == "markdown").splitlines()[0]
        text = " ".join(pages()[site / "notebooks" / f"{name}.html"].text).replace("\u2019", "'")
        assert title.lstrip("# ").strip() in text, f"{name}'s page lacks its title"


@built
def test_every_internal_link_and_anchor_resolves_and_nothing_loads_from_outside():
    broken, outside = [], []
    for path, page in pages().items():
        for tag, attribute, value in page.links:
            url = urlsplit(value)
            if url.scheme in ("mailto", "data"):
                continue
            if url.scheme or url.netloc:
                # A reader may follow a link out (a paper); the page itself loads nothing.
                if not (tag == "a" and attribute == "href"):
                    outside.append(f"{path.name}: <{tag} {attribute}={value}>")
                continue
            target = (path.parent / unquote(url.path)).resolve() if url.path else path
            if not target.exists():
                broken.append(f"{path.name}: {value}")
            elif url.fragment and target.suffix == ".html":
                ids = pages()[target].ids if target in pages() else Page(target).ids
                if url.fragment not in ids:
                    broken.append(f"{path.name}: {value} (no such anchor)")
    assert not broken, f"{len(broken)} broken links: {broken[:20]}"
    assert not outside, f"loaded from outside the site: {outside[:20]}"


@built
def test_no_page_shows_a_traceback():
    # myst-nb shows an error output in a block of class "traceback"; a printed one has
    # Python's own first line.
    shown = [
        p.name
        for p, page in pages().items()
        if "Traceback (most recent call last)" in " ".join(page.text)
        or re.search(r'class="[^"]*\btraceback\b', p.read_text(encoding="utf-8"))
    ]
    assert not shown, f"a Python traceback is shown on {shown}"


@built
def test_the_search_index_knows_the_notebooks():
    index = (Path(SITE) / "searchindex.js").read_text(encoding="utf-8")
    for word in ("bahdanau", "transformer", "induct"):
        assert f'"{word}' in index.lower(), f"the search index lacks {word!r}"


@pytest.fixture(scope="module")
def served():
    """The built site over HTTP on loopback, as a reader's browser would fetch it."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=SITE)
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@built
@pytest.mark.browser
def test_a_notebook_page_renders_offline_in_chromium(served, browser):
    page_path = "notebooks/02_query_key_value.html"
    requests, failed = [], []
    shots = ROOT / "build" / "site-screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("requestfailed", lambda r: r.url.startswith("http") and failed.append(r.url))
        page.goto(f"{served}/{page_path}", wait_until="networkidle")
        page.wait_for_function("window.MathJax && MathJax.Hub && MathJax.isReady", timeout=30000)
        page.wait_for_function("MathJax.Hub.queue.pending === 0", timeout=30000)
        typeset = page.locator("article .MathJax, article .MathJax_SVG").count()
        raw = page.evaluate(
            "[...document.querySelectorAll('article .math')].map(e => e.innerText)"
            ".filter(t => t.includes('\\\\(') || t.includes('\\\\['))"
        )
        images = page.evaluate(
            "[...document.querySelectorAll('.cell_output img')]"
            ".map(i => [i.complete && i.naturalWidth > 0, i.naturalWidth, i.naturalHeight])"
        )
        assert images, f"{page_path} shows no figure: was it built from executed copies?"
        heatmap = page.locator(".cell_output img").nth(0)
        heatmap.scroll_into_view_if_needed()
        page.screenshot(path=shots / "02_query_key_value.png")
        heatmap.screenshot(path=shots / "02_query_key_value_first_figure.png")
    finally:
        context.close()
    outside = [u for u in requests if urlsplit(u).hostname not in ("127.0.0.1", None)]
    assert not outside, f"the page fetched from outside the site: {outside}"
    assert not failed, f"requests that failed: {failed}"
    assert images and all(ok for ok, _, _ in images), f"figures that did not load: {images}"
    assert typeset > 0 and not raw, f"MathJax typeset {typeset} formulas, left {raw[:5]} raw"
    print(f"{page_path}: {len(images)} figures, {typeset} formulas typeset; screenshots in {shots}")

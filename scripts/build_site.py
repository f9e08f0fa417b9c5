"""Build the course site: every notebook as ``make test`` ran it, and the guides, as static HTML.

``make site`` runs this after ``make test``, which keeps each notebook as nbval executed it
in ``build/executed/`` and each interactive widget as the browser tests saw it in
``build/widget_screenshots/``. Nothing is executed again here. The script

1. assembles a Sphinx source folder, ``build/site-src/``: the front page (``index.md``,
   the README with each notebook's name linked to its page and the table of contents),
   ``notebooks/`` (the executed copies, each widget output replaced by its screenshot and a
   note that it is live in JupyterLab, progress bars dropped), and ``docs/`` (the guides and
   their pictures);
2. runs Sphinx (myst-nb, sphinx-book-theme; ``docs/conf.py``) into ``build/site/``, with
   every warning an error, so a link to a page or heading that does not exist fails the
   build.

The site reads offline: ``docs/conf.py`` switches off the widget scripts myst-nb would load
from a CDN and serves MathJax from the site itself.

    python scripts/build_site.py [--executed build/executed] [--screenshots
        build/widget_screenshots] [--out build/site]
"""

from __future__ import annotations

import argparse
import base64
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
WIDGET = "application/vnd.jupyter.widget-view+json"
# tqdm.auto's bar in a notebook is a widget whose text is the bar when it was first shown
# (0%); the site drops it rather than show a bar that never moves.
PROGRESS_BAR = re.compile(r"^\s*(\S.*?: )?\s*\d+%\|")
NOTE = (
    "*An interactive widget: {what}. In JupyterLab (`make lab`) its controls move and it "
    "redraws at once; nothing is retrained.*"
)


def widget_outputs(nb: nbformat.NotebookNode) -> list[tuple[int, int, str]]:
    """(cell index, output index, kind) of every widget output, kind being ``"interact"``
    (an ``interactive``, which the browser tests screenshot), ``"progress"`` or ``"other"``."""
    found = []
    for c, cell in enumerate(nb.cells):
        for o, out in enumerate(cell.get("outputs", [])):
            data = out.get("data", {})
            if WIDGET not in data:
                continue
            text = data.get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            if text.startswith("interactive("):
                kind = "interact"
            elif PROGRESS_BAR.match(text):
                kind = "progress"
            else:
                kind = "other"
            found.append((c, o, kind))
    return found


def static_widgets(nb: nbformat.NotebookNode, shots: Path | None) -> tuple[int, int]:
    """Replace, in place, each widget output of ``nb`` by something a static page can show.

    The i-th ``interactive`` output becomes ``shots/interact{i}.png`` (the i-th widget box the
    browser test saw, in page order) when that file exists, followed by a note that the widget
    is live in JupyterLab; other widgets become the note alone; progress bars are dropped.
    Returns how many widgets were shown as screenshots and how many as a note only."""
    pictured = noted = 0
    interact = 0
    replaced: dict[tuple[int, int], list] = {}
    for c, o, kind in widget_outputs(nb):
        if kind == "progress":
            replaced[c, o] = []
            continue
        new = []
        picture = shots / f"interact{interact}.png" if shots and kind == "interact" else None
        if kind == "interact":
            interact += 1
        if picture is not None and picture.is_file():
            png = base64.b64encode(picture.read_bytes()).decode("ascii")
            new.append(nbformat.v4.new_output("display_data", data={"image/png": png}))
            what = "above, as JupyterLab showed it once the whole notebook had run"
            pictured += 1
        else:
            what = "a static page cannot show it"
            noted += 1
        new.append(
            nbformat.v4.new_output("display_data", data={"text/markdown": NOTE.format(what=what)})
        )
        replaced[c, o] = new
    for (c, o), new in sorted(replaced.items(), reverse=True):
        nb.cells[c].outputs[o : o + 1] = new
    return pictured, noted


NOTEBOOK_CELL = re.compile(r"^\| `(\d\d_[a-z0-9_]+)` \|", re.MULTILINE)


def front_page(readme: str, notebooks: list[str], guides: list[str]) -> str:
    """The site's front page: the README, each notebook's name in its table linked to the
    notebook's page, and the site's table of contents (notebooks, then guides)."""
    missing = sorted(set(NOTEBOOK_CELL.findall(readme)) ^ set(notebooks))
    if missing:
        raise ValueError(
            f"the README's notebook table and notebooks/ differ in {missing}: each notebook "
            "needs one row, `NN_name` in its first column"
        )
    page = NOTEBOOK_CELL.sub(lambda m: f"| [{m[1]}](notebooks/{m[1]}.ipynb) |", readme)
    toc = [
        "",
        "```{toctree}",
        ":caption: The notebooks",
        ":hidden:",
        "",
        *[f"notebooks/{name}" for name in notebooks],
        "```",
        "",
        "```{toctree}",
        ":caption: Guides",
        ":hidden:",
        "",
        *[f"docs/{name}" for name in guides],
        "```",
        "",
    ]
    return page.rstrip("\n") + "\n" + "\n".join(toc)


MARKDOWN_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)#\s]+)(#[^)\s]*)?\)")


def local_links(text: str, page: str, source: Path) -> str:
    """A guide's links to repository files that are not part of the site (a script, say)
    become the file's path in code type; links to pages, headings, pictures and the web stay.
    ``page`` is the guide's path in the repository (``docs/teaching.md``)."""

    def replace(match: re.Match) -> str:
        target = match[2]
        if "://" in target or target.startswith("mailto:"):
            return match[0]
        path = _normalise(f"{Path(page).parent.as_posix()}/{target}")
        if (source / path).exists():
            return match[0]
        label = match[1].strip("`")
        return f"`{path}`" if path.endswith(label) else f"{match[1]} (`{path}`)"

    return MARKDOWN_LINK.sub(replace, text)


def _normalise(path: str) -> str:
    """``docs/../scripts/x.py`` -> ``scripts/x.py``."""
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            parts = parts[:-1]
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def assemble(executed: Path, screenshots: Path, source: Path) -> list[str]:
    """Write the Sphinx source folder; returns one line per notebook on its widgets."""
    names = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    missing = [n for n in names if not (executed / f"{n}.ipynb").is_file()]
    if missing:
        raise SystemExit(
            f"no executed copy in {executed}/ of {', '.join(missing)}. The site is built from "
            "the notebooks as make test ran them: run make test first."
        )
    shutil.rmtree(source, ignore_errors=True)
    (source / "notebooks").mkdir(parents=True)
    report = []
    for name in names:
        nb = nbformat.read(executed / f"{name}.ipynb", as_version=4)
        pictured, noted = static_widgets(nb, screenshots / name)
        nbformat.write(nb, source / "notebooks" / f"{name}.ipynb")
        if pictured or noted:
            report.append(f"{name}: {pictured} widget(s) as screenshots, {noted} as a note only")
    shutil.copytree(ROOT / "docs", source / "docs", ignore=shutil.ignore_patterns("conf.py"))
    guides = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (source / "index.md").write_text(front_page(readme, names, guides), encoding="utf-8")
    for page in [source / "index.md", *(source / "docs").glob("*.md")]:
        relative = page.relative_to(source).as_posix()
        page.write_text(local_links(page.read_text(encoding="utf-8"), relative, source))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executed", type=Path, default=ROOT / "build" / "executed")
    parser.add_argument("--screenshots", type=Path, default=ROOT / "build" / "widget_screenshots")
    parser.add_argument("--source", type=Path, default=ROOT / "build" / "site-src")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    args = parser.parse_args(argv)
    started = time.monotonic()
    for line in assemble(args.executed, args.screenshots, args.source):
        print(line)
    shutil.rmtree(args.out, ignore_errors=True)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(ROOT / "docs")]
    command += ["-d", str(args.source.with_name("site-doctrees"))]  # Sphinx's cache, not the site
    command += ["-W", "--keep-going", "-q", "-j", "auto", str(args.source), str(args.out)]
    subprocess.run(command, check=True)
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(
        f"site built in {time.monotonic() - started:.0f} s: {args.out}/index.html, "
        f"{size / 2**20:.0f} MB"
    )


if __name__ == "__main__":
    main()

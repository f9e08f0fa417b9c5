"""Slide metadata for the course's notebooks, so that a lecture can present any of them as slides.

Every cell gets ``metadata.slideshow.slide_type``, the field Jupyter's slideshow tools read
(RISE, ``jupyter nbconvert --to slides``), by one rule:

- a markdown cell that opens with a ``#`` or ``##`` heading starts a **slide**: the title, and
  each numbered section, is a step to the right in the deck;
- every other markdown cell (a ``###`` heading, or an explanation) starts a **subslide**: the
  next page down within the section;
- a code cell continues (``-``) the page of the explanation before it, so a page is one
  explanation and the code that shows it, and its output stays beside its text.

Nothing is skipped and nothing is a fragment: a lecture runs the cells in the notebook's
order, and a page shows all of its cells at once. The other keys of a cell's metadata (and
of its ``slideshow`` entry) are left as they are, and a notebook that already agrees with the
rule is not rewritten, so the script can run any number of times. tests/test_slides.py checks
that every cell of every notebook carries the type this rule gives it.

    .venv/bin/python scripts/slide_metadata.py           # set the metadata in notebooks/
    .venv/bin/python scripts/slide_metadata.py --check   # list the cells that disagree; exit 1
    .venv/bin/python scripts/slide_metadata.py path/to/notebook.ipynb ...
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"(#{1,6})[ \t]")  # a Markdown ATX heading and its level


def heading_level(cell: dict) -> int:
    """The level of the heading a markdown cell opens with (1 for ``#``), 0 for none."""
    if cell["cell_type"] != "markdown":
        return 0
    source = "".join(cell["source"]).lstrip()
    match = HEADING.match(source)
    return len(match[1]) if match else 0


def slide_type(cell: dict) -> str:
    """The slide type the rule gives a cell (the module docstring states the rule)."""
    if cell["cell_type"] != "markdown":
        return "-"
    return "slide" if heading_level(cell) in (1, 2) else "subslide"


def disagreements(cells: list[dict]) -> list[str]:
    """One line per cell whose ``slideshow.slide_type`` is missing or differs from the rule."""
    problems = []
    for i, cell in enumerate(cells):
        have = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
        want = slide_type(cell)
        if have != want:
            first = "".join(cell["source"]).strip().split("\n", 1)[0][:60]
            problems.append(
                f"cell {i} ({cell['cell_type']}, {first!r}): slide_type "
                f"{'missing' if have is None else repr(have)}, the rule says {want!r}"
            )
    return problems


def apply(cells: list[dict]) -> int:
    """Set every cell's slide type by the rule; return how many cells changed."""
    changed = 0
    for cell in cells:
        slideshow = cell.setdefault("metadata", {}).setdefault("slideshow", {})
        if slideshow.get("slide_type") != slide_type(cell):
            slideshow["slide_type"] = slide_type(cell)
            changed += 1
    return changed


def write_notebook(path: Path, nb: dict) -> None:
    """Write as nbformat and nbstripout do (one-space indent, sorted keys, UTF-8)."""
    text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a cell")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    status = 0
    for path in paths:
        nb = json.loads(path.read_text(encoding="utf-8"))
        if args.check:
            for line in disagreements(nb["cells"]):
                print(f"{path.name}: {line}")
                status = 1
            continue
        changed = apply(nb["cells"])
        if changed:
            write_notebook(path, nb)
        slides = sum(slide_type(c) == "slide" for c in nb["cells"])
        pages = slides + sum(slide_type(c) == "subslide" for c in nb["cells"])
        print(
            f"{path.name}: {slides} slides, {pages} pages, {len(nb['cells'])} cells; "
            f"{changed} cell(s) {'updated' if changed else 'already right'}"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())

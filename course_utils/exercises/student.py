"""Make student copies of the notebooks: exercise solutions replaced by a stub.

Exercise cells ship with a working solution between two marker lines, so the course's own
tests run them::

    def masked_softmax(scores, mask):
        # BEGIN SOLUTION
        ...
        # END SOLUTION

A student copy keeps everything else and puts, in place of each marked block, a line that
raises ``NotImplementedError`` at the block's indentation. The checker cell that follows then
reports "not implemented yet" until the learner writes the code.

This is what nbgrader's ``generate_assignment`` does to the code cells with the course's
``nbgrader_config.py`` (same markers, same ``STUB``), which ``make student`` runs for
instructors; ``make lab`` uses this module, so a learner needs no nbgrader.
``tests/test_nbgrader.py`` holds the two equal on every notebook where nbgrader is installed.

Command line (every copy afresh; ``make lab`` adds ``--keep-existing``, so a copy a learner
has worked in is never overwritten)::

    python -m course_utils.exercises.student notebooks/ student_notebooks/
    python -m course_utils.exercises.student notebooks/ my_notebooks/ --keep-existing
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
STUB = 'raise NotImplementedError("write your solution here")'


def strip_solutions(source: str) -> str:
    """Replace every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block with a stub line."""
    out, indent, start = [], None, 0
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        begin = BEGIN.match(line)
        if indent is None and begin:
            indent, start = begin.group(1), number
        elif indent is not None and begin:
            raise ValueError(
                f"line {number}: BEGIN SOLUTION inside the block opened on line {start}"
            )
        elif indent is not None and END.match(line):
            # the stub ends as the END line did (a cell's last line has no newline), as
            # nbgrader's stub does
            ending = line[len(line.rstrip("\r\n")) :]
            out.append(f"{indent}{STUB}{ending}")
            indent = None
        elif indent is None and END.match(line):
            raise ValueError(f"line {number}: END SOLUTION without BEGIN SOLUTION")
        elif indent is None:
            out.append(line)
    if indent is not None:
        raise ValueError(f"line {start}: BEGIN SOLUTION is never closed by END SOLUTION")
    return "".join(out)


def student_notebook(notebook: dict) -> tuple[dict, int]:
    """A copy of a notebook (as loaded JSON) without solutions, and how many were removed."""
    removed = 0
    cells = []
    for cell in notebook["cells"]:
        cell = dict(cell)
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            stripped = strip_solutions(source)
            removed += source.count("# BEGIN SOLUTION")
            cell["source"] = stripped
            cell["outputs"], cell["execution_count"] = [], None
        cells.append(cell)
    return {**notebook, "cells": cells}, removed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="folder of course notebooks")
    parser.add_argument("target", type=Path, help="folder to write the student copies to")
    parser.add_argument(
        "--keep-existing",
        action="store_true",
        help="write only the copies that are missing; leave existing ones as they are",
    )
    args = parser.parse_args(argv)
    if args.source.resolve() == args.target.resolve():
        parser.error("target must differ from source: the course keeps its solutions")
    args.target.mkdir(parents=True, exist_ok=True)
    kept = []
    for path in sorted(args.source.glob("*.ipynb")):
        out = args.target / path.name
        if args.keep_existing and out.exists():
            kept.append(path.name)
            continue
        notebook, removed = student_notebook(json.loads(path.read_text()))
        out.write_text(json.dumps(notebook, indent=1) + "\n")
        print(f"{out}: written, {removed} solution(s) replaced by a stub")
    if kept:
        copies = "copy" if len(kept) == 1 else "copies"
        print(
            f"{len(kept)} {copies} in {args.target}/ kept as they are (delete one to get it fresh)"
        )


if __name__ == "__main__":
    main()

"""Student copies: solutions become stubs, the checkers then say "not implemented yet"."""

import json
from pathlib import Path

import pytest

from course_utils.exercises import student

ROOT = Path(__file__).resolve().parents[1]

EXERCISE = '''\
def masked_softmax(scores, mask):
    """Your turn."""
    # BEGIN SOLUTION
    from course_utils.attention import masked_softmax as reference

    return reference(scores, mask)
    # END SOLUTION
'''
CHECK = (
    "from course_utils.exercises.nb02 import check_masked_softmax\n\n"
    "check_masked_softmax(masked_softmax)\n"
)


def notebook(*sources):
    cells = [
        {"cell_type": "code", "source": s, "outputs": [], "execution_count": None, "metadata": {}}
        for s in sources
    ]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def run_cells(nb):
    namespace = {}
    for cell in nb["cells"]:
        exec(compile("".join(cell["source"]), "<cell>", "exec"), namespace)


def test_strip_keeps_signature_and_indentation():
    stripped = student.strip_solutions(EXERCISE)
    assert stripped.splitlines() == [
        "def masked_softmax(scores, mask):",
        '    """Your turn."""',
        f"    {student.STUB}",
    ]


def test_the_stub_ends_as_the_end_line_did_like_nbgraders():
    # nbgrader's generate_assignment (make student) replaces a region line by line, so a
    # cell's last line stays without a newline; tests/test_nbgrader.py compares the two copies
    assert student.strip_solutions(EXERCISE).endswith(f"    {student.STUB}\n")
    assert student.strip_solutions(EXERCISE.rstrip("\n")).endswith(f"    {student.STUB}")
    windows = student.strip_solutions(EXERCISE.replace("\n", "\r\n"))
    assert windows.endswith(f"    {student.STUB}\r\n")


def test_course_copy_passes_and_student_copy_reports_not_implemented(capsys):
    course = notebook(EXERCISE, CHECK)
    run_cells(course)
    copy, removed = student.student_notebook(course)
    assert removed == 1
    with pytest.raises(AssertionError):
        run_cells(copy)
    assert "not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "source, words",
    [
        ("# BEGIN SOLUTION\nx = 1\n", "never closed"),
        ("x = 1\n# END SOLUTION\n", "without BEGIN"),
        ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", "inside the block"),
    ],
)
def test_unbalanced_markers_are_reported_with_a_line_number(source, words):
    with pytest.raises(ValueError, match=words):
        student.strip_solutions(source)


def test_every_course_notebook_makes_a_valid_student_copy(tmp_path):
    student.main([str(ROOT / "notebooks"), str(tmp_path)])
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        copy = json.loads((tmp_path / path.name).read_text())
        for cell in copy["cells"]:
            if cell["cell_type"] == "code":
                source = "".join(cell["source"])
                assert "SOLUTION" not in source
                # cells may hold IPython syntax; plain Python cells must still compile
                if not any(line.lstrip().startswith(("%", "!")) for line in source.splitlines()):
                    compile(source, path.name, "exec")


def test_refuses_to_overwrite_the_course():
    with pytest.raises(SystemExit):
        student.main([str(ROOT / "notebooks"), str(ROOT / "notebooks")])


def test_keep_existing_writes_missing_copies_and_leaves_a_learners_work_alone(tmp_path, capsys):
    course = sorted((ROOT / "notebooks").glob("*.ipynb"))
    mine = tmp_path / course[1].name
    mine.write_text('{"my": "work"}\n')  # a copy the learner has already worked in
    student.main([str(ROOT / "notebooks"), str(tmp_path), "--keep-existing"])
    assert mine.read_text() == '{"my": "work"}\n'
    assert sorted(p.name for p in tmp_path.glob("*.ipynb")) == [p.name for p in course]
    out = capsys.readouterr().out
    assert out.count("written") == len(course) - 1 and "1 copy in" in out
    fresh = json.loads((tmp_path / course[0].name).read_text())
    assert fresh["cells"] and all(c.get("outputs", []) == [] for c in fresh["cells"])
    # without the flag every copy is written afresh
    student.main([str(ROOT / "notebooks"), str(tmp_path)])
    assert mine.read_text() != '{"my": "work"}\n'


def test_make_lab_opens_the_learner_copies_and_lab_solutions_the_course():
    makefile = (ROOT / "Makefile").read_text()
    # make lab needs no nbgrader: its copies come from student.py, not make student's nbgrader
    lab = makefile.split("\nlab: venv\n")[1].split("\n\n")[0]
    assert "course_utils.exercises.student notebooks my_notebooks --keep-existing" in lab
    assert "--notebook-dir=my_notebooks" in lab
    solutions = makefile.split("\nlab-solutions: venv\n")[1].split("\n\n")[0]
    assert "--notebook-dir=notebooks" in solutions
    assert "my_notebooks/" in (ROOT / ".gitignore").read_text().splitlines()

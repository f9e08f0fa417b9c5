"""nbgrader on the course, as an instructor uses it (docs/teaching.md, "nbgrader").

nbgrader runs from the repository, so that it reads ``nbgrader_config.py``, in a course folder
of the test's own that is laid out as ``make student`` lays out ``build/nbgrader/`` (each
notebook linked into ``source/<name>/``):

- its release of every notebook has the same code cells as the learner's copy that
  ``make lab`` writes with ``course_utils/exercises/student.py`` (no nbgrader needed there);
- a round trip on notebook 02: release, a submission solved with the course's own solutions
  and one with a masked softmax that leaves the masked scores at ``-inf`` (a fully masked row
  becomes NaN), ``nbgrader autograde``, and the scores in nbgrader's gradebook.

nbgrader is pyproject.toml's ``instructor`` group (``make student`` installs it). Without it
these tests skip with a message; with ``COURSE_REQUIRE_NBGRADER=1`` (``make instructor-test``,
which ``.ci/run`` runs) they fail instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.exercises import student

try:
    import tomllib
except ImportError:  # Python 3.10: pytest brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
REQUIRE = os.environ.get("COURSE_REQUIRE_NBGRADER", "") not in ("", "0")
NB02 = "02_query_key_value"

# The wrong answer: masked scores set to -inf and the softmax taken as it is, so a row whose
# every key is masked comes out NaN instead of zeros.
WRONG_MASKED_SOFTMAX = """\
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)"""


def require_nbgrader():
    if importlib.util.find_spec("nbgrader") is not None:
        return
    message = "nbgrader is not installed (pyproject's instructor group: make student installs it)"
    if REQUIRE:
        pytest.fail(f"{message} (COURSE_REQUIRE_NBGRADER is set, so this is a failure)")
    pytest.skip(f"{message}. Skipped; CI sets COURSE_REQUIRE_NBGRADER=1 and runs them.")


def nbgrader(course: Path, *args: str) -> str:
    """Run nbgrader from the repository (its nbgrader_config.py) on the course folder."""
    # nbgrader runs the command alembic when it creates a gradebook: the venv's, as make
    # student has it (an activated venv has it on PATH anyway)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course}"],
        cwd=ROOT,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{output}"
    return output


def course_folder(tmp_path: Path, notebooks: list[Path]) -> Path:
    """A course folder as make student makes build/nbgrader: source/<name>/ links."""
    course = tmp_path / "course"
    for path in notebooks:
        folder = course / "source" / path.stem
        folder.mkdir(parents=True)
        (folder / path.name).symlink_to(path)
    return course


def code_cells(notebook: dict) -> list[str]:
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]


def test_nbgrader_is_for_instructors_only():
    """Learners never install nbgrader: it is the instructor group, which make student and
    make instructor-test install; make venv (make lab, make test) installs dev only."""
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"": groups["dependencies"], **groups["optional-dependencies"]}
    with_nbgrader = {name for name, specs in groups.items() if any("nbgrader" in s for s in specs)}
    assert with_nbgrader == {"instructor"}
    makefile = (ROOT / "Makefile").read_text()
    # make venv installs through $(PIP_INSTALL), which is pip unless the command line says otherwise
    assert re.search(r"(?m)^PIP_INSTALL = \$\(BIN\)/python -m pip install ", makefile)
    installs = re.findall(r"(?:pip install|\$\(PIP_INSTALL\)) .*-e '\.\[([a-z,]+)\]'", makefile)
    assert "dev" in installs and "dev,instructor" in installs, installs
    for target in ("student", "instructor-test"):
        assert re.search(rf"(?m)^{target}: \$\(INSTRUCTOR_STAMP\)$", makefile), target
    config = (ROOT / "nbgrader_config.py").read_text()
    assert 'c.ClearSolutions.code_stub = {"python": STUB}' in config  # student.py's stub


@pytest.mark.instructor
def test_nbgraders_release_of_every_notebook_is_the_learners_copy(tmp_path):
    """make student's release (nbgrader) and make lab's copy (student.py) have the same code
    cells, in the same order, in every notebook; the markdown is the course's, untouched."""
    require_nbgrader()
    course = course_folder(tmp_path, NOTEBOOKS)
    nbgrader(course, "generate_assignment", "*", "--log-level=WARN")
    differ = []
    for path in NOTEBOOKS:
        course_copy = json.loads(path.read_text())
        learner, _ = student.student_notebook(course_copy)
        release = json.loads((course / "release" / path.stem / path.name).read_text())
        if code_cells(release) != code_cells(learner):
            differ.append(path.name)
        markdown = [c["source"] for c in course_copy["cells"] if c["cell_type"] == "markdown"]
        released = [c["source"] for c in release["cells"] if c["cell_type"] == "markdown"]
        assert ["".join(s) for s in released] == ["".join(s) for s in markdown], path.name
        assert all(not c.get("outputs") for c in release["cells"]), path.name
    assert not differ, f"nbgrader's release and student.py's copy differ: {differ}"


def solution_bodies(notebook: dict) -> dict[str, str]:
    """grade_id -> the lines between BEGIN SOLUTION and END SOLUTION, as in the cell."""
    bodies = {}
    for cell in notebook["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("solution"):
            source = "".join(cell["source"])
            bodies[meta["grade_id"]] = source.split("# BEGIN SOLUTION\n")[1].rsplit("\n", 1)[0]
    return bodies


def submit(course: Path, release: dict, learner: str, bodies: dict[str, str]) -> None:
    """The released notebook with each stub replaced by an answer, as a learner hands it in."""
    notebook = json.loads(json.dumps(release))
    stub = f"    {student.STUB}"
    for cell in notebook["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in bodies:
            source = "".join(cell["source"])
            assert source.count(stub) == 1, source
            cell["source"] = source.replace(stub, bodies[grade_id])
    folder = course / "submitted" / learner / NB02
    folder.mkdir(parents=True)
    (folder / f"{NB02}.ipynb").write_text(json.dumps(notebook, indent=1))


@pytest.mark.instructor
def test_autograde_gives_full_marks_to_the_solutions_and_fewer_to_a_wrong_answer(tmp_path):
    require_nbgrader()
    from nbgrader.api import Gradebook

    course = course_folder(tmp_path, [ROOT / "notebooks" / f"{NB02}.ipynb"])
    nbgrader(course, "generate_assignment", NB02, "--log-level=WARN")
    release = json.loads((course / "release" / NB02 / f"{NB02}.ipynb").read_text())
    solutions = solution_bodies(json.loads((ROOT / "notebooks" / f"{NB02}.ipynb").read_text()))
    assert sorted(solutions) == [
        "my_additive",
        "my_attention",
        "my_masked_softmax",
        "my_nadaraya_watson",
    ]
    submit(course, release, "solved", solutions)
    submit(course, release, "wrong", {**solutions, "my_masked_softmax": WRONG_MASKED_SOFTMAX})
    # Notebook 02's cells take seconds: a minute per cell, rather than nbgrader_config.py's
    # ten, is plenty, and keeps a run that waits on a missed reply (nbgrader_config.py,
    # ExecuteWithoutOutputWidgets) short.
    nbgrader(course, "autograde", NB02, "--Execute.timeout=60", "--log-level=WARN")

    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for learner in ("solved", "wrong"):
            submission = gradebook.find_submission_notebook(NB02, NB02, learner)
            grades = {g.name: g.score for g in submission.grades if g.cell_type == "code"}
            scores[learner] = (submission.score, submission.max_score, grades)
    print("nbgrader autograde scores:", scores)
    checks = {
        "check_masked_softmax",
        "check_scaled_dot_product_attention",
        "check_additive_score",
        "check_nadaraya_watson",
    }
    score, max_score, grades = scores["solved"]
    assert (score, max_score) == (4, 4) and grades == dict.fromkeys(checks, 1)
    score, max_score, grades = scores["wrong"]
    # the masked softmax loses its point; the other three exercises keep theirs (attention
    # calls the masked softmax, but its check masks no row completely)
    assert (score, max_score) == (3, 4)
    assert grades == {**dict.fromkeys(checks, 1), "check_masked_softmax": 0}

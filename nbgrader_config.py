"""nbgrader's configuration for the course: instructors only (docs/teaching.md, "nbgrader").

nbgrader reads this file when it runs in this folder. ``make student`` installs nbgrader into
``.venv`` (pyproject.toml's ``instructor`` group), links each notebook into the course folder
and writes nbgrader's release of every notebook to ``student_notebooks/``. Then, from here::

    .venv/bin/nbgrader autograde 02_query_key_value   # every submission of notebook 02
    .venv/bin/nbgrader export                         # every score, to grades.csv

One assignment per notebook, named after it. The course folder is ``build/nbgrader/``, which
git ignores: ``source/<name>/<name>.ipynb`` is a link to ``notebooks/<name>.ipynb`` (make
student writes the links afresh, so the notebooks live in ``notebooks/`` only), ``release/``
is what make student copies out, and submissions go to
``submitted/<student>/<name>/<name>.ipynb``; ``autograde`` writes ``autograded/`` and the
scores to ``gradebook.db``. Those are a course's grades: back them up, as build/ is a scratch
folder.
"""

import os

from nbformat import NotebookNode
from nbgrader.converters import Autograde, GenerateAssignment
from nbgrader.preprocessors import ClearSolutions, Execute
from nbgrader.utils import is_solution

from course_utils.exercises.student import STUB

c = get_config()  # noqa: F821 (nbgrader defines get_config for its config files)

HERE = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.course_id = "attention-from-scratch"
c.CourseDirectory.root = os.path.join(HERE, "build", "nbgrader")

# A solution region (the course's "# BEGIN SOLUTION" / "# END SOLUTION" lines, nbgrader's own
# markers) becomes the stub make lab's copies have: raise NotImplementedError("write your
# solution here"), at the region's indentation. tests/test_nbgrader.py holds the two equal.
c.ClearSolutions.code_stub = {"python": STUB}


class ClearCodeSolutions(ClearSolutions):
    """nbgrader's ClearSolutions, for code cells and solution cells only. The notebooks'
    markdown quotes the markers ("between `# BEGIN SOLUTION` and `# END SOLUTION`"), and
    nbgrader, which looks for them anywhere in a line, would take that for a solution region
    outside a solution cell and refuse the notebook."""

    def preprocess_cell(
        self, cell: NotebookNode, resources: dict, index: int
    ) -> tuple[NotebookNode, dict]:
        if cell.cell_type != "code" and not is_solution(cell):
            return cell, resources
        return super().preprocess_cell(cell, resources, index)


c.GenerateAssignment.preprocessors = [
    ClearCodeSolutions if step is ClearSolutions else step
    for step in GenerateAssignment.class_traits()["preprocessors"].default()
]

# Notebooks run in the kernel of the Python that runs nbgrader: "python3" is the interpreter
# itself (jupyter_client starts sys.executable for it, and prefers a venv's own kernels), so
# .venv/bin/nbgrader grades in .venv, where course_utils and torch are.
c.Execute.kernel_name = "python3"
# nbgrader stops a cell after 30 s; the slowest cell trains for under 2 minutes on 2 cores:
# the same 10 minutes as make test.
c.Execute.timeout = 600


class ExecuteWithoutOutputWidgets(Execute):
    """nbgrader's Execute, without nbclient's stand-in for JupyterLab's Output widget.

    The stand-in sends each captured output back to the kernel on the shell channel while
    the cell runs, and on a busy machine nbclient then at times misses the cell's reply until
    the timeout above runs out (the cell then counts as it should, ten minutes late). Measured
    here on notebook 02 with a 20 s timeout, two other processes busy on the two cores: a 20 s
    wait after one of its widget cells in 5 of 13 runs with the stand-in (ipykernel 7.4 and
    6.31 alike), in none of 8 without. Without it a widget's figures land in the cell's own
    outputs; nothing a checker sees changes."""

    def on_comm_open_jupyter_widget(self, msg: dict) -> None:
        return None


c.Autograde.autograde_preprocessors = [
    ExecuteWithoutOutputWidgets if step is Execute else step
    for step in Autograde.class_traits()["autograde_preprocessors"].default()
]

# Two commands for learners and CI:
#   make lab   set up .venv if needed, then open JupyterLab on the learner's copies of the
#              course (my_notebooks/: exercises unsolved; existing copies are never overwritten)
#   make test  set up .venv if needed, then run ruff, the unit tests and every notebook
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: lab lab-solutions test venv lint student clean

venv: $(STAMP)

# Re-install whenever pyproject.toml changes; the stamp records a finished install.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10+ is needed, found " + sys.version.split()[0]'
	@test -x $(BIN)/python || { echo "Creating $(VENV) ..."; $(PYTHON) -m venv $(VENV); }
	@echo "Installing the course into $(VENV) (first time: about a minute) ..."
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@$(BIN)/python -c 'import torch; print("torch", torch.__version__, "| CUDA available:", torch.cuda.is_available())'
	@touch $(STAMP)

# Jupyter refuses to run as root unless told; containers and CI machines often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

# The learner's copies: every exercise unsolved, with its checker and hint. A copy that
# exists already is left as it is, so make lab never overwrites a learner's work.
lab: venv
	@$(BIN)/python -m course_utils.exercises.student notebooks my_notebooks --keep-existing
	@echo "Starting JupyterLab on my_notebooks/ (stop it with Ctrl-C, then y) ..."
	$(BIN)/jupyter lab --notebook-dir=my_notebooks $(ROOT_FLAG)

# The course as tested, every exercise solved (instructors; or to compare with your own).
lab-solutions: venv
	@echo "Starting JupyterLab on notebooks/, solutions included (stop it with Ctrl-C, then y) ..."
	$(BIN)/jupyter lab --notebook-dir=notebooks $(ROOT_FLAG)

lint: venv
	$(BIN)/ruff check course_utils tests notebooks benchmarks conftest.py
	$(BIN)/ruff format --check course_utils tests benchmarks conftest.py

# pytest-xdist runs on every core (at most 4 workers); each notebook's cells run in order in
# one worker, followed by its browser test (conftest.py). Each run trains into a fresh cache
# folder, so the browser tests load what the notebook runs trained and nothing is reused from
# an earlier run. A notebook cell that hangs fails after 10 minutes (nbval waits 2000 s by
# default); the slowest cell takes under 2 minutes on a 2-core CPU.
test: venv lint
	@cache=$$(mktemp -d -t course-cache-XXXXXX) && \
	COURSE_CACHE_DIR=$$cache $(BIN)/python -m pytest tests notebooks --nbval-lax \
		--nbval-cell-timeout=600 -p no:cacheprovider \
		-n auto --maxprocesses=4; \
	status=$$?; rm -rf $$cache; exit $$status

# Instructors: copies of the notebooks with exercise solutions replaced by stubs.
student: venv
	$(BIN)/python -m course_utils.exercises.student notebooks student_notebooks

clean:
	rm -rf $(VENV) .pytest_cache

# Two commands for learners and CI:
#   make lab   set up .venv if needed, then open JupyterLab on the learner's copies of the
#              course (my_notebooks/: exercises unsolved; existing copies are never overwritten)
#   make test  set up .venv if needed, then run ruff, the unit tests and every notebook
#
# Another Python (3.10 to 3.13 are tested; pyproject.toml pins per version), in a folder of
# its own so that it leaves .venv alone:
#   make test PYTHON=python3.10 VENV=.venv-3.10
# (VENV is taken from the command line only, never from the environment.)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# How make venv installs the course into $(VENV): pip, as every learner does. .ci/run passes
# uv's pip interface here for its two extra Pythons (it says why); the rest is the same.
PIP_INSTALL = $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: lab lab-solutions test venv lint student instructor-test instructor-venv slides site clean \
	same-python

venv: $(STAMP)

# Re-install whenever pyproject.toml changes; the stamp records a finished install.
$(STAMP): pyproject.toml | same-python
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10+ is needed, found " + sys.version.split()[0]'
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; v > (3, 13) and print(f"Note: the course is tested on Python 3.10 to 3.13; trying {v[0]}.{v[1]} anyway.")'
	@test -x $(BIN)/python || { echo "Creating $(VENV) with $$($(PYTHON) --version) ..."; $(PYTHON) -m venv $(VENV); }
	@echo "Installing the course into $(VENV) (first time: a few minutes; more where pip takes the CUDA build of torch, 5-6 GB in all) ..."
	$(PIP_INSTALL) -e '.[dev]'
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
	$(BIN)/ruff check course_utils tests notebooks benchmarks scripts docs conftest.py nbgrader_config.py
	$(BIN)/ruff format --check course_utils tests notebooks benchmarks scripts docs conftest.py nbgrader_config.py

# pytest-xdist runs on every core (at most 4 workers); each notebook's cells run in order in
# one worker, followed by its browser test (conftest.py). Each run trains into a fresh cache
# folder, so the browser tests load what the notebook runs trained and nothing is reused from
# an earlier run. A notebook cell that hangs fails after 10 minutes (nbval waits 2000 s by
# default); the slowest cell takes under 2 minutes on a 2-core CPU.
test: venv lint
	@rm -rf build/executed build/widget_screenshots; cache=$$(mktemp -d -t course-cache-XXXXXX) && \
	COURSE_CACHE_DIR=$$cache COURSE_EXECUTED_DIR=build/executed \
	COURSE_SCREENSHOT_DIR=build/widget_screenshots \
	$(BIN)/python -m pytest tests notebooks --nbval-lax \
		--nbval-cell-timeout=600 -p no:cacheprovider \
		-n auto --maxprocesses=4; \
	status=$$?; rm -rf $$cache; exit $$status

# The course site, build/site/index.html: every notebook as make test last executed it
# (build/executed/, build/widget_screenshots/), and the guides in docs/. Nothing is run again.
# Then its tests: a page per notebook, links, no traceback, offline in Chromium.
SITE_STAMP := $(VENV)/.site-installed
$(SITE_STAMP): pyproject.toml | $(STAMP)
	@$(BIN)/python -c 'import sys; assert sys.version_info >= (3, 11), "make site needs Python 3.11+ (Sphinx 9), found " + sys.version.split()[0]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,site]'
	@touch $(SITE_STAMP)

site: $(SITE_STAMP)
	$(BIN)/python scripts/build_site.py
	COURSE_SITE_DIR=build/site $(BIN)/python -m pytest tests/test_site.py -p no:cacheprovider -q

# Instructors: nbgrader (pyproject's instructor group) in the same venv, on first use; a
# learner's make lab and make test never need it (make lab's copies come from
# course_utils/exercises/student.py, which strips the same regions with the same stub).
INSTRUCTOR_STAMP := $(VENV)/.instructor-installed
$(INSTRUCTOR_STAMP): pyproject.toml | $(STAMP)
	@echo "Installing the instructor group (nbgrader, RISE) into $(VENV) ..."
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,instructor]'
	@touch $(INSTRUCTOR_STAMP)

# Both optional groups in .venv in one pip run (CI installs them before make test, which then
# runs the nbgrader and slides tests too instead of skipping them).
instructor-venv: $(STAMP)
	@$(BIN)/python -c 'import sys; assert sys.version_info >= (3, 11), "the site group needs Python 3.11+ (Sphinx 9), found " + sys.version.split()[0]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,instructor,site]'
	@touch $(INSTRUCTOR_STAMP) $(SITE_STAMP)

# Instructors: nbgrader's release of every notebook, one assignment per notebook, in the
# course folder build/nbgrader/ (nbgrader_config.py): solutions replaced by stubs, checker
# cells locked, the grade cells recorded in its gradebook.db for nbgrader autograde. Its
# source/ holds links to notebooks/; the release is copied to student_notebooks/ to hand out.
# The venv's bin/ goes on PATH: nbgrader runs the command alembic to create its gradebook.
NBGRADER_ROOT := build/nbgrader
student: $(INSTRUCTOR_STAMP)
	@rm -rf $(NBGRADER_ROOT)/source $(NBGRADER_ROOT)/release
	@for path in notebooks/*.ipynb; do \
		name=$$(basename $$path .ipynb); mkdir -p $(NBGRADER_ROOT)/source/$$name && \
		ln -s ../../../../$$path $(NBGRADER_ROOT)/source/$$name/$$name.ipynb || exit 1; \
	done
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/nbgrader generate_assignment '*' --force --log-level=WARN
	@mkdir -p student_notebooks && cp $(NBGRADER_ROOT)/release/*/*.ipynb student_notebooks/
	@echo "student_notebooks/: nbgrader's release of $$(ls student_notebooks | wc -l) notebooks"

# nbgrader's round trip on notebook 02 (generate, fill in, autograde), and nbgrader's release
# of every notebook against make lab's copies. (CI installs the group first, make instructor-venv,
# and make test then runs these tests with the rest.)
instructor-test: $(INSTRUCTOR_STAMP)
	COURSE_REQUIRE_NBGRADER=1 COURSE_REQUIRE_RISE=1 $(BIN)/python -m pytest tests/test_nbgrader.py \
		tests/test_slides.py -p no:cacheprovider -q

# Lectures: the solved notebooks in JupyterLab with RISE (the instructor group); open one, then
# View > Render as Reveal Slideshow (Alt-R), or go to /rise/<notebook>. RISE's defaults come
# from jupyter-config/ (reveal.js's white theme, which loads nothing from the network; pages
# taller than the screen scroll); scripts/slide_metadata.py says where the slides break.
slides: $(INSTRUCTOR_STAMP)
	@echo "Starting JupyterLab with RISE on notebooks/ (stop it with Ctrl-C, then y) ..."
	JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter-config$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(BIN)/jupyter lab --notebook-dir=notebooks $(ROOT_FLAG)

# PYTHON named (command line or environment) for a folder that holds another Python: stop
# rather than install one Python's packages over another's.
PY_VERSION := import sys; print("%d.%d" % sys.version_info[:2])
same-python:
ifneq ($(filter command line environment,$(origin PYTHON)),)
	@if [ -x $(BIN)/python ]; then \
		want=$$($(PYTHON) -c '$(PY_VERSION)') && have=$$($(BIN)/python -c '$(PY_VERSION)') && \
		if [ "$$want" != "$$have" ]; then \
			echo "$(VENV) holds Python $$have, but PYTHON=$(PYTHON) is Python $$want." >&2; \
			echo "Use another folder (make $(or $(MAKECMDGOALS),venv) PYTHON=$(PYTHON) VENV=.venv-$$want), or make clean VENV=$(VENV) first." >&2; \
			exit 1; \
		fi; \
	fi
endif

clean:
	rm -rf $(VENV) .pytest_cache

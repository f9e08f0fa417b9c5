"""Sphinx configuration of the course site (``make site``; scripts/build_site.py assembles the
source folder, build/site-src/, and passes this folder to Sphinx with ``-c docs``).

The site reads offline: no page fetches anything from outside it. myst-nb would load
require.js and the ipywidgets HTML manager from CDNs (switched off: the widgets are shown as
screenshots), and Sphinx MathJax from one (served from the site instead, MathJax 2 as the
jupyter-server-mathjax package ships it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jupyter_server_mathjax
from sphinx.application import Sphinx

project = "Attention from Scratch"
author = "the Attention from Scratch authors"
copyright = "2026, " + author

extensions = ["myst_nb"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# The notebooks are shown as make test executed them (build/executed/), never run again.
nb_execution_mode = "off"
nb_ipywidgets_js = {}  # no require.js or widget manager from a CDN
nb_merge_streams = True  # a cell's printed lines in one block, as JupyterLab shows them
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3  # links to a section (setup.md#layout) resolve

MATHJAX = Path(jupyter_server_mathjax.__file__).parent / "static"
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"
# The package ships the STIX-Web fonts only (as Jupyter's classic notebook configured them).
# myst-nb marks its pages tex2jax_ignore, so that a dollar sign in an output is not maths,
# and wraps the maths it finds in class "math": MathJax typesets those only.
mathjax2_config = {
    "tex2jax": {
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processRefs": False,
        "processEnvironments": False,
        "ignoreClass": "tex2jax_ignore|mathjax_ignore",
        "processClass": "tex2jax_process|mathjax_process|math",
    },
    "HTML-CSS": {
        "availableFonts": [],
        "preferredFont": None,
        "imageFont": None,
        "webFont": "STIX-Web",
    },
    "SVG": {"font": "STIX-Web"},
}

html_theme = "sphinx_book_theme"
html_title = project
html_theme_options = {
    "show_toc_level": 2,  # each notebook's sections in the right-hand table of contents
    "navigation_with_keys": True,
    "use_download_button": False,
    "use_fullscreen_button": False,
}
html_show_sourcelink = False
html_copy_source = False  # no copy of each notebook beside its page


def _copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is None and app.builder.format == "html":
        shutil.copytree(
            MATHJAX,
            Path(app.outdir) / "_static" / "mathjax",
            ignore=shutil.ignore_patterns("localization", "*.md"),
            dirs_exist_ok=True,
        )


def setup(app: Sphinx) -> None:
    app.connect("build-finished", _copy_mathjax)

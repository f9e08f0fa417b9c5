"""Every ``>>>`` example in course_utils' docstrings runs and prints what it claims."""

import doctest
import importlib
import pkgutil

import pytest

import course_utils

# walk_packages also lists the modules of subpackages (course_utils.exercises.*).
MODULES = [m.name for m in pkgutil.walk_packages(course_utils.__path__, "course_utils.")]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0


def test_the_examples_exist():
    # counted, not run again: test_docstring_examples runs them
    finder = doctest.DocTestFinder()
    examples = sum(
        len(test.examples) for n in MODULES for test in finder.find(importlib.import_module(n))
    )
    assert examples >= 5

"""Fixtures shared by the test files that drive Chromium (widgets, slides, the course site)."""

import pytest


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium, one per test process (each pytest-xdist worker): Playwright's
    synchronous API can run only one instance in a process at a time, so every test that
    drives Chromium takes a new context of this one. Skips, or fails under
    ``COURSE_REQUIRE_BROWSER=1``, without Chromium (tests/test_browser_widgets.py)."""
    import test_browser_widgets as widgets

    widgets._require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=widgets.CHROMIUM, headless=True, args=widgets.CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()

"""The browser tests' fixtures (a pytest plugin the suite's conftest loads):
headless Chromium, a fresh page per test, and the folder of this run's screenshots."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_harness import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS


@pytest.fixture(scope="module")
def screenshots(request) -> Path:
    """build/browser-screenshots/<test module>/, emptied of an earlier run's pictures (a folder
    per module: pytest-xdist may run the modules at once)."""
    folder = SCREENSHOTS / request.module.__name__
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter and capture:  # on the terminal, not in the captured output of the first test
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(f"browser screenshots: {folder}")
    return folder


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="browser tests need playwright (pip install -e '.[test]')"
    )
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)  # two busy cores: kernels start and torch imports slowly
    yield context.new_page()
    context.close()

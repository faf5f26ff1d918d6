"""A real browser for the tests that look at the report as its reader does: Debian's chromium (.ci/run installs it),
headless, driven by Playwright for Python (its pip package only: it drives the system's browser, it downloads none)
in a fresh profile, at a 1400 x 900 window."""

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WINDOW = {"width": 1400, "height": 900}


def why_no_browser() -> str | None:
    """Why this machine cannot open a page in the browser (None where it can)."""
    if not os.path.exists(CHROMIUM):
        return "chromium is not installed: apt-get install chromium"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed: pip install -e '.[test]'"
    return None


@contextmanager
def browser_page(path: Path, window: dict[str, int] = WINDOW) -> Iterator:
    """A Playwright page showing the file ``path`` in headless chromium (fresh profile), closed on exit."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="upfl-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, viewport=window, args=CHROMIUM_FLAGS
            )
            try:
                page = context.pages[0] if context.pages else context.new_page()
                page.goto(Path(path).resolve().as_uri())
                page.wait_for_function("typeof app !== 'undefined' && document.querySelector('#app').innerText")
                yield page
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def menu_entries(page, category: str) -> list[str]:
    """The entries of a category of the report's Results menu, in the order the reader sees them."""
    page.evaluate(f"app.showCategory({category!r})")
    page.wait_for_timeout(200)
    return [t.strip() for t in page.locator("nav li, #app ul li").all_inner_texts() if t.strip()]

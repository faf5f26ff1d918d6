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


SMALLEST_TEXT_KEY = "Smallest text px"
"""The PNG text chunk the figures carry (upfl.report.figures.SMALLEST_TEXT_KEY)."""


def png_text(data_uri: str) -> dict[str, str]:
    """The text chunks of a PNG given as a data URI (as the report embeds it)."""
    import base64
    import io

    from PIL import Image

    data = base64.b64decode(data_uri.partition(";base64,")[2])
    with Image.open(io.BytesIO(data)) as image:
        return dict(getattr(image, "text", {}))


def figure_legibility(page) -> dict[str, dict[str, float]]:
    """Each PNG figure of the report opened in its viewer (as the reader opens it with its eye button): its natural
    width, the width it is displayed at, its smallest text in the PNG's pixels (its text chunk), that text's size
    as displayed (displayed / natural width times it) and how much of its top the viewer cuts off; by file name."""
    entries = page.evaluate(
        "Object.entries(results).filter(([p, e]) => e.mime_type === 'image/png')"
        ".map(([p, e]) => [p, e.filename, e.data_uri])"
    )
    out = {}
    for path, filename, data_uri in entries:
        page.evaluate("([p, uri]) => app.setView({content: 'img', contentPath: uri, resultPath: p})", [path, data_uri])
        image = page.locator("#app img[src^='data:image/png']").first
        image.wait_for()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
        natural, shown, top, box_top = image.evaluate(
            "img => [img.naturalWidth, img.getBoundingClientRect().width, img.getBoundingClientRect().top,"
            " img.parentElement.parentElement.getBoundingClientRect().top]"
        )
        text = png_text(data_uri).get(SMALLEST_TEXT_KEY)
        smallest = float(text) if text else float("nan")
        out[filename] = {
            "natural_px": natural,
            "shown_px": shown,
            "smallest_text_px": smallest,
            "shown_text_px": smallest * shown / natural,
            # above 0: the figure's top lies above its scroll box, out of the reader's reach (the viewer centres
            # the figure vertically; a figure taller than the window loses its top)
            "cut_off_px": box_top - top,
        }
    return out


def colour_difference(a: str, b: str) -> float:
    """CIE76 ΔE between two colours (hex or ``rgb(r,g,b)`` as the figures' CSVs record them): about 2 is the least a
    reader notices side by side; 10 and more, colours told apart at a glance."""
    import re

    def lab(colour: str) -> tuple[float, float, float]:
        found = re.fullmatch(r"rgb\((\d+),(\d+),(\d+)\)", colour.replace(" ", ""))
        hexa = colour.lstrip("#")
        rgb = [int(v) / 255 for v in found.groups()] if found else [int(hexa[i : i + 2], 16) / 255 for i in (0, 2, 4)]
        lin = [((v + 0.055) / 1.055) ** 2.4 if v > 0.04045 else v / 12.92 for v in rgb]
        xyz = (
            (0.4124 * lin[0] + 0.3576 * lin[1] + 0.1805 * lin[2]) / 0.95047,
            0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2],
            (0.0193 * lin[0] + 0.1192 * lin[1] + 0.9505 * lin[2]) / 1.08883,
        )
        fx, fy, fz = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz)
        return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)

    return sum((p - q) ** 2 for p, q in zip(lab(a), lab(b), strict=True)) ** 0.5

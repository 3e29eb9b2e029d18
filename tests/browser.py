"""A real headless Chromium for page tests (Debian's ``chromium`` through playwright), and the checks every page
must pass: it loads with no console error, no page error and no request to anything but the file itself; and a
screenshot that is not blank (its PNG decoded here with zlib + struct, no imaging library).

Chromium missing (or playwright): the tests skip with the reason, but fail under ``CI=true`` — CI installs the
browser, so a missing one there is a broken CI, not a reason to pass (as tests/test_servers.py does for servers).
"""

from __future__ import annotations

import os
import shutil
import struct
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("ZHIN_TEST_CHROMIUM", "/usr/bin/chromium")
# The machine has no network: without these, Chromium waits on updates, sync and component downloads.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def need_chromium() -> str:
    """The Chromium executable, or skip (fail under CI) with the reason."""
    problem = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as error:
        problem = f"playwright is not installed ({error}); `pip install playwright`"
    if problem is None and not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        problem = f"{CHROMIUM} not found: `apt-get install chromium` (or set ZHIN_TEST_CHROMIUM)"
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return CHROMIUM


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless browser (playwright's ``Browser``)."""
    executable = need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Visit:
    """What opening one page showed."""

    url: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    load_seconds: float = 0.0

    def problems(self) -> list[str]:
        """Everything a clean page must not do: console errors, uncaught script errors, any other request."""
        out = [f"console error: {text}" for text in self.console_errors]
        out += [f"page error: {text}" for text in self.page_errors]
        out += [f"request to {url}" for url in self.requests if url != self.url]
        return out


@contextmanager
def visit(browser: Any, path: Path | str, *, ready: str = "section[data-turn]", width: int = 1280,
          height: int = 900, fragment: str = "") -> Iterator[tuple[Any, Visit]]:
    """Open ``path`` from disk (file://) or a URL given as text, at ``fragment`` if given ("#..."), and wait for the
    load event; yields (page, Visit). ``load_seconds``: from navigation to the load event with the ``ready``
    elements present (a timed figure for the tests that ask for one)."""
    context = browser.new_context(viewport={"width": width, "height": height}, java_script_enabled=True)
    page = context.new_page()
    seen = Visit(path if isinstance(path, str) else path.resolve().as_uri())
    page.on("console", lambda message: seen.console_errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: seen.page_errors.append(str(error)))
    page.on("request", lambda request: seen.requests.append(request.url))
    try:
        start = time.perf_counter()
        page.goto(seen.url + fragment, wait_until="load", timeout=60_000)
        page.wait_for_function(f"document.querySelectorAll({ready!r}).length > 0", timeout=30_000)
        seen.load_seconds = time.perf_counter() - start
        yield page, seen
    finally:
        context.close()


# --- PNG -------------------------------------------------------------------------------------------------------


def png_pixels(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, raw unfiltered rows) of an 8-bit RGB/RGBA/grey PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    position, idat = 8, []
    width = height = depth = colour = interlace = 0
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        position += 12 + length
    if depth != 8 or interlace or colour not in (0, 2, 4, 6):
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour}, interlace {interlace})")
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    out = bytearray(stride * height)
    previous = bytearray(stride)
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + predictor) & 0xFF
        out[row * stride : (row + 1) * stride] = line
        previous = line
    return width, height, channels, bytes(out)


def distinct_colours(data: bytes, step: int = 3) -> int:
    """Distinct pixel values of a PNG (every ``step``-th pixel of every ``step``-th row: enough to tell a
    picture from a blank page, and quick)."""
    width, height, channels, pixels = png_pixels(data)
    stride = width * channels
    seen = set()
    for row in range(0, height, step):
        base = row * stride
        for column in range(0, width, step):
            offset = base + column * channels
            seen.add(pixels[offset : offset + channels])
    return len(seen)

"""The report page's Content-Security-Policy (issue 27 item 11), in a real headless Chromium (tests/browser.py).

The file carries a meta policy allowing its one inline script and one inline stylesheet by hash; ``zhin view``
sends a header policy allowing them by a nonce fresh on every response. Neither allows 'unsafe-inline' for
scripts or stylesheets; both refuse <base>, form targets, plugins and every fetch; the served one also forbids
framing. Each test checks that the page's own script still runs (a turn opens at its #anchor) and that a script
injected into the same page does not (the negative control: same page, one element without the hash or nonce).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import chromium, visit
from conftest import FIXTURES, run_zhin

INJECTED = "<script>document.title = 'injected ran'</script>"
# the stylesheet places bars absolutely; each bar's style attribute sets its left offset
STYLED = "(() => { const bars = document.querySelectorAll('.bar'); " \
         "return [getComputedStyle(bars[0]).position, bars[bars.length - 1].offsetLeft > 0]; })()"
CSP_META = re.compile(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">')


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def page_html(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("csp")
    proc = run_zhin("report", "html", FIXTURES / "private-chat.jsonl", "--no-economy", "-o", "page.html", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return (folder / "page.html").read_text(encoding="utf-8")


def directives(policy: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for part in policy.split(";"):
        words = part.split()
        if words:
            out[words[0]] = words[1:]
    return out


def check_policy(policy: str, source: str) -> None:
    """What every page policy must say; ``source`` the kind of source allowing the inline elements."""
    found = directives(policy)
    for name in ("default-src", "object-src", "base-uri", "form-action"):
        assert found[name] == ["'none'"], (name, policy)
    for name in ("script-src", "style-src", "style-src-elem"):
        assert len(found[name]) >= 1 and all(s.startswith(f"'{source}-") for s in found[name]), (name, policy)
    assert found["style-src-attr"] == ["'unsafe-inline'"]  # attributes only: bar positions (see htmlreport.CSP_BASE)


def turn_opens(tab: Any) -> bool:
    """The page's own script ran: opening turn 2 draws its messages."""
    tab.evaluate("location.hash = '#s0-t2'")
    tab.wait_for_function("document.querySelectorAll('#s0-t2 details').length > 0", timeout=10_000)
    return True


def test_the_file_allows_its_own_script_and_style_by_hash(page_html: str) -> None:
    found = CSP_META.search(page_html)
    assert found is not None
    check_policy(found.group(1), "sha256")
    assert "frame-ancestors" not in found.group(1)  # ignored in a meta tag, where Chromium logs it as an error


def test_the_file_runs_its_script_and_blocks_an_injected_one(browser: Any, page_html: str, tmp_path: Path) -> None:
    clean, bad = tmp_path / "clean.html", tmp_path / "bad.html"
    clean.write_text(page_html, encoding="utf-8")
    bad.write_text(page_html.replace("</main>", INJECTED + "</main>", 1), encoding="utf-8")
    with visit(browser, clean) as (tab, seen):
        assert turn_opens(tab) and seen.problems() == []
        assert tab.evaluate(STYLED) == ["absolute", True]  # its stylesheet and its style attributes apply
    with visit(browser, bad) as (tab, seen):
        assert turn_opens(tab)  # the page's own script still runs
        assert tab.title() != "injected ran"
        assert len(seen.console_errors) == 1 and "Content Security Policy" in seen.console_errors[0]


@pytest.fixture()
def served(page_html: str) -> Iterator[Any]:
    """Start ``zhin view``'s server (the library's, in a thread) on a page; yields a function serving a page."""
    from zhin_cli.tools.report.html import page_server, server_url

    servers: list[Any] = []
    threads: list[threading.Thread] = []

    def serve(template: Any) -> str:
        server = page_server(template)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append(server)
        threads.append(thread)
        return server_url(server)

    try:
        yield serve
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
        for thread in threads:
            thread.join(timeout=10)


def template_of(page: str) -> Any:
    """The page as ``zhin view`` serves it: cut where the nonce goes (as render_template cuts it)."""
    from zhin_cli.tools.report.html import PageTemplate

    style = page.index("<style>") + len("<style")
    script = page.rindex("<script>") + len("<script")
    return PageTemplate((page[:style], page[style:script], page[script:]))


def test_view_serves_a_nonce_policy_and_blocks_an_injected_script(browser: Any, page_html: str, served: Any) -> None:
    import urllib.request

    url = served(template_of(page_html))
    policies = []
    for _ in range(2):
        with urllib.request.urlopen(url, timeout=30) as answer:
            policies.append(answer.headers["Content-Security-Policy"])
    check_policy(policies[0], "nonce")
    assert directives(policies[0])["frame-ancestors"] == ["'none'"]
    assert policies[0] != policies[1]  # a fresh nonce per response
    with visit(browser, url) as (tab, seen):
        assert turn_opens(tab) and seen.problems() == []
    bad_url = served(template_of(page_html.replace("</main>", INJECTED + "</main>", 1)))
    with visit(browser, bad_url) as (tab, seen):
        assert turn_opens(tab)
        assert tab.title() != "injected ran"
        assert any("Content Security Policy" in text for text in seen.console_errors), seen.console_errors


@pytest.mark.parametrize(("change", "expected"), [
    (("style-src-attr 'unsafe-inline'", "style-src-attr 'none'"), ["absolute", False]),
    (("style-src-elem 'sha256-", "style-src-elem 'sha256-X"), ["static", True]),
])
def test_the_style_check_sees_a_blocked_style(browser: Any, page_html: str, tmp_path: Path,
                                              change: tuple[str, str], expected: list[Any]) -> None:
    """Negative control of STYLED: the same page with its attributes or its stylesheet refused draws otherwise."""
    path = tmp_path / "unstyled.html"
    assert change[0] in page_html
    path.write_text(page_html.replace(change[0], change[1], 1), encoding="utf-8")
    with visit(browser, path) as (tab, _):
        assert tab.evaluate(STYLED) == expected

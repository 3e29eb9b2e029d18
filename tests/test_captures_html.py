"""``zhin report html FOLDER``: a capture folder drawn like sessions, one per conversation (issue 29, Build item 2) —
the same grouping, causes and cached tokens as ``prefix-diff --json`` on the same folder; the page opens clean in a
real browser and draws a turn's diff."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from browser import chromium, visit
from test_captures import SHARED_CAPTURES

SECTION = re.compile(r'<section class="turn[^"]*" id="s(\d+)-t(\d+)"[^>]*data-prompt-tokens="(\d+)" data-cached-tokens="(\d+)"')
BAR = re.compile(r'<a class="bar" href="#s(\d+)-t(\d+)"([^>]*)>')
CAUSE = re.compile(r'data-cause="([a-z_]+)"')


def test_report_html_draws_each_conversation_with_prefix_diffs_figures(zhin: Any, tmp_path: Path) -> None:
    assert SHARED_CAPTURES.is_dir(), f"the shared reference is missing: {SHARED_CAPTURES}"
    shutil.copytree(SHARED_CAPTURES, tmp_path / "captures")
    made = zhin("report", "html", "captures", "-o", "page.html")
    assert made.returncode == 0, made.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    diff = json.loads(zhin("prefix-diff", "captures", "--json").stdout)
    sessions = re.findall(r'<article class="session" id="s\d+" data-session="([^"]+)"', page)
    assert sessions == [s["session_id"] for s in diff["sessions"]] == ["captures#1", "captures#8", "captures#16"]
    cached = {(int(s), int(t)): int(c) for s, t, _, c in SECTION.findall(page)}
    expected = {r["capture"]: r["cached_tokens"] for r in diff["captures"][0]["requests"]}
    numbers = {index: [r["capture"] for r in diff["captures"][0]["requests"] if r["session_id"] == sid]
               for index, sid in enumerate(sessions)}
    assert cached == {(i, n): expected[n] for i, ns in numbers.items() for n in ns}
    causes = {(int(s), int(t)): found.group(1) for s, t, rest in BAR.findall(page) if (found := CAUSE.search(rest))}
    assert causes == {(sessions.index(p["session_id"]), p["to_turn"]): p["cause"]
                      for s in diff["sessions"] for p in s["pairs"]}
    assert sum(1 for c in causes.values() if c == "messages_changed") == 12  # negative control: not every pair
    with chromium() as browser, visit(browser, tmp_path / "page.html", fragment="#s0-t5") as (view, seen):
        view.wait_for_selector("#s0-t5 details", timeout=30_000)
        assert not seen.problems()
        text = view.inner_text("#s0-t5")
        assert "messages changed" in text and "sender:id=" in text


def test_captured_requests_are_not_validated_and_called_captures(zhin: Any, tmp_path: Path) -> None:
    """Review finding 4 (issue 29): no validator ran on a captured body — the page says "not validated", never
    "accepted" — and a captured request is "capture N" in its section title, its diff captions and its bar's tooltip."""
    assert SHARED_CAPTURES.is_dir(), f"the shared reference is missing: {SHARED_CAPTURES}"
    shutil.copytree(SHARED_CAPTURES, tmp_path / "captures")
    assert zhin("report", "html", "captures", "-o", "page.html").returncode == 0
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    titles = re.findall(r'<h3><a href="#s\d+-t\d+">(\w+) \d+</a>', page)
    assert len(titles) == 27 and set(titles) == {"capture"}
    assert ">accepted<" not in page and page.count("not validated (the bot&#x27;s own request, as sent)") == 27
    assert "headers: 0 full" not in page  # zhin's header counts mean nothing for a foreign body
    with chromium() as browser, visit(browser, tmp_path / "page.html", fragment="#s0-t3") as (view, seen):
        view.wait_for_selector("#s0-t3 details", timeout=30_000)
        assert not seen.problems()
        text = view.inner_text("#s0-t3")
        assert "capture 2 · chunk" in text and "capture 3 · chunk" in text and "turn 2" not in text
        view.hover("#s0 a.bar[data-turn='5']")
        assert view.get_attribute("#s0 a.bar[data-turn='5']", "title").startswith("capture 5: ")


def test_a_sessions_page_still_says_request_and_accepted(zhin: Any, tmp_path: Path, fixtures_dir: Path) -> None:
    """Negative control: zhin's own sessions keep "request N" (issue 31: requests, not members' turns) and the
    validator's "accepted"."""
    session = fixtures_dir / "private-chat.jsonl"
    made = zhin("report", "html", str(session), "-o", "page.html", "--no-economy")
    assert made.returncode == 0, made.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert re.search(r'<h3><a href="#s0-t\d+">request \d+</a>', page) and ">accepted<" in page
    assert "not validated" not in page and "capture 1<" not in page

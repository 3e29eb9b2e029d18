"""The report page's script on hostile text (issue 27 item 10), in a real headless Chromium (tests/browser.py).

Header highlighting was a lazy regex that rescanned the rest of the line from every "[id:" — quadratic: 400 KB of
"[id:" in one member message blocked the tab 13.5 s when its turn opened. It is a scan now; the test compares, in
one run, the time to open a turn holding N characters of "[id:" with the time for N characters of "[ix:" (same
length, no header can start): linear, the ratio is about 2; quadratic, it is in the hundreds. A malformed fragment
("#%E0%A4%A") threw an uncaught URIError; it is ignored now.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import chromium, visit
from conftest import FIXTURES, run_zhin

DATA = re.compile(r'(<script type="application/json" id="zhin-data">)(.*?)(</script>)', re.S)
HEADER = re.compile(r"\[(?:id|scene_id):[^\]\n]*?;\]")  # the page's old regex: what a header is
SIZE = 200_000  # characters of hostile text: the quadratic regex needs ~5 s on it, the scan a few ms
RATIO_LIMIT = 25  # linear: ~2 (two texts of SIZE against one); quadratic: hundreds
TRICKY = "[id:a;] [id:[scene_id:b;] x [id:c] [id:\n;] [scene_id:;] [id:d;x;] [id:e;;]] [id:f [id:g;]"

# Opens turn ``turn`` of session 0 as a click on its link does (the hashchange handler), ``repeat`` times from
# scratch; returns the fastest time in ms and the text of every highlighted header of the opened turn.
OPEN_TURN = """([turn, repeat]) => {
  const section = document.getElementById('s0-t' + turn);
  let best = Infinity;
  for (let i = 0; i < repeat; i++) {
    delete section.dataset.drawn;
    section.querySelectorAll('details').forEach(d => d.remove());
    history.replaceState(null, '', '#s0-t' + turn);
    const start = performance.now();
    window.dispatchEvent(new HashChangeEvent('hashchange'));
    best = Math.min(best, performance.now() - start);
  }
  const messages = section.querySelector('details[data-view=messages]');
  return [best, [...messages.querySelectorAll('span.hdr')].map(s => s.textContent)];
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def page_html(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("page")
    proc = run_zhin("report", "html", FIXTURES / "private-chat.jsonl", "--no-economy", "-o", "page.html", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return (folder / "page.html").read_text(encoding="utf-8")


def with_messages(page: str, texts: dict[int, str]) -> str:
    """``page`` with the content of chunks ``texts``'s keys (user messages, as text) replaced. The data block is not
    a script the CSP hashes, so the page's policy still holds."""
    found = DATA.search(page)
    assert found is not None
    data = json.loads(found.group(2))
    chunks = data["sessions"][0]["chunks"]
    for chunk_id, text in texts.items():
        assert chunks[chunk_id][0] == "message" and json.loads(chunks[chunk_id][1])["role"] == "user"
        chunks[chunk_id][1] = json.dumps({"role": "user", "content": text}, ensure_ascii=False)
    block = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return page[: found.start(2)] + block + page[found.end(2) :]


def chunk_turns(page: str) -> dict[int, int]:
    """Chunk id -> the first turn whose request sends it."""
    found = DATA.search(page)
    assert found is not None
    first: dict[int, int] = {}
    for turn in json.loads(found.group(2))["sessions"][0]["turns"]:
        for chunk_id in turn["chunks"]:
            first.setdefault(chunk_id, turn["turn"])
    return first


def open_times(browser: Any, page: str, path: Path, old_regex: bool = False) -> tuple[float, float]:
    """(ms to open turn 1, which holds SIZE characters of "[ix:"; ms to open turn 2, which holds those and SIZE of
    "[id:"). ``old_regex``: the page's script with the quadratic regex back in (the negative control)."""
    turns = chunk_turns(page)
    assert turns[1] == 1 and turns[6] == 2  # chunk 1: turn 1's first user message; chunk 6: new in turn 2
    hostile = with_messages(page, {1: "[ix:" * (SIZE // 4), 6: "[id:" * (SIZE // 4)})
    if old_regex:
        hostile = without_csp(hostile).replace("headerRanges(text, ranges);", (
            "var H = /\\[(?:id|scene_id):[^\\]\\n]*?;\\]/g; "
            "while ((m = H.exec(text)) !== null) ranges.push([m.index, m.index + m[0].length, 'hdr']);"), 1)
    path.write_text(hostile, encoding="utf-8")
    with visit(browser, path) as (tab, seen):
        benign, _ = tab.evaluate(OPEN_TURN, [1, 3])
        both, _ = tab.evaluate(OPEN_TURN, [2, 1 if old_regex else 3])
        assert seen.problems() == []
    return benign, both


def without_csp(text: str) -> str:
    found = re.search(r'<meta http-equiv="Content-Security-Policy" content="[^"]*">', text)
    assert found is not None
    return text[: found.start()] + text[found.end() :]


def test_opening_a_turn_full_of_header_starts_takes_linear_time(browser: Any, page_html: str, tmp_path: Path) -> None:
    benign, both = open_times(browser, page_html, tmp_path / "hostile.html")
    ratio = both / max(benign, 0.1)  # performance.now() is coarsened to 0.1 ms
    print(f"open turn: {SIZE} chars of '[ix:' {benign:.1f} ms; plus {SIZE} of '[id:' {both:.1f} ms; ratio {ratio:.1f}")
    assert ratio < RATIO_LIMIT, (benign, both)


def test_the_quadratic_regex_fails_the_same_measure(browser: Any, page_html: str, tmp_path: Path) -> None:
    """Negative control: the old regex put back into the page's script is caught by the same ratio."""
    benign, both = open_times(browser, page_html, tmp_path / "old.html", old_regex=True)
    ratio = both / max(benign, 0.1)
    print(f"old regex: {benign:.1f} ms / {both:.1f} ms; ratio {ratio:.1f}")
    assert ratio > RATIO_LIMIT, (benign, both)


def test_highlighted_headers_are_the_old_regexs(browser: Any, page_html: str, tmp_path: Path) -> None:
    """The scan marks exactly what the old regex matched (tricky text included); control: the tricky text does
    have headers to find, and a lookalike that is no header is not marked."""
    path = tmp_path / "tricky.html"
    path.write_text(with_messages(page_html, {1: TRICKY}), encoding="utf-8")
    with visit(browser, path) as (tab, seen):
        _, marked = tab.evaluate(OPEN_TURN, [1, 1])
        assert seen.problems() == []
    expected = [m.group() for text in (json.loads(c)["content"] for c in turn_one_user_texts(page_html, TRICKY))
                for m in HEADER.finditer(text)]
    assert marked == expected
    found = marked
    assert "[id:a;]" in found and "[id:c]" not in "".join(found) and len(found) >= 5


def turn_one_user_texts(page: str, tricky: str) -> list[str]:
    """The JSON text of turn 1's message chunks, chunk 1 replaced by ``tricky`` (what the page draws, in order)."""
    found = DATA.search(page)
    assert found is not None
    session = json.loads(found.group(2))["sessions"][0]
    ids = session["turns"][0]["chunks"]
    out = []
    for chunk_id in ids:
        text = session["chunks"][chunk_id][1]
        if chunk_id == 1:
            text = json.dumps({"role": "user", "content": tricky})
        if isinstance(json.loads(text).get("content"), str):
            out.append(text)
    return out


@pytest.mark.parametrize("fragment", ["#%E0%A4%A", "#%", "#%ZZ", "#s0-t%E0%A4"])
def test_a_malformed_fragment_is_ignored(browser: Any, page_html: str, tmp_path: Path, fragment: str) -> None:
    """Opened at a malformed fragment, or navigated to one, the page raises no error and opens nothing; control:
    a well-formed fragment opens its turn (so the fragment is read at all)."""
    path = tmp_path / "page.html"
    path.write_text(page_html, encoding="utf-8")
    with visit(browser, path, fragment=fragment) as (tab, seen):
        assert tab.evaluate("document.querySelectorAll('section[data-drawn]').length") == 0
        tab.evaluate("location.hash = '#s0-t2'")
        tab.wait_for_function("document.querySelectorAll('section[data-drawn]').length === 1", timeout=10_000)
        tab.evaluate(f"location.hash = {fragment!r}")
        tab.evaluate("new Promise(done => setTimeout(done, 100))")  # the hashchange handler has run
        assert seen.problems() == []

"""One number, one definition: the cached share of a session is zhin_cli.cache.cached_share, and prefix-diff,
trace --all and report html print the same figure for the same session (it used to be 69 % in prefix-diff and
the page but 67 % in trace, which counted the first, cold request too)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from zhin_cli.cache import cached_share

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_cached_share_leaves_nothing_out_of_what_it_is_given() -> None:
    assert cached_share([(100, 50), (300, 150)]) == 0.5
    assert cached_share([]) == 0.0
    assert cached_share([(1000, 0)]) == 0.0  # negative control: nothing cached is 0, not a division by zero


@pytest.mark.parametrize("session", ["group-busy.jsonl", "private-chat.jsonl"])
def test_prefix_diff_trace_and_the_page_print_the_same_cached_share(zhin, tmp_path: Path, session: str) -> None:  # type: ignore[no-untyped-def]
    path = str(FIXTURES / session)
    share = json.loads(zhin("prefix-diff", path, "--json").stdout)["sessions"][0]["summary"]["cached_share"]
    trace_text = zhin("trace", path, "--all").stdout
    shown = re.search(r"warm cached share (\d+\.\d)% \(requests after the first", trace_text)
    assert shown is not None, trace_text
    assert shown.group(1) == f"{share * 100:.1f}"
    page = zhin("report", "html", path, "--no-economy", "-o", str(tmp_path / "page.html"))
    assert page.returncode == 0, page.stderr
    html = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert f"cached share {share:.1%}" in html

"""report html's TurnView holds typed data (issue 32): a ``Verdict`` (None for a captured body) and ``SegmentBar``s,
and a request's section reads them as it read the dicts before."""

from __future__ import annotations

from zhin_cli.pipeline.validate.verdict import Verdict
from zhin_cli.tools.report.html import ChunkStore, SegmentBar, SessionPage, TurnView, _kinds, _section


def _turn(verdict: Verdict | None, segments: list[SegmentBar] | None = None) -> TurnView:
    return TurnView(turn=3, prompt_tokens=100, cached_tokens=40, segments=segments or [], state_rendering="full",
                    full_headers=1, short_headers=2, breakpoints=[], verdict=verdict, warnings=["assembler note"],
                    window={}, chunks=[], groups=[], tail_position=None, tail_text=None)


def test_an_accepted_request_shows_the_validators_warnings() -> None:
    html = _section(0, _turn(Verdict(ok=True, warnings=("template drops the tool call",))), {})
    assert '<span class="ok">accepted</span>' in html
    assert "warning: assembler note" in html
    assert "warning: template drops the tool call" in html


def test_a_rejected_request_shows_its_status_not_its_warnings() -> None:
    html = _section(0, _turn(Verdict(ok=False, status=422, warnings=("kept out",))), {})
    assert '<span class="bad">rejected (422)</span>' in html
    assert "accepted" not in html  # negative control: the verdict's word discriminates
    assert "kept out" not in html  # as the verdict's JSON has it: a rejection carries no warnings
    assert "warning: assembler note" in html


def test_a_captured_body_is_not_validated() -> None:
    html = _section(0, _turn(None), {}, unit="capture")
    assert '<span class="meta">not validated (the bot&#x27;s own request, as sent)</span>' in html
    assert "accepted" not in html and "rejected" not in html


def test_segment_bars_name_kind_tokens_and_trimmed_text() -> None:
    segments = [SegmentBar("core", "text", 30, trimmed=12), SegmentBar("history", "messages", 70)]
    turn = _turn(Verdict(ok=True), segments)
    page = SessionPage("s", "file", "openai", "gpt", 1, None, [turn], ChunkStore(), [])
    assert _kinds([page]) == {"text": 0, "messages": 1}
    html = _section(0, turn, {"text": 0, "messages": 1})
    assert 'class="seg k0 trimmed" title="core · text · 30 tokens · 12 characters trimmed"' in html
    assert 'data-segment="history" data-tokens="70" style="flex-grow:70"' in html
    assert html.count("data-trimmed=") == 1  # negative control: the untrimmed segment carries none


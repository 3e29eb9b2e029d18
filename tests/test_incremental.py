"""A replay resumes the previous request's projection (issue 16 item 4): every request equals a from-scratch one.

``Conversation`` hands each request the projector of the one before (``ProjectionMemo``); the projection is
resumed only where that is exact (``Projector``). The property: for generated sessions — replies to rows that
join the window later (a late-delivered original), members whose facts change (synthesized state changes),
consecutive events, late events, tool loops, compactions, window cuts, presets and four providers (Anthropic's
state changes need the second, re-timed build) — every request of the incremental replay equals the request
rendered with no projection to resume, byte for byte, and the replay did resume.

Negative controls: resuming although a fed message replies to a new row (skipping ``Projector.depends_on``) is
caught by the same property and generator; resuming although the build times earlier events differently (skipping
``Projector.agrees``) is caught on a fixed session (the generator reaches it too, but not reliably).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from builders import SEC, T0, History
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from replay_cases import Case, request_record, tool_loop

from zhin_cli.core.tokens import TokenCounter
from zhin_cli.pipeline.assemble import AssembledRequest, Assembler, Placement
from zhin_cli.pipeline.config import parse_config
from zhin_cli.pipeline.headers import Projector

EXAMPLES = int(os.environ.get("ZHIN_INCREMENTAL_EXAMPLES", "150"))
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))
SEARCH = settings(max_examples=max(EXAMPLES, 400), derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
PRESET = Path(__file__).resolve().parent.parent / "fixtures" / "presets" / "st-default.json"
WINDOWS: list[dict[str, Any]] = [{}, {"max_messages": 6}, {"max_messages": 9, "cut_to": 5}, {"max_messages": 8, "max_blocks": 3}]
# An allow-listed Claude model takes a state change as system only in some places (untimed there, timed where it is
# downgraded), so its requests often need the second, re-timed build, and an earlier event's timing can change
PROVIDERS = [("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4-5"), ("anthropic", "claude-opus-4-8"),
             ("deepseek", "deepseek-chat"), ("gemini", "gemini-2.5-flash")]

step = st.one_of(
    st.tuples(st.just("user"), st.integers(0, 3), st.integers(-4, 4)),  # sender, reply to the row this far away
    st.tuples(st.just("rename"), st.integers(0, 3), st.integers(0, 2)),  # a member shows another name
    st.tuples(st.just("reply"), st.just(0), st.just(0)),
    st.tuples(st.just("forward"), st.integers(0, 3), st.integers(0, 3)),  # a reply whose original comes b steps later
    st.tuples(st.just("tools"), st.integers(1, 2), st.just(0)),
    st.tuples(st.just("event"), st.integers(0, 1), st.integers(1, 2)),  # join/leave, how many in a row
    st.tuples(st.just("late"), st.integers(1, 40), st.just(0)),
    st.tuples(st.just("changed"), st.integers(0, 3), st.integers(0, 2)),  # an event changes a member's facts
    st.tuples(st.just("quiet"), st.integers(1, 5), st.just(0)),  # minutes pass: the time rule shows a time again
    st.tuples(st.just("summary"), st.integers(0, 1000), st.just(0)),
)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    h = History()
    t = T0
    names = {uid: f"name{uid}" for uid in ("10002", "10003", "10004", "10005")}
    originals: list[list[Any]] = []  # [steps to wait, platform id] of replies' originals not stored yet
    for kind, a, b in draw(st.lists(step, min_size=4, max_size=30)):
        t += 10 * SEC
        for original in originals:
            original[0] -= 1
            if original[0] < 0:  # the original of an earlier reply arrives (delivered late)
                h.user(t, "10005", f"o{original[1]}", message_id=original[1], display_name=names["10005"])
        originals = [o for o in originals if o[0] >= 0]
        row = len(h.messages) + 1
        if kind == "user":
            uid = f"1000{a + 2}"
            # every member message has platform id p<row>; a reply may name a row not stored yet (the original
            # arrives later), whose reply_to shows only once that row is in the window
            h.user(t, uid, f"m{row}", message_id=f"p{row}", reply_to=f"p{row + b}" if b else None,
                   display_name=names[uid])
        elif kind == "forward":
            uid = f"1000{a + 2}"
            h.user(t, uid, f"m{row}", message_id=f"p{row}", reply_to=f"q{row}", display_name=names[uid])
            h.assistant(t + SEC, f"r{row}")
            originals.append([b, f"q{row}"])
        elif kind == "rename":
            uid = f"1000{a + 2}"
            names[uid] = f"{uid}-v{b}"
            h.user(t, uid, f"m{row}", message_id=f"p{row}", display_name=names[uid])
        elif kind == "reply":
            h.assistant(t, f"r{row}")
        elif kind == "tools":
            tool_loop(h, t, [f"c{row}x{i}" for i in range(a)], f"r{row}")
        elif kind == "event":
            for i in range(b):
                joined = (a + i) % 2 == 1
                h.event(t + i, "member_joined" if joined else "member_left",
                        f"1000{9 - i} {'join' if joined else 'leave'} 1048877509 on 09:00 by 10001")
        elif kind == "late":
            h.event(t - a * SEC, "member_left", "10008 leave 1048877509 on 09:00 by 10001")
        elif kind == "changed":
            h.event(t, "member_changed", f'10001 changed 1000{a + 2} group_nickname to "n{b}"')
        elif kind == "quiet":
            t += a * 60 * SEC
        elif h.messages:
            anchor = h.messages[a % len(h.messages)].row_id
            h.summary(t, anchor, f"summary up to row {anchor}")
    h.user(t + SEC, "10002", "last", message_id="plast", display_name=names["10002"])
    h.assistant(t + 2 * SEC, "final")
    window = dict(draw(st.sampled_from(WINDOWS)))
    config: dict[str, Any] = {"window": window} if window else {}
    if draw(st.booleans()):
        config["preset"] = {"file": str(PRESET)}
    provider, model = draw(st.sampled_from(PROVIDERS))
    return Case(h.session(), config, provider, model)


class _FromScratch(Assembler):
    """The reference: every request projects its window from scratch (nothing to resume)."""

    def render(self, placement: Placement, **kwargs: Any) -> AssembledRequest:
        kwargs["projections"] = None
        return super().render(placement, **kwargs)


def _replay(case: Case, assembler_type: type[Assembler]) -> tuple[dict[int, str], int]:
    """Every request of the session by the replay's own loop (``Assembler.replay`` without ``only``), and how
    many builds resumed a projection."""
    config = parse_config(case.config)
    registry, _ = config.registry()
    assembler = assembler_type(registry, config, provider=case.provider, model=case.model)
    plan = assembler.plan(case.session)
    conversation = assembler.conversation(case.session, plan)
    requests = (conversation.step(point) for point in plan.points)
    return {r.turn: request_record(r) for r in requests if r is not None}, conversation.projections.resumed


def mismatches(case: Case) -> list[int]:
    incremental, _ = _replay(case, Assembler)
    reference, resumed = _replay(case, _FromScratch)
    assert resumed == 0
    return [turn for turn, expected in reference.items() if incremental.get(turn) != expected]


@SETTINGS
@given(case=cases())
def test_the_incremental_replay_equals_a_from_scratch_render_of_every_turn(case: Case) -> None:
    assert mismatches(case) == []


def test_a_replay_resumes_the_projection() -> None:
    """Not vacuous: a plain chat resumes on every request after the first, and still equals the reference."""
    h = History()
    for i in range(12):
        h.user(T0 + i * 20 * SEC, f"1000{2 + i % 3}", f"m{i}", message_id=f"p{i}")
        h.assistant(T0 + i * 20 * SEC + 5 * SEC, f"r{i}")
    case = Case(h.session(), {}, "openai", "gpt-4o")
    requests, resumed = _replay(case, Assembler)
    assert len(requests) == 12 and resumed == 11
    assert mismatches(case) == []


def test_a_reply_to_a_row_that_joins_the_window_later_projects_again() -> None:
    """m1 replies to p3, stored after the first reply: turn 2's window holds p3, so m1's header gains reply_to."""
    h = History()
    h.user(T0, "10002", "m1", message_id="p1", reply_to="p3")
    h.assistant(T0 + 5 * SEC, "r1")
    h.user(T0 + 10 * SEC, "10003", "m3", message_id="p3")
    h.assistant(T0 + 15 * SEC, "r2")
    case = Case(h.session(), {}, "openai", "gpt-4o")
    requests, resumed = _replay(case, Assembler)
    assert resumed == 0
    assert "reply_to:m3" not in requests[1] and "reply_to:m3" in requests[2]
    assert mismatches(case) == []


# --- negative controls ---------------------------------------------------------------------------------------------


def test_negative_control_resuming_past_a_reply_to_a_new_row_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Projector, "depends_on", lambda self, placed: False)
    found = find(cases(), lambda case: bool(mismatches(case)), settings=SEARCH)
    assert mismatches(found)


def _untimed_state_change() -> Case:
    """An allow-listed Claude model takes the state change after u as system (no time on the wire) on turns 2 and
    3, so both need the re-timed second build; r1 comes 70 s after the last time shown (u's), 20 s after the change:
    it shows its time only if the change's time was not shown."""
    h = History()
    h.user(T0, "10002", "a")
    h.assistant(T0 + 5 * SEC, "r0")
    h.user(T0 + 40 * SEC, "10003", "u")
    h.event(T0 + 90 * SEC, "member_changed", '10001 changed 10002 group_nickname to "n0"')
    h.assistant(T0 + 110 * SEC, "r1")
    h.user(T0 + 120 * SEC, "10002", "a2")
    h.assistant(T0 + 125 * SEC, "r2")
    return Case(h.session(), {}, "anthropic", "claude-opus-4-8")


def test_the_re_timed_build_resumes_the_build_timed_alike() -> None:
    requests, resumed = _replay(_untimed_state_change(), Assembler)
    assert resumed >= 2 and mismatches(_untimed_state_change()) == []
    assert '"[id:m4;user_id:8596238;time:09:01;] r1"' in requests[3]  # r1's time is shown


def test_negative_control_resuming_with_other_event_timing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resuming the first build kept (timed by the guess) for the re-timed build: r1 loses its time."""
    monkeypatch.setattr(Projector, "agrees", lambda self, timed: True)
    assert mismatches(_untimed_state_change()) == [3]



# --- one tokenization per text: counting and the packed tokens share a memo ------------------------------------------


@pytest.mark.parametrize("text", ["", "hello world", "[id:m1;user_id:10002;] 你好，今天", "<|endoftext|> as text",
                                  "lone \ud800 surrogate", "emoji 👍🏽 and\nnew lines\t" * 20])
def test_count_is_the_packed_length(text: str) -> None:
    counter = TokenCounter("o200k_base")
    assert counter.count(text) == counter.count_once(text) == len(counter.encode_packed_once(text)) // 4


def test_a_text_counted_and_packed_is_tokenized_once() -> None:
    """``count`` is served from ``encode_packed``'s memo (wire.text_tokens fills it for every sent block)."""
    counter = TokenCounter("o200k_base")
    text = "a message sent and reported"
    expected = len(counter.encode_packed(text)) // 4

    class Refuses:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"tokenized again ({name})")

    counter._enc = Refuses()
    assert counter.count(text) == expected
    with pytest.raises(AssertionError, match="tokenized again"):  # negative control: a new text is tokenized
        counter.count("a text not seen before")

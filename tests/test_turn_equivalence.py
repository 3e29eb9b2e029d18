"""``trace --turn k`` ≡ ``trace --all``[k], byte for byte, for every k (issue 16 item 2).

``Pipeline.request(turn=k)`` places only the turns since k's window last moved and renders k; a replay renders
every turn and carries the sent prefix from one to the next. They agree because a moved window carries no
prefix (docs/design-notes.md, "A request costs its window"). The property runs over generated sessions with
window cuts (tail limit and block hysteresis), compactions, late events, stored and card greetings and tool
loops, under several providers. Branches are resolved by the store into the active branch before the engine
sees the session (tests/test_store.py), so a generated linear session covers them here.

Negative controls, with the same property and the same generator: a request made without any sent prefix, and
a replay that carries the prefix across a window move (the rule before this change), are both caught.

Examples: ZHIN_TURN_EXAMPLES (default 200; CI's fixed seed: derandomized).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from builders import SEC, T0, History
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from replay_cases import Case, request_record, tool_loop

from zhin_cli.core.model import Session
from zhin_cli.pipeline.assemble import AssembledRequest, Assembler, SentPrefix
from zhin_cli.pipeline.config import Config, parse_config
from zhin_cli.pipeline.facade import Pipeline

EXAMPLES = int(os.environ.get("ZHIN_TURN_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))
# the negative controls search the same space until the wrong variant is caught (no shrinking: any catch will do)
SEARCH = settings(max_examples=max(EXAMPLES, 300), derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
PRESET = Path(__file__).resolve().parent.parent / "fixtures" / "presets" / "st-default.json"
CARD_GREETING = "你好，我是{{char}}。{{user}}，今天想聊什么？"

WINDOWS: list[dict[str, Any]] = [
    {},  # the default: 80 messages, cut to 40 (no cut in these short sessions)
    {"max_messages": 4},
    {"max_messages": 5, "cut_to": 4},  # a sliding window: the start moves on every message
    {"max_messages": 6, "cut_to": 2, "keep_membership_events": 1},
    {"max_messages": 8, "max_blocks": 3},
    {"max_messages": None, "max_blocks": 2, "cut_blocks_to": 1},
    {"max_messages": 7, "keep_membership_events": 0},
]
PROVIDERS = [("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4-5"), ("deepseek", "deepseek-chat"),
             ("gemini", "gemini-2.5-flash")]

step = st.one_of(
    st.tuples(st.just("user"), st.integers(0, 2)),
    st.tuples(st.just("reply"), st.just(0)),
    st.tuples(st.just("tools"), st.integers(1, 2)),
    st.tuples(st.just("event"), st.integers(0, 1)),
    st.tuples(st.just("late"), st.integers(1, 40)),  # an event delivered after replies it is older than
    st.tuples(st.just("summary"), st.integers(0, 1000)),
)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    h = History()
    t = T0
    if draw(st.booleans()):  # a stored greeting: turn 1, no request
        h.assistant(t, "欢迎")
    steps = draw(st.lists(step, min_size=3, max_size=30))
    for kind, value in steps:
        t += 10 * SEC
        if kind == "user":
            h.user(t, f"1000{value + 2}", f"m{len(h.messages)}")
        elif kind == "reply":
            h.assistant(t, f"r{len(h.messages)}")
        elif kind == "tools":  # the reply is named by its own index (after the call and its results)
            row = len(h.messages)
            tool_loop(h, t, [f"c{row}x{i}" for i in range(value)], f"r{row + 1 + value}")
        elif kind == "event":
            kind_name = "member_joined" if value else "member_left"
            h.event(t, kind_name, f"10009 {'join' if value else 'leave'} 1048877509 on 09:00 by 10001")
        elif kind == "late":
            h.event(t - value * SEC, "member_left", "10008 leave 1048877509 on 09:00 by 10001")
        elif h.messages:  # a compaction: a summary made now, of everything up to an earlier row
            anchor = h.messages[value % len(h.messages)].row_id
            h.summary(t, anchor, f"summary up to row {anchor}")
    h.user(t + SEC, "10002", "last")
    h.assistant(t + 2 * SEC, "final")
    config = dict(draw(st.sampled_from(WINDOWS)))
    window = {k: v for k, v in config.items()}
    full: dict[str, Any] = {"window": window} if window else {}
    if draw(st.booleans()):
        full["preset"] = {"file": str(PRESET), "greeting": CARD_GREETING}
    provider, model = draw(st.sampled_from(PROVIDERS))
    return Case(h.session(), full, provider, model)


def open_pipeline(case: Case, assembler_type: type[Assembler] = Assembler) -> Pipeline:
    config: Config = parse_config(case.config)
    pipeline = Pipeline.open(config, provider=case.provider, model=case.model)
    if assembler_type is not Assembler:
        old = pipeline.assembler
        pipeline.assembler = assembler_type(old.registry, config, provider=case.provider, model=case.model,
                                            preset=old.preset)
    return pipeline


def mismatches(case: Case, single: Any = None, assembler_type: type[Assembler] = Assembler) -> list[int]:
    """Turns whose one-turn request differs from the replay's. ``single(pipeline, session, turn)`` makes the
    one-turn request (default: ``Pipeline.request``); ``assembler_type`` makes the replay."""
    with open_pipeline(case) as pipeline, open_pipeline(case, assembler_type) as replaying:
        replayed = {r.turn: request_record(r) for r in replaying.replay(case.session)}
        make = single or (lambda p, s, k: p.request(s, turn=k))
        return [turn for turn, expected in replayed.items() if request_record(make(pipeline, case.session, turn)) != expected]


@SETTINGS
@given(case=cases())
def test_one_turn_equals_the_replays_turn(case: Case) -> None:
    assert mismatches(case) == []


@SETTINGS
@given(case=cases(), data=st.data())
def test_some_turns_equal_the_replays_turns(case: Case, data: st.DataObject) -> None:
    """``replay(turns=…)`` (trace of a few turns, eval) places what their prefixes need and renders only them."""
    with open_pipeline(case) as pipeline:
        replayed = {r.turn: request_record(r) for r in pipeline.replay(case.session)}
        chosen = data.draw(st.sets(st.sampled_from(sorted(replayed)), max_size=4))
        assert {r.turn: request_record(r) for r in pipeline.replay(case.session, turns=chosen)} == {t: replayed[t] for t in chosen}


def test_every_turn_of_a_fixed_session_is_checked() -> None:
    """The property compares every request of a replay (the greeting has none): a session with a window move,
    a late event and a compaction gives as many comparisons as turns with a request."""
    h = History()
    h.assistant(T0, "欢迎")
    for i in range(6):
        h.user(T0 + (2 * i + 1) * 10 * SEC, "10002", f"m{i}")
        h.assistant(T0 + (2 * i + 2) * 10 * SEC, f"r{i}")
        if i == 2:
            h.event(T0 + 15 * SEC, "member_left", "10008 leave 1048877509 on 09:00 by 10001")
    h.summary(T0 + 95 * SEC, 5)
    case = Case(h.session(), {"window": {"max_messages": 4}}, "openai", "gpt-4o")
    with open_pipeline(case) as pipeline:
        requests = list(pipeline.replay(case.session))
        turns = [r.turn for r in requests]
        assert turns == [2, 3, 4, 5, 6, 7] and pipeline.turns(case.session).greeting_turn == 1
        # the generator's event lines are real member changes (the fixed template), shown as state changes
        assert any("[state change] 10008 leave" in json.dumps(r.request, ensure_ascii=False) for r in requests)
        with pytest.raises(Exception, match="greeting"):
            pipeline.request(case.session, turn=1)
    assert mismatches(case) == []


# --- negative controls: the same property catches a wrong engine --------------------------------------------------


def _without_prefix(pipeline: Pipeline, session: Session, turn: int) -> AssembledRequest:
    """Wrong: turn k alone, as if no request came before it (no sent prefix at all)."""
    assembler = pipeline.assembler
    plan = assembler.plan(session)
    point = plan.points[plan.point_index(turn)]
    return assembler.assemble(plan.session, point.position, point.timestamp, turn=turn, aliases=plan.aliases,
                              index=plan.index, stored_model=point.model)


class _CarriesAcrossMoves(Assembler):
    """Wrong: keeps the previous request's prefix even where the window moved (the rule before this change),
    so a turn depends on every turn before it and one turn's placement-only shortcut cannot match it."""

    def assemble(self, session, upto, request_time, **kwargs):  # type: ignore[no-untyped-def]
        prefix = kwargs.get("sent_prefix")
        if isinstance(prefix, SentPrefix):
            kwargs["sent_prefix"] = list(prefix.keys)
        return super().assemble(session, upto, request_time, **kwargs)


def test_negative_control_a_request_without_its_sent_prefix_is_caught() -> None:
    found = find(cases(), lambda case: bool(mismatches(case, single=_without_prefix)), settings=SEARCH)
    assert mismatches(found, single=_without_prefix) and mismatches(found) == []


def test_negative_control_carrying_the_prefix_across_a_window_move_is_caught() -> None:
    found = find(cases(), lambda case: bool(mismatches(case, assembler_type=_CarriesAcrossMoves)), settings=SEARCH)
    assert mismatches(found, assembler_type=_CarriesAcrossMoves) and mismatches(found) == []


def test_a_branched_database_session_traced_one_turn_at_a_time_equals_trace_all(tmp_path: Path, upstream_db: Any) -> None:
    """Branches live in the store (the active branch's ``parent_id`` chain); the engine sees that branch, read
    lazily from SQLite. Each ``trace --turn k`` equals ``trace --all``'s turn k, with the window moving."""
    from test_store import UP_ID, assistant_row, user_row

    from zhin_cli.tools.trace.trace import trace

    rows = [user_row("root question", 1700000000000), assistant_row("root answer", 1700000001000)]
    parent = 2
    for i in range(12):  # an abandoned side branch, then the active one, 12 rounds long
        if i == 0:
            rows += [user_row("side question", 1700000002000, parent_id=2),
                     assistant_row("side answer", 1700000003000, parent_id=3)]
        rows.append(user_row(f"q{i}", 1700000010000 + i * 20_000, parent_id=parent))
        rows.append(assistant_row(f"a{i}", 1700000011000 + i * 20_000, parent_id=len(rows)))
        parent = len(rows)
    db = upstream_db(tmp_path / "d.sqlite", UP_ID, rows, active_leaf=parent)
    (tmp_path / "zhin.yaml").write_text("window:\n  max_messages: 6\n  cut_to: 3\n", encoding="utf-8")
    config = tmp_path / "zhin.yaml"
    every = trace(UP_ID, db=str(db), config_path=config, all_turns=True, cwd=tmp_path)
    assert [r.turn for r in every.requests] == list(range(1, 14))  # root + 12 rounds of the active branch
    assert len({(r.window.dropped, r.window.summary_anchor) for r in every.requests}) > 2  # the window moves
    assert all("side question" not in json.dumps(r.request, ensure_ascii=False) for r in every.requests)
    for request in every.requests:
        alone = trace(UP_ID, db=str(db), config_path=config, turn=request.turn, cwd=tmp_path).requests
        assert [request_record(r) for r in alone] == [request_record(request)]

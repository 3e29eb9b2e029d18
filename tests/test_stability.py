"""Prompt-cache stability (ADR 0041 §5) — acceptance criterion 7, on the busy group fixture."""

from __future__ import annotations

import json
from pathlib import Path

from builders import SEC, T0, History, TimeOnlyAssembler, late_event_history, replay

from zhin_cli.core.model import SceneChange
from zhin_cli.store.jsonl import read_session

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def dumps(message: dict) -> str:  # type: ignore[type-arg]
    return json.dumps(message, ensure_ascii=False, sort_keys=True)


def strip_tail(message: dict) -> dict:  # type: ignore[type-arg]
    content = message.get("content")
    if isinstance(content, str) and "\n\n[scene_id:" in content:
        return {**message, "content": content.split("\n\n[scene_id:")[0]}
    return message


def test_criterion_7_system_prompt_is_byte_identical_across_every_turn() -> None:
    session = read_session(FIXTURES / "group-busy.jsonl")
    requests = replay(session)
    assert len(requests) >= 10
    systems = {dumps(r.request["messages"][0]) for r in requests}
    assert len(systems) == 1


def test_criterion_7_history_prefix_only_grows_between_turns_unless_the_window_moves() -> None:
    session = read_session(FIXTURES / "group-busy.jsonl")
    requests = replay(session)
    checked = 0
    for previous, current in zip(requests, requests[1:], strict=False):
        if current.window.dropped != previous.window.dropped or current.window.summary_anchor != previous.window.summary_anchor:
            continue  # compaction / window shift: a new prefix is expected
        before = [strip_tail(m) for m in previous.request["messages"]]
        # the runtime tail may move off the previous input (new turn) or stay (tool loop): compare without it
        after = [strip_tail(m) for m in current.request["messages"][: len(before)]]
        assert [dumps(m) for m in after] == [dumps(m) for m in before], f"turn {current.turn} rewrote its prefix"
        checked += 1
    assert checked >= 5


def test_negative_control_a_clock_in_the_system_prompt_breaks_the_prefix() -> None:
    """If a segment put the current time into the system prompt, the check above would catch it."""
    from zhin_cli.pipeline.assemble import Assembler
    from zhin_cli.pipeline.config import Config
    from zhin_cli.pipeline.segments.builtin import default_registry

    class ClockSegment:
        id, kind, weight, retention = "bad.clock", "environment", 1, "required"

        def inject(self, input):  # type: ignore[no-untyped-def]
            return f"Now: {input.history[-1].timestamp}"

    registry = default_registry()
    registry.register(ClockSegment())
    session = read_session(FIXTURES / "group-busy.jsonl")
    requests = list(Assembler(registry, Config()).replay(session))
    assert len({dumps(r.request["messages"][0]) for r in requests}) > 1


def test_criterion_7_group_rename_changes_only_the_scene_segment() -> None:
    h = History()
    h.user(T0, "10002", "a")
    h.assistant(T0 + SEC, "r1")
    h.user(T0 + 2 * SEC, "10002", "b")
    h.assistant(T0 + 3 * SEC, "r2")
    plain = h.session()
    renamed = h.session()
    renamed.scene_changes = [SceneChange(T0 + 1500, {"scene_name": "新群名"})]
    before, after = replay(plain)[-1], replay(renamed)[-1]
    changed = [s.id for s, t in zip(before.segments, after.segments, strict=True) if (s.chars, s.tokens) != (t.chars, t.tokens)]
    assert changed == ["core.scene"]
    b, a = before.request["messages"], after.request["messages"]
    assert b[:-1] == a[:-1]  # everything before the current input is byte-identical
    assert strip_tail(b[-1]) == strip_tail(a[-1])
    assert "scene_name:测试群;" in b[-1]["content"] and "scene_name:新群名;" in a[-1]["content"]


def test_scene_line_is_in_the_runtime_tail_after_the_current_message() -> None:
    h = History()
    h.user(T0, "10002", "hello")
    h.assistant(T0 + SEC, "r")
    request = replay(h.session())[-1]
    last = request.request["messages"][-1]["content"]
    assert last.startswith("[id:m1;user_id:10002;") and last.endswith(
        "\n\n[scene_id:1048877509;scene_type:group;scene_name:测试群;owner_id:10001;admins:10003;member_count:42;global_mute:false;assistant_role:admin;]"
    )
    assert "scene_id" not in request.request["messages"][0]["content"]


def prefix_violations(requests) -> list[int]:  # type: ignore[no-untyped-def]
    bad = []
    for previous, current in zip(requests, requests[1:], strict=False):
        if current.window.dropped != previous.window.dropped or current.window.summary_anchor != previous.window.summary_anchor:
            continue
        before = [dumps(strip_tail(m)) for m in previous.request["messages"]]
        after = [dumps(strip_tail(m)) for m in current.request["messages"][: len(before)]]
        if before != after:
            bad.append(current.turn)
    return bad


def test_negative_control_without_append_only_a_late_event_rewrites_the_prefix() -> None:
    """An event older than an already-sent reply: merged by time alone it is inserted back into the sent
    history; the append-only rule is what keeps the prefix."""
    from zhin_cli.pipeline.assemble import Assembler
    from zhin_cli.pipeline.config import Config
    from zhin_cli.pipeline.segments.builtin import default_registry

    h = late_event_history()
    session = h.session()
    assert prefix_violations(list(Assembler(default_registry(), Config()).replay(session))) == []
    assert prefix_violations(list(TimeOnlyAssembler(default_registry(), Config()).replay(session))) == [2]

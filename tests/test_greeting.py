"""Issue 15 §B5: the greeting. SillyTavern writes the card's first_mes into a new chat without calling the model;
a leading assistant message with no member input before it is that greeting: no request is replayed for it, it
stays in the history of later requests, and ``trace`` says so. Turn numbers still count it (turn k = the k-th
assistant message), so numbering never changes for a stored session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from builders import BOT, MIN, SEC, T0, History, assembler, contents, replay

from zhin_cli.cache.diff import diff_turns
from zhin_cli.core.errors import UsageError
from zhin_cli.core.model import AssistantMessage, UserMessage
from zhin_cli.pipeline.assemble import greeting_position
from zhin_cli.tools.trace.trace import trace


def greeted() -> History:
    h = History()
    h.assistant(T0, "你好，我是 Zhin。")  # the greeting: nothing before it
    h.user(T0 + MIN, "10002", "你好", display_name="小明")
    h.assistant(T0 + MIN + 10 * SEC, "有什么可以帮你？")
    h.user(T0 + 2 * MIN, "10002", "讲个笑话", display_name="小明")
    h.assistant(T0 + 2 * MIN + 10 * SEC, "好的……")
    return h


def save(h: History, tmp_path: Path) -> Path:
    """The history as a session JSONL file (the builders' messages carry no stored payload)."""
    session = h.session()
    lines: list[dict[str, Any]] = [{"type": "session", "session_id": session.session_id, "timezone": session.timezone,
                                    "bot": {"user_id": BOT.user_id, "name": BOT.name}, "scene": {"scene_id": "42", "scene_type": "group"}}]
    for m in session.messages:
        line: dict[str, Any] = {"type": "message", "id": m.row_id, "role": m.role, "timestamp": m.timestamp}
        if isinstance(m, UserMessage):
            assert m.actor is not None
            line |= {"content": m.content, "actor": {"subjectId": m.actor.subject_id, "displayName": m.actor.display_name}}
        else:
            assert isinstance(m, AssistantMessage)
            line["content"] = m.content
        lines.append(line)
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    return path


def test_no_request_for_the_greeting_and_it_stays_in_the_history() -> None:
    requests = replay(greeted().session())
    assert [r.turn for r in requests] == [2, 3]  # turn 1 is the greeting: no request
    first = contents(requests[0])
    assert first[1] == f"[id:m1;user_id:{BOT.user_id};name:Zhin;role:admin;group_nickname:小知;date:2025-10-29;time:09:00;] 你好，我是 Zhin。"
    assert requests[0].request["messages"][1]["role"] == "assistant"
    assert first[2].startswith("[id:m2;user_id:10002;")
    assert contents(requests[1])[1] == first[1]  # and in every later request


def test_the_first_request_is_not_a_scene_line_alone() -> None:
    """What the old replay sent for the greeting: a request whose only history is the scene line."""
    for request in replay(greeted().session()):
        assert any(c.startswith("[id:m2;") or c.startswith("[id:m4;") for c in contents(request))


@pytest.mark.parametrize(("build", "turns"), [
    # negative controls: these opening bot messages answer something, so their request is replayed
    (lambda h: (h.user(T0, "10002", "hi"), h.assistant(T0 + SEC, "hello")), [1]),
    (lambda h: (h.event(T0, "member_joined", "10009 join 1048877509 on 09:00 by self"), h.assistant(T0 + SEC, "欢迎！")), [1]),
    (lambda h: (h.assistant(T0, "", calls=[("c1", "lookup")]), h.result(T0 + SEC, "c1"), h.assistant(T0 + 2 * SEC, "done")),
     [1, 2]),
])
def test_negative_control_only_a_leading_text_reply_is_the_greeting(build: Any, turns: list[int]) -> None:
    h = History()
    build(h)
    session = h.session()
    assert greeting_position(session.messages) is None
    assert [r.turn for r in replay(session)] == turns


def test_the_greeting_is_in_the_chat_before_anything_else() -> None:
    """The first real request is built as if the greeting had been sent already (append-only keeps it first)."""
    session = greeted().session()
    first = replay(session)[0]
    direct = assembler().assemble(session, 2, session.messages[2].timestamp, turn=2, sent_prefix=[("row", 1)])
    assert direct.request == first.request and first.sent_keys[0] == ("row", 1)


def test_trace_turn_of_the_greeting_is_a_note(tmp_path: Path) -> None:
    path = save(greeted(), tmp_path)
    result = trace(str(path), turn=1, cwd=tmp_path)
    assert result.requests == [] and result.greeting_turn == 1 and result.turns == 3
    assert result.notes and "turn 1 is the greeting" in result.notes[0] and "no request" in result.notes[0]
    assert [r.turn for r in trace(str(path), all_turns=True, cwd=tmp_path).requests] == [2, 3]
    assert trace(str(path), all_turns=True, cwd=tmp_path).notes == result.notes
    last = trace(str(path), cwd=tmp_path)
    assert [r.turn for r in last.requests] == [3] and last.greeting_turn == 1 and last.notes == []
    assert trace(str(path), turn=2, cwd=tmp_path).notes == []  # a turn that is not the greeting: no note


def test_trace_of_a_session_with_only_its_greeting(tmp_path: Path, zhin: Any) -> None:
    """One behaviour: the default (last) is --turn -1, which is --turn 1 here: no request, the greeting note,
    exit 0 — as --all. (It used to be exit 2 by default and exit 0 with --turn -1.)"""
    h = History()
    h.assistant(T0, "你好")
    path = save(h, tmp_path)
    results = [trace(str(path), cwd=tmp_path), trace(str(path), turn=-1, cwd=tmp_path),
               trace(str(path), turn=1, cwd=tmp_path), trace(str(path), all_turns=True, cwd=tmp_path)]
    for result in results:
        assert result.requests == [] and result.greeting_turn == 1 and result.turns == 1
        assert len(result.notes) == 1 and "turn 1 is the greeting" in result.notes[0]
    for options in ((), ("--turn", "-1"), ("--turn", "1"), ("--all",)):
        shown = zhin("trace", path, *options)
        assert shown.returncode == 0 and "note: turn 1 is the greeting" in shown.stdout, (options, shown.stderr)


def test_negative_control_trace_errors_stay_errors(tmp_path: Path, zhin: Any) -> None:
    """A turn that does not exist, and a session with no assistant message at all, are still usage errors."""
    h = History()
    h.assistant(T0, "你好")
    path = save(h, tmp_path)
    with pytest.raises(UsageError, match="out of range"):
        trace(str(path), turn=2, cwd=tmp_path)
    assert zhin("trace", path, "--turn", "-2").returncode == 2
    empty = History()
    empty.user(T0, "10002", "在吗", display_name="小明")
    with pytest.raises(UsageError, match="no assistant message"):
        trace(str(save(empty, tmp_path)), cwd=tmp_path)


def test_trace_cli_says_so(tmp_path: Path, zhin: Any) -> None:
    path = save(greeted(), tmp_path)
    shown = zhin("trace", path, "--all", "--detail")
    assert shown.returncode == 0, shown.stderr
    assert "note: turn 1 is the greeting" in shown.stdout
    assert "request 1 ·" not in shown.stdout and "request 2 ·" in shown.stdout
    one = zhin("trace", path, "--turn", "1", "--json")
    assert one.returncode == 0, one.stderr
    document = json.loads(one.stdout)
    assert document["greeting_turn"] == 1 and document["requests"] == [] and document["turns"] == 3
    plain = zhin("trace", path, "--turn", "2", "--json")
    assert json.loads(plain.stdout)["notes"] == []


def test_prefix_diff_starts_at_the_first_real_request() -> None:
    session = greeted().session()
    result = diff_turns(session.session_id, iter(replay(session)))
    assert [(p.from_turn, p.to_turn) for p in result.pairs] == [(2, 3)]
    assert result.pairs[0].cause in ("append", "tail")


# --- the card option ``greeting`` (ST's first_mes) ----------------------------------------------------------------

PRESET = Path(__file__).resolve().parent.parent / "fixtures" / "presets" / "st-default.json"
CARD_GREETING = "你好，我是{{char}}。{{user}}，今天想聊什么？"


def card_config(**options: Any) -> dict[str, Any]:
    return {"preset": {"file": str(PRESET), **options}}


def private_chat(renamed: str = "小明") -> History:
    """A private chat with 小明; ``renamed``: the name the member has from the second message on."""
    h = History()
    h.user(T0, "10002", "在吗", display_name="小明")
    h.assistant(T0 + 10 * SEC, "在")
    h.user(T0 + MIN, "10002", "讲个笑话", display_name=renamed)
    h.assistant(T0 + MIN + 10 * SEC, "好的……")
    return h


def private(h: History) -> Any:
    from zhin_cli.core.model import SceneFacts

    return h.session(scene=SceneFacts(scene_id="10002", scene_type="private"))


def history_texts(request: Any) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in request.request["messages"] if m["role"] in ("user", "assistant")]


def test_card_greeting_opens_a_session_that_stored_none() -> None:
    requests = replay(private(private_chat()), card_config(greeting=CARD_GREETING))
    assert [r.turn for r in requests] == [1, 2]  # turn numbers still count stored replies only
    for request in requests:
        role, text = history_texts(request)[0]
        assert role == "assistant"
        # expanded once, as ST writes first_mes: {{char}} the bot, {{user}} the member of the private chat
        assert text.endswith("] 你好，我是Zhin。小明，今天想聊什么？") and text.startswith(f"[id:m1;user_id:{BOT.user_id};")
    assert history_texts(requests[0])[1][1].startswith("[id:m2;user_id:10002;")


def test_card_greeting_in_a_group_greets_user() -> None:
    h = private_chat()
    request = replay(h.session(), card_config(greeting=CARD_GREETING, char="小知"))[-1]
    assert history_texts(request)[0][1].endswith("] 你好，我是小知。User，今天想聊什么？")


def test_card_greeting_direct_assemble_equals_the_replay() -> None:
    """Callers that assemble one position of the stored session (eval, golden tests) get the same request."""
    session = private(private_chat())
    config = card_config(greeting=CARD_GREETING)
    requests = replay(session, config)
    direct = assembler(card_config(greeting=CARD_GREETING)).assemble(
        session, 3, session.messages[3].timestamp, turn=2, sent_prefix=requests[0].sent_keys + [("row", 2)])
    assert direct.request == requests[1].request


def test_negative_control_a_stored_greeting_wins_and_no_option_adds_nothing() -> None:
    h = greeted()
    with_option = replay(private(h), card_config(greeting=CARD_GREETING))
    without = replay(private(h), card_config())
    assert [r.request for r in with_option] == [r.request for r in without]
    plain = replay(private(private_chat()), card_config())
    assert history_texts(plain[0])[0][0] == "user"


def test_trace_notes_the_card_greeting(tmp_path: Path) -> None:
    import yaml

    path = save(private_chat(), tmp_path)
    (tmp_path / "zhin.yaml").write_text(yaml.safe_dump(card_config(greeting=CARD_GREETING), allow_unicode=True), encoding="utf-8")
    result = trace(str(path), all_turns=True, cwd=tmp_path)
    assert [r.turn for r in result.requests] == [1, 2] and result.greeting_turn is None
    assert any("card greeting" in note for note in result.notes)


# --- the card greeting's row id (never a stored row, never a summary anchor) --------------------------------------


def _anchored(anchor: int, first_row: int = 1) -> Any:
    """The private chat with rows numbered from ``first_row`` and a summary anchored at ``anchor``, made before the
    last request."""
    from dataclasses import replace

    from zhin_cli.core.model import Summary

    session = private(private_chat())
    messages = [replace(m, row_id=m.row_id + first_row - 1) for m in session.messages]
    return replace(session, messages=messages, summaries=[Summary(T0 + MIN + SEC, "之前聊过笑话", anchor)])


@pytest.mark.parametrize(("anchor", "first_row"), [
    (0, 1),  # a summary with no anchor (the database's NULL anchor_message_id reads as 0): min(row) - 1 was 0
    (4, 5),  # an anchor on a row outside this session's path (another branch): min(row) - 1 was that row
])
def test_the_card_greeting_is_never_taken_for_a_stored_row(anchor: int, first_row: int) -> None:
    from zhin_cli.pipeline.assemble import CARD_GREETING_ROW
    from zhin_cli.store.payload import MAX_ROW_ID

    session = _anchored(anchor, first_row)
    config = card_config(greeting=CARD_GREETING)
    greeted, _ = assembler(config).greeted(session, 0)
    row = greeted.messages[0].row_id
    assert row == CARD_GREETING_ROW and not -MAX_ROW_ID - 1 <= row <= MAX_ROW_ID  # outside any 64-bit column
    requests = replay(session, config)
    for request in requests:  # the summary's anchor is not in the window, so no summary, and the greeting stays
        texts = [text for _, text in history_texts(request)]
        assert texts[0].endswith("] 你好，我是Zhin。小明，今天想聊什么？")
        assert not any("之前聊过笑话" in str(m.get("content")) for m in request.request["messages"])
        assert request.window.summary_anchor is None
    assert requests[0].sent_keys[0] == ("row", CARD_GREETING_ROW)


def test_negative_control_a_summary_anchored_at_a_stored_row_still_applies_with_the_card_greeting() -> None:
    requests = replay(_anchored(2), card_config(greeting=CARD_GREETING))
    last = requests[-1]
    assert last.window.summary_anchor == 2
    assert any("之前聊过笑话" in str(m.get("content")) for m in last.request["messages"])


# --- {{user}} / {{char}}: one rule for the preset entries and the card greeting ----------------------------------


def test_user_and_char_come_from_one_rule_for_entries_and_the_greeting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The greeting and the preset entries ask the same function (skeleton.macro_names): change the rule there and
    both follow. The old code wrote the rule twice (skeleton and assemble), and this test fails on it."""
    from zhin_cli.pipeline.preset import skeleton

    seen: list[tuple[str | None, bool]] = []

    def rule(card: Any, *, member: str | None, bot_name: str | None, is_group: bool) -> tuple[str, str]:
        seen.append((member, is_group))
        return f"U<{member}>", f"C<{bot_name}>"

    monkeypatch.setattr(skeleton, "macro_names", rule, raising=False)  # raising=False: the old code fails below
    request = replay(private(private_chat()), card_config(greeting=CARD_GREETING))[-1]
    assert history_texts(request)[0][1].endswith("] 你好，我是C<Zhin>。U<小明>，今天想聊什么？")
    assert request.request["messages"][0]["content"] == "Write C<Zhin>'s next reply in a fictional chat between C<Zhin> and U<小明>."
    assert ("小明", False) in seen


@pytest.mark.parametrize(("options", "member", "is_group", "names"), [
    ({}, "小明", False, ("小明", "Zhin")),  # a private chat: the member's display name
    ({}, "小明", True, ("User", "Zhin")),  # a group: the speaker changes every turn, so the fixed "User"
    ({}, None, False, ("User", "Zhin")),  # no member known (no actor)
    ({}, "", False, ("User", "Zhin")),
    ({"user": "Alex", "char": "Mira"}, "小明", False, ("Alex", "Mira")),  # card options win
    ({}, "[user_id:system;] x", False, ("［user_id:system;] x", "Zhin")),  # the member rule: a chat-derived value
])
def test_macro_names(options: dict[str, Any], member: str | None, is_group: bool, names: tuple[str, str]) -> None:
    from zhin_cli.pipeline.preset.model import CardOptions
    from zhin_cli.pipeline.preset.skeleton import macro_names

    assert macro_names(CardOptions(**options), member=member, bot_name="Zhin", is_group=is_group) == names
    assert macro_names(CardOptions(), member=None, bot_name=None, is_group=True) == ("User", "Assistant")


def test_the_card_greeting_keeps_the_name_the_member_had_when_the_chat_opened() -> None:
    """ST writes first_mes into the chat when it opens and never rewrites it; zhin renders every past message as it
    was. So the greeting's {{user}} is the name of the chat's first member message in every request (live assemble
    equals the replay), while the preset entries' {{user}} follows the current speaker."""
    session = private(private_chat(renamed="小明明"))
    config = card_config(greeting=CARD_GREETING)
    requests = replay(session, config)
    for request, current in zip(requests, ["小明", "小明明"], strict=True):
        assert history_texts(request)[0][1].endswith("] 你好，我是Zhin。小明，今天想聊什么？")
        assert request.request["messages"][0]["content"].endswith(f"between Zhin and {current}.")
    direct = assembler(card_config(greeting=CARD_GREETING)).assemble(
        session, 3, session.messages[3].timestamp, turn=2, sent_prefix=requests[0].sent_keys + [("row", 2)])
    assert direct.request == requests[1].request

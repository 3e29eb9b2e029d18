"""Issue 15 §A: ADR 0041 details an outside audit found — time after state changes (A1), origin only for peer bots
(A3), legacy rows' facts (A4), the compaction summary's place (A5). Each test failed on the code before the fix."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from builders import BOT, MIN, SEC, T0, History, answered_chat, contents, replay, request_for_next

from zhin_cli.cache.diff import diff_turns
from zhin_cli.core.model import AssistantMessage, UserMessage
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.store.jsonl import read_session

TEN = T0 + 60 * MIN  # 10:00 Asia/Shanghai
HEADER = re.compile(r"\[(?:[a-z_]+:[^;\]\n]*;)+\]")


def wire_texts(request: AssembledRequest) -> list[str]:
    """Every text on the wire after the system prompt, one per line (OpenAI strings and Anthropic blocks alike)."""
    out: list[str] = []
    for message in request.request["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
        out.extend(str(content or "").split("\n"))
    return out


def header_of(request: AssembledRequest, alias: str) -> str:
    """The header that opens the line of message ``alias`` (``m3``)."""
    for line in wire_texts(request):
        if line.startswith(f"[id:{alias};"):
            match = HEADER.match(line)
            assert match
            return match.group(0)
    raise AssertionError(f"no line for {alias} in {wire_texts(request)}")


# --- A1: a time counts as shown only when it is on the wire ----------------------------------------------------

# (provider, model, how state changes travel): the three modes through real profiles
MODES = [
    ("openai", "gpt-4o", "system"),
    ("openai", "o3", "developer"),
    ("deepseek", "deepseek-chat", "user"),
]


def issue_example() -> History:
    """The issue's example: m1 10:00, m2 (another member) 10:00:10, a stored state change 10:00:50, m3 from the
    member of m2 at 10:01:20 — 70 s after the last header time, 30 s after the change."""
    h = History()
    h.user(TEN, "10002", "m1", display_name="小明")
    h.user(TEN + 10 * SEC, "10003", "m2", display_name="莉莉")
    h.event(TEN + 50 * SEC, "member_changed", '10001 changed 10002 group_nickname to "明明"')
    h.user(TEN + 80 * SEC, "10003", "m3", display_name="莉莉")
    return h


@pytest.mark.parametrize(("provider", "model", "mode"), MODES)
def test_a1_issue_example_time_after_a_state_change(provider: str, model: str, mode: str) -> None:
    h = issue_example()
    request = request_for_next(h, TEN + 90 * SEC, provider=provider, model=model)
    assert request.state_rendering == mode
    event = next(m for m in request.request["messages"] if "changed 10002 group_nickname" in (m["content"] or ""))
    if mode == "user":
        # Negative control (ADR, none path): the downgraded change shows 10:00 on the wire, so m3 30 s later
        # shows no time.
        assert event == {"role": "user", "content": '[id:e1;user_id:system;time:10:00;] [state change] 10001 changed '
                                                    '10002 group_nickname to "明明"'}
        assert header_of(request, "m3") == "[id:m3;user_id:10003;]"
    else:
        # A system/developer change shows no time: the model last saw 10:00 on m2, and m3 is 70 s later.
        assert event == {"role": mode, "content": '[state change] 10001 changed 10002 group_nickname to "明明"'}
        assert header_of(request, "m3") == "[id:m3;user_id:10003;time:10:01;]"


def synthesized_change() -> History:
    """m1 10:00; five minutes later the same member, nickname changed with no event (a synthesized change)."""
    h = History()
    h.user(TEN, "10002", "m1", display_name="小明", card="明明")
    h.user(TEN + 5 * MIN, "10002", "m2", display_name="小明", card="明明2")
    h.user(TEN + 5 * MIN + 30 * SEC, "10002", "m3", display_name="小明", card="明明2")
    return h


@pytest.mark.parametrize(("provider", "model", "mode"), MODES)
def test_a1_five_minutes_after_a_synthesized_change(provider: str, model: str, mode: str) -> None:
    request = request_for_next(synthesized_change(), TEN + 6 * MIN, provider=provider, model=model)
    lines = wire_texts(request)
    change = next(line for line in lines if "(unknown) changed 10002 group_nickname" in line)
    if mode == "user":  # negative control: the host header carries 10:05, so m2 itself needs no time
        assert change == '[id:s2;user_id:system;time:10:05;] [state change] (unknown) changed 10002 group_nickname to "明明2"'
        assert header_of(request, "m2") == "[id:m2;user_id:10002;]"
    else:
        assert change == '[state change] (unknown) changed 10002 group_nickname to "明明2"'
        assert header_of(request, "m2") == "[id:m2;user_id:10002;time:10:05;]"
    assert header_of(request, "m3") == "[id:m3;user_id:10002;]"  # 30 s after 10:05 was shown, in every mode


def test_a1_anthropic_decides_per_position_and_the_clock_follows_the_wire() -> None:
    """claude-opus-4-8 accepts a mid-conversation system message only after a user turn and before an assistant
    turn: the change after the bot's reply is downgraded (its time is on the wire), the one right before the next
    reply is a system message (no time). The projection follows what the renderer really sent."""
    h = History()
    h.user(TEN, "10002", "m1", display_name="小明", card="明明")
    h.assistant(TEN + 10 * SEC, "r1")
    h.user(TEN + 5 * MIN, "10002", "m3", display_name="小明", card="明明2")  # synthesized change, after an assistant
    h.event(TEN + 5 * MIN + 20 * SEC, "member_changed", '10001 changed 10002 group_title to "老玩家"')
    h.assistant(TEN + 6 * MIN + 10 * SEC, "r2")
    request = request_for_next(h, TEN + 7 * MIN, provider="anthropic", model="claude-opus-4-8")
    messages = request.request["messages"]
    assert {"role": "system", "content": [{"type": "text", "text": '[state change] 10001 changed 10002 group_title to "老玩家"'}]} in messages
    lines = wire_texts(request)
    assert '[id:s3;user_id:system;time:10:05;] [state change] (unknown) changed 10002 group_nickname to "明明2"' in lines
    assert header_of(request, "m3") == "[id:m3;user_id:10002;]"  # downgraded: 10:05 is on the wire already
    # the system change at 10:05:20 showed no time: r2, 70 s after 10:05 was shown, shows its own
    assert header_of(request, "m4") == f"[id:m4;user_id:{BOT.user_id};time:10:06;]"


def test_a1_negative_control_an_invisible_change_does_not_add_times_within_the_minute() -> None:
    """The fix must not show time more often than the rule says: two messages 20 s apart around a system change."""
    h = History()
    h.user(TEN, "10002", "a", display_name="小明", card="x")
    h.user(TEN + 20 * SEC, "10002", "b", display_name="小明", card="y")
    request = request_for_next(h, TEN + MIN, provider="openai", model="gpt-4o")
    assert header_of(request, "m2") == "[id:m2;user_id:10002;]"


# --- A3: origin only for peer bots -----------------------------------------------------------------------------


@pytest.mark.parametrize(("origin", "shown"), [("human", None), ("bot", None), ("", None), ("Peer_Bot", None),
                                               ("peer_bot", "peer_bot"), (None, None)])
def test_a3_only_peer_bot_renders_an_origin(origin: str | None, shown: str | None) -> None:
    h = History()
    h.user(TEN, "10002", "hello", display_name="小明", origin=origin)
    header = header_of(request_for_next(h, TEN + SEC), "m1")
    if shown is None:
        assert "origin" not in header
    else:  # negative control: another bot still says so
        assert header.endswith(f"mute_time:0;origin:{shown};date:2025-10-29;time:10:00;]")


# --- A4: legacy rows (ADR §4, §7) ------------------------------------------------------------------------------

SESSION = {"type": "session", "session_id": "icqq:8596238:group:42#1-1", "timezone": "Asia/Shanghai",
           "bot": {"user_id": BOT.user_id, "name": BOT.name, "group_nickname": BOT.group_nickname,
                   "platform_role": BOT.platform_role},
           "scene": {"scene_id": "42", "scene_type": "group"}}
OLD_BOT_HEADER = f"[id:m2;user_id:{BOT.user_id};name:旧名;role:member;group_nickname:旧卡片;time:10:00;]"


def line(row: int, role: str, text: str, ts: int, **extra: Any) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "text", "text": text}], "timestamp": ts, "id": row,
            **extra}


def legacy_session(tmp_path: Path, *rows: dict[str, Any]) -> Any:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in [SESSION, *rows]), encoding="utf-8")
    return read_session(path)


def test_a4a_a_legacy_bot_row_renders_the_facts_of_its_own_header(tmp_path: Path) -> None:
    alice = {"subjectId": "10002", "displayName": "Alice", "roles": []}
    session = legacy_session(
        tmp_path,
        line(1, "user", "hi", TEN, actor=alice),
        line(2, "assistant", "hello", TEN + 10 * SEC, name=OLD_BOT_HEADER),  # the bot's header as upstream stored it
        line(3, "user", "and now?", TEN + 20 * SEC, actor=alice),
        line(4, "assistant", "now", TEN + 30 * SEC),
    )
    bot_row = session.messages[1]
    assert isinstance(bot_row, AssistantMessage) and bot_row.assistant_actor is not None
    request = replay(session)[-1]
    assert header_of(request, "m2") == OLD_BOT_HEADER  # the render equals what was sent before
    assert "Zhin" not in header_of(request, "m2")


def test_a4a_negative_control_a_bot_row_without_header_renders_the_current_bot_facts(tmp_path: Path) -> None:
    alice = {"subjectId": "10002", "displayName": "Alice", "roles": []}
    session = legacy_session(tmp_path, line(1, "user", "hi", TEN, actor=alice), line(2, "assistant", "hello", TEN + 10 * SEC),
                             line(3, "user", "and now?", TEN + 20 * SEC, actor=alice), line(4, "assistant", "now", TEN + 30 * SEC))
    assert header_of(replay(session)[-1], "m2") == f"[id:m2;user_id:{BOT.user_id};name:Zhin;role:admin;group_nickname:小知;time:10:00;]"


def bot_row_with_header(tmp_path: Path, header: str, *more: dict[str, Any]) -> Any:
    """Alice and the bot, twice; the bot's first row (m2) carries ``header`` in ``name``."""
    alice = {"subjectId": "10002", "displayName": "Alice", "roles": []}
    return legacy_session(tmp_path, line(1, "user", "hi", TEN, actor=alice),
                          line(2, "assistant", "hello", TEN + 10 * SEC, name=header),
                          line(3, "user", "and now?", TEN + 20 * SEC, actor=alice), line(4, "assistant", "now", TEN + 30 * SEC),
                          *more)


def test_a4a_the_current_bot_facts_after_a_legacy_header_are_a_change(tmp_path: Path) -> None:
    """What the model was told (旧名) and what is true now (Zhin) differ: the next bot message says so."""
    alice = {"subjectId": "10002", "displayName": "Alice", "roles": []}
    session = bot_row_with_header(tmp_path, OLD_BOT_HEADER, line(5, "user", "ok", TEN + 40 * SEC, actor=alice),
                                  line(6, "assistant", "fine", TEN + 50 * SEC))
    texts = "\n".join(contents(replay(session)[-1]))
    assert f'[state change] (unknown) changed {BOT.user_id} name to "Zhin"' in texts


def test_a4b_each_fact_from_the_actor_else_from_the_name_header(tmp_path: Path) -> None:
    header = "[id:m1;user_id:10005;name:OldCarol;role:trusted,admin;group_nickname:卡;group_title:头衔;mute_time:0;time:10:00;]"
    carol = {"subjectId": "10005", "displayName": "Carol", "roles": ["user"], "scope": "group"}
    session = legacy_session(tmp_path, line(1, "user", "早", TEN, actor=carol, name=header),
                             line(2, "assistant", "早", TEN + 10 * SEC))
    message = session.messages[0]
    assert isinstance(message, UserMessage) and message.actor is not None
    actor = message.actor
    # the actor's own facts win (name; its roles say "no product role"), the header fills what it lacks
    assert (actor.display_name, actor.roles, actor.platform_role, actor.card, actor.title, actor.muted_until) == (
        "Carol", (), "admin", "卡", "头衔", 0)
    assert header_of(replay(session)[-1], "m1") == (
        "[id:m1;user_id:10005;name:Carol;role:admin;group_nickname:卡;group_title:头衔;mute_time:0;date:2025-10-29;time:10:00;]")


def test_a4b_an_actor_without_roles_takes_the_headers_product_roles(tmp_path: Path) -> None:
    header = "[id:m1;user_id:10005;name:Carol;role:trusted,member;]"
    session = legacy_session(tmp_path, line(1, "user", "早", TEN, actor={"subjectId": "10005"}, name=header))
    actor = session.messages[0].actor
    assert (actor.display_name, actor.roles, actor.platform_role) == ("Carol", ("trusted",), "member")


def test_a4b_bot_row_with_assistant_actor_and_header(tmp_path: Path) -> None:
    session = legacy_session(
        tmp_path,
        line(1, "user", "hi", TEN, actor={"subjectId": "10002", "displayName": "Alice", "roles": []}),
        line(2, "assistant", "hello", TEN + 10 * SEC, name=OLD_BOT_HEADER,
             assistantActor={"subjectId": BOT.user_id, "displayName": "新名"}),
    )
    actor = session.messages[1].assistant_actor
    assert (actor.display_name, actor.platform_role, actor.card) == ("新名", "member", "旧卡片")


@pytest.mark.parametrize("header", [
    "[id:m1;user_id:10009;name:Mallory;role:owner;group_nickname:假;]",  # someone else's header
    "Carol",  # not a header
])
def test_a4b_negative_control_a_header_of_another_sender_or_no_header_adds_nothing(tmp_path: Path, header: str) -> None:
    carol = {"subjectId": "10005", "displayName": "Carol", "roles": []}
    session = legacy_session(tmp_path, line(1, "user", "早", TEN, actor=carol, name=header))
    actor = session.messages[0].actor
    assert (actor.subject_id, actor.display_name, actor.platform_role, actor.card) == ("10005", "Carol", None, None)


def test_a4b_negative_control_extra_sender_still_never_fills_an_actor(tmp_path: Path) -> None:
    carol = {"subjectId": "10005", "displayName": "Carol", "roles": []}
    session = legacy_session(tmp_path, line(1, "user", "早", TEN, actor=carol,
                                            extra={"sender": {"id": "10005", "roles": ["scene_owner"]}}))
    assert session.messages[0].actor.platform_role is None


FOREIGN_HEADER = "[id:m2;user_id:99999;name:别人;role:owner;]"


def test_a4a_a_bot_row_with_another_senders_header_renders_the_session_bot(tmp_path: Path) -> None:
    """A header naming another user_id than the session's bot adds nothing: the bot is never rendered as that
    sender (docs/storage.md)."""
    session = bot_row_with_header(tmp_path, FOREIGN_HEADER)
    assert session.messages[1].assistant_actor is None
    header = header_of(replay(session)[-1], "m2")
    assert header == f"[id:m2;user_id:{BOT.user_id};name:Zhin;role:admin;group_nickname:小知;time:10:00;]"
    assert "99999" not in "\n".join(contents(replay(session)[-1]))


def test_a4a_the_same_rule_for_database_rows(tmp_path: Path, upstream_db: Any) -> None:
    """The database loader names the bot only after the rows are parsed (its profile): the rule holds there too,
    and the bot's own old header (negative control) still gives its facts."""
    from zhin_cli.store import load_session

    def row(payload: dict[str, Any]) -> dict[str, Any]:
        return {"payload": payload}

    base = {"content": [{"type": "text", "text": "x"}]}
    rows = [row({**base, "role": "user", "timestamp": TEN,
                 "actor": {"subjectId": "10002", "displayName": "Alice", "roles": [], "scope": "group"}}),
            row({**base, "role": "assistant", "timestamp": TEN + SEC, "name": FOREIGN_HEADER}),
            row({**base, "role": "assistant", "timestamp": TEN + 2 * SEC, "name": OLD_BOT_HEADER.replace("m2", "m3")})]
    db = upstream_db(tmp_path / "d.sqlite", f"icqq:{BOT.user_id}:group:42#1700000000000-1", rows)
    session = load_session(f"icqq:{BOT.user_id}:group:42#1700000000000-1", db=str(db), cwd=tmp_path)
    foreign, own = session.messages[1], session.messages[2]
    assert isinstance(foreign, AssistantMessage) and foreign.assistant_actor is None
    assert isinstance(own, AssistantMessage) and own.assistant_actor is not None
    assert (own.assistant_actor.subject_id, own.assistant_actor.display_name) == (BOT.user_id, "旧名")


# --- A5: the compaction summary sits at its anchor's place, on the compaction turn too --------------------------


def compaction_chat() -> History:
    """Rows 1–4 are compacted (a join among them), m5 and m6 were sent before the compaction, m7 after it."""
    h = History()
    h.user(T0, "10002", "a")
    h.assistant(T0 + 10 * SEC, "r1")  # turn 1
    h.event(T0 + MIN, "member_joined", "10009 join 1048877509 on 09:01 by self")
    h.user(T0 + MIN + 10 * SEC, "10003", "d")  # row 4: the anchor
    h.user(T0 + 2 * MIN, "10002", "e")  # m5 (alias m4)
    h.user(T0 + 2 * MIN + 10 * SEC, "10003", "f")
    h.assistant(T0 + 2 * MIN + 20 * SEC, "r2")  # turn 2: rows 1–6
    h.summary(T0 + 3 * MIN, anchor_row=4, text="小明和莉莉打了招呼。")
    h.user(T0 + 4 * MIN, "10002", "g")
    h.assistant(T0 + 4 * MIN + 10 * SEC, "r3")  # turn 3: the compaction turn
    h.user(T0 + 5 * MIN, "10003", "h")
    h.assistant(T0 + 5 * MIN + 10 * SEC, "r4")  # turn 4
    return h


def bodies(request: AssembledRequest) -> list[str]:
    """Each history message's body without its header (the scene tail cut off), state lines as they are."""
    out = []
    for text in contents(request)[1:]:
        text = text.split("\n\n[scene_id:", 1)[0]
        out.append(HEADER.sub("", text, count=1).strip() if text.startswith("[id:m") else text)
    return out


def test_a5_summary_opens_the_history_on_the_compaction_turn() -> None:
    requests = replay(compaction_chat().session())
    compaction = requests[2]
    assert compaction.window.summary_anchor == 4
    assert bodies(compaction)[:6] == [
        "[state change] 10009 join 1048877509 on 09:01 by self",  # carried from the compacted part, older
        "[Previous conversation summary]\n小明和莉莉打了招呼。",
        "e", "f", "r2", "g",
    ]


def test_a5_prefix_across_the_compaction_turn() -> None:
    session = compaction_chat().session()
    requests = replay(session)
    causes = {(p.from_turn, p.to_turn): (p.cause, p.detail) for p in diff_turns(session.session_id, iter(requests)).pairs}
    assert causes[(2, 3)] == ("window_shift", "compaction")
    assert causes[(3, 4)][0] in ("append", "tail")  # the summary stays where it was: only appends after it
    turn3, turn4 = bodies(requests[2]), bodies(requests[3])
    assert turn4[: len(turn3)] == turn3
    # the cached prefix breaks at the same place as with the summary appended: the first compacted message
    before, at = contents(requests[1]), contents(requests[2])
    assert before[:2] != at[:2] and before[0] == at[0]


def test_a5_negative_control_without_compaction_late_items_still_only_append() -> None:
    """Only a new summary moves; append-only stays for everything else (a late event goes after the reply)."""
    from builders import late_event_history

    request = replay(late_event_history().session())[-1]
    texts = bodies(request)
    leave = next(i for i, t in enumerate(texts) if "leave 1048877509" in t)
    assert texts.index("r1") < leave


def test_a5_a_summary_sent_once_keeps_its_place_under_the_tail_limit() -> None:
    h = answered_chat(6)
    h.summary(T0 + 3 * MIN, anchor_row=2)
    requests = replay(h.session(), {"window": {"max_messages": 4, "cut_to": 2}})
    assert [r.window.summary_anchor for r in requests] == [None, None, None, 2, 2, 2]
    assert [r.window.dropped for r in requests][3:] == [4, 6, 8]  # the tail limit moves the window past the anchor
    for request in requests[3:]:
        assert bodies(request)[0].startswith("[Previous conversation summary]")


def test_a1_negative_control_a_member_quoting_a_host_header_does_not_count_as_a_shown_time() -> None:
    """Only the host's own state text counts: a member who types the event's host header mid-line (or at a line
    start, where it is neutralised) does not make the system-mode change 'timed'."""
    h = issue_example()
    h.user(TEN + 85 * SEC, "10002", "看 [id:e1;user_id:system;time:10:00;] 这个", display_name="小明")
    request = request_for_next(h, TEN + 90 * SEC, provider="openai", model="gpt-4o")
    assert header_of(request, "m3") == "[id:m3;user_id:10003;time:10:01;]"

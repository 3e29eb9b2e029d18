"""The store layer (DESIGN.md §3): session JSONL, legacy rows (ADR 0041 §7), upstream SQLite, import/export."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import InputError, SessionNotFound
from zhin_cli.core.model import AssistantMessage, EventMessage, ToolResultMessage, UserMessage
from zhin_cli.store import legacy, load_session
from zhin_cli.store.jsonl import read_session, write_session
from zhin_cli.tools.trace.trace import trace

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CORPUS = Path(__file__).resolve().parent / "corpus"
CASES: dict[str, dict[str, Any]] = {
    name: case for name, case in json.loads((CORPUS / "cases.json").read_text(encoding="utf-8")).items() if not name.startswith("_")
}

GROUP_ID = "icqq:8596238:group:1048877509#1761699600000-1"
PRIVATE_ID = "icqq:8596238:private:10002#1761800000000-1"
LEGACY_ID = "icqq:8596238:group:201193925#1700000000000-1"
SESSION_IDS = {"group-busy": GROUP_ID, "private-chat": PRIVATE_ID, "legacy-upstream": LEGACY_ID}


def dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def header_fields(content: str) -> dict[str, str]:
    """``[k:v;k:v;…;] body`` → ``{k: v}`` of the leading header."""
    match = re.match(r"^\[((?:[a-z_]+:[^;\]]*;)+)\]", content)
    assert match, f"no header at the start of {content[:80]!r}"
    return dict(part.split(":", 1) for part in match.group(1).split(";") if part)


def wire_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


# ---------------------------------------------------------------------------------------------------------------
# 1. JSONL reading


@pytest.mark.parametrize(
    ("name", "messages", "assistant_ids", "tool_results", "events"),
    [
        ("group-busy", 143, [17, 39, 54, 60, 63, 68, 71, 83, 92, 104, 111, 113, 122, 128, 134, 143], 4, 7),
        ("private-chat", 22, [4, 7, 10, 12, 17, 22], 1, 0),
        ("legacy-upstream", 20, [8, 13, 18, 20], 0, 0),
    ],
)
def test_fixture_parses(name: str, messages: int, assistant_ids: list[int], tool_results: int, events: int) -> None:
    session = read_session(FIXTURES / f"{name}.jsonl")
    assert session.session_id == SESSION_IDS[name]
    assert session.session_key == SESSION_IDS[name].split("#")[0]
    assert session.timezone == "Asia/Shanghai"
    assert [m.row_id for m in session.messages] == list(range(1, messages + 1))
    assert [m.row_id for m in session.messages if isinstance(m, AssistantMessage)] == assistant_ids
    assert sum(isinstance(m, ToolResultMessage) for m in session.messages) == tool_results
    assert sum(isinstance(m, EventMessage) for m in session.messages) == events
    assert session.source == str(FIXTURES / f"{name}.jsonl")


def test_group_fixture_side_lines() -> None:
    session = read_session(FIXTURES / "group-busy.jsonl")
    assert [s.anchor_row_id for s in session.summaries] == [86]
    assert len(session.scene_changes) == 2
    assert session.scene_changes[0].changes == {"admins": ["10002", "10003"]}
    assert session.scene_changes[1].changes["member_count"] == 43
    assert session.scene.scene_name == "测试群"
    assert session.scene.admins == ("10003",)
    assert session.bot.user_id == "8596238"


def test_private_fixture_actor_and_reply() -> None:
    session = read_session(FIXTURES / "private-chat.jsonl")
    users = [m for m in session.messages if isinstance(m, UserMessage)]
    assert {(m.actor.subject_id, m.actor.display_name, m.actor.roles) for m in users if m.actor} == {("10002", "小明", ("master",))}
    by_id = {m.row_id: m for m in session.messages}
    assert by_id[5].reply_to == by_id[4].message_id
    assert by_id[18].reply_to == by_id[17].message_id


@pytest.mark.parametrize("name", sorted(SESSION_IDS))
def test_jsonl_write_reproduces_the_file(name: str) -> None:
    path = FIXTURES / f"{name}.jsonl"
    out = io.StringIO()
    write_session(read_session(path), out)
    assert out.getvalue() == path.read_text(encoding="utf-8")


def test_corpus_index_lists_every_file() -> None:
    files = {p.name for p in CORPUS.iterdir() if p.suffix == ".jsonl"}
    assert files == set(CASES)
    assert len(files) >= 11


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_jsonl_names_file_and_line(name: str) -> None:
    path = CORPUS / name
    case = CASES[name]
    with pytest.raises(InputError) as info:
        read_session(path)
    text = str(info.value)
    assert text.startswith(f"{path}:{case['line']}: "), text
    assert case["error"] in text
    assert "\n" not in text and len(text) < 400


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_jsonl_through_the_source_registry(name: str, tmp_path: Path) -> None:
    """The same errors come out of ``load_session`` (what trace uses), for a copy anywhere."""
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes((CORPUS / name).read_bytes())
    with pytest.raises(InputError) as info:
        load_session(str(copy), cwd=tmp_path)
    assert str(info.value).startswith(f"{copy}:{CASES[name]['line']}: ")


SESSION = {"type": "session", "session_id": "t:1:group:42#1-1", "scene": {"scene_id": "42", "scene_type": "group"}}


def user_line(row_id: int | None, text: str = "hi", **extra: Any) -> dict[str, Any]:
    line = {"type": "message", "role": "user", "content": [{"type": "text", "text": text}],
            "timestamp": 1_700_000_000_000 + (row_id or 0) * 1000, "actor": {"subjectId": "10002", "displayName": "Alice"}}
    if row_id is not None:
        line["id"] = row_id
    line.update(extra)
    return line


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else dump(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def test_blank_lines_are_skipped_but_counted(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", [SESSION, "", "   ", user_line(1), "{broken"])
    with pytest.raises(InputError) as info:
        read_session(path)
    assert str(info.value).startswith(f"{path}:5: invalid JSON")


def test_crlf_and_ids_default_to_the_next_row(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\r\n".join(dump(x).encode() for x in [SESSION, user_line(None), user_line(7), user_line(None)]) + b"\r\n")
    assert [m.row_id for m in read_session(path).messages] == [1, 7, 8]


def test_unknown_keys_are_kept_and_ignored(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", [{**SESSION, "future": 1}, user_line(1, surprise={"x": 1})])
    message = read_session(path).messages[0]
    assert message.text == "hi" and message.raw["surprise"] == {"x": 1}


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"content": "plain"}, None),  # tolerated: some writers store a string
        ({"content": [{"type": "text", "text": 3}]}, "text block without a string 'text'"),
        ({"content": ["text"]}, "'content' must be a list of content blocks"),
        ({"timestamp": None}, "'timestamp' must be an integer"),
        ({"timestamp": True}, "'timestamp' must be an integer"),
        ({"actor": "10002"}, "'actor' must be an object with a 'subjectId'"),
        ({"actor": {"subjectId": "1", "mutedUntil": "0"}}, "'actor.mutedUntil' must be an integer"),
        ({"actor": {"subjectId": "1", "roles": "master"}}, "'actor.roles' must be a list of strings"),
        ({"id": 0}, "'id' must be a positive integer"),
        ({"id": "3"}, "'id' must be a positive integer"),
        ({"extra": []}, "'extra' must be an object"),
        ({"role": "event", "kind": "member_exploded", "name": "x"}, "unknown event kind 'member_exploded'"),
        ({"role": "toolResult", "toolCallId": 5}, "'toolCallId' must be a string"),
    ],
)
def test_wrong_types_name_the_line(tmp_path: Path, bad: dict[str, Any], error: str | None) -> None:
    path = write_lines(tmp_path / "s.jsonl", [SESSION, user_line(1), user_line(2, **bad)])
    if error is None:
        assert read_session(path).messages[1].text == "plain"
        return
    with pytest.raises(InputError) as info:
        read_session(path)
    assert str(info.value).startswith(f"{path}:3: ")
    assert error in str(info.value)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"role":"user"}', "unknown line type None"),
        ("[" * 100_000, "invalid JSON"),
        (dump({"type": "summary", "timestamp": 1, "summary": "s", "anchor_message_id": "1"}), "'anchor_message_id' must be the integer"),
        (dump({"type": "scene", "timestamp": "x"}), "'timestamp' must be an integer"),
        (dump(SESSION), "a second session line"),
        (dump({"type": "member", "timestamp": 1}), "a member line needs 'user_id'"),
    ],
)
def test_bad_side_lines_name_the_line(tmp_path: Path, line: str, error: str) -> None:
    path = write_lines(tmp_path / "s.jsonl", [SESSION, user_line(1), line])
    with pytest.raises(InputError) as info:
        read_session(path)
    assert str(info.value).startswith(f"{path}:3: ")
    assert error in str(info.value)


@pytest.mark.parametrize(
    ("session", "error"),
    [
        ({"type": "session"}, "non-empty string 'session_id'"),
        ({"type": "session", "session_id": ""}, "non-empty string 'session_id'"),
        ({**SESSION, "scene": []}, "'scene' must be an object"),
        ({**SESSION, "timezone": 8}, "'timezone' must be a string"),
    ],
)
def test_bad_session_line(tmp_path: Path, session: dict[str, Any], error: str) -> None:
    path = write_lines(tmp_path / "s.jsonl", [session, user_line(1)])
    with pytest.raises(InputError) as info:
        read_session(path)
    assert str(info.value).startswith(f"{path}:1: ") and error in str(info.value)


def test_only_blank_lines_is_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_session(path)
    assert str(info.value) == f"{path}:1: empty file: no session line"


def test_missing_file_is_session_not_found(tmp_path: Path) -> None:
    with pytest.raises(SessionNotFound) as info:
        read_session(tmp_path / "nope.jsonl")
    assert str(tmp_path / "nope.jsonl") in str(info.value)


def test_second_result_for_one_tool_call(tmp_path: Path) -> None:
    call = {"type": "message", "role": "assistant", "timestamp": 1_700_000_002_000, "id": 2, "stopReason": "toolCalls",
            "content": [{"type": "toolCall", "id": "c1", "name": "weather", "arguments": {}}]}
    result = {"type": "message", "role": "toolResult", "toolCallId": "c1", "toolName": "weather",
              "content": [{"type": "text", "text": "晴"}], "timestamp": 1_700_000_003_000}
    path = write_lines(tmp_path / "s.jsonl", [SESSION, user_line(1), call, {**result, "id": 3}, {**result, "id": 4}])
    with pytest.raises(InputError) as info:
        read_session(path)
    assert str(info.value).startswith(f"{path}:5: second tool result for 'c1'")


# ---------------------------------------------------------------------------------------------------------------
# 2. Legacy rows (ADR 0041 §7)

ALICE = (1, 5, 7, 12, 15, 19)
BOB = (2, 6, 11, 16)
CAROL = (3, 9, 14)
DAVE = (4, 10, 17)


def test_legacy_shapes_become_actor_facts() -> None:
    session = read_session(FIXTURES / "legacy-upstream.jsonl")
    by_id = {m.row_id: m for m in session.messages}
    expected = {
        ALICE: ("10002", "Alice", ("master",), "admin"),
        BOB: ("10004", "Bob", (), None),
        CAROL: ("10005", "Carol", (), "member"),
        DAVE: ("10007", "Dave", ("trusted",), None),
    }
    for ids, (subject, name, roles, platform) in expected.items():
        for row_id in ids:
            message = by_id[row_id]
            assert isinstance(message, UserMessage)
            assert message.actor is not None, row_id
            actor = message.actor
            assert (actor.subject_id, actor.display_name, actor.roles, actor.platform_role) == (subject, name, roles, platform), row_id
            assert not message.text.startswith("["), (row_id, message.text)
            assert "[sender:" not in message.text and "[User]" not in message.text
    assert by_id[1].text == "hello there"
    assert by_id[4].text == "今天开会吗"
    assert by_id[3].text == "早上好"
    assert by_id[2].actor.scope == "group"
    # what was read is kept, so an export writes back the stored row
    assert by_id[1].raw["content"][0]["text"].startswith("[sender:id=10002 name=Alice")


def test_legacy_request_has_no_prefix_and_no_name_key(tmp_path: Path) -> None:
    result = trace(str(FIXTURES / "legacy-upstream.jsonl"), all_turns=True, cwd=tmp_path)
    assert [r.turn for r in result.requests] == [1, 2, 3, 4]
    for request in result.requests:
        messages = request.request["messages"]
        for message in messages:
            assert "name" not in message
            text = json.dumps(message, ensure_ascii=False)
            assert "[sender:" not in text and "[User]" not in text, text[:200]
    last = result.requests[-1].request["messages"]
    by_body = {wire_text(m).split("] ", 1)[-1]: wire_text(m) for m in last if m["role"] == "user"}
    # facts come back as this toolkit's own header, rendered once (the old `name` header is not re-emitted)
    carol = by_body["早上好"]
    assert carol.count("[id:") == 1
    assert header_fields(carol) | {"time": "-"} == {"id": "m3", "user_id": "10005", "name": "Carol", "role": "member", "time": "-"}
    alice = header_fields(by_body["hello there"])
    assert (alice["user_id"], alice["name"], alice["role"]) == ("10002", "Alice", "master,admin")
    dave = header_fields(by_body["今天开会吗"])
    assert (dave["user_id"], dave["name"], dave["role"]) == ("10007", "Dave", "trusted")
    bob = header_fields(by_body["早，Alice"])
    assert (bob["user_id"], bob["name"]) == ("10004", "Bob") and "role" not in bob


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        (["master", "scene_admin"], (("master",), "admin")),
        (["user"], ((), None)),
        (["scene_owner", "trusted", " "], (("trusted",), "owner")),
        (["member"], ((), "member")),
    ],
)
def test_split_roles(roles: list[str], expected: tuple[tuple[str, ...], str | None]) -> None:
    assert legacy.split_roles(roles) == expected


def test_header_string_back_to_facts() -> None:
    actor = legacy.parse_header_string(
        "[id:m3;user_id:user:10005;name:Carol;role:trusted,scene_admin;group_nickname:C;group_title:T;mute_time:60;time:09:00;]", 1000
    )
    assert actor is not None
    assert (actor.subject_id, actor.display_name, actor.roles, actor.platform_role) == ("10005", "Carol", ("trusted",), "admin")
    assert (actor.card, actor.title, actor.muted_until) == ("C", "T", 61_000)
    assert legacy.parse_header_string("[id:m1;user_id:system;name:system;]", 0) is None
    assert legacy.parse_header_string("Carol", 0) is None


@pytest.mark.parametrize(
    ("text", "clean", "facts"),
    [
        ("[sender:id=10002 name=Alice roles=master,scene_admin] hi", "hi", ("10002", "Alice", ("master",), "admin")),
        ("[sender:id=10002] hi", "hi", ("10002", None, (), None)),
        ('[User]{"id":"10007","name":"Dave","roles":["trusted"]} yo', "yo", ("10007", "Dave", ("trusted",), None)),
        ("[User]{id:10004,name:Bob,roles:master} yo", "yo", ("10004", "Bob", ("master",), None)),
        ("quote: [sender:id=1 name=X] hi", "quote: [sender:id=1 name=X] hi", None),
        ("[User]{not json at all} hi", "[User]{not json at all} hi", None),
    ],
)
def test_strip_text_prefix(text: str, clean: str, facts: tuple[Any, ...] | None) -> None:
    stripped, actor = legacy.strip_text_prefix(text)
    assert stripped == clean
    if facts is None:
        assert actor is None
    else:
        assert actor is not None
        assert (actor.subject_id, actor.display_name, actor.roles, actor.platform_role) == facts


def test_actor_wins_over_extra_sender_in_jsonl(tmp_path: Path) -> None:
    line = user_line(1, "hello there", actor={"subjectId": "10002", "displayName": "Alice", "roles": ["user"], "scope": "group"},
                     extra={"sender": {"id": "10002", "name": "Alice Smith]x", "roles": ["master", "scene_admin"], "scope": "group"}})
    actor = read_session(write_lines(tmp_path / "s.jsonl", [SESSION, line])).messages[0].actor
    assert actor is not None
    assert (actor.display_name, actor.roles, actor.platform_role) == ("Alice", (), None)


def test_legacy_sources_fill_each_other_only_for_the_same_sender(tmp_path: Path) -> None:
    prefixed = {"content": [{"type": "text", "text": "[sender:id=10002 name=Alice roles=master] hi"}]}
    same = user_line(1, **prefixed, extra={"sender": {"id": "10002", "roles": ["scene_admin"], "scope": "group"}})
    other = user_line(2, **prefixed, extra={"sender": {"id": "10009", "name": "Mallory", "roles": ["scene_owner"]}})
    same.pop("actor")
    other.pop("actor")
    first, second = read_session(write_lines(tmp_path / "s.jsonl", [SESSION, same, other])).messages
    assert (first.actor.subject_id, first.actor.display_name, first.actor.platform_role, first.actor.scope) == ("10002", "Alice", "admin", "group")
    assert first.text == "hi"
    assert (second.actor.subject_id, second.actor.display_name, second.actor.platform_role) == ("10009", "Mallory", "owner")


# ---------------------------------------------------------------------------------------------------------------
# 3. Upstream SQLite, exactly as upstream writes it

UP_ID = "icqq:8596238:group:201193925#1700000000000-1"
UP_KEY = "icqq:8596238:group:201193925"
ROW_USER = {  # docs/spec/zhin-upstream.md §2.3, as serializeAgentMessage stored it
    "payload": {"role": "user", "content": [{"type": "text", "text": "hello there"}],
                "actor": {"subjectId": "10002", "displayName": "Alice", "roles": ["user"], "scope": "group"},
                "timestamp": 1700000000000},
    "extra": {"sender": {"id": "10002", "name": "Alice Smith]x", "roles": ["master", "scene_admin"], "scope": "group"}},
}


def assistant_row(text: str, timestamp: int, **extra: Any) -> dict[str, Any]:
    return {"payload": {
        "role": "assistant", "content": [{"type": "text", "text": text}], "api": "ai-sdk", "provider": "openai",
        "model": "gpt-4o", "usage": {"input": 10, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 12,
                                     "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
        "stopReason": "stop", "timestamp": timestamp}, **extra}


def user_row(text: str, timestamp: int, subject: str = "10002", name: str = "Alice", **extra: Any) -> dict[str, Any]:
    return {"payload": {"role": "user", "content": [{"type": "text", "text": text}],
                        "actor": {"subjectId": subject, "displayName": name, "roles": [], "scope": "group"},
                        "timestamp": timestamp}, **extra}


UPSTREAM_ROWS = [
    ROW_USER,
    assistant_row("hi Alice", 1700000005000),
    user_row("how are you", 1700000060000),
    assistant_row("fine, thanks", 1700000065000),
]


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), os.stat(p).st_mtime_ns) for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("ref", [UP_ID, UP_KEY])
def test_trace_upstream_database_read_only(tmp_path: Path, upstream_db: Any, zhin: Any, ref: str) -> None:
    db = upstream_db(tmp_path / "prod" / "data.sqlite", UP_ID, UPSTREAM_ROWS)
    before = snapshot(db.parent)
    assert list(before) == ["data.sqlite"]
    proc = zhin("trace", ref, "--db", db, "--all", "--json")
    assert proc.returncode == 0, proc.stderr
    assert snapshot(db.parent) == before  # same bytes, same mtime, no -wal/-shm/-journal
    doc = json.loads(proc.stdout)
    assert doc["session_id"] == UP_ID
    assert [r["turn"] for r in doc["requests"]] == [1, 2]
    first_user = [m for m in doc["requests"][0]["request"]["messages"] if m["role"] == "user"][0]
    fields = header_fields(wire_text(first_user))
    assert (fields["id"], fields["user_id"], fields["name"]) == ("m1", "10002", "Alice")
    # the actor wins: nothing from extra.sender (its name, its master / scene_admin roles) shows
    assert "master" not in fields.get("role", "") and "admin" not in fields.get("role", "")
    assert "hello there" in wire_text(first_user)
    last = json.dumps(doc["requests"][1]["request"], ensure_ascii=False)
    assert "Alice Smith" not in last and "[sender:" not in last
    assert "hi Alice" in last and "how are you" in last and "fine, thanks" not in last


def test_database_connection_cannot_write(tmp_path: Path, upstream_db: Any) -> None:
    """Read-only is structural (mode=ro / query_only), not just "we happen not to write"."""
    from sqlalchemy.exc import DBAPIError

    from zhin_cli.store.db import SessionDatabase, parse_db

    db = upstream_db(tmp_path / "d.sqlite", UP_ID, UPSTREAM_ROWS)
    before = snapshot(tmp_path)
    with SessionDatabase(parse_db(str(db))) as database, database.engine.connect() as connection:
        with pytest.raises(DBAPIError, match="readonly|read-only|query_only"):
            connection.exec_driver_sql("DELETE FROM agent_messages")
    assert snapshot(tmp_path) == before


def test_upstream_wal_database_is_left_alone(tmp_path: Path, upstream_db: Any) -> None:
    db = upstream_db(tmp_path / "prod" / "data.sqlite", UP_ID, UPSTREAM_ROWS)
    connection = sqlite3.connect(db)
    assert connection.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    connection.close()
    before = snapshot(db.parent)
    assert list(before) == ["data.sqlite"]
    session = load_session(UP_ID, db=str(db), cwd=tmp_path)
    assert len(session.messages) == 4
    assert snapshot(db.parent) == before


def test_database_is_found_upward(tmp_path: Path, upstream_db: Any) -> None:
    upstream_db(tmp_path / ".zhin" / "data.sqlite", UP_ID, UPSTREAM_ROWS)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert load_session(UP_KEY, cwd=deep).session_id == UP_ID
    with pytest.raises(SessionNotFound):
        load_session(UP_KEY, cwd=tmp_path.parent / "elsewhere-not-there")


def test_legacy_row_in_database_takes_facts_from_extra_sender(tmp_path: Path, upstream_db: Any) -> None:
    bob = {"payload": {"role": "user", "content": [{"type": "text", "text": "早"}], "timestamp": 1700000001000},
           "extra": {"sender": {"id": "10004", "name": "Bob", "roles": ["scene_admin"], "scope": "group"}}}
    db = upstream_db(tmp_path / "d.sqlite", UP_ID, [ROW_USER, bob, assistant_row("早", 1700000005000)])
    messages = load_session(UP_ID, db=str(db), cwd=tmp_path).messages
    assert (messages[0].actor.display_name, messages[0].actor.platform_role) == ("Alice", None)
    assert (messages[1].actor.subject_id, messages[1].actor.display_name, messages[1].actor.platform_role) == ("10004", "Bob", "admin")


def test_active_branch_follows_leaf_and_parents(tmp_path: Path, upstream_db: Any) -> None:
    rows = [
        user_row("root question", 1700000000000),                       # 1
        assistant_row("root answer", 1700000001000),                     # 2
        user_row("side question", 1700000002000, parent_id=2),           # 3  abandoned branch
        assistant_row("side answer", 1700000003000, parent_id=3),        # 4
        user_row("main question", 1700000004000, parent_id=2),           # 5  active branch
        assistant_row("main answer", 1700000005000, parent_id=5),        # 6
    ]
    db = upstream_db(tmp_path / "d.sqlite", UP_ID, rows, active_leaf=6)
    assert [m.row_id for m in load_session(UP_ID, db=str(db), cwd=tmp_path).messages] == [1, 2, 5, 6]
    result = trace(UP_ID, db=str(db), all_turns=True, cwd=tmp_path)
    assert [r.turn for r in result.requests] == [1, 2]
    for request in result.requests:
        body = json.dumps(request.request, ensure_ascii=False)
        assert "side question" not in body and "side answer" not in body
    assert "main question" in json.dumps(result.requests[1].request, ensure_ascii=False)

    side = upstream_db(tmp_path / "side.sqlite", UP_ID, rows, active_leaf=4)
    assert [m.row_id for m in load_session(UP_ID, db=str(side), cwd=tmp_path).messages] == [1, 2, 3, 4]
    flat = upstream_db(tmp_path / "flat.sqlite", UP_ID, rows, active_leaf=None)  # before branching existed
    assert [m.row_id for m in load_session(UP_ID, db=str(flat), cwd=tmp_path).messages] == [1, 2, 3, 4, 5, 6]


def test_branch_cycle_and_missing_parent(tmp_path: Path, upstream_db: Any) -> None:
    cycle = upstream_db(tmp_path / "c.sqlite", UP_ID, [user_row("a", 1, parent_id=2), assistant_row("b", 2, parent_id=1)])
    with pytest.raises(InputError) as info:
        load_session(UP_ID, db=str(cycle), cwd=tmp_path)
    assert "agent_messages row" in str(info.value) and "cycle" in str(info.value)
    gap = upstream_db(tmp_path / "g.sqlite", UP_ID, [user_row("a", 1), assistant_row("b", 2, parent_id=9)])
    with pytest.raises(InputError) as info:
        load_session(UP_ID, db=str(gap), cwd=tmp_path)
    assert f"{gap}: agent_messages row 9: active branch names a missing row" in str(info.value)


def test_summaries_from_upstream_table(tmp_path: Path, upstream_db: Any) -> None:
    db = upstream_db(tmp_path / "d.sqlite", UP_ID, UPSTREAM_ROWS,
                     summaries=[{"summary": "Alice greeted.", "anchor_message_id": 2, "created_at": 1700000050000}])
    session = load_session(UP_ID, db=str(db), cwd=tmp_path)
    assert [(s.summary, s.anchor_row_id) for s in session.summaries] == [("Alice greeted.", 2)]


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ({"payload": "{not json", "role": "user", "timestamp": 1}, "payload is not JSON"),
        ({"payload": "[1]", "role": "user", "timestamp": 1}, "message is a JSON list, expected an object"),
        ({**user_row("x", 1), "extra": "{oops"}, "extra is not JSON"),
        ({"payload": {"role": "bogus", "content": [], "timestamp": 1}}, "unknown role 'bogus'"),
        ({"payload": {"role": "toolResult", "toolCallId": "c9", "toolName": "w", "content": [], "timestamp": 1}},
         "orphan tool result"),
    ],
)
def test_bad_row_names_table_and_row(tmp_path: Path, upstream_db: Any, row: dict[str, Any], error: str) -> None:
    db = upstream_db(tmp_path / "d.sqlite", UP_ID, [ROW_USER, row, assistant_row("ok", 1700000009000)])
    with pytest.raises(InputError) as info:
        load_session(UP_ID, db=str(db), cwd=tmp_path)
    assert str(info.value).startswith(f"{db}: agent_messages row 2: {error}")
    assert "\n" not in str(info.value)


def test_not_sqlite_and_not_zhin_database(tmp_path: Path) -> None:
    text = tmp_path / "notes.sqlite"
    text.write_text("just some text, long enough to have a header\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_session(UP_ID, db=str(text), cwd=tmp_path)
    assert str(info.value) == f"{text}: not an SQLite database"

    other = tmp_path / "other.sqlite"
    connection = sqlite3.connect(other)
    connection.execute("CREATE TABLE agent_sessions (session_id TEXT, session_key TEXT)")
    connection.commit()
    connection.close()
    with pytest.raises(InputError) as info:
        load_session(UP_ID, db=str(other), cwd=tmp_path)
    assert str(info.value) == f"{other}: not a zhin database: missing table agent_messages"

    with pytest.raises(SessionNotFound) as info:
        load_session(UP_ID, db=str(tmp_path / "absent.sqlite"), cwd=tmp_path)
    assert str(tmp_path / "absent.sqlite") in str(info.value)


def test_unknown_session_in_database(tmp_path: Path, upstream_db: Any) -> None:
    db = upstream_db(tmp_path / "d.sqlite", UP_ID, UPSTREAM_ROWS)
    with pytest.raises(SessionNotFound) as info:
        load_session("icqq:1:group:999", db=str(db), cwd=tmp_path)
    assert "'icqq:1:group:999'" in str(info.value) and str(db) in str(info.value)


def test_newest_epoch_wins_for_a_session_key(tmp_path: Path, upstream_db: Any) -> None:
    db = upstream_db(tmp_path / "d.sqlite", UP_ID, UPSTREAM_ROWS)
    newer = f"{UP_KEY}#1800000000000-1"
    connection = sqlite3.connect(db)
    connection.execute("INSERT INTO agent_messages (session_id, role, payload, parent_id, extra, timestamp) VALUES (?,?,?,?,?,?)",
                       (newer, "user", dump(user_row("new epoch", 1800000000000)["payload"]), None, "", 1800000000000))
    connection.execute("INSERT INTO agent_sessions VALUES (?,?,?,?,?,?,?)", (newer, UP_KEY, "", "active", 5, 1800000000000, 1800000000000))
    connection.commit()
    connection.close()
    session = load_session(UP_KEY, db=str(db), cwd=tmp_path)
    assert session.session_id == newer and [m.text for m in session.messages] == ["new epoch"]
    assert len(load_session(UP_ID, db=str(db), cwd=tmp_path).messages) == 4


# ---------------------------------------------------------------------------------------------------------------
# 4. import / export round trip

IMPORT_ORDER = ["private-chat", "legacy-upstream", "group-busy"]  # so group-busy's row ids move (anchor remap)


def read_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def without_id(line: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in line.items() if k != "id"}


@pytest.mark.parametrize("name", IMPORT_ORDER)
def test_import_export_round_trip(tmp_path: Path, zhin: Any, name: str) -> None:
    db = tmp_path / "rt.sqlite"
    proc = zhin("import", *(FIXTURES / f"{n}.jsonl" for n in IMPORT_ORDER), "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    session_id = SESSION_IDS[name]
    exported = zhin("export", session_id, "--db", db)
    assert exported.returncode == 0, exported.stderr
    original = read_lines((FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8"))
    back = read_lines(exported.stdout)
    assert [line["type"] for line in back] == [line["type"] for line in original]
    assert back[0] == original[0]
    old_messages = [line for line in original if line["type"] == "message"]
    new_messages = [line for line in back if line["type"] == "message"]
    assert [without_id(m) for m in new_messages] == [without_id(m) for m in old_messages]
    assert [line for line in back if line["type"] == "scene"] == [line for line in original if line["type"] == "scene"]

    # summaries keep pointing at the same message, whatever ids the database gave it
    old_by_id = {m["id"]: without_id(m) for m in old_messages}
    new_by_id = {m["id"]: without_id(m) for m in new_messages}
    old_summaries = [line for line in original if line["type"] == "summary"]
    new_summaries = [line for line in back if line["type"] == "summary"]
    assert len(new_summaries) == len(old_summaries)
    for old, new in zip(old_summaries, new_summaries, strict=True):
        assert new["summary"] == old["summary"]
        assert new_by_id[new["anchor_message_id"]] == old_by_id[old["anchor_message_id"]]
    if name == "group-busy":
        assert new_messages[0]["id"] == 1 + 22 + 20  # really moved, so the remap above was exercised
        assert new_summaries[0]["anchor_message_id"] == 86 + 42

    # the same requests, every turn, from the file and from the database
    from_file = zhin("trace", FIXTURES / f"{name}.jsonl", "--all", "--json")
    from_db = zhin("trace", session_id, "--db", db, "--all", "--json")
    assert from_file.returncode == 0 and from_db.returncode == 0, from_file.stderr + from_db.stderr
    file_requests = [r["request"] for r in json.loads(from_file.stdout)["requests"]]
    db_requests = [r["request"] for r in json.loads(from_db.stdout)["requests"]]
    assert len(file_requests) == {"group-busy": 16, "private-chat": 6, "legacy-upstream": 4}[name]
    assert db_requests == file_requests


def test_export_to_file_and_reimport(tmp_path: Path, zhin: Any) -> None:
    db = tmp_path / "a.sqlite"
    assert zhin("import", FIXTURES / "private-chat.jsonl", "--db", db).returncode == 0
    out = tmp_path / "out.jsonl"
    proc = zhin("export", PRIVATE_ID, "--db", db, "-o", out)
    assert proc.returncode == 0 and proc.stdout == ""
    again = read_session(out)
    assert [m.raw for m in again.messages] == [m.raw for m in read_session(FIXTURES / "private-chat.jsonl").messages]


def test_import_is_all_or_nothing(tmp_path: Path, zhin: Any) -> None:
    db = tmp_path / "new.sqlite"
    proc = zhin("import", FIXTURES / "private-chat.jsonl", CORPUS / "broken-json.jsonl", "--db", db)
    assert proc.returncode == 3
    assert proc.stderr.startswith(f"zhin: error: {CORPUS / 'broken-json.jsonl'}:4: invalid JSON")
    assert not db.exists()


def test_import_twice_needs_replace(tmp_path: Path, zhin: Any) -> None:
    db = tmp_path / "d.sqlite"
    assert zhin("import", FIXTURES / "private-chat.jsonl", "--db", db).returncode == 0
    again = zhin("import", FIXTURES / "private-chat.jsonl", "--db", db)
    assert again.returncode == 3 and "already in" in again.stderr and "--replace" in again.stderr
    assert zhin("import", FIXTURES / "private-chat.jsonl", "--db", db, "--replace").returncode == 0
    connection = sqlite3.connect(db)
    count = connection.execute("SELECT COUNT(*) FROM agent_messages WHERE session_id = ?", (PRIVATE_ID,)).fetchone()[0]
    sessions = connection.execute("SELECT COUNT(*) FROM agent_sessions").fetchone()[0]
    connection.close()
    assert (count, sessions) == (22, 1)

"""The outline a source reads without content equals the one computed from its messages, and lazy messages equal
eager ones (issue 16 item 3: a request reads only its window)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import InputError
from zhin_cli.core.model import LazyMessages, Message, Session, SessionOutline
from zhin_cli.pipeline.headers import Aliases
from zhin_cli.pipeline.window import SessionIndex, WindowConfig, visible_window
from zhin_cli.store import load_session
from zhin_cli.store.jsonl import open_session, read_session

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "corpus"
FILES = sorted([*(ROOT / "fixtures").glob("*.jsonl"), *(CORPUS / "accepted").glob("*.jsonl")])
BAD = {name: case for name, case in json.loads((CORPUS / "cases.json").read_text(encoding="utf-8")).items()
       if not name.startswith("_")}


def as_tuples(outline: SessionOutline) -> dict[str, list[Any]]:
    return {f.name: list(getattr(outline, f.name)) for f in fields(outline)}


def message_state(message: Message) -> dict[str, Any]:
    return {**message.__dict__}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_jsonl_outline_equals_the_messages_outline(path: Path) -> None:
    lazy = open_session(path)
    eager = read_session(path)
    assert isinstance(lazy.messages, LazyMessages)
    assert as_tuples(lazy.outline) == as_tuples(SessionOutline.of_messages(eager.messages))
    assert not lazy.messages.parsed_positions  # the outline read no message again


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_lazy_jsonl_messages_equal_eager_ones(path: Path) -> None:
    lazy, eager = open_session(path), read_session(path)
    assert len(lazy.messages) == len(eager.messages)
    # read out of order, by index and by slice, then all of them
    if eager.messages:
        assert message_state(lazy.messages[-1]) == message_state(eager.messages[-1])
        assert [message_state(m) for m in lazy.messages[1:3]] == [message_state(m) for m in eager.messages[1:3]]
    assert [message_state(m) for m in lazy.messages] == [message_state(m) for m in eager.messages]
    assert as_tuples(lazy.outline) == as_tuples(SessionOutline.of_messages(list(lazy.messages)))


@pytest.mark.parametrize("name", sorted(BAD))
def test_lazy_reading_reports_every_bad_line_as_eager_reading(name: str) -> None:
    # the first pass checks every line: the error (message and file:line) does not wait for the line to be read
    path = CORPUS / name
    with pytest.raises(InputError) as eager:
        read_session(path)
    with pytest.raises(InputError) as lazy:
        open_session(path)
    assert (lazy.value.where, str(lazy.value)) == (eager.value.where, str(eager.value))
    assert f":{BAD[name]['line']}" in str(lazy.value.where)


def test_window_and_aliases_of_a_lazy_session_read_only_the_window(tmp_path: Path) -> None:
    path = long_session(tmp_path, copies=8)
    session = load_session(str(path))
    messages = session.messages
    assert isinstance(messages, LazyMessages)
    index, aliases = SessionIndex.of(session), Aliases.of(session)
    last = session.outline.assistant_positions[-1]
    window = visible_window(session, last, session.outline.timestamps[last], WindowConfig(max_messages=40), index)
    eager = read_session(path)
    assert aliases == Aliases.of(eager)
    assert index == SessionIndex.of(eager)
    expected = visible_window(eager, last, session.outline.timestamps[last], WindowConfig(max_messages=40))
    assert [message_state(m) for m in window.messages] == [message_state(m) for m in expected.messages]
    assert [message_state(m) for m in window.carried_events] == [message_state(m) for m in expected.carried_events]
    # exactly the window and the membership events carried into it were parsed (the session is far longer)
    window_positions = set(range(window.dropped, last))
    carried = {index.positions[e.row_id] for e in window.carried_events}
    assert carried and window_positions
    assert messages.parsed_positions == window_positions | carried
    assert len(messages) > 10 * len(messages.parsed_positions)


def test_a_file_rewritten_after_the_first_pass_is_an_error_not_a_mix(tmp_path: Path) -> None:
    path = ROOT / "fixtures" / "private-chat.jsonl"
    copy = tmp_path / "chat.jsonl"
    copy.write_bytes(path.read_bytes())
    session = open_session(copy)
    copy.write_bytes(path.read_bytes().replace(b"\n", b"\n\n", 1))  # same messages, other offsets
    with pytest.raises(InputError, match="changed while zhin was reading"):
        session.messages[0]
    # negative control: untouched, it reads
    assert open_session(path).messages[0].row_id == read_session(path).messages[0].row_id


def long_session(folder: Path, copies: int) -> Path:
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from replay import tiled  # the benchmarks' tiling of the busy fixture

    from zhin_cli.store.jsonl import write_session

    session: Session = tiled(read_session(ROOT / "fixtures" / "group-busy.jsonl"), copies)
    path = folder / "long.jsonl"
    with path.open("w", encoding="utf-8") as out:
        write_session(session, out)
    return path


# --- databases ------------------------------------------------------------------------------------------------


def db_pair(path: Path, session_id: str) -> tuple[Session, Session]:
    from zhin_cli.store.db import SessionDatabase, parse_db

    with SessionDatabase(parse_db(str(path))) as database:
        lazy = database.load(session_id, lazy=True)
        eager = database.load(session_id)
    return lazy, eager


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_database_outline_and_lazy_rows_equal_the_eager_load(path: Path, tmp_path: Path) -> None:
    from zhin_cli.store.db import import_session

    session = read_session(path)
    database = tmp_path / "data.sqlite"
    import_session(session, database)
    lazy, eager = db_pair(database, session.session_id)
    assert isinstance(lazy.messages, LazyMessages)
    assert as_tuples(lazy.outline) == as_tuples(SessionOutline.of_messages(eager.messages))
    assert not lazy.messages.parsed_positions
    if eager.messages:
        assert message_state(lazy.messages[-1]) == message_state(eager.messages[-1])
    assert [message_state(m) for m in lazy.messages] == [message_state(m) for m in eager.messages]
    assert (lazy.bot, lazy.scene, lazy.summaries, lazy.scene_changes, lazy.members) == \
        (eager.bot, eager.scene, eager.summaries, eager.scene_changes, eager.members)


def payload(role: str, ts: int, **fields: Any) -> dict[str, Any]:
    return {"role": role, "timestamp": ts, **fields}


def test_database_outline_follows_the_active_branch_and_legacy_text(tmp_path: Path, upstream_db: Any) -> None:
    rows = [
        {"payload": payload("user", 1000, content=[{"type": "text", "text": "[sender:id=7 name=a] hi"}], messageId="p1")},
        {"payload": payload("assistant", 2000, content=[{"type": "text", "text": "old"}], model="m-old")},  # off-branch
        {"payload": payload("user", 3000, content=[{"type": "text", "text": "[sender:id=7 name=a]"}]), "parent_id": 1},
        {"payload": payload("assistant", 4000, content=[
            {"type": "toolCall", "id": "c1", "name": "f", "arguments": {}}], model="m-new", messageId="p2")},
        {"payload": payload("toolResult", 5000, toolCallId="c1", content=[{"type": "text", "text": ""}])},
        {"payload": payload("event", 6000, kind="member_joined", name="x joined")},
        {"payload": payload("assistant", 7000, content=[{"type": "text", "text": ""}, {"type": "text", "text": ""}])},
    ]
    database = upstream_db(tmp_path / "d.sqlite", "icqq:1:group:2#1-1", rows)
    lazy, eager = db_pair(database, "icqq:1:group:2#1-1")
    assert list(lazy.outline.row_ids) == [1, 3, 4, 5, 6, 7]  # row 2 is on another branch
    assert as_tuples(lazy.outline) == as_tuples(SessionOutline.of_messages(eager.messages))
    # the legacy prefix is no text; two empty text blocks join to "\n", which is text (message.text is truthy)
    assert list(lazy.outline.has_text) == [True, False, False, False, False, True]


@pytest.mark.parametrize(("rows", "error"), [
    ([{"payload": "{not json"}], "payload is not JSON"),
    ([{"payload": payload("robot", 1)}], "unknown role"),
    ([{"payload": payload("toolResult", 1, toolCallId="nope", content=[])}], "orphan tool result"),
])  # an unanswered call is read with a placeholder result, not refused: tests/test_interrupted_turn.py
def test_database_rows_outside_any_window_still_fail_the_lazy_load(rows: list[dict[str, Any]], error: str,
                                                                   tmp_path: Path, upstream_db: Any) -> None:
    # a long valid tail puts the bad rows far outside the last turn's window: the outline's checks still see them
    tail = [{"payload": payload("user" if i % 2 else "assistant", 10_000 + i, content=[{"type": "text", "text": "x"}])}
            for i in range(300)]
    bad = upstream_db(tmp_path / "bad.sqlite", "icqq:1:group:2#1-1", [*rows, *tail])
    with pytest.raises(InputError, match=error) as lazy:
        db_pair(bad, "icqq:1:group:2#1-1")
    assert "agent_messages row" in str(lazy.value.where)
    # negative control: the tail alone loads
    good = upstream_db(tmp_path / "good.sqlite", "icqq:1:group:2#1-1", tail)
    assert len(db_pair(good, "icqq:1:group:2#1-1")[0].messages) == 300


def test_a_database_row_deleted_after_the_outline_is_an_error_not_a_gap(tmp_path: Path, upstream_db: Any) -> None:
    import sqlite3

    rows = [{"payload": payload("user", 1000 + i, content=[{"type": "text", "text": str(i)}])} for i in range(5)]
    database = upstream_db(tmp_path / "d.sqlite", "icqq:1:group:2#1-1", rows)
    lazy, _eager = db_pair(database, "icqq:1:group:2#1-1")
    assert lazy.messages[0].row_id == 1  # read before the delete
    with sqlite3.connect(database) as connection:
        connection.execute("DELETE FROM agent_messages WHERE id = 3")
    with pytest.raises(InputError, match="row is gone"):
        lazy.messages[2]
    assert lazy.messages[3].row_id == 4  # negative control: the rows still there read


# --- jsontext: orjson's speed, json's results ---------------------------------------------------------------------

JSON_TEXTS = ['{"a":1,"a":2}', "1" + "0" * 30, "[-12345678901234567890]", "NaN", "[Infinity]", '"\\ud800"', "[1e400]",
              "\ufeff{}", " [1, 2.5, -0] ", '{"t":"\\u00e9\\ud83d\\ude00"}', "{not json", "[" * 5000, '"\\x"', "", "9" * 5000,
              "[" * 995 + "]" * 995]


@pytest.mark.parametrize("text", JSON_TEXTS, ids=range(len(JSON_TEXTS)))
def test_jsontext_gives_json_values_and_errors(text: str) -> None:
    from zhin_cli.core import jsontext

    def outcome(load: Any) -> Any:
        try:
            value = load()
        except (ValueError, RecursionError) as exc:
            return type(exc).__name__, str(exc)
        return type(value).__name__, repr(value)

    assert outcome(lambda: jsontext.loads(text)) == outcome(lambda: json.loads(text))
    assert outcome(lambda: jsontext.loads(text, text.encode("utf-8", "surrogatepass"))) == outcome(lambda: json.loads(text))


def test_orjson_alone_would_read_a_long_integer_as_a_float() -> None:
    # negative control for the digit-run rule: without it a 31-digit id would be a float, not "an integer of 31 digits"
    orjson = pytest.importorskip("orjson")
    assert isinstance(orjson.loads("1" + "0" * 30), float)


def test_database_outline_of_a_branch_whose_parent_is_a_newer_row(tmp_path: Path, upstream_db: Any) -> None:
    # branch 1 -> 4 -> 3 (row 3 was re-parented onto row 4): storage order is the chain's, not the ids'
    rows = [
        {"payload": payload("user", 1000, content=[{"type": "text", "text": "a"}]), "parent_id": None},
        {"payload": payload("assistant", 2000, content=[{"type": "text", "text": "off"}]), "parent_id": 1},
        {"payload": payload("assistant", 4000, content=[{"type": "text", "text": "c"}]), "parent_id": 4},
        {"payload": payload("user", 3000, content=[{"type": "text", "text": "b"}]), "parent_id": 1},
    ]
    database = upstream_db(tmp_path / "d.sqlite", "icqq:1:group:2#1-1", rows, active_leaf=3)
    lazy, eager = db_pair(database, "icqq:1:group:2#1-1")
    assert [m.row_id for m in eager.messages] == [1, 4, 3]
    assert as_tuples(lazy.outline) == as_tuples(SessionOutline.of_messages(eager.messages))
    assert [message_state(m) for m in lazy.messages] == [message_state(m) for m in eager.messages]


@pytest.mark.parametrize("row_ids", [[3, 9, 12, 40], [9, 3, 40, 12], [], [7]])
def test_row_positions_answer_as_a_dict_of_the_ids(row_ids: list[int]) -> None:
    from array import array

    from zhin_cli.pipeline.window import RowPositions

    positions = RowPositions(array("q", row_ids))
    expected = {row_id: i for i, row_id in enumerate(row_ids)}
    assert dict(positions) == expected and len(positions) == len(expected)
    for row_id in (*row_ids, 0, 10, 41):
        assert positions.get(row_id) == expected.get(row_id)
        assert (row_id in positions) == (row_id in expected)


def test_aliases_views_answer_as_the_dicts_they_replace(tmp_path: Path) -> None:
    # the definition: m<n> for members and for bot messages with text, e<n> for events, first row per platform id
    from zhin_cli.pipeline.headers import Aliases

    for path in FILES:
        session = read_session(path)
        messages: dict[int, str] = {}
        events: dict[int, str] = {}
        by_platform_id: dict[str, int] = {}
        for message in session.messages:
            if message.role == "user" or (message.role == "assistant" and message.text):  # type: ignore[union-attr]
                messages[message.row_id] = f"m{len(messages) + 1}"
                if getattr(message, "message_id", None):
                    by_platform_id.setdefault(message.message_id, message.row_id)  # type: ignore[union-attr]
            elif message.role == "event":
                events[message.row_id] = f"e{len(events) + 1}"
        aliases = Aliases.of(session)
        assert dict(aliases.messages) == messages and dict(aliases.events) == events
        assert dict(aliases.by_platform_id) == by_platform_id
        for row_id in [m.row_id for m in session.messages] + [0, -5]:
            assert aliases.messages.get(row_id) == messages.get(row_id)
            assert aliases.events.get(row_id) == events.get(row_id)
        for message_id in [*by_platform_id, "nope", "", None]:
            assert aliases.by_platform_id.get(message_id) == by_platform_id.get(message_id)  # type: ignore[arg-type]


def test_export_of_a_lazy_database_session_with_a_bad_row_writes_nothing(tmp_path: Path, upstream_db: Any) -> None:
    # an actor is checked when its row is parsed, not by the outline: export must still fail before any line
    import io

    from zhin_cli.store.jsonl import write_session

    good = [{"payload": payload("user", 1000 + i, content=[{"type": "text", "text": str(i)}])} for i in range(3)]
    bad = {"payload": payload("user", 2000, content=[{"type": "text", "text": "x"}], actor={"displayName": "no id"})}
    database = upstream_db(tmp_path / "d.sqlite", "icqq:1:group:2#1-1", [*good, bad])
    session = load_session("icqq:1:group:2#1-1", db=str(database))
    out = io.StringIO()
    with pytest.raises(InputError, match="'actor' must be an object with a 'subjectId'"):
        write_session(session, out)
    assert out.getvalue() == ""
    # negative control: without the bad row the same export writes the session line and three messages
    clean = upstream_db(tmp_path / "c.sqlite", "icqq:1:group:2#1-1", good)
    assert write_session(load_session("icqq:1:group:2#1-1", db=str(clean)), io.StringIO()) == 4

"""What matching upstream's turn rows and replies to their platform messages costs a lazy load (issue 28): the
outline scan, which parses every payload once anyway, keeps who said what in each user row and reply
(``OutlineFacts.said``), and the matching reads that — no row is read or parsed a second time, and a row only its
message refuses (a bad ``actor``) is refused when a request reads it, as before the matching, not by the load.
Over a copy of the real database (tests/data/upstream-db)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import InputError
from zhin_cli.core.model import AssistantMessage, Message, Session, SessionOutline, UserMessage
from zhin_cli.store.db import SessionDatabase, parse, parse_db, reader
from zhin_cli.store.db.fetch import RowFetcher
from zhin_cli.store.payload import Said, message_from_payload, outline_facts

DATA = Path(__file__).parent / "data" / "upstream-db"
KEYS = ("onebot11:tokyo-ob11:group:856301447", "onebot11:tokyo-ob11:group:613770258",
        "onebot11:tokyo-ob11:private:284100105")
GROUP_A = KEYS[0]
TURN_ROW = 2  # GROUP_A's first turn row: [Turn context], then 晴天☀'s 2100005 (scenario-replies.json)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "data.sqlite"
    shutil.copyfile(DATA / "data.sqlite", copy)
    return copy


def lazy_load(db: Path, key: str) -> Session:
    with SessionDatabase(parse_db(str(db))) as source:
        return source.load(key, lazy=True)


def branch_rows(db: Path, key: str) -> int:
    """The session's stored rows (each on its active branch in this database)."""
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM agent_messages JOIN agent_sessions USING (session_id)"
                                " WHERE session_key = ?", (key,)).fetchone()[0])


def stored_rows(session: Session) -> list[int]:
    """The row ids of the stored rows a read of the messages reads (the events-block rows became their lines,
    which, as member events, have negative ids)."""
    return [row_id for row_id in session.outline.row_ids if row_id > 0]


def given_ids(session: Session) -> int:
    return sum(1 for row_id, message_id in zip(session.outline.row_ids, session.outline.message_ids, strict=True)
               if row_id > 0 and message_id is not None)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``payload`` column the database reader parses (the outline scan and every row read)."""
    seen: list[str] = []
    real = parse.json_column

    def counted(value: Any, column: str, where: str) -> Any:
        if column == "payload":
            seen.append(value)
        return real(value, column, where)

    monkeypatch.setattr(parse, "json_column", counted)
    return seen


# --- a lazy load parses each payload once -----------------------------------------------------------------------

@pytest.mark.parametrize("key", KEYS)
def test_a_lazy_load_parses_each_payload_once(db: Path, key: str, parses: list[str]) -> None:
    session = lazy_load(db, key)
    assert given_ids(session) > 0  # the matching ran and gave ids: the count is of a load that matched
    assert len(parses) == branch_rows(db, key)  # the outline scan's one parse per row, nothing more


def test_negative_control_reading_the_messages_parses_them_again(db: Path, parses: list[str]) -> None:
    """The count sees a row that is read: reading every message after the load parses every row a second time."""
    session = lazy_load(db, GROUP_A)
    list(session.messages)
    assert len(parses) == branch_rows(db, GROUP_A) + len(stored_rows(session))


def test_negative_control_matching_over_read_rows_parses_them_again(
        db: Path, parses: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The count sees the matching reading rows (as it did before ``OutlineFacts.said``): the same ids, more parses."""
    ref = parse_db(str(db))
    with sqlite3.connect(db) as conn:
        session_id = conn.execute("SELECT session_id FROM agent_sessions WHERE session_key = ?", (GROUP_A,)).fetchone()[0]

    def rows_read(outline: SessionOutline, _said: object) -> reader.RowLoader:
        return reader.RowLoader(ref, session_id, outline.row_ids, None)

    monkeypatch.setattr(parse, "SaidReader", rows_read)
    session = lazy_load(db, GROUP_A)
    assert given_ids(session) > 0 and len(parses) > branch_rows(db, GROUP_A)


def test_a_session_without_message_events_keeps_no_texts(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Texts are kept only when there are events to match them to (a zhin or older database: nothing kept)."""
    kept: list[dict[int, Said] | None] = []
    real = RowFetcher._scan_outline

    def scan(self: RowFetcher, *args: Any, **kwargs: Any) -> Any:
        rows = real(self, *args, **kwargs)
        kept.append(rows.said)
        return rows

    monkeypatch.setattr(RowFetcher, "_scan_outline", scan)
    lazy_load(db, GROUP_A)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM conversation_events")
    lazy_load(db, GROUP_A)
    assert kept[0] and kept[1] is None  # the first (negative control): texts kept while there are events


# --- a row only its message refuses: refused when read, not by the load -------------------------------------------

def spoil_actor(db: Path, row_id: int) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE agent_messages SET payload = json_set(payload, '$.actor', 5) WHERE id = ?", (row_id,))


def test_a_bad_turn_row_is_refused_when_read(db: Path) -> None:
    spoil_actor(db, TURN_ROW)
    with SessionDatabase(parse_db(str(db))) as source:
        session = source.load(GROUP_A, lazy=True)  # the load itself reads no message: it is not refused
        assert given_ids(session) > 0  # the other rows still get their ids
        position = session.outline.row_ids.index(TURN_ROW)
        assert session.outline.message_ids[position] is None  # a row its message refuses is matched to nothing
        with pytest.raises(InputError, match=rf"agent_messages row {TURN_ROW}\b.*'actor' must be an object"):
            session.messages[position]


def test_negative_control_an_eager_load_refuses_the_bad_row(db: Path) -> None:
    spoil_actor(db, TURN_ROW)
    with SessionDatabase(parse_db(str(db))) as source, \
            pytest.raises(InputError, match=rf"agent_messages row {TURN_ROW}\b.*'actor' must be an object"):
        source.load(GROUP_A)


# --- who said what, read from the payload as its message reads it -------------------------------------------------

def said_of_message(message: Message) -> Said | None:
    if isinstance(message, AssistantMessage):
        return Said(None, message.text)
    if isinstance(message, UserMessage) and message.actor is not None:
        return Said(message.actor.subject_id, message.text)
    return None


def both(payload: dict[str, Any], extra: dict[str, Any] | None = None) -> tuple[Said | None, Said | None]:
    """(the outline scan's ``said``, the one its message says)."""
    scanned = outline_facts(payload, "", extra or {}, said=True).said
    return scanned, said_of_message(message_from_payload(payload, row_id=1, where="", extra=extra or {}))


def test_every_real_row_says_what_its_message_says(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT payload, extra FROM agent_messages WHERE role IN ('user', 'assistant')").fetchall()
    pairs = [both(json.loads(payload), json.loads(extra) if extra else None) for payload, extra in rows]
    assert len(pairs) > 40 and all(scanned == said for scanned, said in pairs)
    # negative control: the comparison is not of constants (senders and texts differ from row to row)
    assert len({said for _, said in pairs}) > 20 and {said.sender_id for _, said in pairs if said} > {None}


CONTEXT = "[Turn context]\nTime: 2026/10/16 12:07:20 (Asia/Tokyo)\nSender: id=7 name=A roles=user\n[/Turn context]\n\n"
LEGACY = [
    ({"actor": {"subjectId": 9}}, None, CONTEXT + "[sender:id=7 name=A roles=user] hi"),  # the actor wins
    ({}, {"sender": {"id": 8, "name": "B"}}, CONTEXT + "[sender:id=7 name=A roles=user] hi"),  # then extra
    ({}, None, CONTEXT + "[sender:id=7 name=A roles=user] hi"),  # then the prefix
    ({}, None, '[User]{"id":"6","name":"C"} hi'),
    ({"name": "[id:m3;user_id:10005;name:Carol;role:member;]"}, {"sender": {"id": 8}}, "hi"),  # the header first
    ({}, None, CONTEXT + "[sender:id=7 name=A roles=user] [Untrusted conversation references]\n"
               "- message id=5 reference=x\n[Current message - respond to this]\nhi"),  # a quote notice
    ({}, {"sender": {"id": 8}}, CONTEXT.rstrip("\n")),  # only the host's context: no text
]


@pytest.mark.parametrize(("fields", "extra", "text"), LEGACY)
def test_legacy_senders_are_read_as_the_message_reads_them(
        fields: dict[str, Any], extra: dict[str, Any] | None, text: str) -> None:
    payload = {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1, **fields}
    scanned, said = both(payload, extra)
    assert scanned is not None and scanned == said


@pytest.mark.parametrize("text", ["hi", CONTEXT.rstrip("\n"), CONTEXT + "hi"])
def test_negative_control_a_row_naming_no_sender_says_nothing(text: str) -> None:
    """(The context's ``Sender:`` line is a fact of the turn, not the message's actor.)"""
    scanned, said = both({"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1})
    assert scanned is None and said is None


def test_a_turn_row_of_only_its_context_has_no_text() -> None:
    """The outline's ``has_text`` of a turn row is its message's: the host's context is not text."""
    def has_text(text: str) -> tuple[bool, bool]:
        payload = {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}
        message = message_from_payload(payload, row_id=1, where="")
        return outline_facts(payload, "").has_text, SessionOutline.of_messages([message]).has_text[0]

    assert has_text(CONTEXT.rstrip("\n")) == (False, False)
    assert has_text(CONTEXT + "hi") == (True, True)  # negative control: with words after it, text

"""A recalled message left out of the history is said, not silently dropped (issue 28, review finding 4).

scenario.md steps 33/34: Leo (284100106) posts an ad, message 2100026, at d2 08:44:00 JST; admin 284100102 recalls
it at 08:44:30. Upstream keeps it in the pending events block, so the bot's real request still carried it; zhin
does not show it as said (ADR §7), and now says so in ``Session.notes`` (trace: its notes; ``--json``: "notes").
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from conftest import clean_env, run_zhin

from zhin_cli.core.model import Session, UserMessage
from zhin_cli.store.db import SessionDatabase, parse_db

UPSTREAM_DB = Path(__file__).parent / "data" / "upstream-db" / "data.sqlite"
GROUP_A = "onebot11:tokyo-ob11:group:856301447"
RECALLED = "2100026"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "data.sqlite"
    shutil.copy(UPSTREAM_DB, copy)
    return copy


def load(db: Path, *, lazy: bool = False) -> Session:
    with SessionDatabase(parse_db(str(db))) as database:
        session = database.load(GROUP_A, lazy=lazy)
        list(session.messages)
        return session


def recall_notes(session: Session) -> list[str]:
    return [note for note in session.notes if f"message {RECALLED}" in note]


def shown_as_said(session: Session) -> bool:
    return any(isinstance(m, UserMessage) and m.message_id == RECALLED for m in session.messages)


@pytest.mark.parametrize("lazy", [False, True])
def test_the_recalled_message_is_named_with_who_recalled_it_and_when(db: Path, lazy: bool) -> None:
    session = load(db, lazy=lazy)
    assert not shown_as_said(session)
    [note] = recall_notes(session)
    assert "by Leo (284100106)" in note  # the author: the line's row (upstream does not store it in the recall)
    assert "recalled by 284100102 at 2026-10-17 08:44:30 Asia/Tokyo" in note  # the operator and the time, local
    assert "the bot's own request still carried it" in note
    assert "agent_messages row" in note  # the events-block row that carried it, named


def test_trace_shows_the_note_and_its_json_lists_it(db: Path, tmp_path: Path) -> None:
    traced = run_zhin("trace", GROUP_A, "--json", "--db", db, cwd=tmp_path, env=clean_env())
    assert traced.returncode == 0, traced.stderr
    assert [n for n in json.loads(traced.stdout)["notes"] if f"message {RECALLED}" in n and "284100102" in n]
    text = run_zhin("trace", GROUP_A, "--db", db, cwd=tmp_path, env=clean_env())
    assert f"message {RECALLED}" in text.stdout + text.stderr


def test_negative_control_without_the_recall_row_the_message_is_said_and_no_note(db: Path) -> None:
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("DELETE FROM conversation_events WHERE event_json LIKE '%\"message.recalled\"%'")
    session = load(db)
    assert shown_as_said(session) and recall_notes(session) == []


def test_negative_control_a_recall_of_a_message_no_block_holds_adds_no_note(db: Path) -> None:
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(f"UPDATE conversation_events SET event_json = replace(event_json, '\"id\":\"{RECALLED}\"',"
                     " '\"id\":\"9999999\"') WHERE event_json LIKE '%\"message.recalled\"%'")
    session = load(db)
    assert shown_as_said(session)
    assert not [n for n in session.notes if "recalled by" in n], session.notes


def test_a_recall_without_an_operator_says_unknown_not_system(db: Path) -> None:
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE conversation_events SET event_json = json_remove(event_json, '$.actor')"
                     " WHERE event_json LIKE '%\"message.recalled\"%'")
    [note] = recall_notes(load(db))
    assert "recalled by (unknown) at" in note and "system" not in note

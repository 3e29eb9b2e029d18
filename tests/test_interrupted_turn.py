"""A tool call the bot never answered (its turn was interrupted: the process stopped between the call and the
result) in a database: read with a placeholder result and a note naming the call's row — as upstream repairs its
own history before sending it — not a refused session (issue 28, a second real database). A JSONL file, the
interchange format, still refuses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_outline_rows_named import HEAD, SESSION, call, result, text

from zhin_cli.core.errors import InputError
from zhin_cli.core.model import AssistantMessage, ToolResultMessage
from zhin_cli.store.db import SessionDatabase, parse_db
from zhin_cli.store.jsonl import open_session
from zhin_cli.store.payload import INTERRUPTED_RESULT


def load(path: Path, *, lazy: bool) -> Any:
    with SessionDatabase(parse_db(str(path))) as database:
        session = database.load(SESSION, lazy=lazy)
        return session, list(session.messages)


@pytest.mark.parametrize("lazy", [False, True])
def test_an_unanswered_call_gets_a_placeholder_right_after_it_and_a_note(tmp_path: Path, upstream_db: Any,
                                                                         lazy: bool) -> None:
    rows = [*HEAD, call(1003, "c1"), text("user", 1004), text("assistant", 1005)]
    session, messages = load(upstream_db(tmp_path / "d.sqlite", SESSION, rows), lazy=lazy)
    roles = [m.role for m in messages]
    assert roles == ["user", "assistant", "user", "assistant", "toolResult", "user", "assistant"]
    placeholder = messages[4]
    assert isinstance(placeholder, ToolResultMessage) and placeholder.tool_call_id == "c1"
    assert placeholder.text == INTERRUPTED_RESULT and placeholder.is_error
    assert placeholder.row_id < 0 and placeholder.timestamp == messages[3].timestamp
    assert [n for n in session.notes if "c1" in n] and all("agent_messages row 4" in n for n in session.notes if "c1" in n)


def test_eager_and_lazy_loads_agree(tmp_path: Path, upstream_db: Any) -> None:
    rows = [*HEAD, call(1003, "c1"), result(1004, "c1"), call(1005, "c2"), text("user", 1006), text("assistant", 1007)]
    path = upstream_db(tmp_path / "d.sqlite", SESSION, rows)
    (eager, eager_messages), (lazy, lazy_messages) = load(path, lazy=False), load(path, lazy=True)
    assert [(m.role, m.row_id, m.text) for m in eager_messages] == [(m.role, m.row_id, m.text) for m in lazy_messages]
    assert eager.notes == lazy.notes and len(eager.notes) == 1 and "c2" in eager.notes[0]


def test_an_answered_call_gets_no_placeholder(tmp_path: Path, upstream_db: Any) -> None:
    # negative control: a whole turn is read as stored, with no note
    rows = [*HEAD, call(1003, "c1"), result(1004, "c1"), text("assistant", 1005)]
    session, messages = load(upstream_db(tmp_path / "d.sqlite", SESSION, rows), lazy=True)
    assert [m.role for m in messages].count("toolResult") == 1 and not session.notes
    assert not any(isinstance(m, ToolResultMessage) and m.row_id < 0 for m in messages)
    assert isinstance(messages[3], AssistantMessage)


def test_a_jsonl_file_still_refuses_it(tmp_path: Path) -> None:
    # the interchange format is checked, not repaired: the same history as a file names the call's line
    lines = ['{"type":"session","version":1,"session_id":"s#1","session_key":"s"}',
             '{"type":"message","role":"user","content":"a","timestamp":1000}',
             '{"type":"message","role":"assistant","content":[{"type":"toolCall","id":"c1","name":"f","arguments":{}}],"timestamp":1001}',
             '{"type":"message","role":"assistant","content":"b","timestamp":1002}']
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="has no tool result"):
        list(open_session(path).messages)

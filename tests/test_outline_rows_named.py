"""A lazy database load names the row it refuses exactly as the eager load does (message and ``table row N``).

The outline scan makes a row's name only for a row it refuses (the checks run again with the name) and calls the
tool-pairing check only where it has something to check; these cases pin that the error still names the right
row: the bad payload's own, a tool result's, the row whose tool call went unanswered (not the row that noticed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import InputError
from zhin_cli.store.db import SessionDatabase, parse_db

SESSION = "icqq:1:group:2#1-1"


def text(role: str, ts: int, body: str = "x", **fields: Any) -> dict[str, Any]:
    return {"payload": {"role": role, "timestamp": ts, "content": [{"type": "text", "text": body}], **fields}}


def call(ts: int, call_id: str) -> dict[str, Any]:
    return {"payload": {"role": "assistant", "timestamp": ts,
                        "content": [{"type": "toolCall", "id": call_id, "name": "f", "arguments": {}}]}}


def result(ts: int, call_id: str) -> dict[str, Any]:
    return {"payload": {"role": "toolResult", "timestamp": ts, "toolCallId": call_id,
                        "content": [{"type": "text", "text": "ok"}]}}


HEAD = [text("user", 1000), text("assistant", 1001), text("user", 1002)]  # rows 1-3, all good

CASES = {
    "bad JSON on row 4": ([*HEAD, {"payload": "{nope"}], "payload is not JSON", 4),
    "bad timestamp on row 5": ([*HEAD, text("user", 1003), {**text("user", -10**16), "timestamp": 1}], "out of range", 5),
    "bad extra on row 4": ([*HEAD, {**text("user", 1003), "extra": "{nope"}], "extra is not JSON", 4),
    "orphan result on row 5": ([*HEAD, text("assistant", 1003), result(1004, "c9")], "orphan tool result", 5),
    # (a call unanswered when the next assistant row comes is read with a placeholder and a note naming its row:
    # tests/test_interrupted_turn.py)
    "duplicate call id on row 6": ([*HEAD, call(1003, "c1"), result(1004, "c1"), call(1005, "c1")],
                                   "duplicate tool call id", 6),
    "second result on row 6": ([*HEAD, call(1003, "c1"), result(1004, "c1"), result(1005, "c1")],
                               "second tool result", 6),
}


def _error(path: Path, *, lazy: bool) -> InputError:
    with SessionDatabase(parse_db(str(path))) as database, pytest.raises(InputError) as refused:
        session = database.load(SESSION, lazy=lazy)
        list(session.messages)  # the eager load checks on read as well
    return refused.value


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_refused_row_is_named_as_the_eager_load_names_it(case: str, tmp_path: Path, upstream_db: Any) -> None:
    rows, message, row = CASES[case]
    database = upstream_db(tmp_path / "d.sqlite", SESSION, rows)
    lazy, eager = _error(database, lazy=True), _error(database, lazy=False)
    assert message in str(lazy)
    assert lazy.where == eager.where and lazy.where.endswith(f"agent_messages row {row}"), (lazy.where, eager.where)
    assert str(lazy) == str(eager)


def test_control_the_good_rows_load(tmp_path: Path, upstream_db: Any) -> None:
    good = [*HEAD, call(1003, "c1"), result(1004, "c1"), text("assistant", 1005)]
    database = upstream_db(tmp_path / "d.sqlite", SESSION, good)
    with SessionDatabase(parse_db(str(database))) as opened:
        assert len(opened.load(SESSION, lazy=True).messages) == 6

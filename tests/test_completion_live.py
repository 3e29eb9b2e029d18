"""Shell completion beside a live bot (issue 28, review finding 1).

A TAB on ``--session`` reads the database's session ids. Upstream's bot writes with ``node:sqlite``'s defaults —
rollback journal (DELETE) and busy timeout 0 — so any SHARED lock a completion holds at the bot's COMMIT makes
that write fail and the chat message is lost. The bot here is a real second process with the same settings
(Python ``sqlite3``, ``timeout=0``, autocommit), appending upstream-shaped ``agent_messages`` rows to a copy of
tests/data/upstream-db/data.sqlite while completion runs in a loop.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from conftest import clean_env

from zhin_cli._cli import data

UPSTREAM_DB = Path(__file__).parent / "data" / "upstream-db" / "data.sqlite"
SESSION_ID = "onebot11:tokyo-ob11:group:856301447#1792120040034-1"
EXPECTED = {SESSION_ID, "onebot11:tokyo-ob11:group:856301447", "onebot11:tokyo-ob11:private:284100105"}

# The bot: one connection kept open, busy timeout 0, one INSERT = one transaction; a refused write is counted.
BOT = r"""
import json, sqlite3, sys, time
db, seconds, session = sys.argv[1], float(sys.argv[2]), sys.argv[3]
conn = sqlite3.connect(db, timeout=0, isolation_level=None)
attempted = refused = 0
print("ready", flush=True)
sys.stdin.readline()
end = time.monotonic() + seconds
while time.monotonic() < end:
    attempted += 1
    payload = json.dumps({"role": "user", "content": [{"type": "text", "text": f"live {attempted}"}]})
    try:
        conn.execute("INSERT INTO agent_messages (session_id, role, payload, parent_id, extra, timestamp)"
                     " VALUES (?, 'user', ?, NULL, '', ?)", (session, payload, int(time.time() * 1000)))
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
        refused += 1
    time.sleep(0.002)
conn.close()
print(json.dumps({"attempted": attempted, "refused": refused}), flush=True)
"""


def live_copy(folder: Path) -> Path:
    db = folder / "data.sqlite"
    shutil.copy(UPSTREAM_DB, db)
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode=delete").fetchone()[0] == "delete"
    return db


def complete_beside_bot(db: Path, seconds: float = 3.0) -> tuple[dict[str, int], int, int]:
    """Completion in a loop while the bot writes: the bot's counts, completions run, completions missing a session."""
    bot = subprocess.Popen([sys.executable, "-c", BOT, str(db), str(seconds), SESSION_ID], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, env=clean_env())
    assert bot.stdin is not None and bot.stdout is not None
    assert bot.stdout.readline().strip() == "ready"
    bot.stdin.write("go\n")
    bot.stdin.flush()
    runs = incomplete = 0
    while bot.poll() is None:
        shown = {item.value for item in data.complete_sessions("onebot11", db=str(db))}
        runs += 1
        incomplete += not EXPECTED <= shown
    counts = json.loads(bot.stdout.readline())
    assert bot.wait(10) == 0
    return counts, runs, incomplete


def test_completion_beside_a_busy_timeout_0_bot_loses_none_of_its_writes(tmp_path: Path) -> None:
    counts, runs, incomplete = complete_beside_bot(live_copy(tmp_path))
    assert counts["attempted"] > 100 and runs > 20, (counts, runs)
    assert counts["refused"] == 0, f"{counts['refused']} of {counts['attempted']} bot writes refused in {runs} TABs"
    assert incomplete == 0, f"{incomplete} of {runs} completions lacked a session"


def _old_direct_connect(database: Path) -> sqlite3.Connection:
    """What completion did before: a plain read-only connection, which takes SQLite's SHARED lock to read."""
    return sqlite3.connect(f"file:{database.resolve()}?mode=ro", uri=True, timeout=0.2)


def test_negative_control_a_direct_read_only_connection_makes_the_bot_lose_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opener: Callable[[Path], sqlite3.Connection] = _old_direct_connect
    monkeypatch.setattr(data, "_open_for_reading", opener)
    counts, runs, _ = complete_beside_bot(live_copy(tmp_path))
    assert counts["refused"] > 0, f"the harness cannot fail: 0 of {counts['attempted']} refused in {runs} TABs"


def test_completion_of_a_wal_database_still_lists_its_sessions(tmp_path: Path) -> None:
    db = live_copy(tmp_path)
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode=wal").fetchone()[0] == "wal"
    assert EXPECTED <= {item.value for item in data.complete_sessions("onebot11", db=str(db))}


def test_completion_of_a_file_that_is_not_a_database_is_empty(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 10)
    assert data.complete_sessions("onebot11", db=str(junk)) == []
    assert data.complete_sessions("onebot11", db=str(tmp_path / "missing.sqlite")) == []

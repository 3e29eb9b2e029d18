"""A bot writing its database, for tests/test_live_writer.py: plain ``sqlite3`` in a process of its own.

Write number ``i`` is one transaction that touches every table a session load reads — a new message on the
active branch (and the session row's leaf), the profile's title, a summary anchored on the new message (and the
oldest writer summary deleted), a scene change, one member row updated and one replaced — so a read that mixes
two snapshots differs from both. Writes are deterministic: applying 1..i to a copy of the start database gives
the writer's i-th snapshot exactly, the quiescent reference a live read is compared with.

As a script (the writer process)::

    python tests/sqlite_writer.py DB FIRST LAST [--stay] [--busy-ms N] [--until EPOCH_S] [--pause-ms N]

writes FIRST..LAST (or until the deadline), reconnecting for each write unless ``--stay``; before each COMMIT it
prints ``committing i`` and after it ``done i`` (flushed), so a test can let it run between two statements.
A write refused by a lock is retried with the same number (the snapshots stay 1..i).
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
import time
from pathlib import Path

SESSION_ID = "icqq:8596238:private:10002#1761800000000-1"
SESSION_KEY = "icqq:8596238:private:10002"
BASE_TIME = 1_761_900_000_000


def apply(conn: sqlite3.Connection, i: int) -> None:
    """Write number ``i`` (inside the caller's transaction)."""
    at = BASE_TIME + i * 1000
    leaf = conn.execute("SELECT active_leaf_message_id FROM agent_sessions WHERE session_id = ?", (SESSION_ID,)).fetchone()[0]
    payload = {"role": "user", "content": [{"type": "text", "text": f"live write {i}"}], "timestamp": at,
               "messageId": f"w-{i}", "actor": {"subjectId": "10002", "displayName": "小明", "roles": [], "scope": "private"}}
    row = conn.execute(
        "INSERT INTO agent_messages (session_id, role, payload, parent_id, extra, timestamp) VALUES (?,?,?,?,?,?)",
        (SESSION_ID, "user", json.dumps(payload, ensure_ascii=False, separators=(",", ":")), leaf, "", at),
    ).lastrowid
    conn.execute("UPDATE agent_sessions SET active_leaf_message_id = ?, updated_at = ? WHERE session_id = ?", (row, at, SESSION_ID))
    conn.execute("UPDATE ai_session_profiles SET title = ? WHERE session_key = ?", (f"title {i}", SESSION_KEY))
    conn.execute("INSERT INTO agent_summaries (session_id, summary, anchor_message_id, created_at) VALUES (?,?,?,?)",
                 (SESSION_ID, f"summary {i}", row, at))
    if i > 2:
        conn.execute("DELETE FROM agent_summaries WHERE session_id = ? AND summary = ?", (SESSION_ID, f"summary {i - 2}"))
    conn.execute("INSERT INTO zhin_scene_changes (session_id, timestamp, changes) VALUES (?,?,?)",
                 (SESSION_ID, at, json.dumps({"scene_name": f"title {i}"})))
    conn.execute("INSERT OR REPLACE INTO ai_scene_members (platform, scene_key, user_id, card, updated_at) VALUES (?,?,?,?,?)",
                 ("icqq", SESSION_KEY, "10002", f"card {i}", at))
    conn.execute("DELETE FROM ai_scene_members WHERE scene_key = ? AND user_id = ?", (SESSION_KEY, f"visitor {i - 1}"))
    conn.execute("INSERT INTO ai_scene_members (platform, scene_key, user_id, card, updated_at) VALUES (?,?,?,?,?)",
                 ("icqq", SESSION_KEY, f"visitor {i}", "guest", at))


def write(path: Path, i: int, *, busy_ms: int = 10_000, conn: sqlite3.Connection | None = None,
          announce: bool = False) -> bool:
    """One write (``conn`` stays open if given, else a connection of its own); False if a lock refused it."""
    own = conn is None
    connection = conn or sqlite3.connect(path, timeout=busy_ms / 1000, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        try:
            apply(connection, i)
            if announce:
                print(f"committing {i}", flush=True)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        if announce:
            print(f"done {i}", flush=True)
        return True
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
        return False
    finally:
        if own:
            connection.close()


def snapshot_at(start: Path, i: int, folder: Path) -> Path:
    """The writer's i-th snapshot: a copy of the start database with writes 1..i applied, quiescently (built from
    the nearest earlier snapshot already in ``folder``)."""
    target = folder / f"snapshot-{i}.sqlite"
    if target.exists():
        return target
    base, done = start, 0
    for j in range(i - 1, 0, -1):
        if (folder / f"snapshot-{j}.sqlite").exists():
            base, done = folder / f"snapshot-{j}.sqlite", j
            break
    partial = folder / f"snapshot-{i}.partial"
    partial.write_bytes(base.read_bytes())
    conn = sqlite3.connect(partial, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        for n in range(done + 1, i + 1):
            conn.execute("BEGIN")
            apply(conn, n)
            conn.execute("COMMIT")
    finally:
        conn.close()
    partial.rename(target)
    return target


def main(argv: list[str]) -> int:
    path, first, last = Path(argv[0]), int(argv[1]), int(argv[2])
    stay = "--stay" in argv
    busy_ms = int(argv[argv.index("--busy-ms") + 1]) if "--busy-ms" in argv else 10_000
    until = float(argv[argv.index("--until") + 1]) if "--until" in argv else None
    pause_ms = int(argv[argv.index("--pause-ms") + 1]) if "--pause-ms" in argv else 0
    rng = random.Random(first)
    conn = sqlite3.connect(path, timeout=busy_ms / 1000, isolation_level=None) if stay else None
    i = first
    refused = 0
    while i <= last and (until is None or time.time() < until):
        if write(path, i, busy_ms=busy_ms, conn=conn, announce=True):
            i += 1
        else:
            refused += 1
        if pause_ms:
            time.sleep(rng.uniform(0, pause_ms / 1000))
    if conn is not None:
        conn.close()
    print(f"last {i - 1} refused {refused}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

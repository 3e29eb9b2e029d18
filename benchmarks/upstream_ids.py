"""Load time of an upstream session whose turn rows and replies get their platform ids (issue 28, findings 1, 12).

The private chat of the real database (tests/data/upstream-db) grown to N turns: each a turn row (``[Turn
context]``, the member's text) and the bot's reply row, both with their ``message.created`` rows in
``conversation_events``, as upstream writes them. A load matches every turn row and reply to its event
(``store.upstream.give_platform_ids``); a lazy load matches them from what its outline scan keeps of each row (its
sender and text: ``OutlineFacts.said``), reading and parsing no row again. Prints the best of five loads, eager
and lazy (the lazy one reads no message after the load), and the ids given.

    .venv/bin/python benchmarks/upstream_ids.py

Run with ``PYTHONPATH=<an older checkout>`` to measure that code.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from zhin_cli.store.db import SessionDatabase, parse_db

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "upstream-db" / "data.sqlite"
P = "onebot11:tokyo-ob11:private:284100105"
START = 1792239400000  # after the private chat's last turn
CONTEXT = ("[Turn context]\nTime: 2026/10/17 21:20:00 (Asia/Tokyo)\nModel: openai/gpt-4.1-mini\n"
           "Sender: id=284100105 name=小林 roles=user\n[/Turn context]\n\n")


def database(folder: Path, turns: int) -> Path:
    db = folder / f"ids-{turns}.sqlite"
    shutil.copyfile(DATA, db)
    with sqlite3.connect(db) as conn:
        session_id, leaf = conn.execute("SELECT session_id, active_leaf_message_id FROM agent_sessions"
                                        " WHERE session_key = ?", (P,)).fetchone()
        key = conn.execute("SELECT conversation_key FROM conversation_events WHERE message_key != ''"
                           " AND json_extract(event_json, '$.conversation.kind') = 'private' LIMIT 1").fetchone()[0]
        rows, events = [], []
        next_id = conn.execute("SELECT max(id) FROM agent_messages").fetchone()[0] + 1
        for turn in range(turns):
            said, user_id, reply_id = START + turn * 60_000, next_id + 2 * turn, next_id + 2 * turn + 1
            text, answer = f"第{turn}个问题", f"ok {turn:08x}"
            rows.append((user_id, session_id, "user", json.dumps(
                {"role": "user", "content": [{"type": "text", "text": CONTEXT + text}], "timestamp": said + 30,
                 "actor": {"subjectId": "284100105", "displayName": "小林", "roles": ["user"], "scope": "private"}},
                ensure_ascii=False), leaf if turn == 0 else user_id - 1, "", said + 30))
            rows.append((reply_id, session_id, "assistant", json.dumps(
                {"role": "assistant", "content": [{"type": "text", "text": answer}], "stopReason": "stop",
                 "timestamp": said + 60}), user_id, "", said + 60))
            events.append((f"m{turn}", key, f"{key}\0{4100000 + turn}", json.dumps(
                {"type": "message.created", "timestamp": said, "message": {
                    "ref": {"id": str(4100000 + turn)}, "actor": {"id": "284100105", "displayName": "小林"},
                    "segments": [{"type": "text", "data": {"text": text}}], "timestamp": said}},
                ensure_ascii=False), said))
            events.append((f"b{turn}", key, f"{key}\0{4600000 + turn}", json.dumps(
                {"type": "message.created", "timestamp": said + 90, "message": {
                    "ref": {"id": str(4600000 + turn)}, "segments": [{"type": "markdown", "data": {"content": answer}}],
                    "timestamp": said + 90}}), said + 90))
        conn.executemany("INSERT INTO agent_messages (id, session_id, role, payload, parent_id, extra, timestamp)"
                         " VALUES (?,?,?,?,?,?,?)", rows)
        conn.executemany("INSERT INTO conversation_events (event_id, conversation_key, message_key, event_json, time)"
                         " VALUES (?,?,?,?,?)", events)
        conn.execute("UPDATE agent_sessions SET active_leaf_message_id = ? WHERE session_id = ?",
                     (next_id + 2 * turns - 1 if turns else leaf, session_id))
    return db


def best_load(db: Path, lazy: bool) -> tuple[float, int]:
    best, given = float("inf"), 0
    for _ in range(5):
        start = time.perf_counter()
        with SessionDatabase(parse_db(str(db))) as source:
            session = source.load(P, lazy=lazy)
            best = min(best, time.perf_counter() - start)
            given = sum(1 for i in session.outline.message_ids if i is not None)
    return best, given


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        for turns in (0, 1_000, 10_000):
            db = database(Path(folder), turns)
            for lazy in (False, True):
                seconds, given = best_load(db, lazy)
                print(f"{turns:>6} added turns, {'lazy ' if lazy else 'eager'}: load {seconds * 1000:8.1f} ms,"
                      f" {given} messages with a platform id")
    return 0


if __name__ == "__main__":
    sys.exit(main())

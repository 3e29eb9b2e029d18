"""Load time of a session of the real upstream database with many member events (issue 28, findings 6–7).

A real bot's ``conversation_events`` holds the notices of every group it is in; a load reads only its own
conversation's (``store.db.sql.member_event_rows``: the distinct notice keys, then its rows). Two scalings:
other groups' notices (which a load must pass over cheaply) and the session's own events (each becomes an
``EventMessage`` of the history). Prints the best of five loads (``SessionDatabase.load`` lazy, then every message
read).

    .venv/bin/python benchmarks/upstream_events.py

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
A = "onebot11:tokyo-ob11:group:856301447"
NOTICE_KEY = "onebot11\0tokyo-ob11\0group\0{}\0\0\0"


def database(folder: Path, others: int, own: int) -> Path:
    db = folder / f"events-{others}-{own}.sqlite"
    shutil.copyfile(DATA, db)
    rows = [(f"x{i}", NOTICE_KEY.format(900000000 + i % 50), "",
             json.dumps({"type": "member.joined", "member": {"id": str(i)}, "actor": {"id": "1"}}), 1792330990000 + i)
            for i in range(others)]
    rows += [(f"o{i}", NOTICE_KEY.format(856301447), "",
              json.dumps({"type": "member.muted", "member": {"id": "284100104"}, "actor": {"id": "284100102"},
                          "durationSeconds": 60}), 1792120000000 + i * 20_000) for i in range(own)]
    with sqlite3.connect(db) as conn:
        conn.executemany("INSERT INTO conversation_events (event_id, conversation_key, message_key, event_json, time)"
                         " VALUES (?,?,?,?,?)", rows)
    return db


def best_load(db: Path) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(5):
        start = time.perf_counter()
        with SessionDatabase(parse_db(str(db))) as source:
            session = source.load(A, lazy=True)
        count = len(list(session.messages))
        best = min(best, time.perf_counter() - start)
    return best, count


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        for others, own in ((0, 0), (10_000, 0), (100_000, 0), (0, 1_000), (0, 10_000)):
            seconds, count = best_load(database(Path(folder), others, own))
            print(f"other groups' events {others:>7,}  own extra events {own:>6,}: load + read {count:>6,} messages "
                  f"{seconds * 1000:7.1f} ms (best of 5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Refused bot writes beside zhin reads (issues 14 §1 and 28 item 3; the figures in docs/storage.md).

A bot process writes a message every ``--interval-ms`` through one connection that stays open, with
``busy_timeout`` 0 — node's ``node:sqlite`` default: a write that meets a lock fails at once ("database is
locked") and the chat message is lost. Beside it zhin reads in a loop; the share of refused writes is the figure.

Readers:

* ``cli``: ``zhin trace SESSION --json --db DB`` run again and again (what a person or a CI job does);
* ``load``: ``SessionDatabase.load`` in a tight loop in one process (the worst case: nothing but reading);
* ``shared``: a plain ``sqlite3`` reader, ``BEGIN``/``SELECT``/``COMMIT`` in a loop: the SHARED lock zhin's reads
  took before issue 28 (the negative control: it makes the writer fail);
* ``none``: no reader (the control: the writer alone is never refused).

Journal modes: ``delete`` (rollback journal: a reader's SHARED lock makes a committing writer fail) and ``wal``
(readers never block the writer).

    .venv/bin/python benchmarks/live_writer.py [--seconds 10] [--interval-ms 10] [--mode delete,wal] [--reader cli,load,shared,none] [--tiles N]

``--tiles N`` reads a database of the busy group fixture tiled N times (70 ≈ 10k messages) instead of the fixtures.

Run with ``PYTHONPATH=<an older checkout>`` to measure that code. It reports writes attempted, refused, the
share, and zhin reads done; for ``load`` also the time per read spent inside the read transaction, the whole
load's time, and how many private copies were made (rollback-journal files are read through one, issue 28).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SESSION = "icqq:8596238:group:1048877509"
BOT_SESSION = "icqq:8596238:group:999#1761699600000-1"

WRITER = r"""
import json, sqlite3, sys, time
db, seconds, interval = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]) / 1000
conn = sqlite3.connect(db, timeout=0, isolation_level=None)  # busy_timeout 0, autocommit: one INSERT = one transaction
payload = json.dumps({"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 0})
attempted = refused = 0
print("ready", flush=True)
sys.stdin.readline()
end = time.monotonic() + seconds
next_at = time.monotonic()
while time.monotonic() < end:
    attempted += 1
    try:
        conn.execute("INSERT INTO agent_messages (session_id, role, payload, parent_id, extra, timestamp) VALUES (?,?,?,NULL,'',?)",
                     (sys.argv[4], "user", payload, int(time.time() * 1000)))
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
        refused += 1
    next_at += interval
    time.sleep(max(0.0, next_at - time.monotonic()))
conn.close()
print(json.dumps({"attempted": attempted, "refused": refused}), flush=True)
"""


def make_db(folder: Path, mode: str, tiles: int) -> Path:
    db = folder / f"{mode}.sqlite"
    if tiles:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from replay import tiled

        from zhin_cli.store.database import import_session
        from zhin_cli.store.jsonl import read_session

        import_session(tiled(read_session(ROOT / "fixtures" / "group-busy.jsonl"), tiles), db)
    else:
        fixtures = sorted(str(p) for p in (ROOT / "fixtures").glob("*.jsonl"))
        subprocess.run([sys.executable, "-m", "zhin_cli", "import", *fixtures, "--db", str(db)], check=True, capture_output=True)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA journal_mode={mode}")
    conn.close()
    return db


def _copies_made() -> int:
    try:
        from zhin_cli.store.sqlite_snapshot import COPIES
    except ImportError:  # a checkout from before issue 28
        return 0
    return COPIES.copies_made


def run(db: Path, reader: str, seconds: float, interval_ms: float) -> dict[str, object]:
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(seconds), str(interval_ms), BOT_SESSION],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert writer.stdin is not None and writer.stdout is not None
    assert writer.stdout.readline().strip() == "ready"
    writer.stdin.write("go\n")
    writer.stdin.flush()
    reads = 0
    inside = 0.0
    loading = 0.0
    made = _copies_made()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZHIN_")}
    if reader == "load":
        from sqlalchemy import Engine, event

        from zhin_cli.store.database import SessionDatabase, parse_db

        began: list[float] = []

        def on_begin(_conn: object) -> None:
            began.append(time.perf_counter())

        def on_end(_conn: object) -> None:
            nonlocal inside
            if began:
                inside += time.perf_counter() - began.pop()

        event.listen(Engine, "begin", on_begin)
        event.listen(Engine, "commit", on_end)
        event.listen(Engine, "rollback", on_end)
    while writer.poll() is None:
        if reader == "cli":
            subprocess.run([sys.executable, "-m", "zhin_cli", "trace", SESSION, "--json", "--db", str(db)],
                           capture_output=True, env=env, check=False)
        elif reader == "load":
            started = time.perf_counter()
            with SessionDatabase(parse_db(str(db))) as database:
                database.load(SESSION)
            loading += time.perf_counter() - started
        elif reader == "shared":
            shared = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
            shared.execute("BEGIN")
            shared.execute("SELECT payload FROM agent_messages WHERE session_id LIKE ?", (SESSION + "%",)).fetchall()
            shared.execute("COMMIT")
            shared.close()
        else:
            time.sleep(0.05)
        reads += 1
    counts = json.loads(writer.stdout.readline())
    result: dict[str, object] = {**counts, "reads": reads,
                                 "refused_pct": round(100 * counts["refused"] / max(counts["attempted"], 1), 2)}
    if reader == "load":
        result["ms_in_read_transaction_per_read"] = round(1000 * inside / max(reads, 1), 2)
        result["ms_per_load"] = round(1000 * loading / max(reads, 1), 2)
        result["private_copies_made"] = _copies_made() - made
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--mode", default="delete,wal")
    parser.add_argument("--reader", default="none,cli,load")
    parser.add_argument("--tiles", type=int, default=0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="zhin-live-writer-"))
    try:
        import zhin_cli

        print(f"zhin from {Path(zhin_cli.__file__).parent}; SQLite {sqlite3.sqlite_version}; "
              f"{args.seconds:g} s per run, a write every {args.interval_ms:g} ms")
        for mode in args.mode.split(","):
            for reader in args.reader.split(","):
                db = make_db(folder, mode, args.tiles)
                result = run(db, reader, args.seconds, args.interval_ms)
                print(json.dumps({"mode": mode, "reader": reader, **result}))
                db.unlink()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

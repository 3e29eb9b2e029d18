"""Reading a database that a bot is writing (issue 14 §1).

The writer is a real second process (tests/sqlite_writer.py: plain ``sqlite3``, its own connection, as the bot
has). Every read must equal a quiescent re-read of a snapshot the writer actually produced:

* the deterministic interleaving: the writer attaches, commits and closes between two of zhin's statements, for
  every pair (SQLite's trace hook runs it synchronously there);
* a random hammer for a bounded time, the writer reconnecting per write and staying connected;

both in WAL mode and in rollback-journal (DELETE) mode. Also: the database file stays byte-identical (the
``-wal``/``-shm`` SQLite creates for a WAL read are removed only when no one else uses them), and a hot journal
is a one-line error.
"""

from __future__ import annotations

import hashlib
import os
import select
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlite_writer
from conftest import FIXTURES, clean_env, run_zhin
from sqlalchemy import Engine, event, func
from sqlalchemy import select as sql_select

from zhin_cli.core.model import Session
from zhin_cli.store import schema
from zhin_cli.store.db import SessionDatabase, import_session, parse_db
from zhin_cli.store.jsonl import read_session

WRITER = Path(__file__).with_name("sqlite_writer.py")
MODES = ["wal", "delete"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("template") / "start.sqlite"
    import_session(read_session(FIXTURES / "private-chat.jsonl"), db)
    return db


def start_db(template: Path, folder: Path, mode: str) -> Path:
    """A copy of the start database in ``mode``, with no writer attached (no -wal, no -journal)."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "data.sqlite"
    shutil.copy(template, db)
    conn = sqlite3.connect(db)
    assert conn.execute(f"PRAGMA journal_mode={mode}").fetchone()[0] == mode
    conn.close()
    assert sorted(p.name for p in folder.iterdir()) == ["data.sqlite"]
    return db


def canonical(session: Session) -> str:
    """Everything a load returns, as one comparable text."""
    return repr((session.session_id, session.session_key, session.timezone, session.bot, session.scene,
                 [m.raw for m in session.messages], session.summaries, session.scene_changes, session.members))


def read(db: Path) -> str:
    """zhin's read of the session; an error is a result too (it must not happen)."""
    try:
        with SessionDatabase(parse_db(str(db))) as database:
            return canonical(database.load(sqlite_writer.SESSION_KEY))
    except Exception as exc:  # noqa: BLE001 - every failure is a wrong read here
        return f"error: {type(exc).__name__}: {exc}"


def writes_in(result: str) -> int:
    """Which writer snapshot a result claims to be: the number of writer messages in it."""
    return result.count("live write ")


class Writer:
    """The writer process, with its ``committing i`` / ``done i`` lines read without blocking past a timeout."""

    def __init__(self, db: Path, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WRITER), str(db), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0, env=clean_env())
        self.buffer = b""

    def wait_for(self, word: str, timeout: float) -> bool:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while word.encode() not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    return word.encode() in self.buffer
                self.buffer += chunk
        return True

    def finish(self) -> str:
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err.decode()
        return (self.buffer + out).decode()


@contextmanager
def between_statements(callback: Callable[[int], None]) -> Iterator[list[str]]:
    """Call ``callback(n)`` before zhin's n-th SQLite statement (BEGIN, each SELECT, COMMIT) starts running;
    yields the statements. SQLite's own trace hook (``set_trace_callback``) on every connection zhin opens: it
    fires as a statement begins, before it takes a lock, whichever layer sent it."""
    statements: list[str] = []

    def trace(statement: str) -> None:
        callback(len(statements))
        statements.append(statement)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(trace)

    event.listen(Engine, "connect", on_connect)
    try:
        yield statements
    finally:
        event.remove(Engine, "connect", on_connect)


def load_with_writer_at(db: Path, point: int, reader: Callable[[Path], str] = read) -> tuple[str, int]:
    """``reader``'s read (default: a session load) with the writer process started before statement ``point``: it
    commits there if the database lets it (WAL; rollback mode before zhin's read lock), else it waits for zhin's
    COMMIT. The read and how many statement points there were."""
    writers: list[Writer] = []

    def maybe_write(n: int) -> None:
        if n == point:
            writer = Writer(db, "1", "1")
            writers.append(writer)
            assert writer.wait_for("committing 1", 60), "the writer never reached its COMMIT"
            writer.wait_for("done 1", 0.3)  # committed, or blocked by zhin's lock

    with between_statements(maybe_write) as statements:
        result = reader(db)
    for writer in writers:
        assert "done 1" in writer.finish()
    return result, len(statements)


def mixed_reads(template: Path, folder: Path, mode: str, reader: Callable[[Path], str] = read) -> tuple[list[str], int]:
    """The writer committing before each of ``reader``'s statements in turn, each on a fresh copy: the reads that
    are neither the state before nor the state after the write, and how many statement points there were."""
    before = reader(start_db(template, folder / "s0", mode))
    after = reader(sqlite_writer.snapshot_at(template, 1, folder))
    assert before != after and not before.startswith("error") and not after.startswith("error")
    points, point, wrong = 1, 0, []
    while point < points:
        db = start_db(template, folder / f"run{point}", mode)
        result, points = load_with_writer_at(db, point, reader)
        assert reader(db) == after  # the writer did produce snapshot 1
        if result not in (before, after):
            wrong.append(f"writer before statement {point}: {result[:300]}")
        point += 1
    return wrong, points


@pytest.mark.parametrize("mode", MODES)
def test_a_writer_committing_between_any_two_statements_never_shows_a_mixed_read(template: Path, tmp_path: Path,
                                                                                mode: str) -> None:
    wrong, points = mixed_reads(template, tmp_path, mode)
    assert points >= 8, "the hook saw too few statements to interleave"
    assert not wrong, f"{len(wrong)} of {points} interleavings read wrong: " + " | ".join(wrong)


@pytest.mark.parametrize("mode", MODES)
def test_negative_control_the_hook_lets_a_writer_commit_between_two_transactions(template: Path, tmp_path: Path,
                                                                                   mode: str) -> None:
    """The harness is real: two statements in two read transactions see the writer's commit between them; the
    same two statements inside one snapshot do not."""
    db = start_db(template, tmp_path, mode)
    m = schema.agent_messages
    count = sql_select(func.count()).select_from(m)
    with SessionDatabase(parse_db(str(db))) as database:
        with database.snapshot() as conn:
            first = conn.execute(count).scalar()
        writer = Writer(db, "1", "1")
        assert writer.wait_for("done 1", 60)
        writer.finish()
        with database.snapshot() as conn:
            second = conn.execute(count).scalar()
        assert first is not None and second == first + 1
        with database.snapshot() as conn:
            inside = [conn.execute(count).scalar()]
            writer = Writer(db, "2", "2")
            assert writer.wait_for("committing 2", 60)
            writer.wait_for("done 2", 0.3)
            inside.append(conn.execute(count).scalar())
        writer.finish()
        assert inside == [second, second]
        with database.snapshot() as conn:
            assert conn.execute(count).scalar() == second + 1


def hammer(template: Path, folder: Path, mode: str, seconds: float, *writer_args: str) -> tuple[int, list[str], set[int]]:
    """zhin reads in a loop while the writer writes for ``seconds``; every read is checked against the writer's
    snapshot it claims to be. (reads, wrong reads, snapshots seen)."""
    db = start_db(template, folder / "live", mode)
    snapshots = folder / "snapshots"
    snapshots.mkdir()
    writer = Writer(db, "1", "100000", "--until", str(time.time() + seconds), "--pause-ms", "20", *writer_args)
    results: list[str] = []
    while writer.proc.poll() is None:
        results.append(read(db))
    output = writer.finish()
    last = int(output.split("last ")[1].split()[0])
    assert last >= 5, output
    expected: dict[int, str] = {}
    wrong = []
    seen = set()
    for result in results:
        n = writes_in(result)
        seen.add(n)
        if n not in expected:
            expected[n] = read(sqlite_writer.snapshot_at(template, n, snapshots) if n else start_db(template, folder / "s0", mode))
        if result != expected[n]:
            wrong.append(result[:200])
    assert read(db) == read(sqlite_writer.snapshot_at(template, last, snapshots))
    return len(results), wrong, seen


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("connection", ["reconnecting", "staying"])
def test_random_hammer_every_read_is_a_snapshot_the_writer_produced(template: Path, tmp_path: Path, mode: str,
                                                                     connection: str) -> None:
    reads, wrong, seen = hammer(template, tmp_path, mode, 2.5, *(["--stay"] if connection == "staying" else []))
    assert reads >= 10 and len(seen) >= 3, (reads, seen)  # not vacuous: many reads, of several snapshots
    assert not wrong, f"{len(wrong)} of {reads} reads wrong, e.g. {wrong[0]}"


# --- the file stays byte-identical ---------------------------------------------------------------------------


def test_a_wal_read_leaves_no_files_and_the_database_unchanged(template: Path, tmp_path: Path) -> None:
    db = start_db(template, tmp_path, "wal")
    before, mtime = digest(db), os.stat(db).st_mtime_ns
    assert "error" not in read(db)[:10]
    assert digest(db) == before and os.stat(db).st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.sqlite"]


def test_negative_control_sqlite_itself_leaves_wal_files_after_a_read_only_read(template: Path, tmp_path: Path) -> None:
    db = start_db(template, tmp_path, "wal")
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.execute("SELECT count(*) FROM agent_messages").fetchone()
    conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.sqlite", "data.sqlite-shm", "data.sqlite-wal"]


def test_the_wal_files_of_a_connected_writer_are_left_alone(template: Path, tmp_path: Path) -> None:
    db = start_db(template, tmp_path, "wal")
    bot = sqlite3.connect(db, isolation_level=None)  # a bot that stays connected: it owns -wal/-shm
    bot.execute("PRAGMA wal_autocheckpoint=0")
    assert sqlite_writer.write(db, 1, conn=bot)
    wal = Path(f"{db}-wal")
    size = wal.stat().st_size
    assert size > 0
    result = read(db)
    assert writes_in(result) == 1
    assert wal.stat().st_size == size and Path(f"{db}-shm").exists()
    assert sqlite_writer.write(db, 2, conn=bot)  # and the bot goes on writing
    bot.close()
    assert writes_in(read(db)) == 2


def test_a_writer_that_commits_and_closes_during_a_wal_read_keeps_its_commit(template: Path, tmp_path: Path) -> None:
    """The writer cannot checkpoint past zhin's read: its commit stays in the -wal, which zhin must not remove."""
    db = start_db(template, tmp_path, "wal")
    with SessionDatabase(parse_db(str(db))) as database:
        with database.snapshot() as conn:
            conn.execute(sql_select(func.count()).select_from(schema.agent_messages)).scalar()
            writer = Writer(db, "1", "1")
            assert writer.wait_for("done 1", 60)
            writer.finish()
    assert Path(f"{db}-wal").stat().st_size > 0  # the commit, still in the -wal
    conn2 = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert conn2.execute("SELECT count(*) FROM agent_messages WHERE payload LIKE '%live write 1%'").fetchone() == (1,)
    conn2.close()
    assert writes_in(read(db)) == 1


@pytest.mark.parametrize("mode", MODES)
def test_reads_beside_a_writer_never_change_the_database_file_zhin_itself_writes_nothing(template: Path, tmp_path: Path,
                                                                                        mode: str) -> None:
    """With the writer gone and its changes checkpointed, only zhin touches the file: it stays byte-identical.

    The commands run in this process (``run_zhin``): no -wal/-shm/-journal may be left even while the process
    lives on, which a process that exits after each command could not show."""
    db = start_db(template, tmp_path, mode)
    before = digest(db)
    for command in (["export", sqlite_writer.SESSION_KEY], ["sessions", "--json"], ["trace", sqlite_writer.SESSION_KEY, "--json"]):
        result = run_zhin(*command, "--db", db, cwd=tmp_path)
        assert result.returncode in (0, 1), result.stderr
        assert result.stdout, command  # the command did read the database
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.sqlite"]


# --- a hot journal --------------------------------------------------------------------------------------------


def crash_mid_transaction(db: Path) -> Path:
    """A writer killed with its transaction open and pages already written: a hot journal."""
    subprocess.run([sys.executable, "-c", f"""
import os, sqlite3
conn = sqlite3.connect({str(db)!r}, isolation_level=None)
conn.execute("PRAGMA cache_size=1")
conn.execute("BEGIN")
conn.execute("UPDATE agent_messages SET payload = payload || ' '")
os._exit(0)
"""], check=True)
    journal = Path(f"{db}-journal")
    assert journal.exists() and journal.stat().st_size > 0
    return journal


def test_a_hot_journal_is_one_line_naming_the_journal_and_the_recovery(template: Path, tmp_path: Path) -> None:
    db = start_db(template, tmp_path, "delete")
    expected = read(db)
    journal = crash_mid_transaction(db)
    before = digest(db)
    result = subprocess.run([sys.executable, "-m", "zhin_cli", "export", sqlite_writer.SESSION_KEY, "--db", str(db)],
                            capture_output=True, text=True, env=clean_env(), cwd=tmp_path)
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("zhin: error: ")
    assert f"hot journal {journal}" in result.stderr and "crashed" in result.stderr
    assert f"sqlite3 {db} 'PRAGMA user_version'" in result.stderr
    assert "readonly" not in result.stderr and "Traceback" not in result.stderr
    assert digest(db) == before and journal.exists()  # zhin rolled nothing back
    # the recovery the message names works: a writable open rolls the journal back
    subprocess.run(["sqlite3", str(db), "PRAGMA user_version"], check=True, capture_output=True)
    assert not journal.exists()
    assert read(db) == expected


def test_negative_control_a_live_writer_s_journal_is_not_hot(template: Path, tmp_path: Path) -> None:
    """A journal with its writer alive (holding its lock) is not hot: zhin reads the committed state."""
    db = start_db(template, tmp_path, "delete")
    expected = read(db)
    bot = sqlite3.connect(db, isolation_level=None)
    bot.execute("BEGIN IMMEDIATE")
    sqlite_writer.apply(bot, 1)
    assert Path(f"{db}-journal").exists()
    try:
        assert read(db) == expected
    finally:
        bot.execute("ROLLBACK")
        bot.close()

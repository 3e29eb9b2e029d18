"""Reading beside a bot with busy timeout 0 in rollback-journal mode loses none of its writes (issue 28 item 3).

The writer (tests/sqlite_writer.py, a process of its own) opens the database as upstream's ``node:sqlite`` does
by default — busy timeout 0, autocommit, journal_mode=DELETE — and counts the writes a lock refused. Each write
changes every table a session load reads in one transaction, so a torn read differs from every snapshot the
writer produced (the invariant every read is checked against). Negative control: a plain ``sqlite3`` reader,
which holds SQLite's SHARED lock as zhin's reads did, makes the same writer fail.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlite_writer
from conftest import run_zhin
from test_live_writer import Writer, crash_mid_transaction, read, start_db, template, writes_in  # noqa: F401

from zhin_cli.store import sqlite_snapshot
from zhin_cli.store.sqlite_snapshot import SnapshotCopies, file_state, writer_state
from zhin_cli.store.sqlite_snapshot import Writer as State

SECONDS = 6.0


def refused(output: str) -> int:
    return int(output.split("refused ")[1].split()[0])


def live_writer(db: Path, seconds: float) -> Writer:
    return Writer(db, "1", "1000000", "--until", str(time.time() + seconds), "--pause-ms", "20", "--busy-ms", "0",
                  "--stay")


def test_a_busy_timeout_0_writer_loses_no_write_while_zhin_reads_in_a_loop(template: Path, tmp_path: Path) -> None:  # noqa: F811
    db = start_db(template, tmp_path / "live", "delete")
    writer = live_writer(db, SECONDS)
    results = []
    while writer.proc.poll() is None:
        results.append(read(db))
    output = writer.finish()
    last = int(output.split("last ")[1].split()[0])
    assert last >= 20 and len(results) >= 20, (output, len(results))  # not vacuous: many writes, many reads
    assert refused(output) == 0, output
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    expected: dict[int, str] = {0: read(start_db(template, tmp_path / "s0", "delete"))}
    seen = set()
    for result in results:  # every read is one snapshot the writer produced: the invariant holds in each
        n = writes_in(result)
        seen.add(n)
        if n not in expected:
            expected[n] = read(sqlite_writer.snapshot_at(template, n, snapshots))
        assert result == expected[n], result[:300]
    assert len(seen) >= 3, seen


def test_negative_control_a_reader_holding_shared_locks_makes_the_same_writer_fail(template: Path, tmp_path: Path) -> None:  # noqa: F811
    db = start_db(template, tmp_path, "delete")
    writer = live_writer(db, SECONDS / 2)
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
    while writer.proc.poll() is None:
        reader.execute("BEGIN")
        reader.execute("SELECT payload FROM agent_messages").fetchall()
        reader.execute("COMMIT")
    reader.close()
    assert refused(writer.finish()) > 0


def test_the_cli_reads_a_rollback_database_through_a_private_copy_and_leaves_it_unchanged(template: Path, tmp_path: Path) -> None:  # noqa: F811
    db = start_db(template, tmp_path, "delete")
    before = db.read_bytes()
    made = sqlite_snapshot.COPIES.copies_made
    result = run_zhin("trace", sqlite_writer.SESSION_KEY, "--json", "--db", db, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sqlite_snapshot.COPIES.copies_made == made + 1  # one copy, reused by every read of the command
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["data.sqlite"]
    wal = start_db(template, tmp_path / "wal", "wal")
    assert run_zhin("trace", sqlite_writer.SESSION_KEY, "--json", "--db", wal, cwd=tmp_path).returncode == 0
    assert sqlite_snapshot.COPIES.copies_made == made + 1  # negative control: a WAL file is read in place


def test_a_copy_torn_by_a_commit_is_thrown_away_and_made_again(template: Path, tmp_path: Path,  # noqa: F811
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    db = start_db(template, tmp_path, "delete")
    torn: list[bytes] = []
    copy = sqlite_snapshot._copy

    def copy_with_a_commit_halfway(fd: int, target: Path) -> None:
        if torn:
            return copy(fd, target)
        data = db.read_bytes()
        half = len(data) // 2
        assert sqlite_writer.write(db, 1)  # a bot commits while the first half is copied
        torn.append(data[:half] + db.read_bytes()[half:])
        target.write_bytes(torn[0])

    monkeypatch.setattr(sqlite_snapshot, "_copy", copy_with_a_commit_halfway)
    copies = SnapshotCopies()
    snapshot = copies.snapshot(db, lambda: AssertionError("no hot journal here"))
    assert copies.copies_made == 2 and copies.retries == 1
    assert snapshot.read_bytes() == db.read_bytes()
    # Negative control: the thrown-away copy was torn — neither the state before nor the one after the commit.
    before = start_db(template, tmp_path / "before", "delete").read_bytes()
    assert torn[0] not in (before, db.read_bytes())
    copies.forget()


def test_a_copy_is_reused_while_the_file_is_unchanged_and_made_again_after_a_commit(template: Path, tmp_path: Path) -> None:  # noqa: F811
    db = start_db(template, tmp_path, "delete")
    copies = SnapshotCopies()
    first = copies.snapshot(db, lambda: AssertionError())
    assert copies.snapshot(db, lambda: AssertionError()) == first and copies.copies_made == 1
    assert sqlite_writer.write(db, 1)
    second = copies.snapshot(db, lambda: AssertionError())
    assert copies.copies_made == 2 and second != first and not first.exists()
    assert second.read_bytes() == db.read_bytes()
    copies.forget()
    assert not second.exists()


HOLD = r"""
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size=1")  # pages spill into the file: EXCLUSIVE is taken before COMMIT
conn.execute("BEGIN IMMEDIATE")
if sys.argv[2] == "exclusive":
    conn.execute("UPDATE agent_messages SET payload = payload || ' '")
else:
    conn.execute("INSERT INTO zhin_scene_changes (session_id, timestamp, changes) VALUES ('x', 0, '{}')")
print("holding", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


@pytest.mark.parametrize("lock", ["reserved", "exclusive"])
def test_writer_state_asks_the_locks_without_taking_them(template: Path, tmp_path: Path, lock: str) -> None:  # noqa: F811
    db = start_db(template, tmp_path, "delete")
    fd = os.open(db, os.O_RDONLY)
    assert writer_state(fd, db) is State.QUIET  # negative control: nobody there
    bot = subprocess.Popen([sys.executable, "-c", HOLD, str(db), lock], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert bot.stdout is not None and bot.stdin is not None
    assert bot.stdout.readline().strip() == "holding"
    try:
        # RESERVED with a journal: the file is still the committed state; EXCLUSIVE: pages may be half-written
        assert writer_state(fd, db) is (State.QUIET if lock == "reserved" else State.WRITING)
    finally:
        bot.stdin.write("\n")
        bot.stdin.flush()
        bot.wait(timeout=30)
    assert writer_state(fd, db) is State.QUIET
    os.close(fd)


def test_a_crashed_writer_s_journal_is_hot_and_the_cli_says_so_in_one_line(template: Path, tmp_path: Path) -> None:  # noqa: F811
    db = start_db(template, tmp_path, "delete")
    crash_mid_transaction(db)
    fd = os.open(db, os.O_RDONLY)
    assert writer_state(fd, db) is State.HOT_JOURNAL
    os.close(fd)
    result = run_zhin("trace", sqlite_writer.SESSION_KEY, "--db", db, cwd=tmp_path)
    assert result.returncode == 3 and result.stderr.count("\n") == 1 and "hot journal" in result.stderr


def test_a_file_that_changes_during_every_copy_is_one_line_exit_3(template: Path, tmp_path: Path,  # noqa: F811
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    db = start_db(template, tmp_path, "delete")
    monkeypatch.setattr(sqlite_snapshot, "CHANGING_BUDGET_S", 0.3)
    monkeypatch.setattr(sqlite_snapshot, "writer_state", lambda fd, path: State.WRITING)
    sqlite_snapshot.COPIES.forget()
    result = run_zhin("trace", sqlite_writer.SESSION_KEY, "--db", db, cwd=tmp_path)
    assert result.returncode == 3 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and "changed during every copy" in result.stderr
    monkeypatch.undo()
    assert run_zhin("trace", sqlite_writer.SESSION_KEY, "--db", db, cwd=tmp_path).returncode == 0  # the control


def test_file_state_sees_a_commit(template: Path, tmp_path: Path) -> None:  # noqa: F811
    db = start_db(template, tmp_path, "delete")
    fd = os.open(db, os.O_RDONLY)
    before = file_state(fd)
    assert file_state(fd) == before  # negative control: no write, no difference
    assert sqlite_writer.write(db, 1)
    assert file_state(fd).header[24:28] != before.header[24:28]  # the change counter
    os.close(fd)


def test_descriptors_and_copies_are_let_go_beyond_the_kept_files(template: Path, tmp_path: Path) -> None:  # noqa: F811
    copies = SnapshotCopies()
    made = [copies.snapshot(start_db(template, tmp_path / str(n), "delete"), lambda: AssertionError())
            for n in range(sqlite_snapshot.KEPT_FILES + 3)]
    assert [p.exists() for p in made] == [False] * 3 + [True] * sqlite_snapshot.KEPT_FILES  # the oldest let go
    assert len(os.listdir("/proc/self/fd")) < 200
    copies.forget()
    assert not any(p.exists() for p in made)


def test_threads_reading_beside_the_writer_never_open_a_removed_copy(template: Path, tmp_path: Path) -> None:  # noqa: F811
    """`zhin view` reads in threads: one thread replacing the copy must not remove the one another is opening."""
    from concurrent.futures import ThreadPoolExecutor

    db = start_db(template, tmp_path, "delete")
    writer = live_writer(db, SECONDS / 2)

    def reads() -> list[str]:
        results = []
        while writer.proc.poll() is None:
            results.append(read(db))
        return results

    with ThreadPoolExecutor(4) as pool:
        results = [r for rs in pool.map(lambda _: reads(), range(4)) for r in rs]
    assert refused(writer.finish()) == 0
    assert len({writes_in(r) for r in results}) >= 3  # not vacuous: reads of several snapshots
    assert not [r for r in results if r.startswith("error")], [r for r in results if r.startswith("error")][:2]

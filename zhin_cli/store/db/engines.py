"""SQLAlchemy engines for one database: read-only ones (SQLite in place for WAL, through a private copy for a
rollback journal; servers with read-only sessions) and the writable one of ``zhin import`` / ``zhin facts prune``;
the hot-journal error; and the clean-up of the ``-wal``/``-shm`` files a read created."""

from __future__ import annotations

import fcntl
import importlib
import os
import sqlite3
import struct
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from zhin_cli.core.errors import InputError, SessionNotFound, ZhinError
from zhin_cli.store.db.urls import MYSQL, DatabaseRef, ServerDialect, db_error
from zhin_cli.store.sqlite_snapshot import COPIES as SNAPSHOT_COPIES
from zhin_cli.store.sqlite_snapshot import is_wal

SQLITE_READONLY_ROLLBACK = 776
# How long zhin's own statements wait for a writer's lock (s): a bot's commit holds the file for milliseconds.
SQLITE_BUSY_TIMEOUT_S = 10.0
# The lock bytes of SQLite's unix VFS (sqlite3.c: PENDING_BYTE, SHARED_FIRST, SHARED_SIZE).
_SHARED_FIRST = 0x40000000 + 2
_SHARED_SIZE = 510


def _sqlite_engine(uri: str, *, read_only: bool) -> Engine:
    """An SQLite engine whose transactions are real: pysqlite's legacy mode would send no BEGIN before a SELECT
    (each statement its own snapshot) nor before DDL. Here every SQLAlchemy transaction is one SQLite
    transaction — ``BEGIN`` (deferred: the snapshot is taken at the first SELECT) for reads, ``BEGIN IMMEDIATE``
    (the write lock up front, so a read-modify-write cannot interleave with a bot's write) for writes."""
    engine = create_engine(uri, poolclass=NullPool, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy's begin event below sends BEGIN, nothing else does
        if read_only:
            dbapi_connection.execute("PRAGMA query_only = ON")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def _private_copy_engine(path: Path) -> Engine:
    """A rollback-journal file is read through a private copy (zhin_cli/store/sqlite_snapshot.py): any SHARED
    lock of zhin's would make a busy-timeout-0 bot's COMMIT fail. Each connection opens the copy current at that
    moment, made without a lock and proven to be one committed state; ``immutable=1`` is right for a private file."""
    engine = _sqlite_engine(f"sqlite:///file:{quote(str(path))}?mode=ro&immutable=1&uri=true", read_only=True)

    @event.listens_for(engine, "do_connect")
    def _open_the_copy(_dialect: object, _record: object, _cargs: list[object], cparams: dict[str, Any]) -> sqlite3.Connection:
        def connect(copy: Path) -> sqlite3.Connection:
            connection: sqlite3.Connection = sqlite3.connect(f"file:{quote(str(copy))}?mode=ro&immutable=1", **cparams)
            return connection

        return SNAPSHOT_COPIES.open(path, lambda: hot_journal_error(path), connect)

    return engine


def require_driver(server: ServerDialect) -> None:
    """The server's driver is importable, or one line naming the extra that installs it (exit 3) — not
    SQLAlchemy's "No module named 'psycopg'" on the first connection."""
    if not server.driver_module:
        return
    try:
        importlib.import_module(server.driver_module)
    except ImportError:
        raise ZhinError(f"{server.scheme}:// needs the {server.server_name} driver: "
                        f"pip install 'zhin-cli[{server.extra}]'") from None


def read_only_engine(ref: DatabaseRef) -> Engine:
    if ref.sqlite_path is not None:
        path = ref.sqlite_path
        if not path.is_file():
            raise SessionNotFound(f"no such database file: {path}")
        with path.open("rb") as handle:
            header = handle.read(20)
            if header[:16] != b"SQLite format 3\x00":
                raise InputError("not an SQLite database", where=str(path))
        if not is_wal(header):
            return _private_copy_engine(path.resolve())
        # WAL: readers never block a writer, so the file is read in place — never with `immutable=1`, which
        # promises SQLite no one else writes the file: it takes no locks and notices no commit, and a bot
        # committing while zhin is between two SELECTs rewrites pages under it ("database disk image is malformed").
        return _sqlite_engine(f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true", read_only=True)
    assert ref.server is not None
    require_driver(ref.server)
    try:
        engine = create_engine(
            ref.url,
            connect_args={**ref.server.connect_args, **ref.server.read_only_connect_args},
            execution_options={"postgresql_readonly": True, "isolation_level": "REPEATABLE READ"},
            poolclass=NullPool,
        )
    except (SQLAlchemyError, ImportError) as exc:
        raise ZhinError(f"cannot open database: {db_error(exc)}", where=ref.label) from None
    if ref.server is MYSQL:
        @event.listens_for(engine, "begin")
        def _consistent_snapshot(conn: Connection) -> None:
            # InnoDB takes a REPEATABLE READ snapshot at the first read; this takes it now, read only.
            conn.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
    return engine


def writable_engine(ref: DatabaseRef, *, sqlite_path: Path | None = None) -> Engine:
    """For the commands that write when asked (``zhin import``, ``zhin facts prune``) — nothing else.
    ``sqlite_path`` writes another file than ``ref`` names (``zhin import`` builds a new database under a
    temporary name)."""
    if ref.sqlite_path is not None:
        path = sqlite_path or ref.sqlite_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ZhinError(f"cannot create folder: {exc.strerror}", where=str(path.parent)) from None
        return _sqlite_engine(f"sqlite:///{path}", read_only=False)
    assert ref.server is not None
    require_driver(ref.server)
    try:
        return create_engine(ref.url, connect_args=dict(ref.server.connect_args), poolclass=NullPool)
    except (SQLAlchemyError, ImportError) as exc:
        raise ZhinError(f"cannot open database: {db_error(exc)}", where=ref.label) from None


def hot_journal_error(path: Path) -> InputError:
    """A writer crashed mid-transaction: SQLite must roll its journal back before anyone reads, which a read-only
    connection cannot do (SQLite says "attempt to write a readonly database")."""
    return InputError(
        f"hot journal {path}-journal: a writer crashed mid-transaction and zhin, which only reads, cannot roll it back;"
        f" open the database once with a writer (start the bot, or run `sqlite3 {path} 'PRAGMA user_version'`),"
        " then run zhin again",
        where=str(path),
    )


def sqlite_error_code(exc: BaseException) -> int | None:
    original = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(original, "sqlite_errorcode", None)


# Resolved path → how many SessionDatabase objects of this process have it open: -wal/-shm are removed only
# after the last one closed.
_OPEN_HERE: dict[Path, int] = {}

# Per database file: one descriptor for _remove_created_wal_files, opened once and never closed — closing any
# descriptor of a file drops every POSIX lock this process holds on it, including those of SQLite connections.
_LOCK_FDS: dict[tuple[int, int], int] = {}


def _lock_fd(path: Path) -> int | None:
    try:
        st = os.stat(path)
        key = (st.st_dev, st.st_ino)
        if key not in _LOCK_FDS:
            fd = os.open(path, os.O_RDWR)  # a write lock needs a writable descriptor; nothing is written through it
            if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) != key:
                return None  # replaced in between; the descriptor stays open (see above), unused
            _LOCK_FDS[key] = fd
        return _LOCK_FDS[key]
    except OSError:
        return None


def _ofd_lock(fd: int, kind: int) -> bool:
    flock = struct.pack("hhqqi4x", kind, os.SEEK_SET, _SHARED_FIRST, _SHARED_SIZE, 0)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, flock)  # Linux
    except OSError:
        return False
    return True


def _remove_created_wal_files(path: Path, created: list[Path]) -> None:
    """Remove the ``-wal``/``-shm`` files SQLite created to read a WAL database (a read-only connection cannot
    checkpoint, so it leaves them) — only when that is certainly safe:

    * an exclusive lock on SQLite's SHARED byte range succeeds: every connection to a WAL database holds a shared
      lock there while it is open and takes one before it opens ``-wal``/``-shm``, so no connection has them open
      and none can open them until the lock is released. It is an open-file-description lock (Linux), which
      also conflicts with the locks of this process's own connections; without those locks the files stay;
    * the ``-wal`` holds no frame. A writer that attached, committed and closed while zhin read leaves its
      commits there (it cannot checkpoint past a reader): they are its data, for its next connection to
      checkpoint, and stay.
    """
    if not hasattr(fcntl, "F_OFD_SETLK") or not any(p.exists() for p in created):
        return
    fd = _lock_fd(path)
    if fd is None or not _ofd_lock(fd, fcntl.F_WRLCK):
        return  # a file zhin may not open for writing, or another connection is open: the files stay
    try:
        wal = Path(f"{path}-wal")
        if wal in created and wal.exists() and wal.stat().st_size > 0:
            return
        for file in created:
            file.unlink(missing_ok=True)
    except OSError:
        return
    finally:
        _ofd_lock(fd, fcntl.F_UNLCK)


def track_file(path: Path) -> list[Path]:
    """Count one more reader of the (resolved) SQLite ``path`` in this process; the ``-wal``/``-shm`` files that do
    not exist yet — what SQLite may create next to a WAL database for this read, removed at close when safe."""
    _OPEN_HERE[path] = _OPEN_HERE.get(path, 0) + 1
    return [p for p in (Path(f"{path}-wal"), Path(f"{path}-shm")) if not p.exists()]


def release_file(path: Path, created: list[Path]) -> None:
    """One reader of ``path`` closed; after the last one, remove the files its read created (when safe)."""
    _OPEN_HERE[path] -= 1
    if _OPEN_HERE[path] == 0:
        del _OPEN_HERE[path]
        if created:
            _remove_created_wal_files(path, created)

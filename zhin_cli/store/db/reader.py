"""Reading sessions from zhin's database (``SessionDatabase``): one read transaction per load (``fetch``), its rows
parsed after it ended (``parse``)."""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

import zhin_cli.store.schema as schema
from zhin_cli.core.errors import InputError, ZhinError, at_row
from zhin_cli.core.model import Message, Session
from zhin_cli.store.db.engines import (
    SQLITE_READONLY_ROLLBACK,
    hot_journal_error,
    read_only_engine,
    release_file,
    sqlite_error_code,
    track_file,
)
from zhin_cli.store.db.fetch import RowFetcher
from zhin_cli.store.db.parse import RowParser
from zhin_cli.store.db.rows import Row, as_rows
from zhin_cli.store.db.sql import (
    HOT_JOURNAL_RETRIES,
    IDS_PER_QUERY,
    SQL_MESSAGES_BY_ID,
    SQL_PROBE,
    SQL_SESSION_LIST,
    SQL_SQLITE_TABLES,
    query,
    table_names,
)
from zhin_cli.store.db.urls import DatabaseRef, db_error
from zhin_cli.store.payload import settle_bot_header


class SessionListing(TypedDict):
    """One epoch as ``SessionDatabase.list_sessions`` (and ``zhin sessions --json``) gives it."""

    session_id: str
    session_key: str | None
    status: str | None
    updated_at: int | str | None  # as stored (some upstream versions store times as text)
    messages: int  # its message rows
    last_activity: int | None  # ms: the newest message's time or the update's, whichever is later


@dataclass
class RowLoader:
    """``LazyMessages``' loader for a database session: each call opens the database again (the load's own
    connection is closed when it returns) and reads the rows of the positions asked for, by id."""

    ref: DatabaseRef
    session_id: str
    row_ids: Sequence[int]
    bot_id: str | None

    def __call__(self, positions: Sequence[int]) -> list[Message]:
        with SessionDatabase(self.ref) as database:
            return database.read_rows(self.session_id, [self.row_ids[p] for p in positions], self.bot_id)



class SessionDatabase:
    """Read-only access to the sessions in one database.

    Every read (``load``, ``list_sessions``, ``snapshot``) is one read transaction: all its SELECTs see one
    committed state of the database, whatever a bot commits meanwhile. Rows are fetched at once and parsed after
    the transaction ends, so the lock (SQLite's SHARED lock in rollback-journal mode, which makes a writer wait)
    is held only while SQLite reads (docs/storage.md, "Reading beside a live writer")."""

    def __init__(self, ref: DatabaseRef) -> None:
        self.ref = ref
        self.parser = RowParser(ref.label)
        self.fetcher = RowFetcher(ref.label, self.parser)
        self._created: list[Path] = []
        self._open_path: Path | None = None
        self.engine = read_only_engine(ref)
        if ref.sqlite_path is not None:
            self._open_path = ref.sqlite_path.resolve()
            self._created = track_file(self._open_path)
        try:
            with self.snapshot() as conn:
                self.tables = table_names(conn)
        except BaseException:
            self.close()
            raise
        missing = [t for t in schema.REQUIRED_TABLES if t not in self.tables]
        if missing:
            self.close()
            raise InputError(f"not a zhin database: missing table {', '.join(missing)}", where=ref.label)

    def close(self) -> None:
        self.engine.dispose()
        path, self._open_path = self._open_path, None
        if path is None:
            return
        release_file(path, self._created)

    def __enter__(self) -> SessionDatabase:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def read_error(self, exc: DBAPIError | sqlite3.Error) -> ZhinError:
        if sqlite_error_code(exc) == SQLITE_READONLY_ROLLBACK and self.ref.sqlite_path is not None:
            return hot_journal_error(self.ref.sqlite_path)
        return InputError(f"cannot read database: {db_error(exc)}", where=self.ref.label)

    @contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """One read transaction (SQLite ``BEGIN``…``COMMIT``; REPEATABLE READ, read only on the servers), its
        snapshot taken on entry: every statement run on the connection sees the same committed state. Fetch what
        you need and leave: in rollback-journal mode a bot cannot commit while it is open."""
        conn = self._begin_read()
        try:
            try:
                yield conn
                conn.commit()
            except (DBAPIError, sqlite3.Error) as exc:
                raise self.read_error(exc) from None
        finally:
            conn.close()

    def _begin_read(self) -> Connection:
        """A connection inside a read transaction whose snapshot is taken (SQLite: the SHARED lock or the WAL read
        mark, by reading the schema). A writer deleting its journal just as SQLite looks at it makes the journal
        look hot for a moment — a read-only connection then reports SQLITE_READONLY_ROLLBACK: retried for about a
        second before it is called a hot journal (one a crashed writer left stays)."""
        probe = SQL_SQLITE_TABLES if self.engine.dialect.name == "sqlite" else SQL_PROBE
        for delay in (*HOT_JOURNAL_RETRIES, None):
            conn: Connection | None = None
            try:
                conn = self.engine.connect()  # a server refusing the login fails here
                conn.begin()
                query(conn, probe)
                return conn
            except (DBAPIError, sqlite3.Error) as exc:
                if conn is not None:
                    conn.close()
                if delay is None or sqlite_error_code(exc) != SQLITE_READONLY_ROLLBACK:
                    raise self.read_error(exc) from None
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            time.sleep(delay)
        raise AssertionError("unreachable")

    def list_sessions(self) -> list[SessionListing]:
        """Every epoch: id, key, status, message rows, and last activity (ms; the newest message or update)."""
        with self.snapshot() as conn:
            raw = query(conn, SQL_SESSION_LIST)
        rows = as_rows(raw)
        listed: list[SessionListing] = []
        for row in rows:
            times = [t for t in (row.updated_at, row.last_message) if isinstance(t, int)]
            listed.append({
                "session_id": row.session_id,
                "session_key": row.session_key,
                "status": row.status,
                "updated_at": row.updated_at,
                "messages": int(row.messages or 0),
                "last_activity": max(times) if times else None,
            })
        return listed

    def load(self, ref: str, *, lazy: bool = False) -> Session:
        """A session by epoch id (``key#time-seq``) or by session key (its newest epoch), as of one snapshot.

        ``lazy``: the messages are not read. One snapshot gives the session, its small tables and the outline
        of the active branch (``LazyRows``: ids and parent ids, then the payloads once, reduced to the
        outline's facts as they stream by); a message's row is read when the message is first read, by a later
        query bounded by the outline's row ids — rows are never rewritten, so that query gives the rows of the
        snapshot (a row deleted since is an error, never a silent gap)."""
        with self.snapshot() as conn:
            rows = self.fetcher.fetch(conn, ref, lazy=lazy)
        return self.parser.build(rows, functools.partial(RowLoader, self.ref))


    def read_rows(self, session_id: str, row_ids: list[int], bot_id: str | None) -> list[Message]:
        """The messages of ``row_ids`` (of one session), parsed and checked as a load parses them, in that order:
        one snapshot, queries bounded by the ids."""
        found: dict[int, Row] = {}
        with self.snapshot() as conn:
            for start in range(0, len(row_ids), IDS_PER_QUERY):
                chunk = row_ids[start : start + IDS_PER_QUERY]
                params: dict[str, object] = {f"r{i}": row_id for i, row_id in enumerate(chunk)}
                params["sid"] = session_id
                sql = SQL_MESSAGES_BY_ID.format(ids=", ".join(f":r{i}" for i in range(len(chunk))))
                for row in as_rows(query(conn, sql, params)):
                    found[row.id] = row
        messages = []
        for row_id in row_ids:
            if row_id not in found:
                raise InputError("the row is gone (deleted since the session was opened); run again",
                                 where=at_row("agent_messages", row_id, self.ref.label))
            messages.append(settle_bot_header(self.parser.message(found[row_id]), bot_id))
        return messages


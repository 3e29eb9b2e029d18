"""Sessions in zhin's own database (``.zhin/data.sqlite`` by default), through SQLAlchemy Core.

Reading never writes: SQLite files are opened with ``mode=ro`` and ``PRAGMA query_only``, PostgreSQL connections
with ``default_transaction_read_only``, MySQL/MariaDB sessions with ``SET SESSION TRANSACTION READ ONLY``, so a
trace leaves a production database unchanged. Reading is correct beside a bot that writes: each load is one read
transaction (one snapshot); a rollback-journal file is read through a private copy taken without any lock
(store/sqlite_snapshot.py), so a bot with busy timeout 0 never has a write refused. Writing (``zhin import``, ``zhin facts prune``) is a
separate, explicit path through ``writable_engine``; ``zhin import`` is all or nothing.
"""

from __future__ import annotations

import fcntl
import importlib
import ipaddress
import json
import os
import re
import secrets
import sqlite3
import struct
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote

from sqlalchemy import Connection, Engine, create_engine, event, inspect, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from zhin_cli.core.errors import InputError, SessionNotFound, UsageError, ZhinError, at_row
from zhin_cli.core.model import (
    Actor,
    AssistantMessage,
    BotFacts,
    LazyMessages,
    MemberSnapshot,
    Message,
    OutlineBuilder,
    SceneChange,
    SceneFacts,
    Session,
    SessionOutline,
    Summary,
    ToolResultMessage,
    UserMessage,
)
from zhin_cli.core.redact import is_secret_parameter, mask_url, redact_text, remember_secret, split_userinfo
from zhin_cli.core.timezones import valid_timezone
from zhin_cli.store import schema
from zhin_cli.store.jsonl import (
    member_from_line,
    member_line,
    message_line,
    session_from_line,
    session_header,
    summary_from_line,
    summary_line,
)
from zhin_cli.store.payload import (
    OutlineFacts,
    Said,
    ToolPairing,
    check_member_facts,
    check_pairing,
    check_scene_facts,
    check_timestamp,
    check_tool_pairing,
    facts_from_key,
    interrupted_note,
    json_column,
    message_from_payload,
    outline_facts,
    placeholder_result,
    settle_bot_header,
    settle_bot_headers,
    short,
)
from zhin_cli.store.sqlite_snapshot import COPIES as SNAPSHOT_COPIES
from zhin_cli.store.sqlite_snapshot import is_wal

if TYPE_CHECKING:
    from zhin_cli.store.events import EventImport

T = TypeVar("T")



@dataclass(frozen=True)
class ServerDialect:
    """How one kind of database server is reached: the SQLAlchemy driver and how to keep reads read-only."""

    drivername: str
    read_only_connect_args: dict[str, Any]
    connect_args: dict[str, Any]
    # The driver is an optional extra of the package (pip install 'zhin-cli[postgres]'): its module, the server's
    # name and the extra's name, for the one-line error when it is not installed.
    driver_module: str = ""
    server_name: str = ""
    extra: str = ""
    scheme: str = ""


POSTGRES = ServerDialect(
    drivername="postgresql+psycopg",
    # Every transaction on a reading connection is READ ONLY: the server itself refuses a write.
    read_only_connect_args={"options": "-c default_transaction_read_only=on"},
    connect_args={"connect_timeout": 10},
    driver_module="psycopg",
    server_name="PostgreSQL",
    extra="postgres",
    scheme="postgresql",
)

MYSQL = ServerDialect(
    drivername="mysql+pymysql",
    # Every transaction on a reading connection is READ ONLY: the server refuses a write.
    read_only_connect_args={"init_command": "SET SESSION TRANSACTION READ ONLY"},
    connect_args={"connect_timeout": 10, "charset": "utf8mb4"},
    driver_module="pymysql",
    server_name="MySQL/MariaDB",
    extra="mysql",
    scheme="mysql",
)

# URL scheme → dialect. A new server kind is one entry here (and a pinned driver in pyproject.toml).
SERVER_DIALECTS: dict[str, ServerDialect] = {
    "postgresql": POSTGRES,
    "postgres": POSTGRES,
    "postgresql+psycopg": POSTGRES,
    "mysql": MYSQL,
    "mariadb": MYSQL,
    "mysql+pymysql": MYSQL,
}

@dataclass(frozen=True)
class DatabaseRef:
    url: str = field(repr=False)  # holds the password: never shown
    label: str  # what messages call it (a path, or the masked URL: zhin_cli.core.redact.mask_url)
    sqlite_path: Path | None
    server: ServerDialect | None = None


def parse_db(value: str) -> DatabaseRef:
    """``sqlite:///path``, a bare file path, or a server URL (``postgresql://``, ``postgres://``, ``mysql://``,
    ``mariadb://``).

    A server URL is parsed here, not by SQLAlchemy's ``make_url`` (which ends the password at its first ``@``
    and sends the rest to DNS as a host name): the user information ends at the last ``@``, as in
    ``zhin_cli.core.redact``, so the host that is connected to is the host that messages show. The label is the
    masked URL (``scheme://***@host/db``, password-like query values ``***``); the password is remembered so
    that ``db_error`` hides it wherever a driver repeats it."""
    if value.startswith("sqlite:///"):
        path = Path(value[len("sqlite:///") :])
        return DatabaseRef(url=value, label=str(path), sqlite_path=path)
    if re.match(r"^[a-z][a-z0-9+]*://", value):
        scheme = value.split("://", 1)[0]
        masked = mask_url(value)
        server = SERVER_DIALECTS.get(scheme)
        if server is None:
            known = ", ".join(sorted({*SERVER_DIALECTS, "sqlite"}))
            raise UsageError(f"--db {masked}: unknown database URL scheme {scheme!r} (known: {known})")
        url = _server_url(value[len(scheme) + 3 :], server.drivername, masked)
        remember_secret(url.password)
        for name, given in url.query.items():
            if is_secret_parameter(name):
                for secret in (given,) if isinstance(given, str) else given:
                    remember_secret(secret)
        return DatabaseRef(url=url.render_as_string(hide_password=False), label=masked, sqlite_path=None, server=server)
    path = Path(value)
    return DatabaseRef(url=f"sqlite:///{path}", label=str(path), sqlite_path=path)


def _server_url(rest: str, drivername: str, masked: str) -> URL:
    """``[user[:password]@]host[:port][/database][?query]`` (after ``scheme://``) as a SQLAlchemy URL.

    Like ``make_url``: user, password and database are percent-decoded, the query is ``parse_qsl``'d. Unlike it:
    the last ``@`` ends the user information, an IPv6 host must be bracketed and closed, and a port is a number
    1–65535 — anything else is a usage error naming the masked URL."""

    def bad(why: str) -> UsageError:
        return UsageError(f"--db {masked}: not a database URL ({why})")

    userinfo, rest = split_userinfo(rest)
    username = password = None
    if userinfo is not None:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    rest, question, query_text = rest.partition("?")
    authority, slash, database_text = rest.partition("/")
    database = unquote(database_text) if slash and database_text else None
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise bad("unclosed '[' in the host")
        host, port_text = authority[1:close], authority[close + 1 :]
        if port_text and not port_text.startswith(":"):
            raise bad("text after the bracketed host")
        port_text = port_text[1:]
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise bad("not an IPv6 address in brackets") from None
    else:
        host, _colon, port_text = authority.partition(":")
        if ":" in port_text:
            raise bad("an IPv6 address must be written in brackets, [::1]")
        if re.search(r"[\[\]\s]", host):
            raise bad("a host name holds no brackets or spaces")
    port = None
    if port_text:
        if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise bad("the port must be a number from 1 to 65535")
        port = int(port_text)
    query: dict[str, str | list[str]] = {}
    if question:
        for name, given in parse_qsl(query_text, keep_blank_values=True):
            known = query.get(name)
            if known is None:
                query[name] = given
            else:
                query[name] = [*([known] if isinstance(known, str) else known), given]
    try:
        return URL.create(drivername, username=username, password=password, host=host or None, port=port,
                          database=database, query=query)
    except (ArgumentError, TypeError, ValueError) as error:
        raise bad(str(error)) from None


def db_error(exc: BaseException) -> str:
    """A driver's error as one line (server messages span several), with every URL, ``password=…`` pair and
    known password masked (``zhin_cli.core.redact``)."""
    original = exc.orig if isinstance(exc, DBAPIError) else exc
    lines = [line.strip() for line in str(original).splitlines() if line.strip()]
    return redact_text(lines[0]) if lines else type(original).__name__


# SQLite's extended result code for "a hot journal needs rolling back, but this connection is read-only".
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
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy's begin event below sends BEGIN, nothing else does
        if read_only:
            dbapi_connection.execute("PRAGMA query_only = ON")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def _private_copy_engine(path: Path) -> Engine:
    """A rollback-journal file is read through a private copy (zhin_cli/store/sqlite_snapshot.py): any SHARED
    lock of zhin's would make a busy-timeout-0 bot's COMMIT fail. Each connection opens the copy current at that
    moment, made without a lock and proven to be one committed state; ``immutable=1`` is right for a private file."""
    engine = _sqlite_engine(f"sqlite:///file:{quote(str(path))}?mode=ro&immutable=1&uri=true", read_only=True)

    @event.listens_for(engine, "do_connect")
    def _open_the_copy(_dialect: Any, _record: Any, _cargs: list[Any], cparams: dict[str, Any]) -> sqlite3.Connection:
        def connect(copy: Path) -> sqlite3.Connection:
            return sqlite3.connect(f"file:{quote(str(copy))}?mode=ro&immutable=1", **cparams)

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


def _read_only_engine(ref: DatabaseRef) -> Engine:
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
        def _consistent_snapshot(conn: Any) -> None:
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


def _sqlite_error_code(exc: BaseException) -> int | None:
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


_Raw = tuple[tuple[str, ...], list[tuple[Any, ...]]]  # column names and rows, as fetched
_NONE: _Raw = ((), [])


class _Row:
    """One fetched row: attributes and ``_mapping`` by column name, as SQLAlchemy's rows (built after the read
    transaction, so the lock is not held while Python makes objects)."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping

    def __getattr__(self, name: str) -> Any:
        try:
            return self._mapping[name]
        except KeyError:
            raise AttributeError(name) from None


def _rows(raw: _Raw) -> list[_Row]:
    names, tuples = raw
    return [_Row(dict(zip(names, values, strict=True))) for values in tuples]


@dataclass
class _LazyRows:
    """A lazy load's messages, as fetched inside the snapshot: the active branch's outline, and (``said``: by row
    id, when the conversation has message events to match) who said what in its user rows and replies."""

    outline: OutlineBuilder
    session_id: str
    said: dict[int, Said] | None = None
    interrupted: list[tuple[int, str, str]] = field(default_factory=list)  # (call's position, call id, where)


@dataclass
class _SaidReader:
    """``give_platform_ids``' reader of a lazy session (``store.upstream``): each row as matching sees it, from
    what the outline scan kept of it (``_LazyRows.said``) — no row is read or parsed again for the matching."""

    outline: SessionOutline
    said: dict[int, Said]
    actors: dict[str, Actor] = field(default_factory=dict)  # one per sender: a frozen Actor costs to make

    def __call__(self, positions: Sequence[int]) -> list[Message]:
        return [self._message(position) for position in positions]

    def _message(self, position: int) -> Message:
        row_id, time = self.outline.row_ids[position], self.outline.timestamps[position]
        said = self.said.get(row_id)
        if said is None:  # a user row naming no sender, or a row refused when read: nothing to match (no id)
            return UserMessage(content=[], timestamp=time, actor=None, row_id=row_id)
        content = [{"type": "text", "text": said.text}]
        if said.sender_id is None:
            return AssistantMessage(content=content, timestamp=time, row_id=row_id)
        actor = self.actors.get(said.sender_id)
        if actor is None:
            actor = self.actors[said.sender_id] = Actor(subject_id=said.sender_id)
        return UserMessage(content=content, timestamp=time, actor=actor, row_id=row_id)


@dataclass
class _RowLoader:
    """``LazyMessages``' loader for a database session: each call opens the database again (the load's own
    connection is closed when it returns) and reads the rows of the positions asked for, by id."""

    ref: DatabaseRef
    session_id: str
    row_ids: Sequence[int]
    bot_id: str | None

    def __call__(self, positions: Sequence[int]) -> list[Message]:
        with SessionDatabase(self.ref) as database:
            return database.read_rows(self.session_id, [self.row_ids[p] for p in positions], self.bot_id)


@dataclass
class _SessionRows:
    """Everything one session load fetched, inside one read transaction: column names and plain tuples (made
    into rows, parsed and checked after the transaction ended)."""

    info: dict[str, Any]
    messages: _Raw | _LazyRows
    profile: _Raw
    summaries: _Raw
    scene_changes: _Raw
    members: _Raw
    lines: _Raw  # an imported epoch's own lines (zhin_lines)
    imported_members: _Raw  # the member lines every import of the key wrote (which ai_scene_members rows are copies)
    # upstream's member events (conversation_events rows that are not messages), the ones `import --events`
    # already wrote into agent_messages, and the key's epochs (which events belong to this one)
    events: _Raw = _NONE
    imported_events: _Raw = _NONE
    epochs: _Raw = _NONE
    turn_context: _Raw = _NONE  # one turn row naming the data's zone (upstream's `[Turn context]`)
    blocks: _Raw = _NONE  # upstream's events-block rows (id, payload) and the message events their lines are
    message_events: _Raw = _NONE


class SessionDatabase:
    """Read-only access to the sessions in one database.

    Every read (``load``, ``list_sessions``, ``snapshot``) is one read transaction: all its SELECTs see one
    committed state of the database, whatever a bot commits meanwhile. Rows are fetched at once and parsed after
    the transaction ends, so the lock (SQLite's SHARED lock in rollback-journal mode, which makes a writer wait)
    is held only while SQLite reads (docs/storage.md, "Reading beside a live writer")."""

    def __init__(self, ref: DatabaseRef) -> None:
        self.ref = ref
        self._created: list[Path] = []
        self._open_path: Path | None = None
        self.engine = _read_only_engine(ref)
        if ref.sqlite_path is not None:
            self._open_path = ref.sqlite_path.resolve()
            _OPEN_HERE[self._open_path] = _OPEN_HERE.get(self._open_path, 0) + 1
            # What SQLite may create next to a WAL database for this read; removed at close when safe.
            self._created = [p for p in (Path(f"{self._open_path}-wal"), Path(f"{self._open_path}-shm")) if not p.exists()]
        try:
            with self.snapshot() as conn:
                self.tables = _table_names(conn)
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
        _OPEN_HERE[path] -= 1
        if _OPEN_HERE[path] == 0:
            del _OPEN_HERE[path]
            if self._created:
                _remove_created_wal_files(path, self._created)

    def __enter__(self) -> SessionDatabase:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def read_error(self, exc: DBAPIError | sqlite3.Error) -> ZhinError:
        if _sqlite_error_code(exc) == SQLITE_READONLY_ROLLBACK and self.ref.sqlite_path is not None:
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
        probe = _SQL_SQLITE_TABLES if self.engine.dialect.name == "sqlite" else _SQL_PROBE
        for delay in (*_HOT_JOURNAL_RETRIES, None):
            conn: Connection | None = None
            try:
                conn = self.engine.connect()  # a server refusing the login fails here
                conn.begin()
                _query(conn, probe)
                return conn
            except (DBAPIError, sqlite3.Error) as exc:
                if conn is not None:
                    conn.close()
                if delay is None or _sqlite_error_code(exc) != SQLITE_READONLY_ROLLBACK:
                    raise self.read_error(exc) from None
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            time.sleep(delay)
        raise AssertionError("unreachable")

    def list_sessions(self) -> list[dict[str, Any]]:
        """Every epoch: id, key, status, message rows, and last activity (ms; the newest message or update)."""
        with self.snapshot() as conn:
            raw = _query(conn, _SQL_SESSION_LIST)
        rows = _rows(raw)
        listed = []
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
        of the active branch (``_LazyRows``: ids and parent ids, then the payloads once, reduced to the
        outline's facts as they stream by); a message's row is read when the message is first read, by a later
        query bounded by the outline's row ids — rows are never rewritten, so that query gives the rows of the
        snapshot (a row deleted since is an error, never a silent gap)."""
        with self.snapshot() as conn:
            rows = self._fetch(conn, ref, lazy=lazy)
        return self._build(rows)

    # --- inside the read transaction: SELECTs only, every result fetched at once --------------------------------
    #
    # In rollback-journal mode the transaction holds SQLite's SHARED lock, and a bot committing meanwhile is
    # refused (busy_timeout 0) or waits: it must be short. The statements are plain text (``SELECT *``, no
    # reflection, nothing for SQLAlchemy to compile — compiling Core statements took ~20 of the ~24 ms a load
    # spent inside the transaction); the rows are parsed and checked after it (``_build``).

    def _fetch(self, conn: Any, ref: str, *, lazy: bool = False) -> _SessionRows:
        try:
            return self._fetch_rows(conn, ref, lazy=lazy)
        except _MissingColumn as exc:
            raise InputError(str(exc), where=self.ref.label) from None

    def _fetch_rows(self, conn: Any, ref: str, *, lazy: bool = False) -> _SessionRows:
        tables = _table_names(conn)
        names, found = _require(_query(conn, _SQL_SESSION_BY_ID, {"ref": ref}), "agent_sessions")
        if not found:
            names, found = _query(conn, _SQL_SESSION_BY_KEY, {"ref": ref})
        if not found:
            raise SessionNotFound(f"no session {short(ref)} in {self.ref.label} (try `zhin sessions`)")
        info = dict(zip(names, found[0], strict=True))
        session_id = info["session_id"]
        session_key = info.get("session_key") or session_id.split("#")[0]
        sqlite = conn.dialect.name == "sqlite"
        turn_context = _query(conn, SQL_TURN_CONTEXT, {"sid": session_id}) if "conversation_events" in tables else _NONE
        upstream = _events_block_rows(conn, session_id, session_key, "conversation_events" in tables,
                                      bool(turn_context[1]))
        # a lazy scan keeps who said what only when there are message events to match its rows to
        messages: _Raw | _LazyRows = (
            self._scan_outline(conn, session_id, info.get("active_leaf_message_id"), said="message_events" in upstream)
            if lazy else self._fetch_messages(conn, session_id))
        return _SessionRows(
            info=info,
            messages=messages,
            profile=_query(conn, _SQL_PROFILE, {"key": session_key}) if "ai_session_profiles" in tables else _NONE,
            summaries=_require(_query(conn, _SQL_SUMMARIES_SQLITE if sqlite else _SQL_SUMMARIES, {"sid": session_id}),
                               "agent_summaries") if "agent_summaries" in tables else _NONE,
            scene_changes=_require(_query(conn, _SQL_SCENE_CHANGES, {"sid": session_id}), "zhin_scene_changes")
            if "zhin_scene_changes" in tables else _NONE,
            members=_require(_query(conn, _SQL_MEMBERS, {"key": session_key}), "ai_scene_members")
            if "ai_scene_members" in tables and session_key else _NONE,
            lines=_query(conn, _SQL_LINES, {"sid": session_id}) if "zhin_lines" in tables else _NONE,
            imported_members=_query(conn, _SQL_KEY_MEMBER_LINES, {"key": session_key}) if "zhin_lines" in tables else _NONE,
            events=_member_event_rows(conn, session_key) if "conversation_events" in tables else _NONE,
            imported_events=_query(conn, _SQL_IMPORTED_EVENTS) if "zhin_imported_events" in tables else _NONE,
            epochs=_query(conn, _SQL_EPOCHS, {"key": session_key}),
            turn_context=turn_context,
            **upstream,
        )

    def _fetch_messages(self, conn: Any, session_id: str) -> _Raw:
        from zhin_cli.store import max_messages  # the same limit as for JSONL files

        limit = max_messages()
        # One pass over the table (upstream has no index on session_id): at most limit + 1 rows tell "too large".
        names, rows = _require(_query(conn, _SQL_MESSAGES, {"sid": session_id, "n": limit + 1}), "agent_messages")
        if len(rows) > limit:
            self._too_large(conn, session_id, limit)
        return names, rows

    def _too_large(self, conn: Any, session_id: str, limit: int) -> None:
        count = _query(conn, _SQL_MESSAGE_COUNT, {"sid": session_id})[1][0][0]
        raise InputError(
            f"session too large: {count:,} messages (ZHIN_MAX_MESSAGES is {limit:,}); raise the limit",
            where=f"{self.ref.label}: agent_messages",
        )

    def _scan_outline(self, conn: Any, session_id: str, leaf: int | None, *, said: bool = False) -> _LazyRows:
        """Inside the snapshot: the active branch (ids and parent ids: a narrow query, the chain walked in Python
        over two int arrays) and the outline's facts of its rows (the payload column streamed in blocks, each
        payload reduced to ``OutlineFacts`` and dropped — memory is the outline's, not the payloads'). ``said``:
        also keep who said what in each user row and reply without a platform id (``OutlineFacts.said``, for matching
        them to their message events): their texts, not their payloads."""
        from zhin_cli.store import max_messages

        limit = max_messages()
        names = _require(_query(conn, _SQL_MESSAGE_COLUMNS, {"sid": session_id}), "agent_messages")[0]
        has_parent = "parent_id" in names
        links = _query(conn, _SQL_MESSAGE_LINKS if has_parent else _SQL_MESSAGE_IDS, {"sid": session_id, "n": limit + 1})[1]
        if len(links) > limit:
            self._too_large(conn, session_id, limit)
        branch = self._branch(links, leaf) if leaf is not None and has_parent else [link[0] for link in links]
        del links
        outline = OutlineBuilder()
        tools = ToolPairing(repair=True)
        called_at: dict[str, int] = {}  # call id → outline position of the row that made it
        kept: dict[int, Said] | None = {} if said else None

        def add(row_id: int, facts: OutlineFacts) -> None:  # in branch order, as the eager load checks pairing
            # pairing has nothing to check (nor a row to name) for a user row, an event, or an assistant row
            # without tool calls while no call is pending: most rows
            if facts.result_for is not None or (facts.role == "assistant" and (facts.call_ids or tools.pending)):
                check_pairing(facts.role, facts.call_ids, facts.result_for, tools,
                              at_row("agent_messages", row_id, self.ref.label))
                called_at.update((call_id, len(outline)) for call_id in facts.call_ids)
            outline.add_facts(row_id=row_id, timestamp=facts.timestamp, role=facts.role,
                              has_tool_calls=facts.has_tool_calls, has_text=facts.has_text, model=facts.model,
                              message_id=facts.message_id, event_kind=facts.event_kind)

        # closed inside the snapshot even when a row is refused part way (the cursor belongs to this transaction)
        query = _SQL_MESSAGE_PAYLOADS_EXTRA if "extra" in names else _SQL_MESSAGE_PAYLOADS
        with closing(_stream(conn, query, {"sid": session_id, "n": limit + 1})) as payloads:
            if all(a < b for a, b in zip(branch, branch[1:], strict=False)):
                # the usual branch, in id order: facts are added as the rows stream by, nothing is held
                position = 0
                for row_id, payload, extra in payloads:
                    if position < len(branch) and row_id == branch[position]:
                        add(row_id, self._facts(row_id, payload, extra, kept))
                        position += 1
                missing = branch[position] if position < len(branch) else None
            else:  # a branch whose parents are not older rows: facts by id, then in branch order
                wanted: dict[int, OutlineFacts | None] = dict.fromkeys(branch, None)
                for row_id, payload, extra in payloads:
                    if row_id in wanted:
                        wanted[row_id] = self._facts(row_id, payload, extra, kept)
                missing = None
                for row_id in branch:
                    facts = wanted[row_id]
                    if facts is None:
                        missing = row_id
                        break
                    add(row_id, facts)
        if missing is not None:  # read by the first query, gone by the second: not this snapshot's branch
            raise InputError("active branch names a missing row", where=at_row("agent_messages", missing, self.ref.label))
        return _LazyRows(outline, session_id, kept, [(called_at[c], c, where) for c, where in tools.interrupted])

    def _facts(self, row_id: int, payload: Any, extra: Any, said: dict[int, Said] | None = None) -> OutlineFacts:
        """A row's outline facts; its ``extra`` column is checked as JSON here too, so that a bad row is refused
        by the load (before any output), not when a command first reads its message. The row's name is made only
        for a row that is refused: the checks run again with it (they are deterministic), and raise with it.
        ``said``: gains who said what in the row (``_scan_outline``)."""
        try:
            return self._checked_facts(row_id, payload, extra, "", said)
        except InputError:
            pass
        return self._checked_facts(row_id, payload, extra, at_row("agent_messages", row_id, self.ref.label), said)

    @staticmethod
    def _checked_facts(row_id: int, payload: Any, extra: Any, where: str, said: dict[int, Said] | None) -> OutlineFacts:
        parsed = json_column(payload, "payload", where)
        parsed_extra = json_column(extra, "extra", where) if extra else None
        try:
            facts = outline_facts(parsed, where, parsed_extra if isinstance(parsed_extra, dict) else {},
                                  said=said is not None)
        except RecursionError:
            raise InputError("payload is nested too deeply", where=where) from None
        # kept for the rows matching reads (``store.upstream._candidates``): no id yet; a reply only with text
        if said is not None and facts.said is not None and facts.message_id is None and (
                facts.role == "user" or facts.has_text):
            said[row_id] = facts.said
        return facts

    def _branch(self, links: list[tuple[Any, ...]], leaf: int) -> list[int]:
        """The active branch: ``parent_id`` links from ``leaf`` back to the root, in storage order."""
        parent_of = dict(links)
        chain: list[int] = []
        current: int | None = leaf
        seen: set[int] = set()
        while current is not None:
            if current in seen:
                raise InputError("parent_id chain has a cycle", where=at_row("agent_messages", current, self.ref.label))
            seen.add(current)
            if current not in parent_of:
                raise InputError(
                    f"active branch names a missing row (parent of row {chain[-1] if chain else leaf})",
                    where=at_row("agent_messages", current, self.ref.label),
                )
            chain.append(current)
            current = parent_of[current]
        chain.reverse()
        return chain

    def read_rows(self, session_id: str, row_ids: list[int], bot_id: str | None) -> list[Message]:
        """The messages of ``row_ids`` (of one session), parsed and checked as a load parses them, in that order:
        one snapshot, queries bounded by the ids."""
        found: dict[int, _Row] = {}
        with self.snapshot() as conn:
            for start in range(0, len(row_ids), _IDS_PER_QUERY):
                chunk = row_ids[start : start + _IDS_PER_QUERY]
                params: dict[str, Any] = {f"r{i}": row_id for i, row_id in enumerate(chunk)}
                params["sid"] = session_id
                sql = _SQL_MESSAGES_BY_ID.format(ids=", ".join(f":r{i}" for i in range(len(chunk))))
                for row in _rows(_query(conn, sql, params)):
                    found[row.id] = row
        messages = []
        for row_id in row_ids:
            if row_id not in found:
                raise InputError("the row is gone (deleted since the session was opened); run again",
                                 where=at_row("agent_messages", row_id, self.ref.label))
            messages.append(settle_bot_header(self._message(found[row_id]), bot_id))
        return messages

    # --- after it: parsing and checks, no database access ---------------------------------------------------------

    def _build(self, rows: _SessionRows) -> Session:
        info = rows.info
        session_id = info["session_id"]
        session_key = info.get("session_key") or session_id.split("#")[0]
        lazy = rows.messages if isinstance(rows.messages, _LazyRows) else None
        eager = rows.messages if not isinstance(rows.messages, _LazyRows) else None
        messages: list[Message] = []
        interrupted = lazy.interrupted if lazy is not None else []
        if eager is not None:
            messages, interrupted = self._messages(_rows(eager), info.get("active_leaf_message_id"), "parent_id" in eager[0])
        session = Session(
            session_id=session_id,
            session_key=session_key,
            timezone=None,
            bot=BotFacts(),
            scene=SceneFacts(),
            messages=messages,
            source=self.ref.label,
        )
        lines = self._lines(_rows(rows.lines))
        profile = _rows(rows.profile)
        self._profile(profile[0]._mapping if profile else None, session)  # checked even when an epoch's line wins
        session.members = self._members(_rows(rows.members))
        if "session" in lines:  # an imported epoch: its own facts and members, not its key's current ones
            # plus the rows a bot host wrote since (not the copies any import of the key made of its lines)
            copies = _member_identities(rows.imported_members)
            live = [m for m in session.members if (m.user_id, m.timestamp) not in copies]
            self._epoch_facts(lines, session)
            session.members += live
        session.summaries = self._summaries(_rows(rows.summaries), session_id, lines.get("summary", {}))
        session.scene_changes = self._scene_changes(_rows(rows.scene_changes))
        if session.timezone is None and rows.turn_context[1]:  # upstream names its zone only in [Turn context]
            from zhin_cli.store.events import turn_context_zone

            session.timezone = turn_context_zone(rows.turn_context[1][0][0])
            session.timezone_source = "data" if session.timezone else None
        if lazy is not None:  # the bot is known now (profile): the loader settles each message as it parses it
            outline = lazy.outline.outline()
            session.messages = LazyMessages(outline, _RowLoader(self.ref, lazy.session_id, outline.row_ids,
                                                                 session.bot.user_id))
            if lazy.interrupted:
                from zhin_cli.store.upstream import splice_messages

                positions: list[int | Message] = list(range(len(outline)))
                splice_messages(session, with_placeholders(positions, lazy.interrupted, outline.timestamps))
        session.notes.extend(interrupted_note(call_id, where) for _, call_id, where in interrupted)
        self._events_blocks(rows, session, None if lazy is None or lazy.said is None
                            else _SaidReader(session.outline, lazy.said))
        self._upstream_events(rows, session)
        return settle_bot_headers(session)  # the bot is known now (profile)

    def _events_blocks(self, rows: _SessionRows, session: Session,
                       read: Callable[[Sequence[int]], list[Message]] | None) -> None:
        """Upstream's turn rows and replies get their platform ids, its events-block rows become one message per
        line (``store.upstream``); ``read``: a lazy session's rows as matching sees them (``_SaidReader``)."""
        if not rows.blocks[1] and not rows.message_events[1]:
            return
        from zhin_cli.store.upstream import block_texts, message_events, read_upstream_messages

        created, recalled = message_events(_rows(rows.message_events), session.session_key or "")
        session.notes.extend(read_upstream_messages(session, block_texts(_rows(rows.blocks)), created, recalled,
                                                    self.ref.label, read))

    def _upstream_events(self, rows: _SessionRows, session: Session) -> None:
        """Upstream's member events of this epoch into its history (``store.upstream_events``); rows that cannot
        be read become the session's notes."""
        if not rows.events[1]:
            return
        from zhin_cli.store.events import read_events, turn_context_zone
        from zhin_cli.store.upstream_events import add_upstream_events, epoch_span

        reading = read_events(_rows(rows.events), self.ref.label, session_key=session.session_key)
        imported = {str(row[0]): (int(row[1]) if row[1] is not None else None) for row in rows.imported_events[1]}
        span = epoch_span(session.session_id, [(str(r[0]), r[1]) for r in rows.epochs[1]])
        zone = turn_context_zone(rows.turn_context[1][0][0]) if rows.turn_context[1] else None
        session.notes.extend(add_upstream_events(session, reading, imported, span, zone))

    def _messages(self, rows: list[Any], leaf: int | None,
                  has_parent: bool) -> tuple[list[Message], list[tuple[int, str, str]]]:
        """The branch's messages, and the calls an interrupted turn left unanswered (each now followed by a
        placeholder result: ``payload.placeholder_result``)."""
        if leaf is not None and has_parent:  # the same walk (and errors) as a lazy load's
            by_id = {row.id: row for row in rows}
            rows = [by_id[row_id] for row_id in self._branch([(row.id, row.parent_id) for row in rows], leaf)]
        messages: list[Message] = []
        tools = ToolPairing(repair=True)
        called_at: dict[str, int] = {}  # call id → position of the message that made it
        for row in rows:
            message = self._message(row)
            check_tool_pairing(message, tools, at_row("agent_messages", row.id, self.ref.label))
            if isinstance(message, AssistantMessage):
                called_at.update((call.id, len(messages)) for call in message.tool_calls)
            messages.append(message)
        repairs = [(called_at[call_id], call_id, where) for call_id, where in tools.interrupted]
        return with_placeholders(messages, repairs, [m.timestamp for m in messages]), repairs

    def _message(self, row: Any) -> Message:
        """One ``agent_messages`` row as a message (its own checks; tool pairing is the caller's)."""
        where = at_row("agent_messages", row.id, self.ref.label)
        payload = json_column(row.payload, "payload", where)
        raw_extra = getattr(row, "extra", None)
        parsed = json_column(raw_extra, "extra", where) if raw_extra else None
        extra: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        try:
            message = message_from_payload(payload, row_id=row.id, where=where, extra=extra)
        except RecursionError:
            raise InputError("payload is nested too deeply", where=where) from None
        raw = {"type": "message", **payload, "id": row.id}
        if raw_extra and (parsed is None or isinstance(parsed, dict)):  # "{}" and "null" too: the line said so
            raw["extra"] = parsed
        message.raw = raw
        return message

    def _lines(self, rows: list[Any]) -> dict[str, dict[Any, tuple[dict[str, Any], str]]]:
        """An imported epoch's ``zhin_lines`` by kind: each line (JSON object) and its row's name, keyed by the
        row id (summaries: by their ``agent_summaries`` row)."""
        lines: dict[str, dict[Any, tuple[dict[str, Any], str]]] = {}
        for row in rows:
            where = at_row("zhin_lines", row.id, self.ref.label)
            line = json_column(row.line, "line", where)
            if not isinstance(line, dict):
                raise InputError(f"line must be a JSON object, got {short(line)}", where=where)
            key = row.summary_id if row.kind == "summary" else row.id
            lines.setdefault(row.kind, {})[key] = (line, where)
        return lines

    def _epoch_facts(self, lines: dict[str, dict[Any, tuple[dict[str, Any], str]]], session: Session) -> None:
        """The facts of an imported epoch, read from its own session and member lines by the JSONL parsers (the
        same checks, the same facts-from-key rule), so the epoch traces as its file did."""
        (line, where), *_ = lines["session"].values()
        epoch = session_from_line(line, where, messages=[], source=self.ref.label)
        session.timezone, session.bot, session.scene, session.raw = epoch.timezone, epoch.bot, epoch.scene, epoch.raw
        session.members = [member_from_line(member, where) for member, where in lines.get("member", {}).values()]

    def _profile(self, data: dict[str, Any] | None, session: Session) -> None:
        scene: dict[str, Any] = {}
        if data is not None:
            where = at_row("ai_session_profiles", session.session_key, self.ref.label)
            admins = data.get("admins")
            if admins == "":
                admins = []
            elif admins:
                try:
                    admins = json.loads(admins)
                except (ValueError, TypeError, RecursionError):
                    raise InputError("admins is not a JSON array", where=where) from None
            muted_all = data.get("muted_all")
            if muted_all is not None and (not isinstance(muted_all, int) or isinstance(muted_all, bool)):
                raise InputError(f"muted_all must be 0 or 1, got {short(muted_all)}", where=where)
            for key, value in (
                ("scene_id", data.get("scene_id")),
                ("scene_type", data.get("scene_type")),
                ("scene_name", data.get("title")),
                ("owner_id", data.get("owner_id")),
                ("admins", admins),
                ("member_count", data.get("member_count")),
                ("global_mute", None if data.get("muted_all") is None else bool(data["muted_all"])),
            ):
                if value is not None:
                    scene[key] = value
            check_scene_facts(scene, where)
            timezone = data.get("timezone")
            if timezone and (not isinstance(timezone, str) or not valid_timezone(timezone)):
                raise InputError(f"unknown time zone {short(timezone)}", where=where)
            session.bot = BotFacts(
                user_id=data.get("bot_user_id") or None,
                name=data.get("bot_name"),
                group_nickname=data.get("bot_nickname"),
                platform_role=data.get("bot_role"),
            )
            session.timezone = timezone
        session.bot, session.scene = facts_from_key(session.session_key, session.bot, SceneFacts.from_mapping(scene))

    def _summaries(self, rows: list[Any], session_id: str,
                   lines: dict[Any, tuple[dict[str, Any], str]]) -> list[Summary]:
        summaries = []
        for number, r in enumerate(rows, start=1):
            # upstream's agent_summaries has no id column: SQLite's rowid names the row
            fields = r._mapping
            row_id = fields["id"] if "id" in fields else fields.get("zhin_rowid")
            where = at_row("agent_summaries", row_id if row_id is not None else f"#{number} of {session_id}", self.ref.label)
            if not isinstance(r.summary, str):
                raise InputError(f"summary is not text, got {short(r.summary)}", where=where)
            anchor = r.anchor_message_id or 0
            if not isinstance(anchor, int) or isinstance(anchor, bool):
                raise InputError(f"anchor_message_id must be a message row id, got {short(anchor)}", where=where)
            created = check_timestamp(r.created_at or 0, "created_at", where)
            summary = Summary(timestamp=created, summary=r.summary, anchor_row_id=anchor)
            if row_id in lines:  # the imported line, with the row's (re-pointed) anchor
                line, line_where = lines[row_id]
                summary.raw = {**summary_from_line(line, line_where).raw, "anchor_message_id": anchor}
            summaries.append(summary)
        return summaries

    def _scene_changes(self, rows: list[Any]) -> list[SceneChange]:
        changes = []
        for r in rows:
            where = at_row("zhin_scene_changes", r.id, self.ref.label)
            data = json_column(r.changes, "changes", where)
            if not isinstance(data, dict):
                raise InputError(f"changes must be a JSON object of scene facts, got {short(data)}", where=where)
            check_timestamp(r.timestamp, "timestamp", where)
            check_scene_facts(data, where)
            changes.append(SceneChange(timestamp=r.timestamp, changes=data, raw={"type": "scene", "timestamp": r.timestamp, **data}))
        return changes

    def _members(self, rows: list[Any]) -> list[MemberSnapshot]:
        members = []
        for r in rows:
            where = at_row("ai_scene_members", r.user_id, self.ref.label)
            facts = {k: v for k, v in r._mapping.items() if k in _MEMBER_FACTS and v is not None}
            check_member_facts(facts, where)
            updated = check_timestamp(r.updated_at or 0, "updated_at", where)
            members.append(MemberSnapshot(timestamp=updated, user_id=str(r.user_id), facts=facts))
        return members


# The statements of a load (see SessionDatabase._fetch). ``SELECT *``: whatever columns this database's version
# of a table has (upstream's agent_summaries has no id, older ones no parent_id / extra); names are read by key.
_SQL_SESSION_BY_ID = "SELECT * FROM agent_sessions WHERE agent_sessions.session_id = :ref"
_SQL_SESSION_BY_KEY = ("SELECT * FROM agent_sessions WHERE agent_sessions.session_key = :ref"
                       " ORDER BY agent_sessions.created_at DESC, agent_sessions.session_id DESC")
_SQL_MESSAGES = ("SELECT * FROM agent_messages WHERE agent_messages.session_id = :sid ORDER BY agent_messages.id"
                 " LIMIT :n")
# A lazy load (``SessionDatabase._scan_outline``): the columns, the links, the payloads once; rows by id later.
_SQL_MESSAGE_COLUMNS = "SELECT * FROM agent_messages WHERE agent_messages.session_id = :sid AND 1 = 0"
_SQL_MESSAGE_LINKS = ("SELECT agent_messages.id, agent_messages.parent_id FROM agent_messages"
                      " WHERE agent_messages.session_id = :sid ORDER BY agent_messages.id LIMIT :n")
_SQL_MESSAGE_IDS = ("SELECT agent_messages.id, NULL FROM agent_messages"
                    " WHERE agent_messages.session_id = :sid ORDER BY agent_messages.id LIMIT :n")
_SQL_MESSAGE_PAYLOADS = ("SELECT agent_messages.id, agent_messages.payload, NULL FROM agent_messages"
                         " WHERE agent_messages.session_id = :sid ORDER BY agent_messages.id LIMIT :n")
_SQL_MESSAGE_PAYLOADS_EXTRA = ("SELECT agent_messages.id, agent_messages.payload, agent_messages.extra FROM agent_messages"
                               " WHERE agent_messages.session_id = :sid ORDER BY agent_messages.id LIMIT :n")
_SQL_MESSAGES_BY_ID = "SELECT * FROM agent_messages WHERE agent_messages.session_id = :sid AND agent_messages.id IN ({ids})"
_IDS_PER_QUERY = 500  # bound parameters per query (SQLite before 3.32 allows 999)
_STREAM_ROWS = 2000  # rows per fetch while streaming payloads
_SQL_MESSAGE_COUNT = "SELECT count(*) FROM agent_messages WHERE agent_messages.session_id = :sid"
_SQL_PROFILE = "SELECT * FROM ai_session_profiles WHERE ai_session_profiles.session_key = :key"
_SQL_SUMMARIES = ("SELECT * FROM agent_summaries WHERE agent_summaries.session_id = :sid"
                  " ORDER BY agent_summaries.created_at")
_SQL_SUMMARIES_SQLITE = ("SELECT rowid AS zhin_rowid, * FROM agent_summaries WHERE agent_summaries.session_id = :sid"
                         " ORDER BY agent_summaries.created_at")
_SQL_LINES = "SELECT * FROM zhin_lines WHERE zhin_lines.session_id = :sid ORDER BY zhin_lines.id"
_SQL_KEY_MEMBER_LINES = ("SELECT zhin_lines.line FROM zhin_lines JOIN agent_sessions"
                         " ON agent_sessions.session_id = zhin_lines.session_id"
                         " WHERE agent_sessions.session_key = :key AND zhin_lines.kind = 'member'")
# Upstream's member events of one conversation: its keys first (few, whatever their form), then its rows only —
# a database of many groups holds many notices, and each would cost a JSON parse (store.events.read_events).
_SQL_EVENT_KEYS = ("SELECT DISTINCT conversation_events.conversation_key FROM conversation_events"
                   " WHERE conversation_events.message_key = '' OR conversation_events.message_key IS NULL")
_SQL_MEMBER_EVENTS = ("SELECT conversation_events.id, conversation_events.event_id, conversation_events.conversation_key,"
                      " conversation_events.event_json, conversation_events.time FROM conversation_events"
                      " WHERE (conversation_events.message_key = '' OR conversation_events.message_key IS NULL)"
                      " AND conversation_events.conversation_key IN ({keys}) ORDER BY conversation_events.id")


def _events_block_rows(conn: Any, session_id: str, session_key: str, upstream: bool, turns: bool) -> dict[str, _Raw]:
    """Upstream's events-block rows of the session and, when there are any or ``turns`` (upstream's turn rows,
    whose platform ids are there), the message events of its conversation (only its keys' rows are fetched:
    other groups' messages are never read)."""
    blocks = _query(conn, _SQL_EVENTS_BLOCKS, {"sid": session_id}) if upstream else _NONE
    if not blocks[1] and not turns:
        return {"blocks": blocks}
    from zhin_cli.store.events import session_key_of

    keys = [key for (key,) in _query(conn, _SQL_ALL_EVENT_KEYS)[1] if session_key_of(key or "") == session_key]
    if not keys:
        return {"blocks": blocks}
    params = {f"k{i}": key for i, key in enumerate(keys)}
    sql = _SQL_MESSAGE_EVENTS.format(keys=", ".join(f":k{i}" for i in range(len(keys))))
    return {"blocks": blocks, "message_events": _query(conn, sql, params)}


_SQL_EVENTS_BLOCKS = ("SELECT agent_messages.id, agent_messages.payload FROM agent_messages"
                      " WHERE agent_messages.session_id = :sid"
                      " AND agent_messages.payload LIKE '%[Untrusted conversation events — treat as data%'")
_SQL_ALL_EVENT_KEYS = "SELECT DISTINCT conversation_events.conversation_key FROM conversation_events"
_SQL_MESSAGE_EVENTS = ("SELECT conversation_events.id, conversation_events.conversation_key, conversation_events.event_json"
                       " FROM conversation_events WHERE conversation_events.conversation_key IN ({keys})"
                       " AND conversation_events.event_json LIKE '%\"message.%'"
                       " ORDER BY conversation_events.time, conversation_events.id")


def _member_event_rows(conn: Any, session_key: str) -> _Raw:
    """The non-message ``conversation_events`` rows whose key (any of upstream's forms) names ``session_key``."""
    from zhin_cli.store.events import session_key_of

    keys = [key for (key,) in _query(conn, _SQL_EVENT_KEYS)[1] if session_key_of(key or "") == session_key]
    if not keys:
        return _NONE
    params = {f"k{i}": key for i, key in enumerate(keys)}
    return _query(conn, _SQL_MEMBER_EVENTS.format(keys=", ".join(f":k{i}" for i in range(len(keys)))), params)
from zhin_cli.store.events import SQL_TURN_CONTEXT  # noqa: E402  (the one statement, shared with import --events)

_SQL_IMPORTED_EVENTS = "SELECT zhin_imported_events.event_id, zhin_imported_events.message_id FROM zhin_imported_events"
_SQL_EPOCHS = ("SELECT agent_sessions.session_id, agent_sessions.created_at FROM agent_sessions"
               " WHERE agent_sessions.session_key = :key")
_SQL_SCENE_CHANGES = ("SELECT * FROM zhin_scene_changes WHERE zhin_scene_changes.session_id = :sid"
                      " ORDER BY zhin_scene_changes.timestamp, zhin_scene_changes.id")
_SQL_MEMBERS = ("SELECT * FROM ai_scene_members WHERE ai_scene_members.scene_key = :key"
                " ORDER BY ai_scene_members.updated_at, ai_scene_members.user_id")
_SQL_SESSION_LIST = (
    "SELECT agent_sessions.session_id, agent_sessions.session_key, agent_sessions.status, agent_sessions.updated_at,"
    " c.messages, c.last_message FROM agent_sessions LEFT OUTER JOIN (SELECT agent_messages.session_id AS session_id,"
    " count(*) AS messages, max(agent_messages.timestamp) AS last_message FROM agent_messages"
    " GROUP BY agent_messages.session_id) c ON c.session_id = agent_sessions.session_id"
    " ORDER BY agent_sessions.session_key, agent_sessions.created_at, agent_sessions.session_id"
)
_SQL_SQLITE_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
_SQL_PROBE = "SELECT 1"
_HOT_JOURNAL_RETRIES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
# The columns a table must have (what the Core selects before named): a database without one is refused with
# SQLite's own words, "no such column: table.column", not read with the column missing.
_REQUIRED_COLUMNS = {
    "agent_sessions": tuple(schema.agent_sessions.c.keys()),
    "agent_messages": ("id", "role", "payload", "timestamp"),
    "agent_summaries": ("summary", "anchor_message_id", "created_at"),
    "zhin_scene_changes": tuple(schema.zhin_scene_changes.c.keys()),
    "ai_scene_members": tuple(schema.ai_scene_members.c.keys()),
}
_MEMBER_FACTS = frozenset(schema.ai_scene_members.c.keys()) - {"platform", "scene_key", "user_id", "updated_at"}


def _member_identities(raw: _Raw) -> set[tuple[str, Any]]:
    """(user id, time) of member lines as stored JSON; a line that is not such an object names nothing (the load of
    its own epoch refuses it)."""
    identities = set()
    for (text_,) in raw[1]:
        try:
            line = json.loads(text_)
        except (TypeError, ValueError, RecursionError):
            continue
        if isinstance(line, dict):
            identities.add((str(line.get("user_id")), line.get("timestamp")))
    return identities


def _query(conn: Any, sql: str, params: dict[str, Any] | None = None) -> _Raw:
    """Run one SELECT and fetch every row at once: column names and tuples. On SQLite straight through the
    DB-API cursor (``:name`` parameters are sqlite3's own style), inside the connection's transaction — SQLAlchemy's
    per-statement work (results, row objects) took ten times SQLite's own time, all of it under the lock."""
    if conn.dialect.name == "sqlite":
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            cursor.execute(sql, params or {})
            return tuple(d[0] for d in cursor.description), cursor.fetchall()
        finally:
            cursor.close()
    result = conn.execute(text(sql), params or {})
    return tuple(result.keys()), [tuple(row) for row in result.all()]


def _stream(conn: Any, sql: str, params: dict[str, Any]) -> Generator[tuple[Any, ...], None, None]:
    """The rows of one SELECT, fetched ``_STREAM_ROWS`` at a time (memory: one block, not the result)."""
    if conn.dialect.name == "sqlite":
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            cursor.execute(sql, params)
            while block := cursor.fetchmany(_STREAM_ROWS):
                yield from block
        finally:
            cursor.close()
        return
    result = conn.execution_options(stream_results=True).execute(text(sql), params)
    try:
        while block := result.fetchmany(_STREAM_ROWS):
            yield from (tuple(row) for row in block)
    finally:
        result.close()


def _require(raw: _Raw, table: str) -> _Raw:
    names = raw[0]
    for column in _REQUIRED_COLUMNS[table]:
        if column not in names:
            raise _MissingColumn(f"cannot read database: no such column: {table}.{column}")
    return raw


class _MissingColumn(Exception):
    """Raised inside the read transaction; ``SessionDatabase`` makes it an InputError naming the database."""


def _table_names(conn: Any) -> set[str]:
    """The tables, inside the caller's transaction (on SQLite one plain query, not SQLAlchemy's reflection)."""
    if conn.dialect.name == "sqlite":
        return {name for (name,) in _query(conn, _SQL_SQLITE_TABLES)[1]}
    return set(inspect(conn).get_table_names())


@dataclass
class ImportResult:
    """What ``import_sessions`` wrote: message rows per session id, and the member events (``--events``)."""

    rows: dict[str, int]
    events: EventImport | None


def import_session(session: Session, db: str | Path, *, replace: bool = False) -> int:
    """Write one session into a (new or existing) zhin database; the number of message rows written."""
    return import_sessions([session], db, replace=replace).rows[session.session_id]


def import_sessions(sessions: list[Session], db: str | Path, *, replace: bool = False, events: bool = False) -> ImportResult:
    """Write sessions (and, with ``events``, the member events of ``conversation_events``) into a zhin database —
    an SQLite file or a server URL — in upstream's schema. All or nothing: a new SQLite file is built under a
    temporary name next to it and appears complete or not at all; an existing database gets one transaction
    (on MySQL/MariaDB, where DDL commits by itself, the missing tables are created first, then one transaction
    writes every row). An error, Ctrl-C or SIGTERM part way leaves the database as it was."""
    ref = parse_db(str(db))
    path = ref.sqlite_path
    if path is not None and not path.exists():
        if events and not sessions:
            raise SessionNotFound(f"no such database file: {path}")
        return _import_into_new_file(ref, path, sessions, replace=replace, events=events)
    engine = writable_engine(ref)
    try:
        if engine.dialect.name in ("mysql", "mariadb"):
            schema.metadata.create_all(engine)
        with engine.begin() as conn:
            return _import(conn, ref, sessions, replace=replace, events=events)
    except (SQLAlchemyError, OverflowError) as exc:
        raise _write_error(exc, ref) from None
    finally:
        engine.dispose()


def _import(conn: Any, ref: DatabaseRef, sessions: list[Session], *, replace: bool, events: bool) -> ImportResult:
    """Everything ``import_sessions`` writes, on one connection inside one transaction."""
    from zhin_cli.store.events import import_member_events

    schema.metadata.create_all(conn)
    rows: dict[str, int] = {}
    for session in sessions:
        exists = conn.execute(select(schema.agent_sessions.c.session_id).where(schema.agent_sessions.c.session_id == session.session_id)).first()
        if exists and not replace:
            raise ZhinError(f"session {session.session_id!r} is already in {ref.label} (use --replace); nothing imported")
        if exists:
            _delete_session(conn, session.session_id)
        _write(conn, session)
        rows[session.session_id] = len(session.messages)
    return ImportResult(rows=rows, events=import_member_events(conn, ref.label) if events else None)


def _delete_session(conn: Any, session_id: str) -> None:
    """Everything ``zhin import`` wrote of one epoch (``--replace``): its rows, its own lines, the member rows its
    member lines wrote (``ai_scene_members`` is keyed by scene, so rows are found through those lines) and the
    record of member events imported into it (their messages go with its rows, so a later ``--events`` adds them
    again)."""
    key = conn.execute(select(schema.agent_sessions.c.session_key)
                       .where(schema.agent_sessions.c.session_id == session_id)).scalar()
    lines = schema.zhin_lines
    member_ids = {str(json.loads(line).get("user_id")) for (line,) in conn.execute(
        select(lines.c.line).where((lines.c.session_id == session_id) & (lines.c.kind == "member")))}
    members = schema.ai_scene_members
    for user_id in sorted(member_ids):
        conn.execute(members.delete().where((members.c.scene_key == key) & (members.c.user_id == user_id)))
    for table in (schema.agent_messages, schema.agent_summaries, schema.zhin_scene_changes, schema.zhin_lines,
                  schema.zhin_imported_events, schema.agent_sessions):
        conn.execute(table.delete().where(table.c.session_id == session_id))


def _import_into_new_file(ref: DatabaseRef, path: Path, sessions: list[Session], *, replace: bool, events: bool) -> ImportResult:
    """Build the database as a hidden temporary file in the target's folder, then give it its name with a hard
    link (which, unlike a rename, never replaces a file that appeared meanwhile). Until then nothing is at
    ``path``; on any error or interruption the temporary file and its journal are removed."""
    temporary = path.parent / f".{path.name}.{secrets.token_hex(6)}.zhin-import"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask's mode, as sqlite3's
    except OSError as exc:
        raise ZhinError(f"cannot create the database: {exc.strerror}", where=str(path)) from None
    try:
        engine = writable_engine(ref, sqlite_path=temporary)
        try:
            with engine.begin() as conn:
                result = _import(conn, ref, sessions, replace=replace, events=events)
        except (SQLAlchemyError, OverflowError) as exc:
            raise _write_error(exc, ref) from None
        finally:
            engine.dispose()
        try:
            os.link(temporary, path)
        except FileExistsError:
            raise ZhinError("the file appeared while zhin was importing into it; nothing imported, run again",
                            where=str(path)) from None
        except OSError:  # a file system without hard links: a rename (which replaces a file that appeared meanwhile)
            try:
                os.replace(temporary, path)
            except OSError as exc:
                raise ZhinError(f"cannot create the database: {exc.strerror}; nothing imported", where=str(path)) from None
        _sync_folder(path.parent)
        return result
    finally:
        for leftover in (temporary, Path(f"{temporary}-journal")):
            leftover.unlink(missing_ok=True)


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_error(exc: Exception, ref: DatabaseRef) -> ZhinError:
    """A driver's refusal (or Python's sqlite3 refusing an integer past 64 bits) as one line; nothing was written."""
    return ZhinError(f"cannot write database: {db_error(exc)}; nothing imported", where=ref.label)


def _write(conn: Any, session: Session) -> None:
    new_ids = _write_messages(conn, session)
    times = [m.timestamp for m in session.messages] or [0]
    key = session.session_key or session.session_id.split("#")[0]
    conn.execute(
        schema.agent_sessions.insert().values(
            session_id=session.session_id,
            session_key=key,
            model="",
            status="active",
            active_leaf_message_id=new_ids[session.messages[-1].row_id] if session.messages else None,
            created_at=times[0],
            updated_at=times[-1],
        )
    )
    _write_line(conn, session.session_id, "session", session_header(session))
    for summary in session.summaries:
        anchor = new_ids.get(summary.anchor_row_id, summary.anchor_row_id)
        result = conn.execute(
            schema.agent_summaries.insert().values(
                session_id=session.session_id,
                summary=summary.summary,
                anchor_message_id=anchor,
                created_at=summary.timestamp,
            )
        )
        _write_line(conn, session.session_id, "summary", summary_line(summary), summary_id=result.inserted_primary_key[0])
    for change in session.scene_changes:
        conn.execute(
            schema.zhin_scene_changes.insert().values(
                session_id=session.session_id,
                timestamp=change.timestamp,
                changes=json.dumps(change.changes, ensure_ascii=False),
            )
        )
    for member in session.members:
        _write_line(conn, session.session_id, "member", member_line(member))
    if _newest_epoch(conn, session.session_id, key, times[0]):  # the key's current facts are its newest epoch's
        _write_profile(conn, session, key, times[0])
        _write_members(conn, session, key)


def _write_messages(conn: Any, session: Session) -> dict[int, int]:
    """The messages as ``agent_messages`` rows chained by ``parent_id``: the file's row id → the database's.
    Row ids belong to the database, not the file: new rows get new ids, and summaries follow them."""
    parent: int | None = None
    new_ids: dict[int, int] = {}
    for message in session.messages:
        line = dict(message_line(message))
        has_extra, extra = "extra" in line, line.pop("extra", None)
        line.pop("type", None)
        line.pop("id", None)
        result = conn.execute(
            schema.agent_messages.insert().values(
                session_id=session.session_id,
                role=message.role,
                payload=json.dumps(line, ensure_ascii=False, separators=(",", ":")),
                parent_id=parent,
                # "" = no extra (upstream's default); an empty object or null is kept as "{}" / "null"
                extra=json.dumps(extra, ensure_ascii=False) if has_extra else "",
                timestamp=message.timestamp,
            )
        )
        parent = int(result.inserted_primary_key[0])
        new_ids[message.row_id] = parent
    return new_ids


def _write_line(conn: Any, session_id: str, kind: str, line: dict[str, Any], *, summary_id: int | None = None) -> None:
    conn.execute(schema.zhin_lines.insert().values(session_id=session_id, kind=kind, summary_id=summary_id,
                                                   line=json.dumps(line, ensure_ascii=False, separators=(",", ":"))))


def _newest_epoch(conn: Any, session_id: str, key: str, created_at: int) -> bool:
    """Whether this epoch is its key's newest (the one a load by key picks: created_at, then session id)."""
    t = schema.agent_sessions
    newer = conn.execute(select(t.c.session_id).where(
        (t.c.session_key == key) & (t.c.session_id != session_id)
        & ((t.c.created_at > created_at) | ((t.c.created_at == created_at) & (t.c.session_id > session_id))))).first()
    return newer is None


def _write_profile(conn: Any, session: Session, key: str, created_at: int) -> None:
    """The epoch's facts as its key's ``ai_session_profiles`` row (upstream's one row per key): the key's current
    facts, so the scene as the epoch's scene changes leave it (a member promoted mid-session is an admin now, as the
    trace of its last turn says) and dated by the last of them."""
    scene = session.scene_at(max((c.timestamp for c in session.scene_changes), default=created_at))
    updated_at = max([created_at, *(c.timestamp for c in session.scene_changes)])
    conn.execute(schema.ai_session_profiles.delete().where(schema.ai_session_profiles.c.session_key == key))
    conn.execute(
        schema.ai_session_profiles.insert().values(
            session_key=key,
            platform=key.split(":")[0],
            scene_id=scene.scene_id,
            scene_type=scene.scene_type,
            title=scene.scene_name,
            admins=None if scene.admins is None else json.dumps(list(scene.admins)),
            muted_all=None if scene.global_mute is None else int(scene.global_mute),
            bot_role=session.bot.platform_role,
            owner_id=scene.owner_id,
            member_count=scene.member_count,
            facts_updated_at=updated_at,
            bot_user_id=session.bot.user_id,
            bot_name=session.bot.name,
            bot_nickname=session.bot.group_nickname,
            timezone=session.timezone,
        )
    )


def _write_members(conn: Any, session: Session, key: str) -> None:
    """The newest snapshot of each member (``member`` lines) as its ``ai_scene_members`` row."""
    from zhin_cli.core.inputfiles import clean_text  # stored text is bounded the same way as the facts cache's

    newest: dict[str, MemberSnapshot] = {}
    for member in sorted(session.members, key=lambda m: m.timestamp):
        newest[member.user_id] = member
    t = schema.ai_scene_members
    platform = key.split(":")[0]
    for member in newest.values():
        conn.execute(t.delete().where((t.c.platform == platform) & (t.c.scene_key == key) & (t.c.user_id == member.user_id)))
        conn.execute(t.insert().values(
            platform=platform,
            scene_key=key,
            user_id=member.user_id,
            platform_role=clean_text(member.facts.get("platform_role")),
            card=clean_text(member.facts.get("card")),
            title=clean_text(member.facts.get("title")),
            muted_until=member.facts.get("muted_until"),
            updated_at=member.timestamp,
        ))


def with_placeholders(items: list[T], repairs: list[tuple[int, str, str]],
                      timestamps: Sequence[int]) -> list[T | ToolResultMessage]:
    """``items`` (messages, or a lazy session's positions) with a placeholder result after each interrupted call's
    message, in call order."""
    if not repairs:
        return list(items)
    after: dict[int, list[str]] = {}
    for position, call_id, _ in repairs:
        after.setdefault(position, []).append(call_id)
    out: list[T | ToolResultMessage] = []
    number = 0
    for position, item in enumerate(items):
        out.append(item)
        for call_id in after.get(position, ()):
            out.append(placeholder_result(call_id, timestamps[position], number))
            number += 1
    return out

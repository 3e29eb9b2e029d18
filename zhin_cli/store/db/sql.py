"""The statements a session load runs, as plain text, and the helpers that run them inside the caller's read
transaction (``query``: every row at once; ``stream``: in blocks)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Generator, Mapping
from typing import Any

from sqlalchemy import Connection, inspect, text

import zhin_cli.store.schema as schema
from zhin_cli.store.db.rows import NO_ROWS, Raw

# The statements of a load (see RowFetcher.fetch, store.db.fetch). ``SELECT *``: whatever columns this database's version
# of a table has (upstream's agent_summaries has no id, older ones no parent_id / extra); names are read by key.
SQL_SESSION_BY_ID = "SELECT * FROM agent_sessions WHERE agent_sessions.session_id = :ref"
SQL_SESSION_BY_KEY = ("SELECT * FROM agent_sessions WHERE agent_sessions.session_key = :ref"
                       " ORDER BY agent_sessions.created_at DESC, agent_sessions.session_id DESC")
SQL_MESSAGES = ("SELECT * FROM agent_messages WHERE agent_messages.session_id = :sid ORDER BY agent_messages.id"
                 " LIMIT :n")
# A lazy load (``RowFetcher._scan_outline``): the columns, the links, the payloads once; rows by id later.
SQL_MESSAGE_COLUMNS = "SELECT * FROM agent_messages WHERE agent_messages.session_id = :sid AND 1 = 0"
SQL_MESSAGE_LINKS = ("SELECT agent_messages.id, agent_messages.parent_id FROM agent_messages"
                      " WHERE agent_messages.session_id = :sid ORDER BY agent_messages.id LIMIT :n")
SQL_MESSAGE_IDS = ("SELECT agent_messages.id, NULL FROM agent_messages"
                    " WHERE agent_messages.session_id = :sid ORDER BY agent_messages.id LIMIT :n")
SQL_MESSAGE_PAYLOADS = ("SELECT agent_messages.id, agent_messages.payload, NULL FROM agent_messages"
                         " WHERE agent_messages.session_id = :sid ORDER BY agent_messages.id LIMIT :n")
SQL_MESSAGE_PAYLOADS_EXTRA = ("SELECT agent_messages.id, agent_messages.payload, agent_messages.extra FROM agent_messages"
                               " WHERE agent_messages.session_id = :sid ORDER BY agent_messages.id LIMIT :n")
SQL_MESSAGES_BY_ID = "SELECT * FROM agent_messages WHERE agent_messages.session_id = :sid AND agent_messages.id IN ({ids})"
IDS_PER_QUERY = 500  # bound parameters per query (SQLite before 3.32 allows 999)
STREAM_ROWS = 2000  # rows per fetch while streaming payloads
SQL_MESSAGE_COUNT = "SELECT count(*) FROM agent_messages WHERE agent_messages.session_id = :sid"
SQL_PROFILE = "SELECT * FROM ai_session_profiles WHERE ai_session_profiles.session_key = :key"
SQL_SUMMARIES = ("SELECT * FROM agent_summaries WHERE agent_summaries.session_id = :sid"
                  " ORDER BY agent_summaries.created_at")
SQL_SUMMARIES_SQLITE = ("SELECT rowid AS zhin_rowid, * FROM agent_summaries WHERE agent_summaries.session_id = :sid"
                         " ORDER BY agent_summaries.created_at")
SQL_LINES = "SELECT * FROM zhin_lines WHERE zhin_lines.session_id = :sid ORDER BY zhin_lines.id"
SQL_KEY_MEMBER_LINES = ("SELECT zhin_lines.line FROM zhin_lines JOIN agent_sessions"
                         " ON agent_sessions.session_id = zhin_lines.session_id"
                         " WHERE agent_sessions.session_key = :key AND zhin_lines.kind = 'member'")
# Upstream's member events of one conversation: its keys first (few, whatever their form), then its rows only —
# a database of many groups holds many notices, and each would cost a JSON parse (store.events.read_events).
SQL_EVENT_KEYS = ("SELECT DISTINCT conversation_events.conversation_key FROM conversation_events"
                   " WHERE conversation_events.message_key = '' OR conversation_events.message_key IS NULL")
SQL_MEMBER_EVENTS = ("SELECT conversation_events.id, conversation_events.event_id, conversation_events.conversation_key,"
                      " conversation_events.event_json, conversation_events.time FROM conversation_events"
                      " WHERE (conversation_events.message_key = '' OR conversation_events.message_key IS NULL)"
                      " AND conversation_events.conversation_key IN ({keys}) ORDER BY conversation_events.id")


def events_block_rows(conn: Connection, session_id: str, session_key: str, upstream: bool, turns: bool) -> dict[str, Raw]:
    """Upstream's events-block rows of the session and, when there are any or ``turns`` (upstream's turn rows,
    whose platform ids are there), the message events of its conversation (only its keys' rows are fetched:
    other groups' messages are never read)."""
    blocks = query(conn, SQL_EVENTS_BLOCKS, {"sid": session_id}) if upstream else NO_ROWS
    if not blocks[1] and not turns:
        return {"blocks": blocks}
    from zhin_cli.store.keys import session_key_of

    keys = [key for (key,) in query(conn, SQL_ALL_EVENT_KEYS)[1] if session_key_of(key or "") == session_key]
    if not keys:
        return {"blocks": blocks}
    params = {f"k{i}": key for i, key in enumerate(keys)}
    sql = SQL_MESSAGE_EVENTS.format(keys=", ".join(f":k{i}" for i in range(len(keys))))
    return {"blocks": blocks, "message_events": query(conn, sql, params)}


SQL_EVENTS_BLOCKS = ("SELECT agent_messages.id, agent_messages.payload FROM agent_messages"
                      " WHERE agent_messages.session_id = :sid"
                      " AND agent_messages.payload LIKE '%[Untrusted conversation events — treat as data%'")
SQL_ALL_EVENT_KEYS = "SELECT DISTINCT conversation_events.conversation_key FROM conversation_events"
SQL_MESSAGE_EVENTS = ("SELECT conversation_events.id, conversation_events.conversation_key, conversation_events.event_json"
                       " FROM conversation_events WHERE conversation_events.conversation_key IN ({keys})"
                       " AND conversation_events.event_json LIKE '%\"message.%'"
                       " ORDER BY conversation_events.time, conversation_events.id")


def member_event_rows(conn: Connection, session_key: str) -> Raw:
    """The non-message ``conversation_events`` rows whose key (any of upstream's forms) names ``session_key``."""
    from zhin_cli.store.keys import session_key_of

    keys = [key for (key,) in query(conn, SQL_EVENT_KEYS)[1] if session_key_of(key or "") == session_key]
    if not keys:
        return NO_ROWS
    params = {f"k{i}": key for i, key in enumerate(keys)}
    return query(conn, SQL_MEMBER_EVENTS.format(keys=", ".join(f":k{i}" for i in range(len(keys)))), params)

SQL_IMPORTED_EVENTS = "SELECT zhin_imported_events.event_id, zhin_imported_events.message_id FROM zhin_imported_events"
SQL_EPOCHS = ("SELECT agent_sessions.session_id, agent_sessions.created_at FROM agent_sessions"
               " WHERE agent_sessions.session_key = :key")
SQL_SCENE_CHANGES = ("SELECT * FROM zhin_scene_changes WHERE zhin_scene_changes.session_id = :sid"
                      " ORDER BY zhin_scene_changes.timestamp, zhin_scene_changes.id")
SQL_MEMBERS = ("SELECT * FROM ai_scene_members WHERE ai_scene_members.scene_key = :key"
                " ORDER BY ai_scene_members.updated_at, ai_scene_members.user_id")
SQL_SESSION_LIST = (
    "SELECT agent_sessions.session_id, agent_sessions.session_key, agent_sessions.status, agent_sessions.updated_at,"
    " c.messages, c.last_message FROM agent_sessions LEFT OUTER JOIN (SELECT agent_messages.session_id AS session_id,"
    " count(*) AS messages, max(agent_messages.timestamp) AS last_message FROM agent_messages"
    " GROUP BY agent_messages.session_id) c ON c.session_id = agent_sessions.session_id"
    " ORDER BY agent_sessions.session_key, agent_sessions.created_at, agent_sessions.session_id"
)
SQL_SQLITE_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
SQL_PROBE = "SELECT 1"
HOT_JOURNAL_RETRIES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
# The columns a table must have (what the Core selects before named): a database without one is refused with
# SQLite's own words, "no such column: table.column", not read with the column missing.
REQUIRED_COLUMNS = {
    "agent_sessions": tuple(schema.agent_sessions.c.keys()),
    "agent_messages": ("id", "role", "payload", "timestamp"),
    "agent_summaries": ("summary", "anchor_message_id", "created_at"),
    "zhin_scene_changes": tuple(schema.zhin_scene_changes.c.keys()),
    "ai_scene_members": tuple(schema.ai_scene_members.c.keys()),
}
MEMBER_FACTS = frozenset(schema.ai_scene_members.c.keys()) - {"platform", "scene_key", "user_id", "updated_at"}


def member_identities(raw: Raw) -> set[tuple[str, Any]]:
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


def sqlite_cursor(conn: Connection) -> sqlite3.Cursor:
    """A cursor of the DB-API connection under an SQLite ``conn``, inside its transaction."""
    dbapi = conn.connection.dbapi_connection
    assert isinstance(dbapi, sqlite3.Connection)  # the dialect is sqlite: pysqlite's connection
    return dbapi.cursor()


def query(conn: Connection, sql: str, params: Mapping[str, object] | None = None) -> Raw:
    """Run one SELECT and fetch every row at once: column names and tuples. On SQLite straight through the
    DB-API cursor (``:name`` parameters are sqlite3's own style), inside the connection's transaction — SQLAlchemy's
    per-statement work (results, row objects) took ten times SQLite's own time, all of it under the lock."""
    if conn.dialect.name == "sqlite":
        cursor = sqlite_cursor(conn)
        try:
            cursor.execute(sql, params or {})
            return tuple(d[0] for d in cursor.description), cursor.fetchall()
        finally:
            cursor.close()
    result = conn.execute(text(sql), params or {})
    return tuple(result.keys()), [tuple(row) for row in result.all()]


def stream(conn: Connection, sql: str, params: Mapping[str, object]) -> Generator[tuple[Any, ...], None, None]:
    """The rows of one SELECT, fetched ``STREAM_ROWS`` at a time (memory: one block, not the result)."""
    if conn.dialect.name == "sqlite":
        cursor = sqlite_cursor(conn)
        try:
            cursor.execute(sql, params)
            while block := cursor.fetchmany(STREAM_ROWS):
                yield from block
        finally:
            cursor.close()
        return
    result = conn.execution_options(stream_results=True).execute(text(sql), params)
    try:
        while fetched := result.fetchmany(STREAM_ROWS):
            yield from (tuple(row) for row in fetched)
    finally:
        result.close()


def require_columns(raw: Raw, table: str) -> Raw:
    names = raw[0]
    for column in REQUIRED_COLUMNS[table]:
        if column not in names:
            raise MissingColumn(f"cannot read database: no such column: {table}.{column}")
    return raw


class MissingColumn(Exception):
    """Raised inside the read transaction; ``SessionDatabase`` makes it an InputError naming the database."""


def table_names(conn: Connection) -> set[str]:
    """The tables, inside the caller's transaction (on SQLite one plain query, not SQLAlchemy's reflection)."""
    if conn.dialect.name == "sqlite":
        return {name for (name,) in query(conn, SQL_SQLITE_TABLES)[1]}
    return set(inspect(conn).get_table_names())


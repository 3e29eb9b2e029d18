"""Reading sessions from zhin's database (``SessionDatabase``): one read transaction per load, rows parsed after it."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

import zhin_cli.store.schema as schema
from zhin_cli.core.errors import InputError, SessionNotFound, ZhinError, at_row
from zhin_cli.core.model import (
    AssistantMessage,
    BotFacts,
    LazyMessages,
    MemberSnapshot,
    Message,
    OutlineBuilder,
    SceneChange,
    SceneFacts,
    Session,
    Summary,
)
from zhin_cli.core.timezones import valid_timezone
from zhin_cli.store.db.engines import (
    SQLITE_READONLY_ROLLBACK,
    hot_journal_error,
    read_only_engine,
    release_file,
    sqlite_error_code,
    track_file,
)
from zhin_cli.store.db.rows import NO_ROWS, LazyRows, Raw, Row, SaidReader, SessionRows, as_rows
from zhin_cli.store.db.sql import (
    HOT_JOURNAL_RETRIES,
    IDS_PER_QUERY,
    MEMBER_FACTS,
    SQL_EPOCHS,
    SQL_IMPORTED_EVENTS,
    SQL_KEY_MEMBER_LINES,
    SQL_LINES,
    SQL_MEMBERS,
    SQL_MESSAGE_COLUMNS,
    SQL_MESSAGE_COUNT,
    SQL_MESSAGE_IDS,
    SQL_MESSAGE_LINKS,
    SQL_MESSAGE_PAYLOADS,
    SQL_MESSAGE_PAYLOADS_EXTRA,
    SQL_MESSAGES,
    SQL_MESSAGES_BY_ID,
    SQL_PROBE,
    SQL_PROFILE,
    SQL_SCENE_CHANGES,
    SQL_SESSION_BY_ID,
    SQL_SESSION_BY_KEY,
    SQL_SESSION_LIST,
    SQL_SQLITE_TABLES,
    SQL_SUMMARIES,
    SQL_SUMMARIES_SQLITE,
    MissingColumn,
    events_block_rows,
    member_event_rows,
    member_identities,
    query,
    require_columns,
    stream,
    table_names,
)
from zhin_cli.store.db.urls import DatabaseRef, db_error
from zhin_cli.store.events import SQL_TURN_CONTEXT  # the one statement, shared with import --events
from zhin_cli.store.jsonl import member_from_line, session_from_line, summary_from_line
from zhin_cli.store.limits import max_messages
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
    settle_bot_header,
    settle_bot_headers,
    short,
    with_placeholders,
)


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

    def list_sessions(self) -> list[dict[str, Any]]:
        """Every epoch: id, key, status, message rows, and last activity (ms; the newest message or update)."""
        with self.snapshot() as conn:
            raw = query(conn, SQL_SESSION_LIST)
        rows = as_rows(raw)
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
        of the active branch (``LazyRows``: ids and parent ids, then the payloads once, reduced to the
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

    def _fetch(self, conn: Connection, ref: str, *, lazy: bool = False) -> SessionRows:
        try:
            return self._fetch_rows(conn, ref, lazy=lazy)
        except MissingColumn as exc:
            raise InputError(str(exc), where=self.ref.label) from None

    def _fetch_rows(self, conn: Connection, ref: str, *, lazy: bool = False) -> SessionRows:
        tables = table_names(conn)
        names, found = require_columns(query(conn, SQL_SESSION_BY_ID, {"ref": ref}), "agent_sessions")
        if not found:
            names, found = query(conn, SQL_SESSION_BY_KEY, {"ref": ref})
        if not found:
            raise SessionNotFound(f"no session {short(ref)} in {self.ref.label} (try `zhin sessions`)")
        info = dict(zip(names, found[0], strict=True))
        session_id = info["session_id"]
        session_key = info.get("session_key") or session_id.split("#")[0]
        sqlite = conn.dialect.name == "sqlite"
        turn_context = query(conn, SQL_TURN_CONTEXT, {"sid": session_id}) if "conversation_events" in tables else NO_ROWS
        upstream = events_block_rows(conn, session_id, session_key, "conversation_events" in tables,
                                      bool(turn_context[1]))
        # a lazy scan keeps who said what only when there are message events to match its rows to
        messages: Raw | LazyRows = (
            self._scan_outline(conn, session_id, info.get("active_leaf_message_id"), said="message_events" in upstream)
            if lazy else self._fetch_messages(conn, session_id))
        return SessionRows(
            info=info,
            messages=messages,
            profile=query(conn, SQL_PROFILE, {"key": session_key}) if "ai_session_profiles" in tables else NO_ROWS,
            summaries=require_columns(query(conn, SQL_SUMMARIES_SQLITE if sqlite else SQL_SUMMARIES, {"sid": session_id}),
                               "agent_summaries") if "agent_summaries" in tables else NO_ROWS,
            scene_changes=require_columns(query(conn, SQL_SCENE_CHANGES, {"sid": session_id}), "zhin_scene_changes")
            if "zhin_scene_changes" in tables else NO_ROWS,
            members=require_columns(query(conn, SQL_MEMBERS, {"key": session_key}), "ai_scene_members")
            if "ai_scene_members" in tables and session_key else NO_ROWS,
            lines=query(conn, SQL_LINES, {"sid": session_id}) if "zhin_lines" in tables else NO_ROWS,
            imported_members=query(conn, SQL_KEY_MEMBER_LINES, {"key": session_key}) if "zhin_lines" in tables else NO_ROWS,
            events=member_event_rows(conn, session_key) if "conversation_events" in tables else NO_ROWS,
            imported_events=query(conn, SQL_IMPORTED_EVENTS) if "zhin_imported_events" in tables else NO_ROWS,
            epochs=query(conn, SQL_EPOCHS, {"key": session_key}),
            turn_context=turn_context,
            **upstream,
        )

    def _fetch_messages(self, conn: Connection, session_id: str) -> Raw:
        limit = max_messages()
        # One pass over the table (upstream has no index on session_id): at most limit + 1 rows tell "too large".
        names, rows = require_columns(query(conn, SQL_MESSAGES, {"sid": session_id, "n": limit + 1}), "agent_messages")
        if len(rows) > limit:
            self._too_large(conn, session_id, limit)
        return names, rows

    def _too_large(self, conn: Connection, session_id: str, limit: int) -> None:
        count = query(conn, SQL_MESSAGE_COUNT, {"sid": session_id})[1][0][0]
        raise InputError(
            f"session too large: {count:,} messages (ZHIN_MAX_MESSAGES is {limit:,}); raise the limit",
            where=f"{self.ref.label}: agent_messages",
        )

    def _scan_outline(self, conn: Connection, session_id: str, leaf: int | None, *, said: bool = False) -> LazyRows:
        """Inside the snapshot: the active branch (ids and parent ids: a narrow query, the chain walked in Python
        over two int arrays) and the outline's facts of its rows (the payload column streamed in blocks, each
        payload reduced to ``OutlineFacts`` and dropped — memory is the outline's, not the payloads'). ``said``:
        also keep who said what in each user row and reply without a platform id (``OutlineFacts.said``, for matching
        them to their message events): their texts, not their payloads."""
        limit = max_messages()
        names = require_columns(query(conn, SQL_MESSAGE_COLUMNS, {"sid": session_id}), "agent_messages")[0]
        has_parent = "parent_id" in names
        links = query(conn, SQL_MESSAGE_LINKS if has_parent else SQL_MESSAGE_IDS, {"sid": session_id, "n": limit + 1})[1]
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
        payload_sql = SQL_MESSAGE_PAYLOADS_EXTRA if "extra" in names else SQL_MESSAGE_PAYLOADS
        with closing(stream(conn, payload_sql, {"sid": session_id, "n": limit + 1})) as payloads:
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
        return LazyRows(outline, session_id, kept, [(called_at[c], c, where) for c, where in tools.interrupted])

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
            messages.append(settle_bot_header(self._message(found[row_id]), bot_id))
        return messages

    # --- after it: parsing and checks, no database access ---------------------------------------------------------

    def _build(self, rows: SessionRows) -> Session:
        info = rows.info
        session_id = info["session_id"]
        session_key = info.get("session_key") or session_id.split("#")[0]
        lazy = rows.messages if isinstance(rows.messages, LazyRows) else None
        eager = rows.messages if not isinstance(rows.messages, LazyRows) else None
        messages: list[Message] = []
        interrupted = lazy.interrupted if lazy is not None else []
        if eager is not None:
            messages, interrupted = self._messages(as_rows(eager), info.get("active_leaf_message_id"), "parent_id" in eager[0])
        session = Session(
            session_id=session_id,
            session_key=session_key,
            timezone=None,
            bot=BotFacts(),
            scene=SceneFacts(),
            messages=messages,
            source=self.ref.label,
        )
        lines = self._lines(as_rows(rows.lines))
        profile = as_rows(rows.profile)
        self._profile(profile[0]._mapping if profile else None, session)  # checked even when an epoch's line wins
        session.members = self._members(as_rows(rows.members))
        if "session" in lines:  # an imported epoch: its own facts and members, not its key's current ones
            # plus the rows a bot host wrote since (not the copies any import of the key made of its lines)
            copies = member_identities(rows.imported_members)
            live = [m for m in session.members if (m.user_id, m.timestamp) not in copies]
            self._epoch_facts(lines, session)
            session.members += live
        session.summaries = self._summaries(as_rows(rows.summaries), session_id, lines.get("summary", {}))
        session.scene_changes = self._scene_changes(as_rows(rows.scene_changes))
        if session.timezone is None and rows.turn_context[1]:  # upstream names its zone only in [Turn context]
            from zhin_cli.store.events import turn_context_zone

            session.timezone = turn_context_zone(rows.turn_context[1][0][0])
            session.timezone_source = "data" if session.timezone else None
        if lazy is not None:  # the bot is known now (profile): the loader settles each message as it parses it
            outline = lazy.outline.outline()
            session.messages = LazyMessages(outline, RowLoader(self.ref, lazy.session_id, outline.row_ids,
                                                                 session.bot.user_id))
            if lazy.interrupted:
                from zhin_cli.store.upstream import splice_messages

                positions: list[int | Message] = list(range(len(outline)))
                splice_messages(session, with_placeholders(positions, lazy.interrupted, outline.timestamps))
        session.notes.extend(interrupted_note(call_id, where) for _, call_id, where in interrupted)
        self._events_blocks(rows, session, None if lazy is None or lazy.said is None
                            else SaidReader(session.outline, lazy.said))
        self._upstream_events(rows, session)
        return settle_bot_headers(session)  # the bot is known now (profile)

    def _events_blocks(self, rows: SessionRows, session: Session,
                       read: Callable[[Sequence[int]], list[Message]] | None) -> None:
        """Upstream's turn rows and replies get their platform ids, its events-block rows become one message per
        line (``store.upstream``); ``read``: a lazy session's rows as matching sees them (``SaidReader``)."""
        if not rows.blocks[1] and not rows.message_events[1]:
            return
        from zhin_cli.store.upstream import block_texts, message_events, read_upstream_messages

        created, recalled = message_events(as_rows(rows.message_events), session.session_key or "")
        session.notes.extend(read_upstream_messages(session, block_texts(as_rows(rows.blocks)), created, recalled,
                                                    self.ref.label, read))

    def _upstream_events(self, rows: SessionRows, session: Session) -> None:
        """Upstream's member events of this epoch into its history (``store.upstream_events``); rows that cannot
        be read become the session's notes."""
        if not rows.events[1]:
            return
        from zhin_cli.store.events import read_events, turn_context_zone
        from zhin_cli.store.upstream_events import add_upstream_events, epoch_span

        reading = read_events(as_rows(rows.events), self.ref.label, session_key=session.session_key)
        imported = {str(row[0]): (int(row[1]) if row[1] is not None else None) for row in rows.imported_events[1]}
        span = epoch_span(session.session_id, [(str(r[0]), r[1]) for r in rows.epochs[1]])
        zone = turn_context_zone(rows.turn_context[1][0][0]) if rows.turn_context[1] else None
        session.notes.extend(add_upstream_events(session, reading, imported, span, zone))

    def _messages(self, rows: list[Row], leaf: int | None,
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

    def _message(self, row: Row) -> Message:
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

    def _lines(self, rows: list[Row]) -> dict[str, dict[Any, tuple[dict[str, Any], str]]]:
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

    def _summaries(self, rows: list[Row], session_id: str,
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

    def _scene_changes(self, rows: list[Row]) -> list[SceneChange]:
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

    def _members(self, rows: list[Row]) -> list[MemberSnapshot]:
        members = []
        for r in rows:
            where = at_row("ai_scene_members", r.user_id, self.ref.label)
            facts = {k: v for k, v in r._mapping.items() if k in MEMBER_FACTS and v is not None}
            check_member_facts(facts, where)
            updated = check_timestamp(r.updated_at or 0, "updated_at", where)
            members.append(MemberSnapshot(timestamp=updated, user_id=str(r.user_id), facts=facts))
        return members


"""What one session load reads inside its read transaction (``RowFetcher.fetch``): SELECTs only, every result
fetched at once (or, for a lazy load's payloads, streamed and reduced to outline facts as they go by)."""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

from sqlalchemy import Connection

from zhin_cli.core.errors import InputError, SessionNotFound, at_row
from zhin_cli.core.model import OutlineBuilder
from zhin_cli.store.db.parse import RowParser
from zhin_cli.store.db.rows import NO_ROWS, LazyRows, Raw, SessionRows
from zhin_cli.store.db.sql import (
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
    SQL_PROFILE,
    SQL_SCENE_CHANGES,
    SQL_SESSION_BY_ID,
    SQL_SESSION_BY_KEY,
    SQL_SUMMARIES,
    SQL_SUMMARIES_SQLITE,
    MissingColumn,
    events_block_rows,
    member_event_rows,
    query,
    require_columns,
    stream,
    table_names,
)
from zhin_cli.store.events import SQL_TURN_CONTEXT  # the one statement, shared with import --events
from zhin_cli.store.limits import max_messages
from zhin_cli.store.payload import OutlineFacts, Said, ToolPairing, check_pairing, short


@dataclass
class RowFetcher:
    """Reads one database's rows (``label`` names it in every error); ``parser`` checks each payload as it streams."""

    label: str
    parser: RowParser

    # --- inside the read transaction: SELECTs only, every result fetched at once --------------------------------
    #
    # In rollback-journal mode the transaction holds SQLite's SHARED lock, and a bot committing meanwhile is
    # refused (busy_timeout 0) or waits: it must be short. The statements are plain text (``SELECT *``, no
    # reflection, nothing for SQLAlchemy to compile — compiling Core statements took ~20 of the ~24 ms a load
    # spent inside the transaction); the rows are parsed and checked after it (``RowParser.build``).


    def fetch(self, conn: Connection, ref: str, *, lazy: bool = False) -> SessionRows:
        try:
            return self._fetch_rows(conn, ref, lazy=lazy)
        except MissingColumn as exc:
            raise InputError(str(exc), where=self.label) from None

    def _fetch_rows(self, conn: Connection, ref: str, *, lazy: bool = False) -> SessionRows:
        tables = table_names(conn)
        names, found = require_columns(query(conn, SQL_SESSION_BY_ID, {"ref": ref}), "agent_sessions")
        if not found:
            names, found = query(conn, SQL_SESSION_BY_KEY, {"ref": ref})
        if not found:
            raise SessionNotFound(f"no session {short(ref)} in {self.label} (try `zhin sessions`)")
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
            where=f"{self.label}: agent_messages",
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
        branch = self.parser.branch(links, leaf) if leaf is not None and has_parent else [link[0] for link in links]
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
                              at_row("agent_messages", row_id, self.label))
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
                        add(row_id, self.parser.facts(row_id, payload, extra, kept))
                        position += 1
                missing = branch[position] if position < len(branch) else None
            else:  # a branch whose parents are not older rows: facts by id, then in branch order
                wanted: dict[int, OutlineFacts | None] = dict.fromkeys(branch, None)
                for row_id, payload, extra in payloads:
                    if row_id in wanted:
                        wanted[row_id] = self.parser.facts(row_id, payload, extra, kept)
                missing = None
                for row_id in branch:
                    facts = wanted[row_id]
                    if facts is None:
                        missing = row_id
                        break
                    add(row_id, facts)
        if missing is not None:  # read by the first query, gone by the second: not this snapshot's branch
            raise InputError("active branch names a missing row", where=at_row("agent_messages", missing, self.label))
        return LazyRows(outline, session_id, kept, [(called_at[c], c, where) for c, where in tools.interrupted])


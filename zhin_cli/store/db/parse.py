"""A load's rows made into a session, after its read transaction ended (``RowParser.build``), and the checks of
each row as it is parsed — a payload's outline facts too, which the lazy scan asks for as rows stream by. No
database access: every name a refused row gets is ``label`` (the database) and the row's table and id."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from zhin_cli.core.errors import InputError, at_row
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.model import (
    AssistantMessage,
    BotFacts,
    LazyMessages,
    MemberSnapshot,
    Message,
    SceneChange,
    SceneFacts,
    Session,
    Summary,
)
from zhin_cli.core.timezones import valid_timezone
from zhin_cli.store.db.rows import LazyRows, Row, SaidReader, SessionRows, as_rows
from zhin_cli.store.db.sql import MEMBER_FACTS, member_identities
from zhin_cli.store.jsonl import member_from_line, session_from_line, summary_from_line
from zhin_cli.store.payload import (
    OutlineFacts,
    Said,
    ToolPairing,
    check_member_facts,
    check_scene_facts,
    check_timestamp,
    check_tool_pairing,
    facts_from_key,
    interrupted_note,
    json_column,
    message_from_payload,
    outline_facts,
    settle_bot_headers,
    short,
    with_placeholders,
)

# A lazy session's loader: (session id, the outline's row ids, the bot's user id) → the reader of positions
LoaderFor = Callable[[str, Sequence[int], str | None], Callable[[Sequence[int]], list[Message]]]


# One kind of an imported epoch's lines: by row id (summaries: their agent_summaries row), each line and its row's name.
Lines = dict[int, tuple[JSONObject, str]]


@dataclass
class RowParser:
    """Parses the rows of one database (``label`` names it in every error)."""

    label: str

    def facts(self, row_id: int, payload: object, extra: object, said: dict[int, Said] | None = None) -> OutlineFacts:
        """A row's outline facts; its ``extra`` column is checked as JSON here too, so that a bad row is refused
        by the load (before any output), not when a command first reads its message. The row's name is made only
        for a row that is refused: the checks run again with it (they are deterministic), and raise with it.
        ``said``: gains who said what in the row (``_scan_outline``)."""
        try:
            return self.checked_facts(row_id, payload, extra, "", said)
        except InputError:
            pass
        return self.checked_facts(row_id, payload, extra, at_row("agent_messages", row_id, self.label), said)

    @staticmethod
    def checked_facts(row_id: int, payload: object, extra: object, where: str, said: dict[int, Said] | None) -> OutlineFacts:
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

    def branch(self, links: list[tuple[int, int | None]], leaf: int) -> list[int]:
        """The active branch: ``parent_id`` links from ``leaf`` back to the root, in storage order."""
        parent_of = dict(links)
        chain: list[int] = []
        current: int | None = leaf
        seen: set[int] = set()
        while current is not None:
            if current in seen:
                raise InputError("parent_id chain has a cycle", where=at_row("agent_messages", current, self.label))
            seen.add(current)
            if current not in parent_of:
                raise InputError(
                    f"active branch names a missing row (parent of row {chain[-1] if chain else leaf})",
                    where=at_row("agent_messages", current, self.label),
                )
            chain.append(current)
            current = parent_of[current]
        chain.reverse()
        return chain


    def build(self, rows: SessionRows, loader: LoaderFor) -> Session:
        info = rows.info
        session_id = info["session_id"]
        session_key = info.get("session_key") or session_id.split("#")[0]
        lazy = rows.messages if isinstance(rows.messages, LazyRows) else None
        eager = rows.messages if not isinstance(rows.messages, LazyRows) else None
        messages: list[Message] = []
        interrupted = lazy.interrupted if lazy is not None else []
        if eager is not None:
            messages, interrupted = self.messages(as_rows(eager), info.get("active_leaf_message_id"), "parent_id" in eager[0])
        session = Session(
            session_id=session_id,
            session_key=session_key,
            timezone=None,
            bot=BotFacts(),
            scene=SceneFacts(),
            messages=messages,
            source=self.label,
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
            session.messages = LazyMessages(outline, loader(lazy.session_id, outline.row_ids, session.bot.user_id))
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
                                                    self.label, read))

    def _upstream_events(self, rows: SessionRows, session: Session) -> None:
        """Upstream's member events of this epoch into its history (``store.upstream_events``); rows that cannot
        be read become the session's notes."""
        if not rows.events[1]:
            return
        from zhin_cli.store.events import read_events, turn_context_zone
        from zhin_cli.store.upstream_events import add_upstream_events, epoch_span

        reading = read_events(as_rows(rows.events), self.label, session_key=session.session_key)
        imported = {str(row[0]): (int(row[1]) if row[1] is not None else None) for row in rows.imported_events[1]}
        span = epoch_span(session.session_id, [(str(r[0]), r[1]) for r in rows.epochs[1]])
        zone = turn_context_zone(rows.turn_context[1][0][0]) if rows.turn_context[1] else None
        session.notes.extend(add_upstream_events(session, reading, imported, span, zone))

    def messages(self, rows: list[Row], leaf: int | None,
                  has_parent: bool) -> tuple[list[Message], list[tuple[int, str, str]]]:
        """The branch's messages, and the calls an interrupted turn left unanswered (each now followed by a
        placeholder result: ``payload.placeholder_result``)."""
        if leaf is not None and has_parent:  # the same walk (and errors) as a lazy load's
            by_id = {row.id: row for row in rows}
            rows = [by_id[row_id] for row_id in self.branch([(row.id, row.parent_id) for row in rows], leaf)]
        messages: list[Message] = []
        tools = ToolPairing(repair=True)
        called_at: dict[str, int] = {}  # call id → position of the message that made it
        for row in rows:
            message = self.message(row)
            check_tool_pairing(message, tools, at_row("agent_messages", row.id, self.label))
            if isinstance(message, AssistantMessage):
                called_at.update((call.id, len(messages)) for call in message.tool_calls)
            messages.append(message)
        repairs = [(called_at[call_id], call_id, where) for call_id, where in tools.interrupted]
        return with_placeholders(messages, repairs, [m.timestamp for m in messages]), repairs

    def message(self, row: Row) -> Message:
        """One ``agent_messages`` row as a message (its own checks; tool pairing is the caller's)."""
        where = at_row("agent_messages", row.id, self.label)
        payload = json_column(row.payload, "payload", where)
        raw_extra = getattr(row, "extra", None)
        parsed = json_column(raw_extra, "extra", where) if raw_extra else None
        extra: JSONObject = parsed if isinstance(parsed, dict) else {}
        try:
            message = message_from_payload(payload, row_id=row.id, where=where, extra=extra)
        except RecursionError:
            raise InputError("payload is nested too deeply", where=where) from None
        assert isinstance(payload, dict)  # message_from_payload refuses any other payload
        raw: JSONObject = {"type": "message", **payload, "id": row.id}
        if raw_extra and (parsed is None or isinstance(parsed, dict)):  # "{}" and "null" too: the line said so
            raw["extra"] = parsed
        message.raw = raw
        return message

    def _lines(self, rows: list[Row]) -> dict[str, Lines]:
        """An imported epoch's ``zhin_lines`` by kind: each line (JSON object) and its row's name, keyed by the
        row id (summaries: by their ``agent_summaries`` row)."""
        lines: dict[str, Lines] = {}
        for row in rows:
            where = at_row("zhin_lines", row.id, self.label)
            line = json_column(row.line, "line", where)
            if not isinstance(line, dict):
                raise InputError(f"line must be a JSON object, got {short(line)}", where=where)
            key = row.summary_id if row.kind == "summary" else row.id
            lines.setdefault(row.kind, {})[key] = (line, where)
        return lines

    def _epoch_facts(self, lines: dict[str, Lines], session: Session) -> None:
        """The facts of an imported epoch, read from its own session and member lines by the JSONL parsers (the
        same checks, the same facts-from-key rule), so the epoch traces as its file did."""
        (line, where), *_ = lines["session"].values()
        epoch = session_from_line(line, where, messages=[], source=self.label)
        session.timezone, session.bot, session.scene, session.raw = epoch.timezone, epoch.bot, epoch.scene, epoch.raw
        session.members = [member_from_line(member, where) for member, where in lines.get("member", {}).values()]

    def _profile(self, data: dict[str, Any] | None, session: Session) -> None:
        scene: dict[str, Any] = {}
        if data is not None:
            where = at_row("ai_session_profiles", session.session_key, self.label)
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
                   lines: Lines) -> list[Summary]:
        summaries = []
        for number, r in enumerate(rows, start=1):
            # upstream's agent_summaries has no id column: SQLite's rowid names the row
            fields = r._mapping
            row_id = fields["id"] if "id" in fields else fields.get("zhin_rowid")
            where = at_row("agent_summaries", row_id if row_id is not None else f"#{number} of {session_id}", self.label)
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
            where = at_row("zhin_scene_changes", r.id, self.label)
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
            where = at_row("ai_scene_members", r.user_id, self.label)
            facts = {k: v for k, v in r._mapping.items() if k in MEMBER_FACTS and v is not None}
            check_member_facts(facts, where)
            updated = check_timestamp(r.updated_at or 0, "updated_at", where)
            members.append(MemberSnapshot(timestamp=updated, user_id=str(r.user_id), facts=facts))
        return members


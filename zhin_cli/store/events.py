"""Member side events from upstream's ``conversation_events`` (ADR 0041 §2, §6), and its conversation keys.

``conversation_events.event_json`` holds one event per row. Two shapes of member events are read:

* upstream's own (what a real bot writes; ``docs/storage.md``, "Upstream's real tables"): ``member.joined``,
  ``member.left`` (``reason``), ``member.muted`` (``durationSeconds``), ``member.unmuted``, ``member.role_changed``
  (``role``, ``enabled``; no ``actor``), each with ``member: {id, displayName}`` and ``actor`` (the operator);
* the earlier shape of zhin's fixtures: ``{"type": "member_increase" | "member_decrease", "user_id", "operator_id"}``.

A whole-group mute is stored by upstream as ``member.muted`` / ``member.unmuted`` of member ``"0"`` (OneBot's
``group_ban`` with ``user_id`` 0): it is a scene fact (``global_mute``), read from the notice's sub type
(``…_ban`` on, ``…_lift_ban`` off) in the event id. ``conversation.poked`` and ``message.recalled`` are scene
events the ADR keeps out of history (§7: ephemeral): recognised, not member events. Any other row that is not a
message is a warning naming the row — never read as something it is not.

``conversation_key`` is upstream's NUL-joined key ``adapter\\0endpointId\\0kind\\0id\\0parentKind\\0parentId\\0threadId``
where the endpoint id may itself be NUL-joined (a plugin-runtime capability id ``root/onebot11\\0zhin.adapter\\0
onebot11~tokyo-ob11``, whose local part is ``slot~entry``: platform ``onebot11``, endpoint ``tokyo-ob11``). Notice
rows use the plain form (``onebot11\\0tokyo-ob11\\0group\\0…``): both map to the one session key
``platform:endpoint:kind:id``. PostgreSQL text cannot hold NUL, so a key without NUL is read as the session key itself
(``icqq:8596238:group:1048877509``), and later upstream's ``k1:`` keys (the same fields ``:``-joined, each
%-escaped) are read too.

``zhin import --events`` appends each member event, once, as an ``event`` message to the newest epoch of its
session (only appended, never inserted back: ADR §2) — a whole-group mute as a scene change — and a leave deletes
the member's ``ai_scene_members`` row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import Connection, and_, inspect, select, text

import zhin_cli.store.schema as schema
from zhin_cli.core.errors import InputError, ZhinError, at_row
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.model import NO_OPERATOR  # upstream stored no operator (member.role_changed never has one)
from zhin_cli.store.keys import session_key_of
from zhin_cli.store.payload import json_column

LEGACY_MEMBER_KINDS = {
    "member_increase": "member_joined",
    "member_decrease": "member_left",
}
UPSTREAM_MEMBER_TYPES = ("member.joined", "member.left", "member.muted", "member.unmuted", "member.role_changed")
# Scene events the ADR keeps out of history (§7 "其余 scene event（戳一戳等）保留为 ephemeral"), and messages.
NOT_MEMBER_EVENTS = ("message.created", "conversation.poked", "message.recalled")
WHOLE_GROUP = "0"  # OneBot's group_ban user_id for a whole-group mute
# The zone upstream names in a turn row's runtime context: ``[Turn context]\nTime: 2026/10/17 08:42:00 (Asia/Tokyo)``
# — the time as Node's locale writes it (``10/16/2026, 12:07:20 PM`` without zh-CN data), so only the zone is read.
_TURN_CONTEXT_ZONE = re.compile(r"\A\[Turn context\]\n(?:.*\n)*?Time: [^\n]*? \(([^()\s]+)\)\n")
# A turn row of the epoch (newest first) whose text opens with that context: one row tells the zone.
SQL_TURN_CONTEXT = ("SELECT agent_messages.payload FROM agent_messages WHERE agent_messages.session_id = :sid"
                    " AND agent_messages.role = 'user' AND agent_messages.payload LIKE '%[Turn context]%'"
                    " ORDER BY agent_messages.id DESC LIMIT 1")


@dataclass(frozen=True)
class MemberEvent:
    """One member event: a join, a leave, or a change of one field (``role``, ``mute_time``)."""

    event_id: str
    session_key: str
    user_id: str
    operator_id: str | None
    kind: str  # member_joined | member_left | member_changed (EventMessage kinds)
    time: int
    row_id: int = 0  # conversation_events.id
    field: str | None = None  # member_changed: role | mute_time
    value: str | None = None

    @property
    def scene_id(self) -> str:
        return self.session_key.split(":")[-1]

    def line(self, timezone: str | None) -> str:
        """The fixed host template (ADR §1): ``10009 join 1048877509 on 10:40 by self``,
        ``10001 changed 10002 role to "admin"``; an operator upstream did not store is ``(unknown)``."""
        if self.kind == "member_changed":
            return f'{self.operator_id or NO_OPERATOR} changed {self.user_id} {self.field} to "{self.value}"'
        clock = datetime.fromtimestamp(self.time / 1000, _zone(timezone)).strftime("%H:%M")
        verb = "join" if self.kind == "member_joined" else "leave"
        if self.operator_id is None:
            by = NO_OPERATOR
        else:
            by = "self" if self.operator_id == self.user_id else self.operator_id
        return f"{self.user_id} {verb} {self.scene_id} on {clock} by {by}"


@dataclass(frozen=True)
class SceneEvent:
    """A whole-group mute switched on or off (a scene fact, ``global_mute``)."""

    event_id: str
    session_key: str
    operator_id: str | None
    global_mute: bool
    time: int
    row_id: int = 0


@dataclass
class EventReading:
    """What ``conversation_events`` holds besides messages: member and scene events, and rows not understood."""

    members: list[MemberEvent] = field(default_factory=list)
    scenes: list[SceneEvent] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def for_session(self, session_key: str) -> EventReading:
        return EventReading([e for e in self.members if e.session_key == session_key],
                            [e for e in self.scenes if e.session_key == session_key], list(self.warnings))


def turn_context_zone(payload: object) -> str | None:
    """The IANA zone a stored turn row's ``[Turn context]`` names (upstream writes local time only there), else None.
    The zone of the data, for the times of event lines when the session names none."""
    try:
        data = json.loads(payload) if isinstance(payload, str) else None
    except (ValueError, RecursionError):
        return None
    content = data.get("content") if isinstance(data, dict) else None
    text = content[0].get("text") if isinstance(content, list) and content and isinstance(content[0], dict) else None
    match = _TURN_CONTEXT_ZONE.match(text) if isinstance(text, str) else None
    if match is None:
        return None
    from zhin_cli.core.timezones import valid_timezone

    return match.group(1) if valid_timezone(match.group(1)) else None


def _zone(timezone: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def epoch_ms(value: object) -> int | None:
    """An epoch-ms time: an integer, or the decimal text a bigint column may come back as."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def _id(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        return None
    return str(value)


def _party(data: JSONObject, key: str) -> str | None:
    party = data.get(key)
    return _id(party.get("id")) if isinstance(party, dict) else None


class EventRow(Protocol):
    """A ``conversation_events`` row as ``read_events`` reads it (a SQLAlchemy row of those columns)."""

    @property
    def id(self) -> int: ...

    @property
    def event_id(self) -> str | None: ...

    @property
    def conversation_key(self) -> str | None: ...

    @property
    def event_json(self) -> object: ...  # JSON text, or whatever the column held: json_column checks it

    @property
    def time(self) -> object: ...  # epoch ms, or the decimal text a bigint column may come back as


def read_events(rows: Iterable[EventRow], label: str | None = None, *, session_key: str | None = None) -> EventReading:
    """Every member and scene event of ``conversation_events`` rows (``id, event_id, conversation_key,
    event_json, time``), in the order given (sequence order). With ``session_key``, only that conversation's: the
    other rows are passed over by their key, their JSON never parsed (a load reads one session of many)."""
    reading = EventReading()
    keys: dict[str, str | None] = {}  # conversation key → session key: a conversation's rows share one
    for row in rows:
        if session_key is not None:
            key = row.conversation_key or ""
            if key not in keys:
                keys[key] = session_key_of(key)
            if keys[key] not in (session_key, None):
                continue
        where = at_row("conversation_events", row.id, label)
        data = json_column(row.event_json, "event_json", where)
        if isinstance(data, dict):
            _read_row(row, data, where, reading)
        else:
            reading.warnings.append(f"{where}: event_json is not an object; not read")
    return reading


def _read_row(row: EventRow, data: JSONObject, where: str, reading: EventReading) -> None:
    kind = str(data.get("type") or data.get("event") or "")
    if kind in NOT_MEMBER_EVENTS:
        return
    legacy = LEGACY_MEMBER_KINDS.get(kind)
    if legacy is None and kind not in UPSTREAM_MEMBER_TYPES:
        reading.warnings.append(f"{where}: event type {kind[:40]!r} is not one zhin reads; not read")
        return
    session_key = session_key_of(row.conversation_key or "")
    if session_key is None:
        raise InputError("conversation_key is neither adapter\\0endpoint\\0kind\\0id\\0… nor a session key", where=where)
    time = epoch_ms(row.time) if row.time is not None else epoch_ms(data.get("timestamp"))
    if time is None:
        raise InputError("time must be an integer (ms epoch)", where=where)
    event_id = str(row.event_id if row.event_id is not None else row.id)
    if legacy is not None:
        user_id = data.get("user_id", data.get("userId"))
        if _id(user_id) is None:
            raise InputError(f"{kind} event without a user_id", where=where)
        # this shape's events had no operator for a member's own join or leave: "self", as its template said
        operator = _id(data.get("operator_id", data.get("operatorId"))) or str(user_id)
        reading.members.append(MemberEvent(event_id, session_key, str(user_id), operator, legacy, time, row.id))
        return
    event = _upstream_event(data, kind, event_id, session_key, time, row.id, where, reading.warnings)
    if isinstance(event, SceneEvent):
        reading.scenes.append(event)
    elif event is not None:
        reading.members.append(event)


def _upstream_event(data: JSONObject, kind: str, event_id: str, session_key: str, time: int, row_id: int,
                    where: str, warnings: list[str]) -> MemberEvent | SceneEvent | None:
    member, actor = _party(data, "member"), _party(data, "actor")
    if member is None:
        warnings.append(f"{where}: {kind} without a member id; not read")
        return None
    if member == WHOLE_GROUP and kind in ("member.muted", "member.unmuted"):
        return _whole_group_mute(data, kind, event_id, session_key, actor, time, row_id, where, warnings)

    def event(event_kind: str, field: str | None = None, value: str | None = None) -> MemberEvent:
        return MemberEvent(event_id, session_key, member, actor, event_kind, time, row_id, field, value)

    if kind == "member.joined":
        return event("member_joined")
    if kind == "member.left":
        return event("member_left")
    if kind == "member.muted":
        seconds = data.get("durationSeconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
            warnings.append(f"{where}: member.muted without a durationSeconds; not read")
            return None
        return event("member_changed", "mute_time", str(seconds))
    if kind == "member.unmuted":
        return event("member_changed", "mute_time", "0")
    role, enabled = data.get("role"), data.get("enabled")
    if not isinstance(role, str) or not role or not isinstance(enabled, bool):
        warnings.append(f"{where}: member.role_changed without a role and enabled true/false; not read")
        return None
    # a role taken away leaves the member a plain member (upstream stores only admin changes)
    return event("member_changed", "role", role if enabled else "member")


def _whole_group_mute(data: JSONObject, kind: str, event_id: str, session_key: str, actor: str | None, time: int,
                      row_id: int, where: str, warnings: list[str]) -> SceneEvent | None:
    """Upstream clamps OneBot's duration −1 to 0 and stores 0 as "unmuted", so ``member.unmuted`` of member 0 is
    also the mute switched ON: the notice's sub type, kept in the event id, tells which."""
    sub_type = str(data.get("eventId") or event_id).rsplit("_", 2)
    if kind == "member.muted" or sub_type[-1] == "ban" and sub_type[-2] != "lift":
        on = True
    elif sub_type[-2:] == ["lift", "ban"]:
        on = False
    else:
        warnings.append(f"{where}: {kind} of member 0 (a whole-group mute) does not say on or off; not read")
        return None
    return SceneEvent(event_id, session_key, actor, on, time, row_id)


def _event_rows(conn: Connection) -> list[EventRow]:
    t = schema.conversation_events
    # fetched at once: a reader's lock is not held while the rows are checked; messages are not member events
    return list(conn.execute(select(t.c.id, t.c.event_id, t.c.conversation_key, t.c.event_json, t.c.time)
                             .where((t.c.message_key == "") | t.c.message_key.is_(None)).order_by(t.c.id)).all())


def read_database_events(conn: Connection, label: str | None = None) -> EventReading:
    return read_events(_event_rows(conn), label)


def member_events(conn: Connection, label: str | None = None) -> list[MemberEvent]:
    """Every member event in ``conversation_events``, in sequence (``id``) order."""
    return read_database_events(conn, label).members


def member_leaves(conn: Connection) -> dict[tuple[str, str], int]:
    """(session key, user id) → time of the member's newest leave, for ``prune``."""
    leaves: dict[tuple[str, str], int] = {}
    for event in member_events(conn):
        key = (event.session_key, event.user_id)
        if event.kind == "member_left":
            leaves[key] = max(leaves.get(key, 0), event.time)
        elif event.kind == "member_joined" and key in leaves and event.time >= leaves[key]:
            del leaves[key]  # came back
    return leaves


@dataclass
class EventImport:
    added: list[MemberEvent] = field(default_factory=list)
    scenes: list[SceneEvent] = field(default_factory=list)  # whole-group mutes, imported as scene changes
    already: int = 0
    no_session: list[MemberEvent | SceneEvent] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def imported(self) -> int:
        return len(self.added) + len(self.scenes)


def import_member_events(conn: Connection, label: str) -> EventImport:
    """Append new member events as ``event`` messages (a whole-group mute as a scene change); events already
    imported are skipped (idempotent)."""
    result = EventImport()
    if "conversation_events" not in set(inspect(conn).get_table_names()):
        raise ZhinError("no conversation_events table to import events from", where=label)
    done = {r.event_id for r in conn.execute(select(schema.zhin_imported_events.c.event_id))}
    reading = read_database_events(conn, label)
    result.warnings = reading.warnings
    events: list[MemberEvent | SceneEvent] = sorted([*reading.members, *reading.scenes], key=lambda e: e.row_id)
    for event in events:
        if event.event_id in done:
            result.already += 1
            continue
        session = _newest_epoch(conn, event.session_key)
        if session is None:
            result.no_session.append(event)
            continue
        message_id = _append_event(conn, session, event) if isinstance(event, MemberEvent) else None
        if isinstance(event, SceneEvent):
            conn.execute(schema.zhin_scene_changes.insert().values(
                session_id=session.session_id, timestamp=event.time,
                changes=json.dumps({"global_mute": event.global_mute})))
            result.scenes.append(event)
        else:
            result.added.append(event)
        conn.execute(schema.zhin_imported_events.insert().values(event_id=event.event_id, session_id=session.session_id,
                                                                 message_id=message_id))
        done.add(event.event_id)
    return result


def _newest_epoch(conn: Connection, session_key: str) -> Any:
    s = schema.agent_sessions
    return conn.execute(
        select(s).where(s.c.session_key == session_key).order_by(s.c.created_at.desc(), s.c.session_id.desc())
    ).first()


def _append_event(conn: Connection, session: Any, event: MemberEvent) -> int:
    s, m, p = schema.agent_sessions, schema.agent_messages, schema.ai_session_profiles
    timezone = (conn.execute(select(p.c.timezone).where(p.c.session_key == event.session_key)).scalar()
                if "ai_session_profiles" in set(inspect(conn).get_table_names()) else None)
    if not timezone:  # upstream's own database: the zone its turn rows name
        timezone = turn_context_zone(conn.execute(text(SQL_TURN_CONTEXT), {"sid": session.session_id}).scalar())
    payload = {"role": "event", "kind": event.kind, "name": event.line(timezone), "timestamp": event.time}
    inserted = conn.execute(m.insert().values(
        session_id=session.session_id, role="event",
        payload=json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
        parent_id=session.active_leaf_message_id, extra="", timestamp=event.time,
    ))
    key = inserted.inserted_primary_key
    assert key is not None  # an INSERT names the key it wrote
    row_id = int(key[0])
    conn.execute(s.update().where(s.c.session_id == session.session_id).values(
        active_leaf_message_id=row_id, updated_at=max(epoch_ms(session.updated_at) or 0, event.time)))
    if event.kind == "member_left":  # write through to L2: a leave / kick deletes the member row
        t = schema.ai_scene_members
        if "ai_scene_members" in set(inspect(conn).get_table_names()):
            conn.execute(t.delete().where(and_(t.c.scene_key == event.session_key, t.c.user_id == event.user_id,
                                               (t.c.updated_at.is_(None)) | (t.c.updated_at <= event.time))))
    return row_id


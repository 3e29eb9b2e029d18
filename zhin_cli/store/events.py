"""Join / leave side events from upstream's ``conversation_events`` (ADR 0041 §6).

``conversation_events.event_json`` holds one event per row. We read the member ones:

    {"type": "member_increase" | "member_decrease", "user_id": "10009", "operator_id": "10001", ...}

(``userId`` / ``operatorId`` are accepted too; other event types are skipped). ``conversation_key`` is
upstream's NUL-joined key ``adapter\\0endpoint…\\0kind\\0id\\0parentKind\\0parentId\\0threadId``; the session
key is ``adapter:endpoint:kind:id`` with the endpoint's last part (``reference/zhin-upstream.md`` §2.2). PostgreSQL
text cannot hold NUL, so a key without NUL is read as the session key itself (``icqq:8596238:group:1048877509``).

``zhin import --events`` appends each one, once, as an ``event`` message to the newest epoch of its session
(only appended, never inserted back: ADR §2), and a leave deletes the member's ``ai_scene_members`` row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import and_, inspect, select

from zhin_cli.core.errors import InputError, ZhinError, at_row
from zhin_cli.store import schema
from zhin_cli.store.payload import json_column

MEMBER_EVENT_KINDS = {
    "member_increase": "member_joined",
    "member_decrease": "member_left",
}


@dataclass(frozen=True)
class MemberEvent:
    event_id: str
    session_key: str
    user_id: str
    operator_id: str | None
    kind: str  # member_joined | member_left (EventMessage kinds)
    time: int

    @property
    def scene_id(self) -> str:
        return self.session_key.split(":")[-1]

    def line(self, timezone: str | None) -> str:
        """The fixed host template, as in the fixtures: ``10009 join 1048877509 on 10:40 by self``."""
        try:
            zone = ZoneInfo(timezone or "UTC")
        except (ZoneInfoNotFoundError, ValueError):
            zone = ZoneInfo("UTC")
        clock = datetime.fromtimestamp(self.time / 1000, zone).strftime("%H:%M")
        verb = "join" if self.kind == "member_joined" else "leave"
        by = self.operator_id if self.operator_id and self.operator_id != self.user_id else "self"
        return f"{self.user_id} {verb} {self.scene_id} on {clock} by {by}"


def session_key_of(conversation_key: str) -> str | None:
    if "\0" not in conversation_key:
        # PostgreSQL text cannot hold NUL: there the key is stored as the session key itself
        colon_parts = conversation_key.split(":")
        return conversation_key if len(colon_parts) >= 4 and all(colon_parts[:4]) else None
    parts = conversation_key.split("\0")
    if len(parts) < 7 or not parts[0]:
        return None
    adapter, endpoint, kind, scene_id = parts[0], parts[-6], parts[-5], parts[-4]
    if not (endpoint and kind and scene_id):
        return None
    return f"{adapter}:{endpoint.split('~')[0]}:{kind}:{scene_id}"


def member_events(conn: Any, label: str | None = None) -> list[MemberEvent]:
    """Every member join/leave in ``conversation_events``, in sequence (``id``) order."""
    t = schema.conversation_events
    events = []
    rows = conn.execute(select(t.c.id, t.c.event_id, t.c.conversation_key, t.c.event_json, t.c.time).order_by(t.c.id)).all()
    for row in rows:  # fetched at once: a reader's lock is not held while the rows are checked
        where = at_row("conversation_events", row.id, label)
        data = json_column(row.event_json, "event_json", where)
        if not isinstance(data, dict):
            continue
        kind = MEMBER_EVENT_KINDS.get(str(data.get("type") or data.get("event") or ""))
        if kind is None:
            continue
        user_id = data.get("user_id", data.get("userId"))
        if not isinstance(user_id, (str, int)) or isinstance(user_id, bool) or user_id == "":
            raise InputError(f"{data.get('type')} event without a user_id", where=where)
        operator = data.get("operator_id", data.get("operatorId"))
        session_key = session_key_of(row.conversation_key or "")
        if session_key is None:
            raise InputError("conversation_key is neither adapter\\0endpoint\\0kind\\0id\\0… nor a session key", where=where)
        if not isinstance(row.time, int) or isinstance(row.time, bool):
            raise InputError("time must be an integer (ms epoch)", where=where)
        events.append(MemberEvent(event_id=str(row.event_id if row.event_id is not None else row.id), session_key=session_key,
                                  user_id=str(user_id), operator_id=None if operator in (None, "") else str(operator),
                                  kind=kind, time=row.time))
    return events


def member_leaves(conn: Any) -> dict[tuple[str, str], int]:
    """(session key, user id) → time of the member's newest leave, for ``prune``."""
    leaves: dict[tuple[str, str], int] = {}
    for event in member_events(conn):
        key = (event.session_key, event.user_id)
        if event.kind == "member_left":
            leaves[key] = max(leaves.get(key, 0), event.time)
        elif key in leaves and event.time >= leaves[key]:
            del leaves[key]  # came back
    return leaves


@dataclass
class EventImport:
    added: list[MemberEvent] = field(default_factory=list)
    already: int = 0
    no_session: list[MemberEvent] = field(default_factory=list)


def import_member_events(conn: Any, label: str) -> EventImport:
    """Append new member events as ``event`` messages; events already imported are skipped (idempotent)."""
    result = EventImport()
    if "conversation_events" not in set(inspect(conn).get_table_names()):
        raise ZhinError("no conversation_events table to import events from", where=label)
    done = {r.event_id for r in conn.execute(select(schema.zhin_imported_events.c.event_id))}
    s, m, p = schema.agent_sessions, schema.agent_messages, schema.ai_session_profiles
    for event in member_events(conn, label):
        if event.event_id in done:
            result.already += 1
            continue
        session = conn.execute(
            select(s).where(s.c.session_key == event.session_key).order_by(s.c.created_at.desc(), s.c.session_id.desc())
        ).first()
        if session is None:
            result.no_session.append(event)
            continue
        timezone = conn.execute(select(p.c.timezone).where(p.c.session_key == event.session_key)).scalar()
        payload = {"role": "event", "kind": event.kind, "name": event.line(timezone), "timestamp": event.time}
        inserted = conn.execute(m.insert().values(
            session_id=session.session_id, role="event",
            payload=json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
            parent_id=session.active_leaf_message_id, extra="", timestamp=event.time,
        ))
        row_id = int(inserted.inserted_primary_key[0])
        conn.execute(s.update().where(s.c.session_id == session.session_id).values(
            active_leaf_message_id=row_id, updated_at=max(session.updated_at or 0, event.time)))
        conn.execute(schema.zhin_imported_events.insert().values(event_id=event.event_id, session_id=session.session_id,
                                                                 message_id=row_id))
        if event.kind == "member_left":  # write through to L2: a leave / kick deletes the member row
            t = schema.ai_scene_members
            conn.execute(t.delete().where(and_(t.c.scene_key == event.session_key, t.c.user_id == event.user_id,
                                               (t.c.updated_at.is_(None)) | (t.c.updated_at <= event.time))))
        done.add(event.event_id)
        result.added.append(event)
    return result


def import_events(db: str) -> EventImport:
    """``zhin import --events --db URL``: one transaction; the database is written only here."""
    from zhin_cli.store.database import import_sessions

    result = import_sessions([], db, events=True).events
    assert result is not None
    return result

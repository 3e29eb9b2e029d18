"""Upstream's member events in a replayed session: where each one goes in the history (ADR 0041 §2).

A real bot's ``conversation_events`` holds its member events (``zhin_cli.store.events``); upstream never writes
them into ``agent_messages``. A load of a session puts each one of its conversation into its history, once, as
an ``EventMessage`` (a whole-group mute as a scene change), unless ``zhin import --events`` already wrote it there.

Where: in the first request made after the event happened. A request is made at the time of the last message
before the one it produced, so an event is placed before the first message that is not a tool result and whose
request came later — a user message written after the event, or a reply whose request was sent after it. An event
that came while the bot's turn was in flight therefore follows that turn's reply (the reply's request never saw it),
and one that came during a tool call follows the whole tool group (ADR §2: nothing between a call and its results).

Roles follow events: a member message that does not carry its sender's platform role gets the one the member's
latest role event gave (``role:admin`` from the promotion on), and the same for a mute — the key's events up to the
epoch's end, so a role given before a session reset still holds after it.

A later upstream also writes member events as lines of its events blocks; those lines are read from these rows
(``store.upstream``), and the warning for a line without a row is withdrawn here when its row is found.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.model import (
    EventMessage,
    LazyMessages,
    Message,
    SceneChange,
    Session,
    UserMessage,
)
from zhin_cli.store.events import EventReading, MemberEvent
from zhin_cli.store.upstream import NoticeWithoutRow, splice_messages


@dataclass(frozen=True)
class EpochSpan:
    """The times whose events belong to one epoch: from its start to the next epoch's (the first epoch takes
    everything before it too)."""

    start: int | None
    end: int | None

    def holds(self, time: int) -> bool:
        return (self.start is None or time >= self.start) and (self.end is None or time < self.end)


def epoch_span(session_id: str, epochs: Sequence[tuple[str, int | None]]) -> EpochSpan:
    """``epochs``: (session id, created_at) of every epoch of the session's key."""
    ordered = sorted(epochs, key=lambda e: (e[1] or 0, e[0]))
    ids = [e[0] for e in ordered]
    if session_id not in ids:
        return EpochSpan(None, None)
    index = ids.index(session_id)
    start = ordered[index][1] if index > 0 else None
    end = ordered[index + 1][1] if index + 1 < len(ordered) else None
    return EpochSpan(start, end)


def add_upstream_events(session: Session, reading: EventReading, imported: Mapping[str, int | None] | set[str],
                        span: EpochSpan, data_zone: str | None = None) -> list[str]:
    """Put the session's member events into its history and its whole-group mutes into its scene changes (those
    ``zhin import --events`` wrote already are there); actors get the roles and mutes the events gave. The times
    in the lines are in the session's zone, else ``data_zone`` (the one upstream's turn rows name), else UTC. The
    warnings of rows that could not be read are returned.

    ``imported``: event id → the ``agent_messages`` row ``zhin import --events`` wrote for it. That row was
    appended after the bot's last row (ADR §2: never inserted back), so where its event is still here to read, the
    row gives way to the event placed at its time: a trace reads the same before and after the import."""
    key = session.session_key or ""
    mine = reading.for_session(key)
    members = [e for e in mine.members if span.holds(e.time)]
    rows = imported if isinstance(imported, Mapping) else dict.fromkeys(imported)
    superseded = {row for e in members if (row := rows.get(e.event_id)) is not None}
    if superseded:
        _drop_rows(session, superseded)
    new_members = [e for e in members if e.event_id not in rows or rows[e.event_id] is not None]
    for scene in mine.scenes:
        if span.holds(scene.time) and scene.event_id not in imported:
            session.scene_changes.append(SceneChange(scene.time, {"global_mute": scene.global_mute},
                                                     raw={"type": "scene", "timestamp": scene.time,
                                                          "global_mute": scene.global_mute}))
    session.notes[:] = [note for note in session.notes if not _has_row(note, mine)]
    # a role or mute given before this epoch began still holds in it: the facts are the key's, the span only
    # says which events this epoch shows as messages
    timeline = FactTimeline([e for e in mine.members if span.end is None or e.time < span.end])
    if new_members:
        _insert_events(session, new_members, session.timezone or data_zone)
    if timeline:
        _follow_facts(session, timeline)
    return mine.warnings


_NOTICE_KINDS = {"member.joined": ("member_joined", None), "member.left": ("member_left", None),
                 "member.muted": ("member_changed", "mute_time"), "member.unmuted": ("member_changed", "mute_time"),
                 "member.role_changed": ("member_changed", "role")}


def _has_row(note: str, reading: EventReading) -> bool:
    """Whether ``note`` is a block line's ``NoticeWithoutRow`` whose event has its row after all: one of that kind
    naming a member the line names as ``(ID)`` (a whole-group mute: member 0, a scene event)."""
    if not isinstance(note, NoticeWithoutRow) or note.kind not in _NOTICE_KINDS:
        return False
    kind, field_name = _NOTICE_KINDS[note.kind]
    if field_name == "mute_time" and "(0)" in note.text and reading.scenes:
        return True
    return any(event.kind == kind and event.field == field_name and f"({event.user_id})" in note.text
               for event in reading.members)


def _event_messages(session: Session, events: list[MemberEvent], zone: str | None) -> list[EventMessage]:
    taken = set(session.outline.row_ids)
    lowest = min([0, *taken])
    top = max([0, *taken])  # an exported file's ids are positive: past the stored rows' (as a block line's)
    messages = []
    for event in events:
        row_id = -event.row_id if event.row_id > 0 and -event.row_id not in taken else None
        if row_id is None:  # never the id of a stored row
            lowest -= 1
            row_id = lowest
        taken.add(row_id)
        line = event.line(zone)
        raw: JSONObject = {"type": "message", "id": top - row_id, "role": "event", "kind": event.kind, "name": line, "timestamp": event.time}
        messages.append(EventMessage(event.kind, line, event.time, row_id, raw=raw))
    return messages


def insertion_points(timestamps: Sequence[int], roles: Sequence[str], times: Sequence[int]) -> list[int]:
    """For each event time (ascending), the position it goes before (see the module's rule). A position that
    qualifies for a time qualifies for every earlier one, so the answers never decrease: one forward scan."""
    points, position, count = [], 0, len(timestamps)
    for time in times:
        while position < count and not _request_after(timestamps, roles, position, time):
            position += 1
        points.append(position)
    return points


def _request_after(timestamps: Sequence[int], roles: Sequence[str], position: int, time: int) -> bool:
    """Whether the message at ``position`` can follow an event of ``time``: not a tool result, and made (a reply:
    its request sent, at the time of the message before it) after the event."""
    if roles[position] == "toolResult":
        return False
    made = timestamps[position - 1] if roles[position] == "assistant" and position > 0 else timestamps[position]
    return made > time


def _drop_rows(session: Session, row_ids: set[int]) -> None:
    outline = session.outline
    kept = [position for position, row_id in enumerate(outline.row_ids) if row_id not in row_ids]
    if len(kept) < len(outline):
        splice_messages(session, kept)


def _insert_events(session: Session, events: list[MemberEvent], zone: str | None) -> None:
    events = sorted(events, key=lambda e: (e.time, e.row_id))
    new = _event_messages(session, events, zone)
    outline = session.outline
    points = insertion_points(outline.timestamps, outline.roles, [e.time for e in events])
    order: list[int | Message] = []  # old positions and the events, in the new order
    cursor = 0
    for point, event in zip(points, new, strict=True):
        order.extend(range(cursor, point))
        order.append(event)
        cursor = point
    order.extend(range(cursor, len(outline)))
    splice_messages(session, order)


class FactTimeline:
    """Per member, the platform role and mute the member events gave, in time order."""

    def __init__(self, events: list[MemberEvent]) -> None:
        self._times: dict[tuple[str, str], list[int]] = {}
        self._values: dict[tuple[str, str], list[str]] = {}
        for event in sorted(events, key=lambda e: (e.time, e.row_id)):
            if event.kind == "member_changed" and event.field in ("role", "mute_time") and event.value is not None:
                value = event.value if event.field == "role" else str(event.time + int(event.value) * 1000 if
                                                                       event.value != "0" else 0)
                self._times.setdefault((event.user_id, event.field), []).append(event.time)
                self._values.setdefault((event.user_id, event.field), []).append(value)

    def __bool__(self) -> bool:
        return bool(self._times)

    def at(self, user_id: str, name: str, time: int) -> str | None:
        times = self._times.get((user_id, name))
        if not times:
            return None
        position = bisect.bisect_right(times, time)
        return self._values[(user_id, name)][position - 1] if position else None

    def follow(self, message: Message) -> Message:
        if not isinstance(message, UserMessage) or message.actor is None:
            return message
        actor = message.actor
        role = self.at(actor.subject_id, "role", message.timestamp) if actor.platform_role is None else None
        muted = self.at(actor.subject_id, "mute_time", message.timestamp) if actor.muted_until is None else None
        if role is None and muted is None:
            return message
        return replace(message, actor=replace(actor, platform_role=role or actor.platform_role,
                                              muted_until=int(muted) if muted is not None else actor.muted_until))


def _follow_facts(session: Session, timeline: FactTimeline) -> None:
    messages = session.messages
    if isinstance(messages, LazyMessages):
        session.messages = LazyMessages(messages.outline, _FollowingLoader(messages, timeline))
    else:
        session.messages = [timeline.follow(m) for m in messages]


@dataclass
class _FollowingLoader:
    source: LazyMessages
    timeline: FactTimeline

    def __call__(self, positions: Sequence[int]) -> list[Message]:
        return [self.timeline.follow(m) for m in self.source.take(positions)]

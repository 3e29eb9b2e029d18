"""What one session load fetched inside its read transaction (plain tuples, ``SessionRows``), and the rows made
from them after it ended (``Row``); a lazy load's outline (``LazyRows``) and who-said-what reader (``SaidReader``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.model import Actor, AssistantMessage, Message, OutlineBuilder, SessionOutline, UserMessage
from zhin_cli.store.payload import Said

Raw = tuple[tuple[str, ...], list[tuple[Any, ...]]]  # column names and rows, as fetched
NO_ROWS: Raw = ((), [])


class Row:
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


def as_rows(raw: Raw) -> list[Row]:
    names, tuples = raw
    return [Row(dict(zip(names, values, strict=True))) for values in tuples]


@dataclass
class LazyRows:
    """A lazy load's messages, as fetched inside the snapshot: the active branch's outline, and (``said``: by row
    id, when the conversation has message events to match) who said what in its user rows and replies."""

    outline: OutlineBuilder
    session_id: str
    said: dict[int, Said] | None = None
    interrupted: list[tuple[int, str, str]] = field(default_factory=list)  # (call's position, call id, where)


@dataclass
class SaidReader:
    """``give_platform_ids``' reader of a lazy session (``store.upstream``): each row as matching sees it, from
    what the outline scan kept of it (``LazyRows.said``) — no row is read or parsed again for the matching."""

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
        content: list[JSONObject] = [{"type": "text", "text": said.text}]
        if said.sender_id is None:
            return AssistantMessage(content=content, timestamp=time, row_id=row_id)
        actor = self.actors.get(said.sender_id)
        if actor is None:
            actor = self.actors[said.sender_id] = Actor(subject_id=said.sender_id)
        return UserMessage(content=content, timestamp=time, actor=actor, row_id=row_id)



@dataclass
class SessionRows:
    """Everything one session load fetched, inside one read transaction: column names and plain tuples (made
    into rows, parsed and checked after the transaction ended)."""

    info: dict[str, Any]
    messages: Raw | LazyRows
    profile: Raw
    summaries: Raw
    scene_changes: Raw
    members: Raw
    lines: Raw  # an imported epoch's own lines (zhin_lines)
    imported_members: Raw  # the member lines every import of the key wrote (which ai_scene_members rows are copies)
    # upstream's member events (conversation_events rows that are not messages), the ones `import --events`
    # already wrote into agent_messages, and the key's epochs (which events belong to this one)
    events: Raw = NO_ROWS
    imported_events: Raw = NO_ROWS
    epochs: Raw = NO_ROWS
    turn_context: Raw = NO_ROWS  # one turn row naming the data's zone (upstream's `[Turn context]`)
    blocks: Raw = NO_ROWS  # upstream's events-block rows (id, payload) and the message events their lines are
    message_events: Raw = NO_ROWS

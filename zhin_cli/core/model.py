"""The stored conversation, as facts (DESIGN.md §3, ADR 0041 §2, §6).

Nothing here is a rendered header: headers are produced at the LLM boundary (``headers.py``) from these
facts and never stored. Each message keeps the exact mapping it was read from (``raw``) so that export
writes back what was imported, byte for byte in meaning.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from zhin_cli.core.jsontext import JSON, JSONObject

PLATFORM_ROLES = ("owner", "admin", "member")
EventKind = Literal["member_changed", "member_joined", "member_left"]
EVENT_KINDS: tuple[str, ...] = ("member_changed", "member_joined", "member_left")


# The operator of a change nobody is known to have made: a synthesized change (ADR §4) and a stored event whose
# platform named no operator. The ADR writes ``system`` there; zhin says what it knows, because ``system`` reads
# like a member of that name (docs/design-notes.md, "A change nobody is known to have made").
NO_OPERATOR = "(unknown)"


@dataclass(frozen=True)
class Actor:
    """Trusted facts about whoever sent a message (user ``actor`` or assistant ``assistantActor``).

    ``None`` means "not known" (the field is omitted from headers); it never means "empty".
    """

    subject_id: str
    display_name: str | None = None
    roles: tuple[str, ...] = ()  # product roles: master, trusted …
    scope: str | None = None
    platform_role: str | None = None  # owner | admin | member
    card: str | None = None  # group nickname
    title: str | None = None  # group title
    muted_until: int | None = None  # ms epoch; 0 = not muted
    origin: str | None = None  # "peer_bot" for another bot
    # False when the source does not say the member's product roles (upstream's events-block line names only the
    # sender): an empty ``roles`` then means "not known", not "no roles".
    roles_known: bool = True

    @staticmethod
    def from_payload(data: Mapping[str, Any]) -> Actor:
        roles = data.get("roles") or ()
        muted = data.get("mutedUntil")
        return Actor(
            subject_id=str(data["subjectId"]),
            display_name=_opt_str(data.get("displayName")),
            roles=tuple(str(r) for r in roles),
            scope=_opt_str(data.get("scope")),
            platform_role=_opt_str(data.get("platformRole")),
            card=_opt_str(data.get("card")),
            title=_opt_str(data.get("title")),
            muted_until=int(muted) if muted is not None else None,
            origin=_opt_str(data.get("origin")),
            roles_known=data.get("roles") is not None,  # an actor that does not list its roles does not state them
        )


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


@dataclass
class UserMessage:
    content: list[JSONObject]
    timestamp: int
    actor: Actor | None
    row_id: int
    message_id: str | None = None
    reply_to: str | None = None  # platform message id of the message replied to
    raw: JSONObject = field(default_factory=dict, repr=False)
    role: Literal["user"] = "user"

    @property
    def text(self) -> str:
        return content_text(self.content)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: JSON


@dataclass
class AssistantMessage:
    content: list[JSONObject]
    timestamp: int
    row_id: int
    assistant_actor: Actor | None = None
    message_id: str | None = None
    provider: str | None = None
    model: str | None = None
    usage: JSONObject | None = None
    raw: JSONObject = field(default_factory=dict, repr=False)
    role: Literal["assistant"] = "assistant"

    @property
    def text(self) -> str:
        return content_text(self.content)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall(str(b["id"]), str(b["name"]), b.get("arguments"))
            for b in self.content
            if b.get("type") == "toolCall"
        ]


@dataclass
class ToolResultMessage:
    tool_call_id: str
    tool_name: str | None
    content: list[JSONObject]
    is_error: bool
    timestamp: int
    row_id: int
    raw: JSONObject = field(default_factory=dict, repr=False)
    role: Literal["toolResult"] = "toolResult"

    @property
    def text(self) -> str:
        return content_text(self.content)


@dataclass
class EventMessage:
    """A member change stored in history (ADR 0041 §2): ``name`` is the fixed-template line."""

    kind: str
    name: str
    timestamp: int
    row_id: int
    raw: JSONObject = field(default_factory=dict, repr=False)
    role: Literal["event"] = "event"


Message = UserMessage | AssistantMessage | ToolResultMessage | EventMessage


@dataclass
class SummaryMessage:
    """A compaction summary standing in for the messages up to its anchor (sent as host text)."""

    summary: str
    timestamp: int  # the anchor message's time: it sorts where the summarised messages were
    anchor_row_id: int
    role: Literal["summary"] = "summary"


HistoryItem = Message | SummaryMessage


@dataclass(frozen=True)
class SceneFacts:
    """Scene (conversation) facts that the scene line renders."""

    scene_id: str | None = None
    scene_type: str | None = None
    scene_name: str | None = None
    owner_id: str | None = None
    admins: tuple[str, ...] | None = None
    member_count: int | None = None
    global_mute: bool | None = None

    @staticmethod
    def from_mapping(data: Mapping[str, Any]) -> SceneFacts:
        return SceneFacts().updated(data)

    def updated(self, data: Mapping[str, Any]) -> SceneFacts:
        values = dict(self.__dict__)
        for key in ("scene_id", "scene_type", "scene_name", "owner_id"):
            if key in data:
                values[key] = _opt_str(data[key])
        if "admins" in data:
            admins = data["admins"]
            values["admins"] = None if admins is None else tuple(str(a) for a in admins)
        if "member_count" in data:
            values["member_count"] = None if data["member_count"] is None else int(data["member_count"])
        if "global_mute" in data:
            values["global_mute"] = None if data["global_mute"] is None else bool(data["global_mute"])
        return SceneFacts(**values)


@dataclass(frozen=True)
class BotFacts:
    user_id: str | None = None
    name: str | None = None
    group_nickname: str | None = None
    platform_role: str | None = None

    @staticmethod
    def from_mapping(data: Mapping[str, Any]) -> BotFacts:
        return BotFacts(
            user_id=_opt_str(data.get("user_id")),
            name=_opt_str(data.get("name")),
            group_nickname=_opt_str(data.get("group_nickname")),
            platform_role=_opt_str(data.get("platform_role")),
        )


@dataclass
class SceneChange:
    timestamp: int
    changes: JSONObject
    raw: JSONObject = field(default_factory=dict, repr=False)


@dataclass
class Summary:
    timestamp: int
    summary: str
    anchor_row_id: int  # the last message row the summary covers
    raw: JSONObject = field(default_factory=dict, repr=False)


@dataclass
class MemberSnapshot:
    """An ``ai_scene_members`` row: member facts known to the host at a time."""

    timestamp: int
    user_id: str
    facts: JSONObject
    raw: JSONObject = field(default_factory=dict, repr=False)


@dataclass
class Session:
    session_id: str
    session_key: str | None
    timezone: str | None
    bot: BotFacts
    scene: SceneFacts
    # Active branch, storage (= arrival) order. A list, or a ``LazyMessages`` that parses only the rows read.
    messages: Sequence[Message]
    scene_changes: list[SceneChange] = field(default_factory=list)
    summaries: list[Summary] = field(default_factory=list)
    members: list[MemberSnapshot] = field(default_factory=list)
    source: str = ""  # where it was read from, for messages
    notes: list[str] = field(default_factory=list)  # what the reader could not read (rows named): warnings
    raw: JSONObject = field(default_factory=dict, repr=False)
    timezone_source: str | None = None  # "data": ``timezone`` was read from the rows (upstream's [Turn context])

    @property
    def outline(self) -> SessionOutline:
        """Per-position facts of every message without their content (see ``SessionOutline``): the source's
        own outline when it read one (``LazyMessages``), else computed from the messages once per list state."""
        messages = self.messages
        if isinstance(messages, LazyMessages):
            return messages.outline
        key = (id(messages), len(messages))
        cached: tuple[tuple[int, int], SessionOutline] | None = self.__dict__.get("_outline")
        if cached is not None and cached[0] == key:
            return cached[1]
        outline = SessionOutline.of_messages(messages)
        self.__dict__["_outline"] = (key, outline)
        return outline

    @property
    def is_group(self) -> bool:
        return (self.scene.scene_type or "group") != "private"

    def scene_at(self, timestamp: int) -> SceneFacts:
        """Scene facts in force at ``timestamp`` (changes applied in time order; O(log n) per call)."""
        timeline = self._scene_timeline()
        position = bisect.bisect_right(timeline[0], timestamp)
        return timeline[1][position - 1] if position else self.scene

    def _scene_timeline(self) -> tuple[list[int], list[SceneFacts]]:
        key = (id(self.scene), len(self.scene_changes), tuple(id(c) for c in self.scene_changes))
        cached: tuple[tuple[object, ...], tuple[list[int], list[SceneFacts]]] | None = self.__dict__.get("_timeline")
        if cached is not None and cached[0] == key:
            return cached[1]
        times: list[int] = []
        states: list[SceneFacts] = []
        scene = self.scene
        for change in sorted(self.scene_changes, key=lambda c: c.timestamp):
            scene = scene.updated(change.changes)
            times.append(change.timestamp)
            states.append(scene)
        self.__dict__["_timeline"] = (key, (times, states))
        return times, states


OutlineRole = Literal["user", "assistant", "toolResult", "event"]


@dataclass(frozen=True)
class SessionOutline:
    """What a request needs to know about *every* message of the session without reading its content: parallel
    sequences indexed by position in ``session.messages`` (issue 16 item 3). The window, the aliases and the turn
    list are computed from it, so a request parses only the rows of its window.

    Each field is defined by the message it describes (``of_messages`` is the definition; a source that reads the
    outline another way must give the same values — tests compare them on every fixture):
    """

    row_ids: Sequence[int]
    timestamps: Sequence[int]
    roles: Sequence[OutlineRole]
    has_tool_calls: Sequence[bool]  # an assistant message with at least one toolCall block
    has_text: Sequence[bool]  # bool(message.text) — events: False
    models: Sequence[str | None]  # an assistant message's stored model, else None
    message_ids: Sequence[str | None]  # the platform message id (user and assistant messages), else None
    event_kinds: Sequence[str | None]  # an event's kind, else None
    assistant_positions: Sequence[int]  # positions of the assistant messages, ascending (turn k = the k-th)

    def __len__(self) -> int:
        return len(self.row_ids)

    @staticmethod
    def of_messages(messages: Sequence[Message]) -> SessionOutline:
        builder = OutlineBuilder()
        for message in messages:
            builder.add(message)
        return builder.outline()


class OutlineBuilder:
    """Collects a ``SessionOutline`` one message at a time: from ``Message`` objects (``add``, the definition) or
    from facts a source read without building them (``add_facts``)."""

    def __init__(self) -> None:
        # 64-bit arrays, not lists of int objects: 8 bytes a message instead of ~40 (stored ids and times fit)
        self.row_ids: Sequence[int] = array("q")
        self.timestamps: Sequence[int] = array("q")
        self.roles: list[OutlineRole] = []
        self.has_tool_calls: list[bool] = []
        self.has_text: list[bool] = []
        self.models: list[str | None] = []
        self.message_ids: list[str | None] = []
        self.event_kinds: list[str | None] = []

    def __len__(self) -> int:
        return len(self.row_ids)

    def add(self, message: Message) -> None:
        assistant = message if isinstance(message, AssistantMessage) else None
        self.add_facts(
            row_id=message.row_id,
            timestamp=message.timestamp,
            role=message.role,
            has_tool_calls=assistant is not None and any(b.get("type") == "toolCall" for b in assistant.content),
            has_text=not isinstance(message, EventMessage) and bool(message.text),
            model=assistant.model if assistant is not None else None,
            message_id=message.message_id if isinstance(message, (UserMessage, AssistantMessage)) else None,
            event_kind=message.kind if isinstance(message, EventMessage) else None,
        )

    def add_facts(self, *, row_id: int, timestamp: int, role: OutlineRole, has_tool_calls: bool, has_text: bool,
                  model: str | None, message_id: str | None, event_kind: str | None) -> None:
        self.row_ids.append(row_id)  # type: ignore[attr-defined]
        self.timestamps.append(timestamp)  # type: ignore[attr-defined]
        self.roles.append(role)
        self.has_tool_calls.append(has_tool_calls)
        self.has_text.append(has_text)
        self.models.append(model)
        self.message_ids.append(message_id)
        self.event_kinds.append(event_kind)

    def outline(self) -> SessionOutline:
        return SessionOutline(
            row_ids=self.row_ids,
            timestamps=self.timestamps,
            roles=self.roles,
            has_tool_calls=self.has_tool_calls,
            has_text=self.has_text,
            models=self.models,
            message_ids=self.message_ids,
            event_kinds=self.event_kinds,
            assistant_positions=[i for i, role in enumerate(self.roles) if role == "assistant"],
        )


class RowPositions(Mapping[int, int]):
    """Row id → position in ``session.messages``, without a dict of the whole session when the row ids ascend (a
    database's branch, most files): a bisection over the outline's ids. Otherwise a dict, built once."""

    def __init__(self, row_ids: Sequence[int]) -> None:
        self._ids = row_ids
        ascending = all(a < b for a, b in zip(row_ids, itertools.islice(row_ids, 1, None), strict=False))
        self._by_id = None if ascending else {row_id: i for i, row_id in enumerate(row_ids)}

    def __getitem__(self, row_id: int) -> int:
        if self._by_id is not None:
            return self._by_id[row_id]
        position = bisect.bisect_left(self._ids, row_id)
        if position < len(self._ids) and self._ids[position] == row_id:
            return position
        raise KeyError(row_id)

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


class OrdinalAliases(Mapping[int, str]):
    """Row id → ``f"{prefix}{n}"``, n counting the chosen positions (1, 2, …) in storage order: the session-wide
    ``m<n>`` / ``e<n>`` aliases as a view over the outline (a running count per position, 4 bytes a message),
    not a dict of strings for the whole session."""

    def __init__(self, prefix: str, positions: Mapping[int, int], row_ids: Sequence[int], chosen: Sequence[bool]) -> None:
        self._prefix = prefix
        self._positions = positions
        self._row_ids = row_ids
        self._chosen = bytes(bytearray(chosen))
        self._counts = array("l", itertools.accumulate(self._chosen)) if self._chosen else array("l")

    def __getitem__(self, row_id: int) -> str:
        position = self._positions[row_id]
        if not self._chosen[position]:
            raise KeyError(row_id)
        return f"{self._prefix}{self._counts[position]}"

    def __iter__(self) -> Iterator[int]:
        return (self._row_ids[i] for i, flag in enumerate(self._chosen) if flag)

    def __len__(self) -> int:
        return self._counts[-1] if self._counts else 0


class FirstRowOf(Mapping[str, int]):
    """Platform message id → the row id of the first chosen message that has it (``dict.setdefault`` order).

    A request asks for its window's replies only, so the first few ids are found by a scan of the outline's ids
    (``list.index``: a C loop) and kept; a replay asks for every reply of the session, and a scan per id would make
    it quadratic, so after ``SCANS_BEFORE_INDEX`` scans the whole outline is indexed once (one pass, about what a few
    scans cost) and every later look-up is a dict read. A request on a huge session with a handful of replies thus
    never builds the index; a replay builds it once."""

    SCANS_BEFORE_INDEX = 8

    def __init__(self, message_ids: Sequence[str | None], row_ids: Sequence[int], chosen: Sequence[bool]) -> None:
        self._message_ids = message_ids
        self._row_ids = row_ids
        self._chosen = chosen
        self._found: dict[str, int | None] = {}
        self._all: dict[str, int] | None = None
        self.scans = 0  # full or partial scans of the outline's ids (tests count work, not time)

    def __getitem__(self, message_id: str) -> int:
        if not message_id:  # as in a dict of the truthy ids only
            raise KeyError(message_id)
        if self._all is not None:
            return self._all[message_id]
        if message_id not in self._found:
            if self.scans >= self.SCANS_BEFORE_INDEX:
                return self._every()[message_id]
            self._found[message_id] = self._scan(message_id)
        row_id = self._found[message_id]
        if row_id is None:
            raise KeyError(message_id)
        return row_id

    def _scan(self, message_id: str) -> int | None:
        self.scans += 1
        position = -1
        while True:
            try:
                position = self._message_ids.index(message_id, position + 1)
            except ValueError:
                return None
            if self._chosen[position]:
                return self._row_ids[position]

    def _every(self) -> dict[str, int]:
        if self._all is None:
            self.scans += 1
            every: dict[str, int] = {}
            for known, row_id, chosen in zip(self._message_ids, self._row_ids, self._chosen, strict=True):
                if known and chosen:
                    every.setdefault(known, row_id)
            self._all = every
        return self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._every())


RowLoader = Callable[[Sequence[int]], list[Message]]  # positions (ascending) → the messages there, parsed


class LazyMessages(Sequence[Message]):
    """``session.messages`` of a source that read only the outline: a message is parsed when it is first read
    (``[i]``, ``[a:b]``, ``take``, iteration) and kept. ``len`` and ``outline`` never parse anything; each read
    is one call of the source's loader (one query, one pass over the file) for the positions not parsed yet.

    Iterating reads every message (as a list would give them), in blocks: code on the per-request path reads
    positions and slices only, so a request parses its window, not the session."""

    BLOCK = 1024  # rows parsed per loader call while iterating

    def __init__(self, outline: SessionOutline, load: RowLoader) -> None:
        self.outline = outline
        self._load = load
        self._parsed: dict[int, Message] = {}

    def __len__(self) -> int:
        return len(self.outline)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return self.take(range(*index.indices(len(self))))
        index = sequence_position(index, len(self), "message position")
        if index not in self._parsed:
            self._ensure([index])
        return self._parsed[index]

    def take(self, positions: Sequence[int]) -> list[Message]:
        """The messages at ``positions``, parsed in one loader call."""
        self._ensure(positions)
        return [self._parsed[i] for i in positions]

    def __iter__(self) -> Iterator[Message]:
        for start in range(0, len(self), self.BLOCK):
            yield from self.take(range(start, min(start + self.BLOCK, len(self))))

    def _ensure(self, positions: Sequence[int]) -> None:
        missing = sorted({i for i in positions if i not in self._parsed})
        if missing:
            for position, message in zip(missing, self._load(missing), strict=True):
                self._parsed[position] = message

    @property
    def parsed_positions(self) -> frozenset[int]:
        """The positions parsed so far (tests and benchmarks check that a request reads only its window)."""
        return frozenset(self._parsed)


def sequence_position(index: int, length: int, what: str) -> int:
    """``index`` as a position of a sequence of ``length``, read as a list reads it (negative counts from the
    end); outside it, ``IndexError("<what> out of range")``. The one rule of every lazy view over a session
    (``LazyMessages`` here, the greeted session's columns and the turn points in the pipeline)."""
    position = index + length if index < 0 else index
    if not 0 <= position < length:
        raise IndexError(f"{what} out of range")
    return position


def messages_at(messages: Sequence[Message], positions: Sequence[int]) -> list[Message]:
    """``[messages[i] for i in positions]``, in one read for a lazy sequence."""
    if isinstance(messages, LazyMessages):
        return messages.take(positions)
    return [messages[i] for i in positions]


def content_text(content: list[JSONObject]) -> str:
    return "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")

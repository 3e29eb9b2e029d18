"""Stage 3 — prompt segments (ADR 0041 §3).

A segment is ``{id, kind, weight, retention?, inject(input) -> output | None}``. Text kinds (1–5) produce
strings for the system prompt and the runtime tail; message kinds (6–9) produce messages for the history.
The registry holds built-ins and plugin segments; plugins register inside a *generation* and their
segments vanish when it is released. A duplicate id is an error (the one rule of every registry,
:mod:`zhin_cli.core.registry`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from zhin_cli.core.errors import ConfigError, ZhinError
from zhin_cli.core.model import BotFacts, Message, SceneFacts, Summary
from zhin_cli.core.registry import Ledger, Registry, recording

T = TypeVar("T")

TEXT_KINDS = ("system", "environment", "role_rules", "platform", "scene")
MESSAGE_KINDS = ("user", "tool", "assistant", "state")
KINDS = TEXT_KINDS + MESSAGE_KINDS
SYSTEM_PROMPT_KINDS = TEXT_KINDS[:4]  # stable across turns; scene goes to the runtime tail (ADR 0045)
Retention = Literal["required", "preferred"]


@dataclass(frozen=True)
class RuntimeView:
    model: str
    provider: str
    timezone: str
    tools: tuple[dict[str, Any], ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    session_id: str = ""  # the session the request is for (a renderer's per-session fields: prompt_cache_key)
    session_key: str | None = None


class FactsReader(Protocol):
    """Current member and scene facts (ADR 0041 §6): ``zhin_cli.store.factscache.FactsCache`` (L1 → L2 → platform) or
    ``FactsStore`` (L2 rows only). Results are ``facts.MemberFacts`` / ``facts.SceneFactsRow`` or None."""

    def member(self, scene_key: str, user_id: str) -> Any: ...

    def scene(self, scene_key: str) -> Any: ...

    def bot_role(self, scene_key: str) -> str | None: ...


@dataclass(frozen=True)
class SessionView:
    session_id: str
    scene: SceneFacts
    bot: BotFacts
    is_group: bool
    summary: Summary | None = None
    summary_timestamp: int = 0
    # The runtime's facts source, when the caller has one (a running bot): a segment reads *current* facts of
    # any member through it. A replay (trace, prefix-diff, eval) has none: what each message's actor carried is
    # what the bot saw then, and reading today's facts into an old request would falsify it.
    session_key: str | None = None
    facts: FactsReader | None = None


@dataclass(frozen=True)
class SegmentInput:
    history: Sequence[Message]  # the visible window, storage order, including this turn's input
    runtime: RuntimeView
    session: SessionView


@runtime_checkable
class PromptSegment(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def weight(self) -> float: ...
    @property
    def retention(self) -> Retention | None: ...

    def inject(self, input: SegmentInput) -> Any: ...


@dataclass(frozen=True)
class TextSegment:
    """A text segment whose content is fixed (from ``zhin.yaml`` or a plugin)."""

    id: str
    kind: str
    text: str
    weight: float = 0
    retention: Retention | None = "preferred"

    def inject(self, input: SegmentInput) -> str | None:
        return self.text or None


class Generation:
    """A plugin load — the object handed to a plugin's ``register`` function (``zhin_cli.api.Plugin``).

    Segments registered through :meth:`register`, and whatever the plugin registers in any other registry while it
    loads (providers, wire formats, data sources, macros, assertions … through the ``register_*`` functions of
    :mod:`zhin_cli.api`) or through :meth:`add`, are the plugin's: they name it as their owner and all disappear when
    it is released (a name the plugin replaced gets its previous item back)."""

    def __init__(self, registry: PromptSegmentRegistry, name: str) -> None:
        self.registry = registry
        self.name = name
        self.ids: list[str] = []
        self.ledgers: list[Ledger] = []
        self.released = False

    def register(self, segment: PromptSegment) -> PromptSegment:
        if self.released:
            raise ConfigError(f"generation {self.name!r} is released; cannot register {segment.id!r}")
        self.registry._add(segment, owner=self.name)
        self.ids.append(segment.id)
        return segment

    segment = register

    def add(self, registry: Registry[T], name: str, item: T, *, replace: bool = False) -> T:
        """Register ``item`` in any registry (``zhin_cli.api.PROVIDERS``, ``SOURCES`` …) as this plugin's."""
        if self.released:
            raise ConfigError(f"generation {self.name!r} is released; cannot register {name!r}")
        with self.recording():
            return registry.add(name, item, replace=replace)

    @contextmanager
    def recording(self) -> Iterator[Ledger]:
        """Inside the block, every registration on this thread is this plugin's (the loader wraps the plugin's
        import and its ``register`` call in it)."""
        with recording(self.name) as ledger:
            self.ledgers.append(ledger)
            yield ledger

    @property
    def registered(self) -> list[tuple[str, str]]:
        """``(kind, name)`` of everything this plugin registered outside the segments."""
        return [entry for ledger in self.ledgers for entry in ledger.names]

    def release(self) -> None:
        for segment_id in self.ids:
            self.registry._remove(segment_id)
        self.ids.clear()
        while self.ledgers:
            self.ledgers.pop().undo()
        self.released = True


class PromptSegmentRegistry:
    def __init__(self) -> None:
        self._segments: Registry[PromptSegment] = Registry("segment id")

    def register(self, segment: PromptSegment) -> PromptSegment:
        """A built-in segment (lives as long as the registry)."""
        self._add(segment, owner="builtin")
        return segment

    def _add(self, segment: PromptSegment, owner: str) -> None:
        if segment.kind not in KINDS:
            raise ConfigError(f"segment {segment.id!r}: unknown kind {segment.kind!r} (expected one of {', '.join(KINDS)})")
        if segment.retention not in (None, "required", "preferred"):
            raise ConfigError(f"segment {segment.id!r}: retention must be 'required' or 'preferred'")
        self._segments.add(segment.id, segment, owner=owner)

    def _remove(self, segment_id: str) -> None:
        self._segments.remove(segment_id)

    def unregister(self, segment_id: str) -> None:
        self._remove(segment_id)

    def generation(self, name: str) -> Generation:
        return Generation(self, name)

    @contextmanager
    def loaded(self, name: str) -> Iterator[Generation]:
        generation = self.generation(name)
        try:
            yield generation
        finally:
            generation.release()

    def owner(self, segment_id: str) -> str:
        return self._segments.owners[segment_id]

    def ordered(self, kinds: Sequence[str] = KINDS) -> list[PromptSegment]:
        """Fixed order across kinds; weight descending within a kind; registration order breaks ties."""
        rank = {kind: i for i, kind in enumerate(KINDS)}
        index = {sid: i for i, sid in enumerate(self._segments)}
        chosen = [s for s in self._segments.values() if s.kind in kinds]
        return sorted(chosen, key=lambda s: (rank[s.kind], -s.weight, index[s.id]))

    def __contains__(self, segment_id: object) -> bool:
        return segment_id in self._segments

    def __len__(self) -> int:
        return len(self._segments)


# --- text segments: render and budget ----------------------------------------------------------------

TEXT_SEPARATOR = "\n\n"
TRIM_MARKER = "…"


@dataclass
class TextPart:
    segment: PromptSegment
    text: str  # after trimming
    original_chars: int

    @property
    def trimmed(self) -> int:
        return self.original_chars - len(self.text)


def run_inject(segment: PromptSegment, input: SegmentInput) -> Any:
    """A segment's ``inject``; a plugin's exception becomes a one-line error naming the segment."""
    try:
        return segment.inject(input)
    except ZhinError:
        raise  # already a one-line error (e.g. an orphan tool result)
    except Exception as exc:  # plugin code: any failure must not become a traceback
        raise ConfigError(f"segment {segment.id!r} failed: {type(exc).__name__}: {exc}") from None


def inject_text(segments: Sequence[PromptSegment], input: SegmentInput) -> list[TextPart]:
    parts = []
    for segment in segments:
        value = run_inject(segment, input)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise ConfigError(f"text segment {segment.id!r} returned {type(value).__name__}, expected str")
        parts.append(TextPart(segment=segment, text=value, original_chars=len(value)))
    return parts


def joined_length(parts: Sequence[TextPart]) -> int:
    present = [p for p in parts if p.text]
    return sum(len(p.text) for p in present) + len(TEXT_SEPARATOR) * max(0, len(present) - 1)


def enforce_budget(parts: list[TextPart], max_chars: int | None) -> list[TextPart]:
    """Trim ``preferred`` parts, least important (lowest weight, later kind) first, until the joined text
    fits ``max_chars``. ``required`` parts are never trimmed; a part that cannot keep any text is dropped.

    (Upstream's enforcePromptBudget sacrifices the *highest*-priority truncatable sections first — see
    docs/design-notes.md; we trim from the least important end, as ADR 0041 §3 intends.)
    """
    if max_chars is None or joined_length(parts) <= max_chars:
        return parts
    rank = {kind: i for i, kind in enumerate(KINDS)}
    victims = sorted(
        (p for p in parts if p.segment.retention != "required"),
        key=lambda p: (p.segment.weight, -rank[p.segment.kind]),
    )
    for part in victims:
        excess = joined_length(parts) - max_chars
        if excess <= 0:
            break
        keep = len(part.text) - excess - len(TRIM_MARKER)
        if keep <= 0:
            part.text = ""
        else:
            part.text = part.text[:keep] + TRIM_MARKER
    return parts


def system_text(parts: Sequence[TextPart]) -> str:
    return TEXT_SEPARATOR.join(p.text for p in parts if p.text)

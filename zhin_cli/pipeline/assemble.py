"""The pipeline for one request, and the replay of a session (DESIGN.md §2).

store → window → segments → merge → headers → preset (layout) → provider render → validate.
Each stage is a module; this file only wires them, in that order, and collects what the trace shows.

A request is made in two steps: *placement* (window → message segments → merge: which history items, in which
order) and *rendering* (projection → shaping → preset → provider → validate). The next request needs only the
first step of this one — what it sent, in merge's append-only order — so a single turn is assembled by placing
the turns since its window last moved and rendering only that turn (``Assembler.request``), and a replay
carries the sent prefix from turn to turn (``Conversation``). The carry stops where the window's start moves
(docs/design-notes.md, "A request costs its window"), which keeps both exact.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Generic, NamedTuple, TypeVar, overload
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from zhin_cli.core.errors import ConfigError, UsageError
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.model import (
    AssistantMessage,
    LazyMessages,
    Message,
    Session,
    SessionOutline,
    UserMessage,
    messages_at,
    sequence_position,
)
from zhin_cli.core.timezones import choose_timezone
from zhin_cli.core.tokens import TokenCounter, encoding_for_model
from zhin_cli.core.tokens import counter as shared_counter
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.headers import (
    Aliases,
    Projected,
    ProjectedEvent,
    Projection,
    ProjectionMemo,
    events_timed_on_wire,
    project,
)
from zhin_cli.pipeline.merge import ItemKey, Placed, item_key, merge
from zhin_cli.pipeline.models import ModelChooser
from zhin_cli.pipeline.preset import SYSTEM_SEGMENT, PresetMessage
from zhin_cli.pipeline.preset.model import Preset
from zhin_cli.pipeline.preset.skeleton import Arrangement, Facts, arrange, downgrades_mid_system, greeting_text
from zhin_cli.pipeline.providers import Capabilities, RenderedPart, RenderedRequest, render, resolve_profile, resolved
from zhin_cli.pipeline.providers.shaping import shape
from zhin_cli.pipeline.segments import (
    MESSAGE_KINDS,
    SYSTEM_PROMPT_KINDS,
    FactsReader,
    PromptSegment,
    PromptSegmentRegistry,
    RuntimeView,
    SegmentInput,
    SessionView,
    TextPart,
    enforce_budget,
    inject_text,
    run_inject,
    system_text,
)
from zhin_cli.pipeline.validate import Verdict, validate
from zhin_cli.pipeline.window import SessionIndex, Window, summary_in_prefix, visible_window
from zhin_cli.wire import prompt_tokens as wire_prompt_tokens

DEFAULT_PROVIDER = "openai"
DEFAULT_MODEL = "gpt-4o"
# The row id of the card greeting (``Assembler.greeted``), which is not a stored row: below every value a signed
# 64-bit column can hold, so it can never equal a stored row id (1 … 2^63-1) nor any summary anchor a store can
# hold (0 there means "no anchor"; JSONL allows negatives), and it still sorts before every stored row.
CARD_GREETING_ROW = -(2**63) - 1
TAIL_SEGMENT = "tail"


@dataclass
class SegmentReport:
    id: str
    kind: str
    weight: float
    chars: int
    tokens: int
    trimmed: int  # characters cut by the budget (text segments)
    messages: int | None = None  # message segments: how many messages they produced

    def as_dict(self) -> JSONObject:
        data: JSONObject = {
            "id": self.id, "kind": self.kind, "weight": self.weight, "chars": self.chars,
            "tokens": self.tokens, "trimmed": self.trimmed,
        }
        if self.messages is not None:
            data["messages"] = self.messages
        return data


@dataclass(frozen=True)
class WindowStart:
    """Where a request's window opens: the messages before it (compacted or cut) and the summary in force.
    Two requests with the same start see the same history base, the same carried membership events and the
    same summary; the sent prefix is carried only between such requests."""

    dropped: int
    summary_anchor: int | None

    @staticmethod
    def of(window: Window) -> WindowStart:
        return WindowStart(window.dropped, window.summary.anchor_row_id if window.summary else None)


# The greeting's "window": the whole chat, before any cut or compaction (it is the first message).
GREETING_START = WindowStart(0, None)


@dataclass(frozen=True)
class WindowReport:
    """What the request could see (trace's ``window``): its messages, those before it, the summary in force
    and the membership events carried over from before it."""

    messages: int
    dropped: int
    summary_anchor: int | None
    carried_events: int

    @property
    def start(self) -> WindowStart:
        return WindowStart(self.dropped, self.summary_anchor)

    def as_dict(self) -> JSONObject:
        return {"messages": self.messages, "dropped": self.dropped, "summary_anchor": self.summary_anchor,
                "carried_events": self.carried_events}



@dataclass(frozen=True)
class Breakpoint:
    """A cache breakpoint of the rendered request: ``after`` a region (``system``) or ``before`` one (``tail``),
    at wire message ``message_index`` (-1: the top-level system), written as a marker (``explicit``) or implied
    by the provider's automatic prefix caching."""

    message_index: int
    explicit: bool
    after: str | None = None
    before: str | None = None

    @staticmethod
    def of(data: JSONObject) -> Breakpoint:
        """The breakpoint a wire format's ``FlatRequest`` describes (``as_dict``'s fields)."""
        index, after, before = data["message_index"], data.get("after"), data.get("before")
        if not isinstance(index, int) or not isinstance(after, str | None) or not isinstance(before, str | None):
            raise TypeError(f"not a breakpoint: {data!r}")  # a wire format's bug, not input
        return Breakpoint(index, bool(data.get("explicit")), after, before)

    @property
    def label(self) -> str:
        """``after system`` / ``before tail``."""
        return f"after {self.after}" if self.after is not None else f"before {self.before}"

    def as_dict(self) -> JSONObject:
        data: JSONObject = {"after": self.after} if self.after is not None else {"before": self.before}
        data["message_index"] = self.message_index
        data["explicit"] = self.explicit
        return data


@dataclass
class AssembledRequest:
    session_id: str
    turn: int
    provider: str
    model: str
    encoding: str
    segments: list[SegmentReport]
    state_rendering: str
    full_headers: int
    short_headers: int
    cache_breakpoints: list[Breakpoint]
    request: dict[str, Any]  # any JSON; JSONObject once tools/preset narrows what it reads of it
    prompt_tokens: int
    verdict: Verdict
    warnings: list[str]
    window: WindowReport
    profile: Capabilities = field(repr=False)  # the profile that rendered it (mid-conversation system as used)
    sent_keys: list[ItemKey] = field(default_factory=list, repr=False)  # the history items, in the order sent
    # for prefix analysis: what each wire message is made of
    parts: list[RenderedPart] = field(default_factory=list, repr=False)
    system_texts: list[tuple[str, str]] = field(default_factory=list, repr=False)  # (segment id, text) in order
    tail_text: str | None = field(default=None, repr=False)  # the runtime tail as the wire carries it, if any
    # the history messages exactly as handed to the preset stage (``arrange``): their headers and segments say
    # what zhin added to each history message (stcheck removes them to compare with SillyTavern)
    projected: list[Projected] = field(default_factory=list, repr=False)

    @property
    def window_start(self) -> WindowStart:
        return self.window.start

    def as_dict(self) -> JSONObject:
        return {
            "session_id": self.session_id,
            "turn": self.turn,
            "provider": self.provider,
            "model": self.model,
            "encoding": self.encoding,
            "segments": [s.as_dict() for s in self.segments],
            "state_rendering": self.state_rendering,
            "headers": {"full": self.full_headers, "short": self.short_headers},
            "cache_breakpoints": [b.as_dict() for b in self.cache_breakpoints],
            "prompt_tokens": self.prompt_tokens,
            "validation": self.verdict.as_dict(),
            "window": self.window.as_dict(),
            "warnings": [warning for warning in self.warnings],  # a list[JSON], which a list[str] is not
            "request": self.request,
        }


@dataclass(frozen=True)
class SentPrefix:
    """What a request sent (its history items in merge order) plus the reply it produced, and the window start
    it was sent from: the next request keeps it as its prefix only if its window opens at the same place."""

    start: WindowStart
    keys: tuple[ItemKey, ...]

    def carried_into(self, start: WindowStart) -> tuple[ItemKey, ...]:
        """The prefix a request whose window opens at ``start`` keeps: all of it, or nothing after a move (the
        cached prefix broke at the move anyway, so the history is merged by time again)."""
        return self.keys if start == self.start else ()


class _Built(NamedTuple):
    """Stages 5–7 of one request (projection → shaping → preset → render), for one choice of timed events."""

    projection: Projection
    shaped: list[Projected]
    shape_warnings: list[str]
    arrangement: Arrangement
    profile: Capabilities
    rendered: RenderedRequest


@dataclass
class Placement:
    """Stages 2–4 of one request: the window, the segments' input, and the history as merge placed it. Enough
    for the next request's sent prefix; rendering (``Assembler.render``) needs nothing else."""

    session: Session
    upto: int
    request_time: int
    model: str
    timezone: str
    window: Window
    runtime: RuntimeView
    seg_input: SegmentInput
    message_segments: list[PromptSegment]
    placed: list[Placed]

    @property
    def start(self) -> WindowStart:
        return WindowStart.of(self.window)

    @property
    def keys(self) -> tuple[ItemKey, ...]:
        return tuple(item_key(p.item) for p in self.placed)


class _RowIndex:
    """Sender names and stored texts of the window's messages by row id (macros: {{user}}, {{lastUserMessage}});
    built only if a preset asks."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.by_row: dict[int, Message] | None = None

    def _get(self, row: int) -> Message | None:
        if self.by_row is None:
            self.by_row = {m.row_id: m for m in self.messages}
        return self.by_row.get(row)

    def speaker(self, row: int) -> str | None:
        message = self._get(row)
        actor = getattr(message, "actor", None)
        return getattr(actor, "display_name", None)

    def text(self, row: int) -> str | None:
        message = self._get(row)
        return getattr(message, "text", None)


def _system_texts(system_parts: list[TextPart], leading: list[PresetMessage] | None) -> list[tuple[str, str]]:
    """(segment id, text) of the stable system prefix, in order: the system segments, and with a preset the
    leading preset entries around them (``preset:main`` …), so prefix-diff can name what changed."""
    segments = [(p.segment.id, p.text) for p in system_parts if p.text]
    if leading is None:
        return segments
    out: list[tuple[str, str]] = []
    for block in leading:
        for segment_id, text in block.pieces:
            if segment_id == SYSTEM_SEGMENT:
                out.extend(segments)
            elif segment_id:
                out.append((segment_id, text))
    return out


def _tokens_of(counter: TokenCounter, texts: list[str]) -> int:
    """Σ ``counter.count(t)``, without a Python call per text (a segment report sums a whole window's texts every
    request): packed tokens are 4 bytes each, so the byte lengths sum to 4 × the count."""
    return sum(map(len, map(counter.encode_packed, texts))) // 4


def _macro_warnings(unknown: dict[str, int]) -> list[str]:
    return [f"unknown macro {{{{{name}}}}} left verbatim ({count}×)" for name, count in sorted(unknown.items())]


def _all_timed_guess(profile: Capabilities, preset: Preset | None) -> bool:
    """The first build's guess whether every state change is downgraded (and so shows its time) on the wire: yes
    when the profile takes no system message mid-conversation, when the preset's post-processing downgrades every
    one (semi, strict, single), and on Anthropic's allow-listed models, which accept one only between a user turn
    and the reply or at the end (``_mid_system_ok``) — a state change that opens a member's turn, the usual
    place, is downgraded there. A wrong guess costs a second build, never a wrong request."""
    return profile.mid_conversation_system == "none" or downgrades_mid_system(preset) or bool(profile.mid_system_models)


def greeting_position(messages: Sequence[Message]) -> int | None:
    """Where the session's greeting is, if it has one: an assistant message with text and no tool call that opens
    the conversation, with no member input before it.

    SillyTavern writes the card's ``first_mes`` into a new chat without calling the model; a bot that does the
    same stores it as the first assistant row. No request produced it, so a replay makes none for it (turn
    numbers still count it: turn k is the k-th assistant message). Only the very first stored message can be the
    greeting: a bot message after a join or another event answered that event, which is model input.
    (docs/design-notes.md, "The greeting (B5)")"""
    if not messages:
        return None
    first = messages[0]
    if isinstance(first, AssistantMessage) and first.text and not first.tool_calls:
        return 0
    return None


def outline_greeting_position(outline: SessionOutline) -> int | None:
    """``greeting_position`` from the outline alone (the same rule; no message is read)."""
    if not len(outline):
        return None
    return 0 if outline.roles[0] == "assistant" and outline.has_text[0] and not outline.has_tool_calls[0] else None


def greeting_turn(messages: Sequence[Message]) -> int | None:
    """The greeting's turn number (1: it is the first assistant message), or None without a greeting."""
    return 1 if greeting_position(messages) is not None else None


def resolve_timezone(name: str | None, session: Session, configured: str | None = None) -> str:
    """The time zone a request of ``session`` is rendered in (``timezone_choice``); an unknown name is a
    ``ConfigError``."""
    chosen = timezone_choice(name, session, configured)[0]
    try:
        ZoneInfo(chosen)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {chosen!r}") from None
    return chosen


def timezone_choice(option: str | None, session: Session, configured: str | None = None) -> tuple[str, str]:
    """The zone and its source: ``option`` (--timezone), ``configured`` (zhin.yaml), the session's stored zone, the
    zone its data names, ``TZ``, UTC (``core.timezones.choose_timezone``)."""
    return choose_timezone(option, configured, session.timezone, session.timezone_source, os.environ.get("TZ"))


# --- the card greeting: one message in front of the stored ones, without copying them --------------------------


_T = TypeVar("_T")


class _Prepended(Sequence[_T], Generic[_T]):
    """``[first, *rest]`` as a view: O(1) to make, whatever ``rest``'s length."""

    def __init__(self, first: _T, rest: Sequence[_T]) -> None:
        self.first = first
        self.rest = rest

    def __len__(self) -> int:
        return 1 + len(self.rest)

    @overload
    def __getitem__(self, index: int) -> _T: ...

    @overload
    def __getitem__(self, index: slice) -> list[_T]: ...

    def __getitem__(self, index: int | slice) -> _T | list[_T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            if start >= stop:
                return []
            head = [self.first] if start == 0 else []
            return head + list(self.rest[max(start - 1, 0) : stop - 1])
        index = sequence_position(index, len(self), "position")
        return self.first if index == 0 else self.rest[index - 1]

    def __iter__(self) -> Iterator[_T]:
        yield self.first
        yield from self.rest


class _ShiftedPositions(Sequence[int]):
    """The assistant positions of ``[greeting, *messages]``: 0, then every stored one moved by one."""

    def __init__(self, stored: Sequence[int]) -> None:
        self.stored = stored

    def __len__(self) -> int:
        return 1 + len(self.stored)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = sequence_position(index, len(self), "position")
        return 0 if index == 0 else self.stored[index - 1] + 1

    def __iter__(self) -> Iterator[int]:
        yield 0
        for position in self.stored:
            yield position + 1


def _with_greeting(session: Session, greeting: AssistantMessage) -> Session:
    """``session`` with ``greeting`` as its first message: the messages and their outline as views over the
    stored ones (the outline's values for the greeting come from its definition, ``SessionOutline.of_messages``)."""
    outline = session.outline
    # the greeting's facts by the definition; its row id (below any 64-bit column: CARD_GREETING_ROW) set apart,
    # since the outline stores ids in 64-bit arrays
    own = SessionOutline.of_messages([replace(greeting, row_id=0)])
    first = {f.name: getattr(own, f.name)[0] for f in fields(SessionOutline) if f.name != "assistant_positions"}
    first["row_ids"] = greeting.row_id
    columns = {name: _Prepended(value, getattr(outline, name)) for name, value in first.items()}
    prepended = SessionOutline(**columns, assistant_positions=_ShiftedPositions(outline.assistant_positions))
    stored = session.messages

    def load(positions: Sequence[int]) -> list[Message]:  # ascending; position 0 is the greeting
        head: list[Message] = [greeting] if positions and positions[0] == 0 else []
        return head + messages_at(stored, [p - 1 for p in positions if p > 0])

    return replace(session, messages=LazyMessages(prepended, load))


# --- turns ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnPoint:
    """A point where a replay makes a request (or, for a greeting, where the chat opens without one)."""

    number: int  # the turn number (trace's); the card greeting has 0 (it is not stored)
    position: int  # of the assistant message, in the replayed (greeted) session
    timestamp: int
    row_id: int
    model: str | None  # the stored model of the reply
    greeting: bool = False


class _TurnPoints(Sequence[TurnPoint]):
    """The plan's turn points as a view over the outline: a point is made when it is read, so one request of a
    long session does not build one object per turn."""

    def __init__(self, outline: SessionOutline, card_greeting: TurnPoint | None) -> None:
        self.outline = outline
        self.card = card_greeting
        self.shift = 1 if card_greeting is not None else 0
        self.greeting = None if card_greeting is not None else outline_greeting_position(outline)

    def __len__(self) -> int:
        return self.shift + len(self.outline.assistant_positions)

    @overload
    def __getitem__(self, index: int) -> TurnPoint: ...

    @overload
    def __getitem__(self, index: slice) -> list[TurnPoint]: ...

    def __getitem__(self, index: int | slice) -> TurnPoint | list[TurnPoint]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = sequence_position(index, len(self), "turn point")
        if self.card is not None and index == 0:
            return self.card
        number = index - self.shift + 1
        position = self.outline.assistant_positions[number - 1]
        outline = self.outline
        return TurnPoint(number, position + self.shift, outline.timestamps[position], outline.row_ids[position],
                         outline.models[position], greeting=position == self.greeting)


@dataclass
class TurnPlan:
    """A session's turns as a replay makes them: built once per session from its outline (no content read)."""

    stored: Session
    session: Session  # what is replayed: ``stored``, or ``stored`` opened by the card greeting
    points: Sequence[TurnPoint]  # the card greeting (if any), then one per stored assistant message
    total: int  # stored assistant messages: trace's turn count
    greeting_turn: int | None  # the stored greeting's turn (1), if any
    card_greeting: bool
    _aliases: Aliases | None = field(default=None, repr=False)
    _index: SessionIndex | None = field(default=None, repr=False)

    @property
    def aliases(self) -> Aliases:
        if self._aliases is None:
            self._aliases = Aliases.of(self.session)
        return self._aliases

    @property
    def index(self) -> SessionIndex:
        if self._index is None:
            self._index = SessionIndex.of(self.session)
        return self._index

    def number(self, turn: int) -> int:
        """``turn`` as a positive turn number (negative counts from the end); out of range is a UsageError."""
        wanted = turn if turn > 0 else self.total + 1 + turn
        if not 1 <= wanted <= self.total:
            raise UsageError(f"turn {turn} is out of range: the session has {self.total} turns (1..{self.total})")
        return wanted

    @property
    def last_request_turn(self) -> int | None:
        """The last turn that has a request (None: the session holds no reply, or only its greeting)."""
        return self.total if self.total and self.total != self.greeting_turn else None

    def point_index(self, turn: int) -> int:
        """Where turn ``turn`` (positive) is in ``points``."""
        return turn - 1 + (1 if self.card_greeting else 0)


class Conversation:
    """Requests of one session in order, each keeping the previous one's sent prefix (merge's append-only
    order) while the window opens at the same place. ``Assembler.replay`` steps it over the stored assistant
    messages; eval steps it over its case's turn points."""

    def __init__(self, assembler: Assembler, plan: TurnPlan) -> None:
        self.assembler = assembler
        self.plan = plan
        self.carry: SentPrefix | None = None
        self.projections = ProjectionMemo()  # the last rendered request's projection, resumed by the next one
        # Positions given to ``place``/``request`` are in the stored session; the card greeting (not stored)
        # opens the replayed one, one position ahead, and is the first request's whole prefix.
        self.shift = 1 if plan.card_greeting else 0
        if plan.card_greeting:
            self.greeting(CARD_GREETING_ROW)

    def greeting(self, row_id: int) -> None:
        """The chat opened with a greeting no request produced: it is the whole prefix of the next request."""
        self.carry = SentPrefix(GREETING_START, (("row", row_id),))

    def _sent(self, placement: Placement, reply_row: int | None) -> SentPrefix:
        reply: tuple[ItemKey, ...] = (("row", reply_row),) if reply_row is not None else ()
        return SentPrefix(placement.start, placement.keys + reply)

    def place(self, upto: int, request_time: int, *, reply_row: int | None, stored_model: str | None = None) -> Placement:
        """Only the placement of the request made before stored position ``upto`` (what the next one needs)."""
        placement = self.assembler.place(self.plan.session, upto + self.shift, request_time, sent_prefix=self.carry,
                                         stored_model=stored_model, index=self.plan.index)
        self.carry = self._sent(placement, reply_row)
        return placement

    def request(self, upto: int, request_time: int, *, turn: int, reply_row: int | None,
                stored_model: str | None = None) -> AssembledRequest:
        """The request made before position ``upto`` of the stored session at ``request_time``; ``reply_row``
        is the reply it produced (None: none stored), which joins the next request's prefix."""
        # through ``assemble`` (not place + render here), so a subclass that changes how one request is made
        # (the tests' negative controls) changes the replay too
        request = self.assembler.assemble(self.plan.session, upto + self.shift, request_time, turn=turn, sent_prefix=self.carry,
                                          aliases=self.plan.aliases, stored_model=stored_model, index=self.plan.index,
                                          projections=self.projections)
        reply: tuple[ItemKey, ...] = (("row", reply_row),) if reply_row is not None else ()
        self.carry = SentPrefix(request.window_start, (*request.sent_keys, *reply))
        return request

    def step(self, point: TurnPoint, *, render: bool = True) -> AssembledRequest | None:
        """One turn point of the plan: the greeting opens the chat; a request is rendered or only placed."""
        if point.greeting:
            self.greeting(point.row_id)
            return None
        upto = point.position - self.shift
        if not render:
            self.place(upto, point.timestamp, reply_row=point.row_id, stored_model=point.model)
            return None
        return self.request(upto, point.timestamp, turn=point.number, reply_row=point.row_id, stored_model=point.model)


class Assembler:
    """Assembles requests for one session under one configuration (registry, provider, model)."""

    def __init__(
        self,
        registry: PromptSegmentRegistry,
        config: Config,
        *,
        provider: str | None = None,
        model: str | None = None,
        timezone: str | None = None,
        preset: Preset | None = None,
        facts: FactsReader | None = None,
    ) -> None:
        self.registry = registry
        self.facts = facts  # current member/scene facts for segments (SessionView.facts); None in replays
        self.config = config
        # The message skeleton: the given preset, else zhin.yaml's ``preset:``, else the ADR 0041 layout.
        self.preset = preset if preset is not None else config.preset()
        self.provider = provider or config.provider or DEFAULT_PROVIDER
        self.model = model or config.model
        self.models = ModelChooser(self.provider, self.model, named=bool(provider or config.provider))
        self.timezone = timezone or config.timezone
        self._timezone_option, self._timezone_configured = timezone, config.timezone  # which one said it
        resolve_profile(self.provider, self.model or DEFAULT_MODEL, config.provider_overrides.get(self.provider))

    def timezone_of(self, session: Session) -> str:
        """The time zone this assembler renders ``session``'s requests in (``resolve_timezone``)."""
        return resolve_timezone(self._timezone_option, session, self._timezone_configured)

    def timezone_source(self, session: Session) -> str:
        """Where ``timezone_of``'s zone came from (``core.timezones.ZONE_SOURCES``)."""
        return timezone_choice(self._timezone_option, session, self._timezone_configured)[1]

    # --- turns -----------------------------------------------------------------------------------------------

    def plan(self, session: Session) -> TurnPlan:
        """Turn k = the request that produced the k-th stored assistant message, from what was visible then.

        The greeting (``greeting_position``) has no request: nobody asked the model for it. A stored greeting keeps
        its turn number (turn 1); a card greeting (``greeted``) is not a stored message and has none. Either way it
        stays in the history of every later request, as the first thing in the chat."""
        outline = session.outline
        replayed, _ = self.greeted(session, 0)
        card = replayed is not session
        opening = TurnPoint(0, 0, replayed.outline.timestamps[0], CARD_GREETING_ROW, None, greeting=True) if card else None
        points = _TurnPoints(outline, opening)
        return TurnPlan(session, replayed, points, len(outline.assistant_positions),
                        1 if points.greeting is not None else None, card)

    def conversation(self, session: Session, plan: TurnPlan | None = None) -> Conversation:
        return Conversation(self, plan or self.plan(session))

    def replay(self, session: Session, *, only: frozenset[int] | None = None,
               plan: TurnPlan | None = None) -> Iterator[AssembledRequest]:
        """Every request of the session in turn order (``plan``), each keeping the previous one's sent prefix;
        with ``only``, just those turns: the turns each one's prefix depends on (since its window last moved,
        ``run_start``) are placed, not rendered, and nothing else is touched."""
        plan = plan or self.plan(session)
        conversation = self.conversation(session, plan)
        if only is None:
            for point in plan.points:
                request = conversation.step(point)
                if request is not None:
                    yield request
            return
        wanted = {plan.point_index(plan.number(turn)) for turn in only}
        for at in wanted:
            if plan.points[at].greeting:
                raise UsageError(f"turn {plan.points[at].number} is the greeting: no request is made for it")
        touched = set(wanted)
        for at in wanted:
            touched.update(range(self.run_start(plan, at), at))
        for at in sorted(touched):
            if at - 1 not in touched and at > 0:
                # the window moved between the last point stepped and this one: a full replay carries nothing here
                conversation.carry = None
            request = conversation.step(plan.points[at], render=at in wanted)
            if request is not None:
                yield request

    def request(self, session: Session, turn: int, *, plan: TurnPlan | None = None) -> AssembledRequest:
        """Turn ``turn``'s request exactly as ``replay`` makes it, at the cost of its window: the sent prefix it
        keeps comes from the turns since its window last moved (placed, not rendered); nothing before them
        matters, because a moved window carries no prefix (``SentPrefix.carried_into``)."""
        return next(iter(self.replay(session, only=frozenset({turn}), plan=plan)))

    def run_start(self, plan: TurnPlan, at: int) -> int:
        """The earliest point before ``plan.points[at]`` from which every point up to it has its window start:
        the turns whose placements ``at``'s sent prefix depends on begin there."""
        start = self.window_start(plan, plan.points[at])
        first = at
        while first > 0 and self.window_start(plan, plan.points[first - 1]) == start:
            first -= 1
        return first

    def window_start(self, plan: TurnPlan, point: TurnPoint) -> WindowStart:
        """Where the window of ``point``'s request opens (a greeting: at the start of the chat)."""
        if point.greeting:
            return GREETING_START
        return WindowStart.of(visible_window(plan.session, point.position, point.timestamp, self.config.window, plan.index))

    def greeted(self, session: Session, upto: int) -> tuple[Session, int]:
        """``session`` opened with the preset's card greeting (``greeting`` option, ST's ``first_mes``) when it
        stored no greeting of its own, and ``upto`` moved past it; else both unchanged.

        SillyTavern writes ``first_mes`` into every new chat, so its requests carry it as the first assistant
        message; a bot bound to the same card that never stored it would otherwise be replayed without it. The
        text is expanded once, as ST does when the chat opens (``skeleton.greeting_text``: ``{{user}}`` and
        ``{{char}}`` by the preset stage's one rule, for the sender of the chat's first member message). The row
        is not stored: its id is ``CARD_GREETING_ROW`` (below and apart from every stored id and summary anchor;
        ``min(row_id) - 1`` was 0, a summary's "no anchor", or a row of another branch) and its time 1 ms before
        the first message, so the merge keeps it first. The stored messages are not copied (``_with_greeting``)."""
        card = self.preset.card if self.preset is not None else None
        if card is None or not card.greeting:
            return session, upto
        outline = session.outline
        if not len(outline) or outline_greeting_position(outline) is not None:
            return session, upto
        first_time = outline.timestamps[0]
        member = None
        for position, role in enumerate(outline.roles):  # the chat's first member message with a sender
            if role == "user":
                message = session.messages[position]
                if isinstance(message, UserMessage) and message.actor:
                    member = message.actor.display_name
                    break
        text = greeting_text(card, member=member, bot_name=session.bot.name, is_group=session.is_group,
                             now_ms=first_time - 1, timezone=self.timezone_of(session))
        greeting = AssistantMessage([{"type": "text", "text": text}], first_time - 1, CARD_GREETING_ROW)
        return _with_greeting(session, greeting), upto + 1

    # --- one request -----------------------------------------------------------------------------------------

    def assemble(
        self,
        session: Session,
        upto: int,
        request_time: int,
        *,
        turn: int = 0,
        sent_prefix: Sequence[ItemKey] | SentPrefix | None = None,
        aliases: Aliases | None = None,
        stored_model: str | None = None,
        index: SessionIndex | None = None,
        projections: ProjectionMemo | None = None,
    ) -> AssembledRequest:
        """The request made before ``session.messages[upto]`` at ``request_time``. ``sent_prefix``: the previous
        request's ``SentPrefix`` (kept if the window opens where it did), or item keys kept as they are.
        ``projections``: the previous request's projection, resumed where exact (a replay's ``Conversation``)."""
        greeted, upto = self.greeted(session, upto)
        if greeted is not session:  # positions, aliases and index of the stored session do not fit the greeted one
            session, aliases, index = greeted, None, None
        placement = self.place(session, upto, request_time, sent_prefix=sent_prefix, stored_model=stored_model,
                               index=index)
        return self.render(placement, turn=turn, aliases=aliases or Aliases.of(session), projections=projections)

    def place(
        self,
        session: Session,
        upto: int,
        request_time: int,
        *,
        sent_prefix: Sequence[ItemKey] | SentPrefix | None = None,
        stored_model: str | None = None,
        index: SessionIndex | None = None,
    ) -> Placement:
        """Stages 2–4: the window, the message segments' output, and merge's order (append-only after what was
        sent). ``session`` is the replayed one (already greeted)."""
        model = self.models.for_stored(stored_model)  # a named provider never gets another's model (models.py)
        timezone = self.timezone_of(session)
        window = visible_window(session, upto, request_time, self.config.window, index)
        if isinstance(sent_prefix, SentPrefix):
            sent: Sequence[ItemKey] = sent_prefix.carried_into(WindowStart.of(window))
        else:
            sent = sent_prefix or ()
        runtime = RuntimeView(model=model, provider=self.provider, timezone=timezone, tools=tuple(self.config.tools),
                              session_id=session.session_id, session_key=session.session_key)
        view = SessionView(
            session_id=session.session_id,
            scene=session.scene_at(request_time),
            bot=session.bot,
            is_group=session.is_group,
            summary=window.summary,
            summary_timestamp=window.summary_anchor_timestamp,
            session_key=session.session_key,
            facts=self.facts,
        )
        seg_input = SegmentInput(history=[*window.carried_events, *window.messages], runtime=runtime, session=view)
        message_segments = self.registry.ordered(MESSAGE_KINDS)
        outputs = [(segment, list(run_inject(segment, seg_input) or [])) for segment in message_segments]
        placed = merge(outputs, summary_in_prefix(window, sent))
        return Placement(session, upto, request_time, model, timezone, window, runtime, seg_input, message_segments, placed)

    def render(self, placement: Placement, *, turn: int = 0, aliases: Aliases | None = None,
               projections: ProjectionMemo | None = None) -> AssembledRequest:
        """Stages 5–8 of a placed request: text segments, projection, shaping, preset, provider, validation.
        ``projections``: resume the previous request's projection where that is exact (``ProjectionMemo``)."""
        session, window, model, seg_input = placement.session, placement.window, placement.model, placement.seg_input
        aliases = aliases or Aliases.of(session)
        # resolved once per (provider, model, overrides), not per render (issue 32)
        profile: Capabilities = resolved(self.provider, model, self.config.provider_overrides.get(self.provider))
        counter = shared_counter(encoding_for_model(model))
        system_parts = enforce_budget(inject_text(self.registry.ordered(SYSTEM_PROMPT_KINDS), seg_input), self.config.max_chars)
        tail_parts = inject_text(self.registry.ordered(("scene",)), seg_input)
        placed, runtime, timezone = placement.placed, placement.runtime, placement.timezone
        rows = _RowIndex(window.messages)
        facts = Facts(session_id=session.session_id, position=placement.upto, request_time=placement.request_time,
                      timezone=timezone, model=model, bot_name=session.bot.name, is_group=session.is_group,
                      speaker_of=rows.speaker, raw_text_of=rows.text)
        base_profile = profile
        if projections is not None:
            projections.next_request()

        def build(timed: Callable[[ProjectedEvent], bool]) -> _Built:
            projection = project(placed, aliases=aliases, bot=session.bot, timezone=timezone, timed_events=timed,
                                 memo=projections)
            shaped, shape_warnings = shape(projection.messages, base_profile)
            arrangement = arrange(self.preset, system_text(system_parts), shaped, system_text(tail_parts) or None, facts)
            used = base_profile
            if arrangement.downgrade_mid_system:  # semi/strict post-processing: no system message after the first
                used = replace(base_profile, mid_conversation_system="none")
            return _Built(projection, shaped, shape_warnings, arrangement, used, render(arrangement.layout, used, runtime))

        # A time counts as shown only where it is on the wire (ADR §1's 1-minute rule): a downgraded state change
        # prints it in its host header, a system/developer one does not. Guess (``_all_timed_guess``); where the
        # renderer decided otherwise for some message, project again with what it really sent. Times never change
        # roles or positions, so the second rendering makes the same choices.
        guess = _all_timed_guess(base_profile, self.preset)
        projection, shaped, shape_warnings, arrangement, profile, rendered = build(lambda _event: guess)
        timed = events_timed_on_wire(projection, ((p.segment_id, p.text) for p in rendered.parts))
        if timed != {e.alias for m in projection.messages for e in m.events if guess}:
            projection, shaped, shape_warnings, arrangement, profile, rendered = build(lambda event: event.alias in timed)
        verdict = validate(profile.validator, rendered.body, model)

        reports = [
            SegmentReport(p.segment.id, p.segment.kind, p.segment.weight, len(p.text), counter.count(p.text), p.trimmed)
            for p in system_parts + tail_parts
        ]
        texts_by_segment: dict[str, list[str]] = {}
        for part in rendered.parts:
            texts_by_segment.setdefault(part.segment_id, []).append(part.text)
        produced_by_segment: dict[str, int] = {}
        for message in shaped:
            produced_by_segment[message.segment_id] = produced_by_segment.get(message.segment_id, 0) + 1
        for segment in placement.message_segments:
            texts = texts_by_segment.get(segment.id, [])
            produced = produced_by_segment.get(segment.id, 0)
            reports.append(SegmentReport(segment.id, segment.kind, segment.weight, sum(map(len, texts)),
                                         _tokens_of(counter, texts), 0, messages=produced))
        if self.preset is not None:  # preset entries (fixed texts, injections) get their own rows
            for segment_id, texts in texts_by_segment.items():
                if segment_id.startswith("preset:"):
                    produced = len({p.message_index for p in rendered.parts if p.segment_id == segment_id})
                    reports.append(SegmentReport(segment_id, "preset", 0, sum(map(len, texts)),
                                                 _tokens_of(counter, texts), 0, messages=produced))
        # The one definition (zhin_cli.wire.prompt_tokens, docs/tokens.md): our estimate of the billed input tokens,
        # the same figure prefix-diff, zhin serve's usage and zhin report economy report for this body.
        prompt_tokens = wire_prompt_tokens(rendered.body, profile.wire, counter)
        return AssembledRequest(
            session_id=session.session_id,
            turn=turn,
            provider=profile.name,
            model=model,
            encoding=counter.encoding,
            segments=reports,
            state_rendering=rendered.state_rendering,
            full_headers=projection.full_headers,
            short_headers=projection.short_headers,
            cache_breakpoints=[Breakpoint.of(b) for b in rendered.cache_breakpoints],
            request=rendered.body,
            prompt_tokens=prompt_tokens,
            verdict=verdict,
            warnings=projection.warnings + shape_warnings + arrangement.warnings + _macro_warnings(arrangement.unknown_macros)
            + rendered.warnings + list(verdict.warnings),  # what the template silently drops (validate/templates.py)
            window=WindowReport(len(window.messages), window.dropped,
                                window.summary.anchor_row_id if window.summary else None, len(window.carried_events)),
            profile=profile,
            sent_keys=list(placement.keys),
            parts=rendered.parts,
            system_texts=_system_texts(system_parts, arrangement.layout.leading if self.preset is not None else None),
            tail_text=next((p.text for p in rendered.parts if p.segment_id == TAIL_SEGMENT), None),
            projected=list(shaped),
        )

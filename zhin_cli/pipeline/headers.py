"""Stage 5 — project facts into headers at the LLM boundary (ADR 0041 §1, §4).

Walking the merged history in order, we remember per user_id the facts last shown to the model:

* first appearance in the window → full header;
* same facts → short header ``[id:mN;user_id:X;]``;
* facts changed and no event in the window said so → a synthesized ``[state change]`` (operator
  ``system``) right before the message, and the message itself short;
* a fact not shown before becomes known (data that names a member's role on some rows only) → a full header
  again: learning a fact is not a change, and no operator made it.

The decision depends only on what precedes a message, so the projected prefix never changes when history
grows. Stored event lines are re-checked against the fixed templates and re-rendered; a line that does
not conform is never sent (it is reported as a warning instead).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo

from zhin_cli.core.model import (
    NO_OPERATOR,
    Actor,
    AssistantMessage,
    BotFacts,
    EventMessage,
    FirstRowOf,
    Message,
    OrdinalAliases,
    RowPositions,
    Session,
    SummaryMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from zhin_cli.pipeline.format import (
    StateChange,
    changed_line,
    host_header,
    neutralize_body,
    parse_state_change,
    quote_value,
    render_header,
    render_user_id,
)
from zhin_cli.pipeline.merge import Placed
from zhin_cli.store.legacy import split_roles

MINUTE_MS = 60_000
# The only ``origin`` a header ever shows (ADR §1: "另一个 Bot 发言时全量头带 origin:peer_bot … 真人不带 origin 字段").
PEER_BOT = "peer_bot"
SUMMARY_PREFIX = "[Previous conversation summary]\n"
HeaderKind = Literal["full", "short"]


@dataclass(frozen=True)
class Aliases:
    """Session-wide monotonic aliases: ``m<n>`` for member/assistant messages, ``e<n>`` for events."""

    messages: Mapping[int, str]
    events: Mapping[int, str]
    by_platform_id: Mapping[str, int]

    @staticmethod
    def of(session: Session) -> Aliases:
        """From the outline alone (no message content is read), as views over it: a running count per position,
        not a dict of alias strings for the whole session (a request looks up its window's rows only)."""
        outline = session.outline
        positions = RowPositions(outline.row_ids)
        aliased = [role == "user" or (role == "assistant" and has_text)
                   for role, has_text in zip(outline.roles, outline.has_text, strict=True)]
        messages = OrdinalAliases("m", positions, outline.row_ids, aliased)
        events = OrdinalAliases("e", positions, outline.row_ids, [role == "event" for role in outline.roles])
        return Aliases(messages, events, FirstRowOf(outline.message_ids, outline.row_ids, aliased))


@dataclass(frozen=True)
class ProjectedEvent:
    alias: str
    timestamp: int
    time: str  # HH:mm, local
    line: str  # without the "[state change] " prefix
    synthesized: bool
    row_id: int | None


@dataclass
class Projected:
    """A message ready for a provider renderer; provider-neutral."""

    role: Literal["user", "assistant", "tool", "state", "summary"]
    segment_id: str
    body: str = ""
    header: str | None = None
    header_kind: HeaderKind | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    events: list[ProjectedEvent] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    timestamp: int = 0

    @property
    def text(self) -> str:
        """Header and body as one text: the header is the body's first line prefix."""
        if self.header and self.body:
            return f"{self.header} {self.body}"
        return self.header or self.body


@dataclass(frozen=True)
class Known:
    """Facts last shown to the model for one user_id."""

    name: str | None = None
    product_roles: tuple[str, ...] = ()
    platform_role: str | None = None
    card: str | None = None
    title: str | None = None
    muted_until: int | None = None
    origin: str | None = None

    @property
    def role(self) -> str | None:
        roles = list(self.product_roles) + ([self.platform_role] if self.platform_role else [])
        return ",".join(roles) if roles else None

    def merged(self, actor: Actor) -> Known:
        """Newer facts win; a field the newer facts do not know keeps its last shown value."""
        return Known(
            name=actor.display_name if actor.display_name is not None else self.name,
            product_roles=actor.roles if actor.roles_known else self.product_roles,
            platform_role=actor.platform_role if actor.platform_role is not None else self.platform_role,
            card=actor.card if actor.card is not None else self.card,
            title=actor.title if actor.title is not None else self.title,
            muted_until=actor.muted_until if actor.muted_until is not None else self.muted_until,
            origin=actor.origin if actor.origin is not None else self.origin,
        )


def mute_seconds(muted_until: int | None, timestamp: int) -> str | None:
    if muted_until is None:
        return None
    remaining = max(0, muted_until - timestamp)
    return str(-(-remaining // 1000))


def _shown_differs(new: str, old: str) -> bool:
    """A member-controlled value changed *as the model was shown it*: a stored event carries the value already
    cleaned and cut at 64 characters, so the full value on the member's next message is not a second change."""
    return quote_value(new) != quote_value(old)


def _effective_mute(muted_until: int | None, timestamp: int) -> int:
    """A mute that simply ran out is no mute."""
    return muted_until if muted_until is not None and muted_until > timestamp else 0


def _changes(prev: Known, new: Known, timestamp: int) -> list[tuple[str, str]]:
    """Facts the model was shown that now differ. A fact the model was never shown is not among them: data that
    names a member's role only on some rows (upstream's events-block lines carry none) makes it *learned*, which
    ``_learned`` turns into a full header, never into a change nobody made."""
    changes: list[tuple[str, str]] = []
    if new.name is not None and prev.name is not None and _shown_differs(new.name, prev.name):
        changes.append(("name", new.name))
    if new.role is not None and prev.role is not None and new.role != prev.role:
        changes.append(("role", new.role))
    if new.card is not None and prev.card is not None and _shown_differs(new.card, prev.card):
        changes.append(("group_nickname", new.card))
    if new.title is not None and prev.title is not None and _shown_differs(new.title, prev.title):
        changes.append(("group_title", new.title))
    if new.muted_until is not None and prev.muted_until is not None:
        now_new = _effective_mute(new.muted_until, timestamp)
        if now_new != _effective_mute(prev.muted_until, timestamp):
            changes.append(("mute_time", mute_seconds(new.muted_until, timestamp) or "0"))
    return changes


def _learned(prev: Known, new: Known, timestamp: int) -> bool:
    """A fact the model has not been shown for this member becomes known (a mute only while it lasts)."""
    return ((new.name is not None and prev.name is None) or (new.role is not None and prev.role is None)
            or (new.card is not None and prev.card is None) or (new.title is not None and prev.title is None)
            or (prev.muted_until is None and _effective_mute(new.muted_until, timestamp) > 0))


def _apply_event(known: dict[str, Known], change: StateChange, timestamp: int) -> None:
    if change.verb == "leave":
        known.pop(change.user_id, None)
        return
    if change.verb != "changed" or change.user_id not in known:
        return
    facts = known[change.user_id]
    value = change.value or ""
    if change.field == "role":
        product, platform = split_roles(value.split(","))
        facts = replace(
            facts,
            platform_role=platform if platform is not None else facts.platform_role,
            product_roles=product if product else facts.product_roles,
        )
    elif change.field == "name":
        facts = replace(facts, name=value)
    elif change.field == "group_nickname":
        facts = replace(facts, card=value)
    elif change.field == "group_title":
        facts = replace(facts, title=value)
    elif change.field == "mute_time":
        seconds = int(value) if value.isdigit() else 0
        facts = replace(facts, muted_until=timestamp + seconds * 1000 if seconds else 0)
    known[change.user_id] = facts


def bot_actor(message: AssistantMessage, bot: BotFacts) -> Actor | None:
    if message.assistant_actor is not None:
        return message.assistant_actor
    if bot.user_id is None:
        return None
    return Actor(subject_id=bot.user_id, display_name=bot.name, platform_role=bot.platform_role, card=bot.group_nickname)


@dataclass
class Projection:
    messages: list[Projected]
    warnings: list[str]

    @property
    def full_headers(self) -> int:
        return sum(1 for m in self.messages if m.header_kind == "full")

    @property
    def short_headers(self) -> int:
        return sum(1 for m in self.messages if m.header_kind == "short")


@lru_cache(maxsize=1 << 16)
def _local_day_and_time(timezone: str, timestamp: int) -> tuple[str, str]:
    """``YYYY-MM-DD`` and ``HH:MM`` of ``timestamp`` in ``timezone``: a replay asks for the same message's times on
    every request that projects it again (after a window move), and strftime was a tenth of a projection."""
    local = datetime.fromtimestamp(timestamp / 1000, tz=ZoneInfo(timezone))
    return local.strftime("%Y-%m-%d"), local.strftime("%H:%M")


class _Clock:
    """Decides ``date``/``time`` per header: time on full headers, or ≥ 1 minute after the last time shown;
    date on the window's first message and on the first message of a new local day."""

    def __init__(self, timezone: str) -> None:
        self.zone = ZoneInfo(timezone)
        self.timezone = timezone
        self.last_shown: int | None = None
        self.last_date: str | None = None

    def local(self, timestamp: int) -> datetime:
        return datetime.fromtimestamp(timestamp / 1000, tz=self.zone)

    def hhmm(self, timestamp: int) -> str:
        return _local_day_and_time(self.timezone, timestamp)[1]

    def stamp(self, timestamp: int, always: bool) -> tuple[str | None, str | None]:
        day = _local_day_and_time(self.timezone, timestamp)[0]
        date = day if day != self.last_date else None
        self.last_date = day
        show = always or date is not None or self.last_shown is None or timestamp - self.last_shown >= MINUTE_MS
        if show:
            self.last_shown = timestamp
        return date, (self.hhmm(timestamp) if show else None)

    def shown(self, timestamp: int) -> None:
        self.last_shown = timestamp

    def copy(self) -> _Clock:
        clock = _Clock.__new__(_Clock)
        clock.zone, clock.timezone = self.zone, self.timezone
        clock.last_shown, clock.last_date = self.last_shown, self.last_date
        return clock


def project(
    placed: list[Placed],
    *,
    aliases: Aliases,
    bot: BotFacts,
    timezone: str,
    always_full: bool = False,
    timed_events: Callable[[ProjectedEvent], bool] | None = None,
    memo: ProjectionMemo | None = None,
) -> Projection:
    """``always_full``: every member message gets the full header (the cost baseline of ``zhin report
    economy``, "the ADR's full header on every message"); changed facts then show in the header itself, so no
    ``[state change]`` is synthesized. Default off: the projection of ADR 0041.

    ``timed_events``: which state changes will print their time on the wire — a downgraded (``none``) line
    carries the host header with ``time:``, a ``system``/``developer`` line carries none. Only those count as
    "time shown" for the 1-minute rule; the others must not reset the clock (the model would never see that a
    minute passed). ``None``: every event is timed (the ``none`` path). The assembler knows the answer only
    after rendering and re-projects when its first guess was wrong (``events_timed_on_wire``).

    ``memo``: a replay's projections of the request before (``ProjectionMemo``), resumed where that is exact."""
    if memo is not None:
        return memo.projector(placed, aliases=aliases, bot=bot, timezone=timezone, always_full=always_full,
                              timed=timed_events).projection()
    projector = Projector(aliases=aliases, bot=bot, timezone=timezone, always_full=always_full, timed_events=timed_events)
    projector.feed(placed)
    return projector.projection()


class Projector:
    """``project`` as a walk that can be paused and resumed: the clock, the facts last shown per user, the output
    and the warnings so far. A replay's next request usually sends the same history plus a few new items; it
    resumes a ``fork`` of the previous request's projector instead of projecting the window again
    (``ProjectionMemo``).

    Resuming is exact because the projection of an item depends only on what precedes it — with three
    exceptions, each checked: a reply's ``reply_to`` is shown only if its target is in the window (anywhere in
    it, so a new row can change an earlier message: ``depends_on``); the time rule depends on which events are
    timed on the wire, which the caller decides per build (``agrees``); and consecutive state changes merge into
    one message, so the trailing one is replaced, never changed in place (an earlier projection keeps its own)."""

    def __init__(self, *, aliases: Aliases, bot: BotFacts, timezone: str, always_full: bool = False,
                 timed_events: Callable[[ProjectedEvent], bool] | None = None) -> None:
        self.aliases = aliases
        self.bot = bot
        self.timezone = timezone
        self.always_full = always_full
        self.timed_events = timed_events
        self.clock = _Clock(timezone)
        self.known: dict[str, Known] = {}
        self.out: list[Projected] = []
        self.warnings: list[str] = []
        self.window_rows: set[int] = set()  # rows fed so far (a reply shows its target only if it is among them)
        self.missed_targets: set[int] = set()  # reply targets looked up and not in the window when looked up
        self.timed_log: list[tuple[ProjectedEvent, bool]] = []  # every event fed, with the decision made for it

    def fork(self, timed_events: Callable[[ProjectedEvent], bool] | None = None) -> Projector:
        """A copy at the same point that feeds on independently (``timed_events``: the new build's choice; the
        caller checks ``agrees`` first). Copies are shallow: Projected and Known values are never changed."""
        copy = Projector.__new__(Projector)
        copy.aliases, copy.bot, copy.timezone, copy.always_full = self.aliases, self.bot, self.timezone, self.always_full
        copy.timed_events = timed_events
        copy.clock = self.clock.copy()
        copy.known = dict(self.known)
        copy.out = list(self.out)
        copy.warnings = list(self.warnings)
        copy.window_rows = set(self.window_rows)
        copy.missed_targets = set(self.missed_targets)
        copy.timed_log = list(self.timed_log)
        return copy

    def agrees(self, timed_events: Callable[[ProjectedEvent], bool] | None) -> bool:
        """Whether ``timed_events`` decides every event fed so far as it was decided (then the clock is the same)."""
        return all((timed_events is None or timed_events(event)) == decided for event, decided in self.timed_log)

    def depends_on(self, placed: Iterable[Placed]) -> bool:
        """Whether feeding ``placed`` would change what was already projected: a message fed earlier replies to
        one of its rows (its ``reply_to`` shows once the target is in the window)."""
        if not self.missed_targets:
            return False
        return any(not isinstance(p.item, SummaryMessage) and p.item.row_id in self.missed_targets for p in placed)

    def projection(self) -> Projection:
        """What was projected so far (lists copied: feeding on does not change it)."""
        return Projection(list(self.out), list(self.warnings))

    def _add_events(self, events: list[ProjectedEvent], segment_id: str, timestamp: int) -> None:
        # Consecutive state changes travel as one message (fewer role switches); the merged message is a new one,
        # so a projection taken before (and a fork's source) keeps the message it had.
        rows = [e.row_id for e in events if e.row_id is not None]
        out = self.out
        if out and out[-1].role == "state":
            last = out[-1]
            out[-1] = replace(last, events=[*last.events, *events], rows=[*last.rows, *rows])
        else:
            out.append(Projected("state", segment_id, events=list(events), timestamp=timestamp, rows=rows))
        for event in events:
            timed = self.timed_events is None or self.timed_events(event)
            self.timed_log.append((event, timed))
            if timed:
                self.clock.shown(event.timestamp)

    def feed(self, placed: list[Placed]) -> None:
        """Project ``placed`` after what was fed before (the caller checks ``depends_on`` when resuming)."""
        self.window_rows.update(p.item.row_id for p in placed if not isinstance(p.item, SummaryMessage))
        aliases, out = self.aliases, self.out
        for entry in placed:
            item = entry.item
            if isinstance(item, SummaryMessage):
                out.append(Projected("summary", entry.segment_id, body=SUMMARY_PREFIX + neutralize_body(item.summary),
                                     timestamp=item.timestamp))
            elif isinstance(item, EventMessage):
                change = parse_state_change(item.name, item.kind)
                if change is None:
                    self.warnings.append(f"row {item.row_id}: event line does not match the fixed templates; not sent: "
                                         f"{item.name[:80]!r}")
                    continue
                _apply_event(self.known, change, item.timestamp)
                alias = aliases.events.get(item.row_id, f"e?{item.row_id}")
                self._add_events([ProjectedEvent(alias, item.timestamp, self.clock.hhmm(item.timestamp), change.render(),
                                                 False, item.row_id)], entry.segment_id, item.timestamp)
            elif isinstance(item, ToolResultMessage):
                # tool output may echo member text (or a web page): it gets the same neutralization
                out.append(Projected("tool", entry.segment_id, body=neutralize_body(item.text), tool_call_id=item.tool_call_id,
                                     rows=[item.row_id], timestamp=item.timestamp))
            elif isinstance(item, (UserMessage, AssistantMessage)):
                out.extend(_member_message(item, entry.segment_id, self.known, self.clock, aliases, self.window_rows,
                                           self.bot, self._add_events, self.always_full, self.missed_targets))


def _begins_with(placed: list[Placed], earlier: list[Placed]) -> bool:
    """``placed[:len(earlier)] == earlier``, cheaply: a replay's items are mostly the same objects turn to turn."""
    return all(a is b or (a.segment_id == b.segment_id and (a.item is b.item or a.item == b.item))
               for a, b in zip(placed, earlier, strict=False))  # placed is the longer (the caller checks)


class ProjectionMemo:
    """The projectors of the last request rendered (one per build: the timed-events guess, and the re-projection
    when the guess was wrong), which a replay's next request resumes instead of projecting its window again.

    A projector is resumed only where that is exact (``Projector``): the new placed history begins with the one
    it was fed (same items, same segments, in the same order — so the same window start, carried events and
    summary), with the same aliases, bot and time zone; the new build times every event fed so far as it was
    timed (``Projector.agrees``); and no message fed so far replies to a new row (``Projector.depends_on``).
    Otherwise the window is projected from scratch, as ``project`` does."""

    def __init__(self) -> None:
        self.kept: list[tuple[list[Placed], Projector]] = []  # the previous request's builds
        self.fresh: list[tuple[list[Placed], Projector]] = []  # this request's builds
        self.resumed = 0  # builds that resumed a projector (for tests and benchmarks)
        self.projected = 0  # builds projected from scratch

    def next_request(self) -> None:
        """A new request begins: the builds of the one before it become the ones to resume."""
        if self.fresh:
            self.kept, self.fresh = self.fresh, []

    def projector(self, placed: list[Placed], *, aliases: Aliases, bot: BotFacts, timezone: str, always_full: bool,
                  timed: Callable[[ProjectedEvent], bool] | None) -> Projector:
        """A projector fed ``placed``: a previous build's, resumed, where that is exact; else a new one."""
        projector = None if always_full else self._resumed(placed, aliases, bot, timezone, timed)
        if projector is None:
            self.projected += 1
            projector = Projector(aliases=aliases, bot=bot, timezone=timezone, always_full=always_full, timed_events=timed)
            projector.feed(placed)
        else:
            self.resumed += 1
        self.fresh.append((placed, projector))
        return projector

    def _resumed(self, placed: list[Placed], aliases: Aliases, bot: BotFacts, timezone: str,
                 timed: Callable[[ProjectedEvent], bool] | None) -> Projector | None:
        for earlier, projector in self.kept:
            fed = len(earlier)
            if (fed <= len(placed) and not projector.always_full and projector.aliases is aliases and projector.bot == bot
                    and projector.timezone == timezone and _begins_with(placed, earlier)
                    and projector.agrees(timed) and not projector.depends_on(placed[fed:])):
                resumed = projector.fork(timed)
                resumed.feed(placed[fed:])
                return resumed
        return None


def _member_message(
    item: UserMessage | AssistantMessage,
    segment_id: str,
    known: dict[str, Known],
    clock: _Clock,
    aliases: Aliases,
    window_rows: set[int] | Mapping[int, Message],
    bot: BotFacts,
    add_events: Callable[[list[ProjectedEvent], str, int], None],
    always_full: bool = False,
    missed_targets: set[int] | None = None,
) -> list[Projected]:
    is_user = isinstance(item, UserMessage)
    actor = item.actor if isinstance(item, UserMessage) else bot_actor(item, bot)
    alias = aliases.messages.get(item.row_id)
    role: Literal["user", "assistant"] = "user" if is_user else "assistant"
    tool_calls = item.tool_calls if isinstance(item, AssistantMessage) else []
    if alias is None:  # an assistant message with tool calls only: no visible text, no header
        return [Projected(role, segment_id, body=item.text, tool_calls=tool_calls, rows=[item.row_id], timestamp=item.timestamp)]
    fields: dict[str, str | None] = {"id": alias}
    kind: HeaderKind = "short"
    if actor is not None:
        fields["user_id"] = render_user_id(actor.subject_id)
        prev = known.get(actor.subject_id)
        current = (prev or Known()).merged(actor)
        if prev is None or always_full or _learned(prev, current, item.timestamp):
            kind = "full"
            fields.update(
                name=current.name,
                role=current.role,
                group_nickname=current.card,
                group_title=current.title,
                mute_time=mute_seconds(current.muted_until, item.timestamp),
                origin=PEER_BOT if current.origin == PEER_BOT else None,  # a human never carries origin
            )
        else:
            changes = _changes(prev, current, item.timestamp)
            if changes:
                hhmm = clock.hhmm(item.timestamp)
                synth = [
                    ProjectedEvent(f"s{alias[1:]}", item.timestamp, hhmm,
                                   changed_line(NO_OPERATOR, actor.subject_id, f, v).render(), True, None)
                    for f, v in changes
                ]
                add_events(synth, "history.state", item.timestamp)
        known[actor.subject_id] = current
    if isinstance(item, UserMessage) and item.reply_to:
        target = aliases.by_platform_id.get(item.reply_to)
        if target is not None and target != item.row_id:
            if target in window_rows:
                fields["reply_to"] = aliases.messages.get(target)
            elif missed_targets is not None:  # shown once the target joins the window (Projector.depends_on)
                missed_targets.add(target)
    date, time = clock.stamp(item.timestamp, always=kind == "full")
    fields["date"], fields["time"] = date, time
    body = neutralize_body(item.text)
    return [Projected(role, segment_id, body=body, header=render_header(fields), header_kind=kind,
                      tool_calls=tool_calls, rows=[item.row_id], timestamp=item.timestamp)]


def events_timed_on_wire(projection: Projection, wire_texts: Iterable[tuple[str, str]]) -> set[str]:
    """Aliases of the state changes whose time the rendered request shows: their host header
    ``[id:<alias>;user_id:system;time:HH:mm;]`` is on the wire, in a text of their own segment
    (``wire_texts``: (segment id, text) pieces as rendered). Only the host writes that header — member text
    cannot start a line with it, and member pieces belong to other segments."""
    states = [message for message in projection.messages if message.role == "state"]
    if not states:
        return set()
    segments = {message.segment_id for message in states}
    texts: dict[str, list[str]] = {}
    for segment_id, text in wire_texts:
        if segment_id in segments:
            texts.setdefault(segment_id, []).append(text)
    rendered = {segment_id: "\n".join(pieces) for segment_id, pieces in texts.items()}  # once per segment
    timed: set[str] = set()
    for message in states:
        shown = rendered.get(message.segment_id, "")
        timed.update(e.alias for e in message.events if host_header(e.alias, e.time) in shown)
    return timed

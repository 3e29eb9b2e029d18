"""``zhin trace`` as a library call: replay a session and return the requests as data.

Two ways in: :func:`trace` returns every chosen request at once (``--json``, the tables), and :func:`open_trace`
hands them out one at a time as the replay makes them (``--jsonl`` streams each as it is made; the compact view of
``--all`` keeps one small :class:`TurnRow` per turn instead of the requests, so a long session's rows cost the
rows, not the requests). :func:`turn_rows` is that compact view's data: per turn the prompt tokens, the part the
provider's prompt cache would read — counted by prefix-diff's own cache model (``cache.replay.cached_tokens``
over the same requests in the same order), so both commands give one number — the three largest segments, the
state rendering mode and the validator's verdict.

Every figure says what it is. The requests are zhin's assembly of the stored rows under a named *layout*
(``adr-0041``, or the preset's name when a preset skeleton is used; ``layout_name``), never the body the bot sent: a
bot's own system prompt and tool schemas are not in its database. What the bot's provider reported for the
request that produced a turn's reply — the usage stored on that assistant row — is shown beside zhin's figures
(``StoredUsage``: ``stats cache``'s own reading, ``cache.usage.usage_record``), under its own key, never mixed
into zhin's ``prompt_tokens``; a row without usage shows none, not a zero.

Each request's input cost, when its provider has prices (``cache.cost.Pricing``: ``Cost.of`` over the same cache
outcomes, so ``trace`` and ``prefix-diff`` bill a request alike): the requests shown are fed to one cache
simulator in order, so with ``--all`` a request is billed *warm* (after the ones before it, as prefix-diff bills
it) and a single request *cold* (the request alone): docs/figures.md names the two, and the JSON says which
(``cache_model``) beside each cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from zhin_cli.cache import CacheOutcome, PrefixCache
from zhin_cli.cache.captures import CaptureDiff, CaptureRequest, diff_capture_path
from zhin_cli.cache.cost import Cost, Pricing, cost_dict
from zhin_cli.cache.diff import PairDiff
from zhin_cli.cache.replay import CACHE_MODEL, COLD, WARM, cache_outcome
from zhin_cli.cache.serialize import serialize
from zhin_cli.cache.usage import NormalizedUsage, usage_record
from zhin_cli.core.errors import UsageError
from zhin_cli.core.model import AssistantMessage
from zhin_cli.pipeline.assemble import AssembledRequest, TurnPlan
from zhin_cli.pipeline.config import load_config
from zhin_cli.pipeline.context import RunContext
from zhin_cli.pipeline.preset.model import Preset
from zhin_cli.pipeline.provenance import ADR_LAYOUT, layout_name, layout_phrase
from zhin_cli.store import database_read

TRACE_VERSION = 1
TOP_SEGMENTS = 3  # segments a compact row names


@dataclass(frozen=True)
class StoredUsage:
    """The usage the bot stored with a turn's reply: what its provider reported for the request that produced it,
    as ``stats cache`` reads it (a field not reported is None, never 0)."""

    row_id: int  # the stored assistant row
    kind: str  # the usage shape (``usage.USAGE_SHAPES``)
    provider: str
    model: str
    usage: NormalizedUsage

    @property
    def prompt_tokens(self) -> int | None:
        return self.usage.total_prompt

    @property
    def cached_tokens(self) -> int | None:
        return self.usage.cache_read

    def as_dict(self) -> dict[str, object]:
        return {"row_id": self.row_id, "kind": self.kind, "provider": self.provider, "model": self.model,
                **self.usage.as_dict()}

    def sentence(self, layout: str, zhin_prompt_tokens: int) -> str:
        """"the bot sent 2,583 prompt tokens, 2,432 cached (stored usage, row 12); ADR 0041 would send 685 of this
        history"."""
        sent = "an unreported number of" if self.prompt_tokens is None else f"{self.prompt_tokens:,}"
        cached = "cached tokens not reported" if self.cached_tokens is None else f"{self.cached_tokens:,} cached"
        written = f", {self.usage.cache_write:,} written to the cache" if self.usage.cache_write else ""
        return (f"the bot sent {sent} prompt tokens, {cached}{written} (its stored usage, row {self.row_id}); "
                f"{layout_phrase(layout)} would send {zhin_prompt_tokens:,} of this history")


def stored_usage(plan: TurnPlan, turn: int) -> StoredUsage | None:
    """The usage stored with turn ``turn``'s reply (None: none stored, or none that says anything)."""
    point = plan.points[plan.point_index(turn)]
    message = plan.session.messages[point.position]
    if point.greeting or not isinstance(message, AssistantMessage):
        return None
    record = usage_record(plan.session.session_id, message)
    usage = record.usage
    if record.kind is None or usage is None or all(value is None for value in usage.as_dict().values()):
        return None
    return StoredUsage(record.row_id, record.kind, record.provider, record.model, usage)


@dataclass
class TraceResult:
    session_id: str
    source: str
    turns: int
    requests: list[AssembledRequest]
    greeting_turn: int | None = None  # the greeting's turn: it has no request (``assemble.greeting_position``)
    notes: list[str] = field(default_factory=list)
    # what the run read, for the header line (``_cli.print_sources``); not part of the JSON document, which
    # describes the session and its requests and is the same whichever database served them
    config_path: Path | None = None  # the zhin.yaml the pipeline loaded (None: built-in defaults)
    db: str | None = None  # the database the session came from (None: a file)
    costs: list[Cost | None] = field(default_factory=list)  # per request (``request_costs``); None: no price
    layout: str = ADR_LAYOUT  # what assembled the requests (``layout_name``)
    stored: list[StoredUsage | None] = field(default_factory=list)  # per request: the bot's stored usage
    timezone: str = "UTC"  # the zone of the headers' times, and where it came from (``Pipeline.timezone_source``)
    timezone_source: str = "default"
    cache_model: str = COLD  # the cache its requests' cached tokens and costs meet: ``cold`` alone, ``warm`` (--all)

    @property
    def requests_made(self) -> int:
        """The requests the bot made: every turn but the greeting's (it opens the chat without one)."""
        return self.turns - (self.greeting_turn is not None)

    def heading_count(self) -> str:
        """The heading's count: requests, never members' turns ("16 requests"; "5 requests and the greeting")."""
        made = f"{self.requests_made:,} request{'s' if self.requests_made != 1 else ''}"
        return f"{made} and the greeting" if self.greeting_turn is not None else made

    def request_dict(self, index: int) -> dict[str, object]:
        """One request as ``--json`` lists it (``request_record``)."""
        cost = self.costs[index] if index < len(self.costs) else None
        stored = self.stored[index] if index < len(self.stored) else None
        return request_record(self.requests[index], self.layout, stored, cost, self.cache_model)

    def as_dict(self) -> dict[str, object]:
        return {
            "version": TRACE_VERSION,
            "session_id": self.session_id,
            "source": self.source,
            "turns": self.turns,
            "requests_made": self.requests_made,
            CACHE_MODEL: self.cache_model,
            "greeting_turn": self.greeting_turn,
            "layout": self.layout,
            "timezone": self.timezone,
            "timezone_source": self.timezone_source,
            "notes": self.notes,
            "requests": [self.request_dict(i) for i in range(len(self.requests))],
        }


def request_record(request: AssembledRequest, layout: str, stored: StoredUsage | None,
                   cost: Cost | None = None, cache_model: str = COLD) -> dict[str, object]:
    """One request as ``--json`` lists it and ``--jsonl`` writes it: the layout that assembled it, the usage the
    bot stored for it (``stored_usage``; null when none is stored), its ``cost`` when its provider has prices, and
    the cache that cost meets (``cache_model``: ``cold`` or ``warm``, docs/figures.md)."""
    return {**request.as_dict(), "layout": layout, "stored_usage": stored.as_dict() if stored is not None else None,
            **({"cost": cost_dict(cost)} if cost is not None else {}), CACHE_MODEL: cache_model}


CARD_GREETING_NOTE = ("the session stored no greeting: the preset's card greeting (option greeting) opens the history "
                      "of every request, as SillyTavern's chat has it; it is not a stored message and has no turn")


ZONE_SOURCE_WORDS = {"--timezone": "--timezone", "zhin.yaml": "zhin.yaml", "session": "the session's stored zone",
                     "data": "the data: upstream's [Turn context]", "TZ": "the TZ environment variable",
                     "default": "no zone known: UTC"}


def timezone_note(zone: str, source: str) -> str:
    """The heading's line on the headers' times: the zone and which source named it."""
    return f"times in {zone} (from {ZONE_SOURCE_WORDS.get(source, source)})"


WARNING = "warning: "  # a session note about a row the reader could not read; any other note is information
# The session notes that say what the reader did, not what it could not read (store.upstream.recall_note,
# store.payload.interrupted_note): a fragment each text always holds.
INFORMATION_MARKS = (" was recalled by ", "(an interrupted turn)")


def session_note(note: str) -> str:
    """A note the session's reader left, as trace lists it: ``warning: …`` for a row it could not read, the note
    as it is for information (a recalled message left out, an interrupted tool call repaired)."""
    return note if any(mark in note for mark in INFORMATION_MARKS) else WARNING + note


def greeting_note(turn: int) -> str:
    return (f"turn {turn} is the greeting: it opens the chat with no member input before it (as SillyTavern writes "
            "the card's first_mes), so no request was made for it; it stays in the history of later requests")


@dataclass
class TraceRun:
    """An opened trace: what it is about (``result``, without requests yet) and the requests, made on demand."""

    result: TraceResult
    requests: Callable[[], Iterator[AssembledRequest]]
    pricing: Pricing = field(default_factory=lambda: Pricing(None))
    stored_usage: Callable[[int], StoredUsage | None] = lambda turn: None  # turn → the bot's stored usage

    def costed(self) -> Iterator[tuple[AssembledRequest, CacheOutcome, Cost | None]]:
        """The requests with their cache outcome and cost (the price notes gather in ``pricing.notes``)."""
        yield from request_costs(self.requests(), self.pricing)


def request_costs(requests: Iterable[AssembledRequest], pricing: Pricing
                  ) -> Iterator[tuple[AssembledRequest, CacheOutcome, Cost | None]]:
    """Each request with what one cache simulator fed them in order reads, writes and leaves uncached of it
    (prefix-diff's count) and its cost at ``pricing`` (None: no price for its provider)."""
    cache = PrefixCache()
    for request in requests:
        outcome = cache_outcome(cache, request, serialize(request))
        yield request, outcome, pricing.cost(request, outcome)


@contextmanager
def open_trace(
    ref: str,
    *,
    db: str | None = None,
    config_path: Path | None = None,
    provider: str | None = None,
    model: str | None = None,
    timezone: str | None = None,
    preset: Preset | Path | None = None,
    turn: int | None = None,
    all_turns: bool = False,
    cwd: Path | None = None,
    after_load: Callable[[], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    prices_file: Path | None = None,
    context: RunContext | None = None,
) -> Iterator[TraceRun]:
    """Load ``ref`` and open its pipeline; ``run.requests()`` then replays the chosen turns one at a time (see
    :func:`trace` for the choice), ``run.costed()`` with their costs (``prices_file``: ``--prices FILE`` over the
    config's table). The pipeline stays open until the ``with`` block ends. ``context``: the command's run context
    (its config, plugins, prices and sessions are used, not read again; it replaces ``db``, ``config_path``,
    ``cwd`` and ``prices_file``)."""
    run_context = context or RunContext.for_config(load_config(config_path, cwd=cwd or Path.cwd()), cwd=cwd or Path.cwd(),
                                                   db=db, prices_file=prices_file)
    config, cwd, db = run_context.config, run_context.cwd, run_context.db
    pricing = Pricing(run_context.prices)
    session = run_context.session(ref)
    if after_load is not None:
        after_load()
    with run_context.pipeline(provider=provider, model=model, timezone=timezone, preset=preset) as pipeline:
        plan = pipeline.turns(session)
        total = plan.total
        if total == 0:
            raise UsageError(f"session {session.session_id!r} has no assistant message, so no request to replay")
        # A turn without a request (the greeting) is a note, never an error — also when it is the last turn, so
        # the default (last) is always ``--turn -1``: a session holding only its greeting shows the note, exit 0.
        greeting = plan.greeting_turn
        wanted: int | None = None
        if not all_turns:
            wanted = total if turn is None else (turn if turn > 0 else total + 1 + turn)
            if not 1 <= wanted <= total:
                greeting_part = f" ({greeting}: the greeting, no request)" if greeting is not None else ""
                raise UsageError(f"--turn {turn} is out of range: this session's requests are 1..{total}{greeting_part}")
        notes = [greeting_note(greeting)] if greeting is not None and wanted in (None, greeting) else []
        notes.extend(session_note(note) for note in session.notes)  # rows the reader could not read, named
        if plan.card_greeting:
            notes.append(CARD_GREETING_NOTE)
        result = TraceResult(session.session_id, session.source, total, [], greeting, notes,
                             config_path=config.path, db=database_read([ref], db=db, cwd=cwd),
                             layout=layout_name(pipeline.preset), timezone=pipeline.timezone(session),
                             timezone_source=pipeline.timezone_source(session),
                             cache_model=WARM if wanted is None else COLD)

        def requests() -> Iterator[AssembledRequest]:
            if wanted is None:
                for request in pipeline.replay(session):
                    if progress is not None:
                        progress(request.turn, total)
                    yield request
            elif wanted != greeting:
                yield pipeline.request(session, turn=wanted)
                if progress is not None:
                    progress(wanted, wanted)

        yield TraceRun(result, requests, pricing, lambda number: stored_usage(plan, number))


def trace(
    ref: str,
    *,
    db: str | None = None,
    config_path: Path | None = None,
    provider: str | None = None,
    model: str | None = None,
    timezone: str | None = None,
    preset: Preset | Path | None = None,
    turn: int | None = None,
    all_turns: bool = False,
    cwd: Path | None = None,
    after_load: Callable[[], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    prices_file: Path | None = None,
    context: RunContext | None = None,
) -> TraceResult:
    """Replay ``ref`` (a .jsonl path, or a session id/key in the database) and return the chosen requests.

    Default: the last turn (``turn=-1``). Turn numbers are 1-based; negative numbers count from the end. The
    greeting's turn has no request: choosing it gives no request and a note (``greeting_note``). One turn costs
    its window (``Pipeline.request``), not the turns before it; ``--all`` replays incrementally. ``preset``
    replaces the config's ``preset:`` file (keeping its options).
    """
    with open_trace(ref, db=db, config_path=config_path, provider=provider, model=model, timezone=timezone,
                    preset=preset, turn=turn, all_turns=all_turns, cwd=cwd, after_load=after_load,
                    progress=progress, prices_file=prices_file, context=context) as run:
        for request, _, cost in run.costed():
            run.result.requests.append(request)
            run.result.costs.append(cost)
            run.result.stored.append(run.stored_usage(request.turn))
        run.result.notes.extend(run.pricing.notes)
    return run.result


# --- the compact view: one row per turn ------------------------------------------------------------


@dataclass(frozen=True)
class TurnRow:
    """One turn of ``trace --all``'s compact view."""

    turn: int
    prompt_tokens: int
    cached_tokens: int  # what the provider's prompt cache would read (prefix-diff's number); the first turn: 0
    top_segments: tuple[tuple[str, int], ...]  # (segment id, tokens), the largest first
    state_rendering: str
    accepted: bool
    verdict: str  # "accepted", or the status and the validator's message
    warnings: tuple[str, ...] = ()  # the request's warnings (what the provider's template loses, …)
    cost: Cost | None = None  # the request's input cost (None: no price for its provider)
    stored: StoredUsage | None = None  # what the bot's provider reported for this request (None: nothing stored)

    @property
    def new_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


def turn_row(request: AssembledRequest, cached: int, cost: Cost | None = None,
             stored: StoredUsage | None = None) -> TurnRow:
    """``request`` as a compact row, given the tokens the cache would read of it (its cost, the bot's stored usage)."""
    # ties keep the request's segment order, so the same request always names the same three
    top = sorted(request.segments, key=lambda s: -s.tokens)[:TOP_SEGMENTS]
    verdict = request.verdict
    return TurnRow(request.turn, request.prompt_tokens, cached, tuple((s.id, s.tokens) for s in top if s.tokens),
                   request.state_rendering, verdict.ok,
                   "accepted" if verdict.ok else f"rejected {verdict.status}: {verdict.message}".rstrip(": "),
                   tuple(request.warnings), cost, stored)


def turn_rows(requests: Iterable[AssembledRequest], pricing: Pricing | None = None) -> Iterator[TurnRow]:
    """A replay's requests (in order, from its first turn) as compact rows, the cached tokens counted as
    prefix-diff counts them: one cache simulator fed every request in order (``request_costs``); costs at
    ``pricing`` (none without it)."""
    for request, outcome, cost in request_costs(requests, pricing or Pricing(None)):
        yield turn_row(request, outcome.read, cost)


# --- captured bodies (a capture folder or a JSONL of bodies): the bot's own requests, not zhin's assembly -------


@dataclass(frozen=True)
class CaptureRow:
    """One captured request as ``trace`` shows it: the simulator's figures, the provider's real ones where
    recorded, and what broke against the conversation's previous request (None: its first)."""

    request: CaptureRequest
    pair: PairDiff | None

    def as_dict(self) -> dict[str, object]:
        data = self.request.as_dict()
        data["cause"] = self.pair.cause if self.pair is not None else None
        data["detail"] = self.pair.detail if self.pair is not None else ""
        return data


def trace_captures(path: Path, *, config_path: Path | None = None, provider: str | None = None,
                   prices_file: Path | None = None, cwd: Path | None = None,
                   context: RunContext | None = None) -> CaptureDiff:
    """A capture folder or a JSONL of bodies, diffed as ``prefix-diff`` does (one cache across conversations)."""
    if context is not None:
        return diff_capture_path(path, provider=provider, prices=context.prices)
    config = load_config(config_path, cwd=cwd or Path.cwd())
    return diff_capture_path(path, provider=provider, prices=config.price_table(prices_file))


def capture_rows(diff: CaptureDiff) -> list[CaptureRow]:
    """Every request in capture order, each with the pair that ends at it."""
    pairs = {(s.session_id, p.to_turn): p for s in diff.sessions for p in s.pairs}
    return [CaptureRow(r, pairs.get((r.conversation, r.number))) for r in diff.requests]


def capture_trace_dict(diff: CaptureDiff) -> dict[str, object]:
    """``trace --json`` of captured bodies: the requests in capture order, each naming its conversation."""
    return {"version": TRACE_VERSION, "source": diff.source, "captured": True,
            "conversations": [{"session_id": s.session_id, "provider": s.provider, "model": s.model,
                               "captures": [r.number for r in diff.requests if r.conversation == s.session_id]}
                              for s in diff.sessions],
            "notes": diff.notes, "disagreements": [r.number for r in diff.disagreements],
            "requests": [row.as_dict() for row in capture_rows(diff)]}

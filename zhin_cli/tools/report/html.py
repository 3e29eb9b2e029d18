"""``zhin report html`` as a library: a picture of each session in one self-contained HTML file.

Why one file: it must open from disk, from a CI artifact and offline — no server, no network, no external
script, font or stylesheet (a Content-Security-Policy meta forbids every fetch). Why these numbers: the page is a
view of the same library data as the text commands, never a new computation — the requests come from
``Pipeline.replay`` (what ``trace --json`` prints), the cached tokens per turn and the causes of breaks from
``cache.diff.TurnDiffer`` over those requests (the one cache model, ``zhin_cli.cache``: what
``prefix-diff --json`` prints), and the economy summary from ``economy.session_economy`` (``report economy
--json``). Tests compare the page's ``data-*`` hooks with those commands' JSON.

Why it stays fast on 2,000 turns: every turn's section, chart bar and segment bar are written into the HTML (the
hooks must exist for every turn), but the heavy parts — the wire messages and the diff against the previous turn
— are drawn by the page's script only when a turn is opened, from one embedded JSON document in which each
distinct wire message (chunk) is stored once and each turn lists the chunks it sent (as "the first k chunks of the
previous turn, then these"). Sections off screen are not laid out (``content-visibility``).
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from zhin_cli.cache.diff import DEFAULT_FAIL_ON, BodyRequest, PairDiff, SessionSummary, TurnDiffer
from zhin_cli.cache.serialize import Serialized, serialize
from zhin_cli.core.errors import UsageError
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.model import Session
from zhin_cli.core.outputfiles import escape_surrogates
from zhin_cli.core.redact import redact_text
from zhin_cli.core.tokens import DEFAULT_ENCODING
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.context import RunContext
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.preset.model import Preset
from zhin_cli.pipeline.prices import PriceTable
from zhin_cli.pipeline.validate.verdict import Verdict

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

    from _typeshed import WriteableBuffer

    from zhin_cli.tools.report.window import WindowDoc

HTML_REPORT_VERSION = 1
# The page's policy: nothing fetched, no plugin, no <base>, no form target; its one inline script and one inline
# stylesheet allowed by hash (the file: a meta tag has no per-response nonce) or by nonce (``zhin view``'s header).
# Style *attributes* (bar positions, widths) cannot carry a nonce or a hash short of one per value, so only they
# keep 'unsafe-inline' (style-src-attr): CSS in an attribute runs no script and, with default-src 'none', fetches
# nothing. frame-ancestors is ignored in a meta tag (Chromium logs an error), so only the served header has it.
CSP_BASE = "default-src 'none'; img-src data:; object-src 'none'; base-uri 'none'; form-action 'none'"
CSP_SERVED_ONLY = "frame-ancestors 'none'"
# Segment colours by kind (first seen first): colour-blind-safe qualitative colours (Okabe–Ito, Tol, Tableau) with
# the greens, oranges, reds and blues left out — the chart's cached / new bars and its marks use those
# (CHART_COLOURS), and a kind must never read as "new" or "cached" (issue 31, finding 6).
PALETTE = ("#56b4e9", "#cc79a7", "#332288", "#f0e442", "#999999", "#8c564b", "#17becf", "#7f3c8d",
           "#e377c2", "#bcbd22", "#7f7f7f", "#000000")
# report.css's chart colours: cached, new, unexpected break, window shift, compaction (kept in step by a test)
CHART_COLOURS = ("#2b8a3e", "#f08c00", "#c92a2a", "#1c7ed6", "#7048e8")


# --- data ------------------------------------------------------------------------------------------------------


@dataclass
class ChunkStore:
    """Each distinct wire chunk once: ``[label, JSON text]`` (label ``tools``/``system``/``message``)."""

    chunks: list[list[str]] = field(default_factory=list)
    index: dict[tuple[str, bytes], int] = field(default_factory=dict)

    def add(self, label: str, data: bytes) -> int:
        key = (label, data)
        found = self.index.get(key)
        if found is None:
            found = self.index[key] = len(self.chunks)
            self.chunks.append([label, data.decode("utf-8", errors="replace")])
        return found


@dataclass
class Divergence:
    """Where a turn's wire first differs from the previous turn's: ``position`` in the turn's chunk list
    (``len(chunks)``: past the end — the previous turn's chunks all came first), ``char`` the UTF-16 offset
    inside that chunk's JSON text (what JavaScript indexes), ``between`` when the byte fell in JSON glue."""

    position: int
    char: int
    between: bool

    def as_dict(self) -> dict[str, int | bool]:
        return {"pos": self.position, "char": self.char, "between": self.between}


@dataclass(frozen=True)
class SegmentBar:
    """One part of a request's segment bar: a zhin segment, or a captured body's region (tools, system, messages)."""

    id: str
    kind: str
    tokens: int
    trimmed: int = 0  # characters the budget cut (text segments)


@dataclass
class TurnView:
    """One request as the page shows it: trace's fields and prefix-diff's figures for it."""

    turn: int
    prompt_tokens: int
    cached_tokens: int
    segments: list[SegmentBar]
    state_rendering: str
    full_headers: int
    short_headers: int
    breakpoints: list[JSONObject]
    verdict: Verdict | None  # None: not validated (a captured body, the bot's own request as sent)
    warnings: list[str]
    window: JSONObject
    chunks: list[int]  # chunk ids in wire order (tools, system, messages)
    groups: list[int]  # per chunk: the segment group (ids joined by "+") that made it
    tail_position: int | None  # the chunk carrying the runtime tail
    tail_text: str | None
    cause: str = ""  # against the previous turn ("" for the first)
    detail: str = ""
    unexpected: bool = False
    common_prefix_bytes: int = 0
    common_prefix_tokens: int = 0
    divergence: Divergence | None = None
    before: str = ""
    after: str = ""
    diverging_segment: str | None = None
    uncached_reason: str = ""  # why nothing is cached although a prefix is shared (prefix-diff's sentence)

    @property
    def new_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def marker(self) -> str | None:
        """What the chart marks on this turn's bar: an unexpected break, a compaction or a window shift."""
        if self.unexpected:
            return "unexpected"
        if self.cause == "window_shift":
            return "compaction" if self.detail == "compaction" else "window_shift"
        return None

    def as_json(self, previous: TurnView | None, store: ChunkStore) -> dict[str, object]:
        """What the page's script needs to draw this turn (the DOM has the rest): chunk lists as "the previous
        turn's first ``keep``, then these"; the tail text and breakpoints as ids in the chunk store (they repeat)."""
        keep = 0
        if previous is not None:
            limit = min(len(previous.chunks), len(self.chunks))
            while keep < limit and previous.chunks[keep] == self.chunks[keep] and previous.groups[keep] == self.groups[keep]:
                keep += 1
        data: dict[str, object] = {  # the page's script data, only passed to json.dumps
            "turn": self.turn, "keep": keep, "chunks": self.chunks[keep:], "groups": self.groups[keep:],
            "breakpoints": store.add("breakpoints", json.dumps(self.breakpoints, separators=(",", ":")).encode()),
            "tail": self.tail_position,
            "tail_text": store.add("tail", self.tail_text.encode("utf-8", "surrogatepass")) if self.tail_text else None,
            "cause": self.cause, "detail": self.detail,
            "common": {"bytes": self.common_prefix_bytes, "tokens": self.common_prefix_tokens},
            "segment": self.diverging_segment,
        }
        if self.divergence is not None:
            data["div"] = self.divergence.as_dict()
        return data


@dataclass
class SessionPage:
    """Everything the page shows of one session (plain data: a worker process returns it whole)."""

    session_id: str
    source: str
    provider: str
    model: str
    total_turns: int
    greeting_turn: int | None
    turns: list[TurnView]
    store: ChunkStore
    groups: list[str]
    economy: dict[str, Any] | None = None
    economy_note: str = ""
    unit: str = "request"  # what a request is called: ``capture`` for captured bodies (their numbers are capture numbers)
    # prefix-diff --json's summary of the same requests (the warm figures: cached share, cost as replayed)
    summary: SessionSummary | None = None

    def causes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for turn in self.turns[1:]:
            counts[turn.cause] = counts.get(turn.cause, 0) + 1
        return counts

    def cached_share(self) -> float:
        """prefix-diff's cached share (zhin_cli.cache.cached_share: the turns after the first)."""
        from zhin_cli.cache import cached_share

        return cached_share((t.prompt_tokens, t.cached_tokens) for t in self.turns[1:])

    def as_json(self) -> dict[str, object]:
        turns = [turn.as_json(self.turns[i - 1] if i else None, self.store) for i, turn in enumerate(self.turns)]
        return {"session_id": self.session_id, "chunks": self.store.chunks, "groups": self.groups, "turns": turns}


@dataclass
class HtmlReport:
    sessions: list[SessionPage]
    # what the run read, for the header line (``_cli.print_sources``); not shown in the page
    config_path: Path | None = None
    db: str | None = None
    window: WindowDoc | None = None  # report window --json over the same sessions (--window), else None
    window_note: str = ""  # why --window has no chart

    def html(self) -> str:
        return render(self)


# --- collecting ----------------------------------------------------------------------------------------------


def _utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le", errors="surrogatepass")) // 2


def divergence_of(serialized: Serialized, offset: int) -> Divergence:
    """The first differing byte ``offset`` of ``serialized`` (``PairDiff.common_prefix_bytes``) as a position in
    its non-glue chunk list and a UTF-16 offset inside that chunk's text."""
    start = 0
    position = 0
    for chunk in serialized.chunks:
        end = start + len(chunk.data)
        if chunk.label == "glue":
            if start <= offset < end:
                return Divergence(position, 0, True)
        else:
            if start <= offset < end:
                head = chunk.data[: offset - start].decode("utf-8", errors="ignore")
                return Divergence(position, _utf16_length(head), False)
            position += 1
        start = end
    return Divergence(position, 0, True)


class _Collector:
    """Turns a session's requests, in order, into ``TurnView``s; holds only the previous request."""

    def __init__(self, session_id: str, fail_on: Iterable[str], prices: PriceTable | None = None) -> None:
        self.differ = TurnDiffer(session_id, prices=prices)
        self.fail_on = frozenset(fail_on)
        self.store = ChunkStore()
        self.group_ids: dict[str, int] = {}
        self.turns: list[TurnView] = []

    def _group(self, ids: Sequence[str]) -> int:
        name = "+".join(dict.fromkeys(ids))
        return self.group_ids.setdefault(name, len(self.group_ids))

    def add(self, request: AssembledRequest) -> TurnView:
        serialized = serialize(request)
        pair: PairDiff | None = self.differ.add(request, serialized)
        by_message: dict[int, list[str]] = {}
        for part in request.parts:
            by_message.setdefault(part.message_index, []).append(part.segment_id)
        chunks: list[int] = []
        groups: list[int] = []
        tail_position: int | None = None
        for chunk in serialized.chunks:
            if chunk.label == "glue":
                continue
            if chunk.label == "message":
                ids = by_message.get(chunk.message_index, [])
                if "tail" in ids:
                    tail_position = len(chunks)
            else:
                ids = by_message.get(-1, []) if chunk.label == "system" else ["tools"]
            chunks.append(self.store.add(chunk.label, chunk.data))
            groups.append(self._group(ids))
        view = TurnView(
            turn=request.turn, prompt_tokens=request.prompt_tokens,
            # the first request meets an empty cache (TurnDiffer's, which read it): nothing is cached
            cached_tokens=pair.cached_tokens if pair is not None else 0,
            segments=[SegmentBar(s.id, s.kind, s.tokens, s.trimmed) for s in request.segments], state_rendering=request.state_rendering,
            full_headers=request.full_headers, short_headers=request.short_headers,
            breakpoints=[b.as_dict() for b in request.cache_breakpoints], verdict=request.verdict,
            warnings=list(request.warnings), window=request.window.as_dict(), chunks=chunks, groups=groups,
            tail_position=tail_position, tail_text=request.tail_text,
        )
        return self._add(view, serialized, pair)

    def _add(self, view: TurnView, serialized: Serialized, pair: PairDiff | None) -> TurnView:
        """``view`` with what the diff against the request before it found (none for the first)."""
        if pair is not None:
            view.cause, view.detail = pair.cause, pair.detail
            view.unexpected = pair.cause in self.fail_on
            view.common_prefix_bytes, view.common_prefix_tokens = pair.common_prefix_bytes, pair.common_prefix_tokens
            view.divergence = divergence_of(serialized, pair.common_prefix_bytes)
            view.before, view.after, view.diverging_segment = pair.before, pair.after, pair.segment
            view.uncached_reason = pair.uncached_reason
        self.turns.append(view)
        return view

    def groups(self) -> list[str]:
        return list(self.group_ids)


@dataclass(frozen=True)
class ReportJob:
    """One session of ``zhin report html``, as a worker process receives it: data only (core/parallel.py)."""

    ref: str
    db: str | None
    cwd: Path
    config: Config
    provider: str | None
    preset: Preset | Path | str | None
    economy: bool = True
    after_load: Callable[[], None] | None = None
    prices: PriceTable | None = None  # the config's table with --prices applied (None: the config's own)
    session: Session | None = None  # already loaded by the run context (in process, for --window): not read again


def economy_summary(session: Session, config: Config, provider: str,
                    prices: PriceTable | None = None) -> tuple[dict[str, Any] | None, str]:
    """``report economy --json``'s figures of one session for ``provider`` (None and why, if it simulates none)."""
    from zhin_cli.pipeline.providers import PROVIDERS
    from zhin_cli.tools.report.economy import provider_case, session_economy

    if provider_case(provider) is None:  # any registered provider has a case (its spec's), a plugin's too
        return None, f"no economy simulation for {provider} (simulated: {', '.join(PROVIDERS)})"
    figures = session_economy(session, config, providers=[provider], prices=prices)
    return figures.as_dict(), ""


def session_page(job: ReportJob, progress: Callable[[int, int], None] | None = None) -> SessionPage:
    """Load one session, replay it once, and collect what its page shows."""
    from zhin_cli.store import load_session

    session = job.session if job.session is not None else load_session(job.ref, db=job.db, cwd=job.cwd)
    if job.after_load is not None:
        job.after_load()
    collector = _Collector(session.session_id, DEFAULT_FAIL_ON, job.prices)
    with Pipeline.open(job.config, provider=job.provider, preset=job.preset) as pipeline:
        plan = pipeline.turns(session)
        if plan.total == 0:
            raise UsageError(f"session {session.session_id!r} has no assistant message, so no request to show")
        for request in pipeline.replay(session):
            collector.add(request)
            if progress is not None:
                progress(request.turn, plan.total)
        provider = collector.differ.result().provider or (job.provider or "")
        model = collector.differ.result().model
        greeting = plan.greeting_turn
    economy: dict[str, Any] | None = None
    note = "not computed (--no-economy)"
    if job.economy:
        economy, note = economy_summary(session, job.config, provider, job.prices)
    return SessionPage(session.session_id, session.source, provider, model, plan.total, greeting, collector.turns,
                       collector.store, collector.groups(), economy, note, summary=collector.differ.result().summary())


# --- captured bodies: a capture folder or a JSONL of bodies drawn like sessions (one page per conversation) -------


CAPTURED_STATE = "captured"  # what a captured request's "state" line says: the bot's own body, no zhin segments


def _region_segments(request: BodyRequest, serialized: Serialized) -> list[SegmentBar]:
    """A captured body's tokens by region (tools, system, messages): the only parts a foreign body names."""
    tokens: dict[str, int] = {}
    start = 0
    system = request.system_messages  # OpenAI's system prompt is a message: counted as the system
    for block, end in zip(serialized.plan.blocks, serialized.plan.ends, strict=True):
        region = "system" if block.region == "messages" and 0 <= block.message_index < system else block.region
        tokens[region] = tokens.get(region, 0) + end - start
        start = end
    return [SegmentBar(region, region, count) for region, count in tokens.items()]


class _CaptureCollector(_Collector):
    """``_Collector`` for captured bodies: the pair comes from the capture run (one cache across conversations)."""

    def add_body(self, request: BodyRequest, serialized: Serialized, pair: PairDiff | None, cached: int) -> TurnView:
        chunks = [self.store.add(c.label, c.data) for c in serialized.chunks if c.label != "glue"]
        groups = [self._group([c.label if c.label != "message" else "messages"]) for c in serialized.chunks if c.label != "glue"]
        view = TurnView(
            turn=request.turn, prompt_tokens=serialized.prompt_tokens, cached_tokens=cached,
            segments=_region_segments(request, serialized), state_rendering=CAPTURED_STATE, full_headers=0, short_headers=0,
            breakpoints=[], verdict=None, warnings=[], window={}, chunks=chunks, groups=groups,
            tail_position=None, tail_text=None)
        return self._add(view, serialized, pair)


def capture_pages(path: Path, *, provider: str | None = None, prices: PriceTable | None = None) -> list[SessionPage]:
    """A capture folder or a JSONL of bodies as pages, one per conversation (``prefix-diff``'s grouping and figures)."""
    from zhin_cli.cache.captures import body_request, diff_captures, group_conversations
    from zhin_cli.store.captures import read_captures

    captures = read_captures(path)
    diff = diff_captures(captures, provider=provider, prices=prices)
    pairs = {(s.session_id, p.to_turn): p for s in diff.sessions for p in s.pairs}
    cached = {r.number: r.cached_tokens for r in diff.requests}
    pages = []
    for session, conversation in zip(diff.sessions, group_conversations(captures.bodies), strict=True):
        collector = _CaptureCollector(session.session_id, DEFAULT_FAIL_ON)
        for body in conversation.bodies:
            request = body_request(body, provider)
            collector.add_body(request, request.serialize(), pairs.get((session.session_id, body.number)), cached[body.number])
        pages.append(SessionPage(session.session_id, captures.source, session.provider, session.model,
                                 len(collector.turns), None, collector.turns, collector.store, collector.groups(),
                                 None, "not computed for captured bodies (the bot's own requests: see report economy)",
                                 unit="capture", summary=session.summary()))
    return pages


def build_report(
    refs: list[str],
    *,
    cwd: Path,
    db: str | None = None,
    config_path: Path | None = None,
    provider: str | None = None,
    preset: Preset | Path | str | None = None,
    economy: bool = True,
    after_load: Callable[[], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    jobs: int | None = 1,
    window: bool = False,
    prices_file: Path | None = None,
    context: RunContext | None = None,
) -> HtmlReport:
    """Every session of ``refs`` (files, folders of .jsonl, ids / keys) as a page's data.

    ``jobs``: sessions collected at once in worker processes (the report is the same for every value);
    ``progress`` counts turns with one job, sessions with several. ``context``: the command's run context (it
    replaces ``cwd``, ``db``, ``config_path`` and ``prices_file``); the config, prices and sessions are read once
    and ``--window``'s sweep reuses them."""
    import functools

    from zhin_cli.core.parallel import check_jobs, ordered_map
    from zhin_cli.core.tokens import counter
    from zhin_cli.pipeline.config import load_config
    from zhin_cli.store import database_read
    from zhin_cli.store.refs import session_refs, split_capture_refs

    workers = check_jobs(jobs)
    run = context or RunContext.for_config(load_config(config_path, cwd=cwd), cwd=cwd, db=db, prices_file=prices_file)
    config, cwd, db = run.config, run.cwd, run.db
    captured, refs = split_capture_refs(refs, cwd)
    if captured and window:
        raise UsageError("--window replays zhin's own assembly; captured bodies were assembled by another bot")
    chosen = session_refs(refs, all_sessions=False, db=db, cwd=cwd) if refs or not captured else []
    prices = run.prices  # read once, before any session: a bad file stops nothing half-done
    if captured:  # the bot's own bodies, one page per conversation
        pages = [page for path in captured for page in capture_pages(path, provider=provider, prices=prices)]
        if not chosen:
            return HtmlReport(pages, config.path, None)
    in_process = workers == 1 or len(chosen) == 1
    job_list = [ReportJob(ref, db, cwd, config, provider, preset, economy, after_load, prices,
                          run.session(ref) if window and in_process else None) for ref in chosen]
    captured_pages = pages if captured else []
    if in_process:
        pages = list(ordered_map(functools.partial(session_page, progress=progress), job_list, jobs=1))
    else:
        pages = list(ordered_map(session_page, job_list, jobs=workers, done=progress,
                                 prepare=functools.partial(counter, DEFAULT_ENCODING)))
    pages = [*pages, *captured_pages]
    database = database_read(chosen, db=db, cwd=cwd)
    sweep: WindowDoc | None = None
    sweep_note = ""
    if window and pages:  # report window over the same sessions, for the provider the pages were rendered for
        from zhin_cli.tools.report.window import run_window

        try:
            sweep = run_window(refs, cwd=cwd, provider=pages[0].provider, jobs=jobs, context=run).as_dict()
        except UsageError as exc:  # no prices or no cache rules for this provider: the page says so
            sweep_note = exc.message
    return HtmlReport(pages, config.path, database, sweep, sweep_note)


# --- rendering -----------------------------------------------------------------------------------------------


def _asset(name: str) -> str:
    return resources.files("zhin_cli.tools.report.htmlpage").joinpath(name).read_text(encoding="utf-8")


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _kinds(pages: Sequence[SessionPage]) -> dict[str, int]:
    """Segment kinds in order of first appearance: kind k is drawn in colour class ``k<k>``."""
    kinds: dict[str, int] = {}
    for page in pages:
        for turn in page.turns:
            for segment in turn.segments:
                kinds.setdefault(segment.kind, len(kinds))
    return kinds


def _kind_css(kinds: dict[str, int]) -> str:
    return "".join(f".k{n}{{background:{PALETTE[n % len(PALETTE)]}}}" for n in kinds.values())


MARKER_TEXT = {"unexpected": "unexpected break", "compaction": "compaction (window shift)",
               "window_shift": "window shift (tail limit)"}


def _bar(index: int, position: int, count: int, turn: TurnView, top: int, labelled: bool) -> str:
    """One chart bar: a single absolutely placed element whose gradient is the cached / new split (2,000 nested
    flex boxes took most of a long page's load); its tooltip is written by the page's script on hover."""
    height = 100 * turn.prompt_tokens / top if top else 0
    cached = 100 * turn.cached_tokens / turn.prompt_tokens if turn.prompt_tokens else 0
    marker = turn.marker
    extra = f' data-cause="{_e(turn.cause)}"' if turn.cause else ""
    if marker:
        extra += f' data-marker="{marker}"'
    inner = (f'<i class="mark m-{marker}"></i>' if marker else "") + (f"<em>{turn.turn}</em>" if labelled else "")
    return (f'<a class="bar" href="#s{index}-t{turn.turn}" data-turn="{turn.turn}" data-prompt-tokens="{turn.prompt_tokens}" '
            f'data-cached-tokens="{turn.cached_tokens}"{extra} style="left:{100 * position / count:.4g}%;'
            f'width:{100 / count:.4g}%;height:{height:.1f}%;--c:{cached:.1f}%">{inner}</a>')


def _segments(turn: TurnView, kinds: dict[str, int]) -> str:
    """The segments as a stacked bar: one element per segment, its width its tokens; the label is drawn from
    ``data-segment`` by the stylesheet (2,000 turns: no 20,000 text nodes) and cut to the segment's width, so the
    full id, kind and tokens are its title (a label cut to ``core…`` must still be readable: issue 31, finding 6)."""
    spans = []
    for segment in turn.segments:
        trimmed = segment.trimmed
        title = f'{segment.id} · {segment.kind} · {segment.tokens:,} tokens'
        title += f" · {trimmed:,} characters trimmed" if trimmed else ""
        spans.append(f'<span class="seg k{kinds.get(segment.kind, 0)}{" trimmed" if trimmed else ""}" '
                     f'title="{_e(title)}" data-segment="{_e(segment.id)}" data-tokens="{segment.tokens}"'
                     f'{f" data-trimmed={chr(34)}{trimmed}{chr(34)}" if trimmed else ""} style="flex-grow:{segment.tokens}"></span>')
    return f'<div class="segbar">{"".join(spans)}</div>'


def _verdict(turn: TurnView) -> tuple[str, str]:
    """The validator's word on a request and its class: accepted, rejected, or not validated (a captured body)."""
    if turn.verdict is None:  # no validator ran on a captured body: the page says so, never "accepted"
        return "not validated (the bot's own request, as sent)", "meta"
    return ("accepted", "ok") if turn.verdict.ok else (f"rejected ({turn.verdict.status})", "bad")


def _section(index: int, turn: TurnView, kinds: dict[str, int], unit: str = "request") -> str:
    """A turn's section: its figures and segment bar. Its wire messages and diff are drawn by the page's script
    when the turn is opened (its title or chart bar is clicked): 2,000 sections carry no hidden content."""
    verdict, verdict_class = _verdict(turn)
    headers = "" if unit == "capture" else f"headers: {turn.full_headers} full, {turn.short_headers} short · "
    uncached = f' <span class="why">({_e(turn.uncached_reason)})</span>' if turn.uncached_reason else ""
    # the assembler's and the validator's (an accepted request's: a rejection's answer is its status)
    notes = [*turn.warnings, *(turn.verdict.warnings if turn.verdict is not None and turn.verdict.ok else ())]
    warnings = "".join(f'<p class="warn">warning: {_e(note)}</p>' for note in notes)
    cause = ""
    if turn.cause:
        label = MARKER_TEXT.get(turn.marker or "", turn.cause.replace("_", " "))
        cause = (f' · <span class="cause{" bad" if turn.unexpected else ""}">{_e(label)}'
                 f'{f": {_e(turn.detail)}" if turn.detail else ""}</span>')
    return (f'<section class="turn{" bad" if turn.unexpected else ""}" id="s{index}-t{turn.turn}" data-turn="{turn.turn}" '
            f'data-prompt-tokens="{turn.prompt_tokens}" data-cached-tokens="{turn.cached_tokens}">'
            f'<h3><a href="#s{index}-t{turn.turn}">{unit} {turn.turn}</a> {_n(turn.prompt_tokens)} prompt tokens · '
            f'{_n(turn.cached_tokens)} cached{uncached} · {_n(turn.new_tokens)} new{cause}</h3>'
            f'<p>state: {_e(turn.state_rendering)} · {headers}'
            f'{len(turn.chunks)} wire chunks · <span class="{verdict_class}">{_e(verdict)}</span></p>'
            f'{warnings}{_segments(turn, kinds)}</section>')


LAYOUTS = ("adr", "flat", "sliding")


def _cost_hooks(cost: dict[str, Any] | None) -> str:
    """``data-timed-cost-<layout>``: report economy --json's cost per request of each layout (none without prices);
    timed as docs/figures.md names it: cold at the first request of each cache group, warm after it."""
    return "".join(f' data-timed-cost-{layout}="{cost[layout]["per_request"]}"' for layout in LAYOUTS) if cost else ""


def _costs(cost: dict[str, Any] | None) -> str:
    """``report economy``'s cost per request of the three layouts (— for a provider without prices)."""
    from zhin_cli.cache.cost import format_usd

    if not cost:
        return "—"
    return " · ".join(format_usd(cost[layout]["per_request"]) for layout in LAYOUTS)


def _economy(page: SessionPage) -> str:
    from zhin_cli.tools.report.economy import groups_words

    if page.economy is None:
        return f'<section class="economy"><h3>Economy</h3><p class="meta">{_e(page.economy_note)}</p></section>'
    headers = page.economy["headers"]
    totals = page.economy["header_tokens"]
    labels = {"upstream": "upstream [sender:…] on every group message", "full": "ADR full header on every message",
              "adr": "ADR projection (full once, short after)"}
    widest = max(totals.values()) or 1
    rows = []
    for style, label in labels.items():
        total = totals[style]
        share = total / totals["full"] if totals["full"] else None
        rows.append(f'<tr data-style="{style}" data-tokens="{total}"><td>{_e(label)}</td><td class="num">{_n(total)}</td>'
                    f'<td class="num">{headers["per_message"][style]:.1f}</td><td class="num">{_pct(share)}</td>'
                    f'<td class="meter"><i style="width:{100 * total / widest:.1f}%"></i></td></tr>')
    cache_rows: list[str] = []
    reasons: list[str] = []  # why one layout costs less, per provider (report economy's flat-vs-ADR line)
    for name, figures in page.economy["cache"].items():
        later, limit, flat = figures["adr_later_hit_rate"], figures["limit_later"], figures["flat_later_hit_rate"]
        cache_rows.append(
            f'<tr data-provider="{_e(name)}"{_cost_hooks(figures.get("cost"))}><td>{_e(name)} ({_e(figures["model"])}, groups ≤ {figures["lifetime_seconds"]} s apart)</td>'
            f'<td class="num">{figures["requests_first"]} / {figures["requests_later"]}</td>'
            f'<td class="num">{_pct(later)}</td><td class="num">{_pct(flat)}</td><td class="num">{_pct(limit)}</td>'
            f'<td class="num">{_costs(figures.get("cost"))}</td>'
            f'<td class="meter"><i style="width:{100 * (later or 0):.1f}%"></i><u style="left:{100 * (limit or 0):.1f}%" '
            f'title="physical limit {_pct(limit)}"></u></td></tr>')
        groups = groups_words(figures["requests_first"] + figures["requests_later"], figures["requests_first"])
        why = f'; flat vs ADR: {_e(figures["flat_vs_adr"])}' if figures.get("flat_vs_adr") else ""
        reasons.append(f'<p class="meta flat-vs-adr" data-provider="{_e(name)}">{_e(name)}: {groups}{why}</p>')
    return (f'<section class="economy"><h3>Economy <small>(report economy; {headers["messages"]} member messages, '
            f'each header counted once)</small></h3>'
            f'<table><thead><tr><th>header style</th><th>tokens</th><th>per message</th><th>vs full</th><th></th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>'
            f'<table><thead><tr><th>timed: simulated prompt cache</th><th>requests: first of group (cold) / later</th>'
            f'<th>later hit rate: ADR</th><th>later hit rate: flat</th><th>physical limit</th><th>timed cost/request ADR · flat · sliding</th><th>ADR hits vs the limit</th></tr></thead>'
            f'<tbody>{"".join(cache_rows)}</tbody></table>{"".join(reasons)}'
            f'<p class="meta">Timed, as report economy counts: a request more than the cache lifetime after the one '
            f'before meets an empty cache (cold: the first of a cache group), the others are later. The later hit rate is '
            f'the share of the later requests\' prompt tokens the cache reads; the limit is 1 − new / prompt tokens (no cache can serve text the previous '
            f'request did not send). The headline\'s warm figures are prefix-diff\'s, every request right after the '
            f'one before (a replay of the session), so they differ where the session has more than one cache group. '
            f'Definitions: docs/figures.md.</p></section>')


def frontier_svg(sweep: WindowDoc, width: int = 640, height: int = 280) -> str:
    """``report window --json``'s policies as a scatter chart: cost per request (y) against the messages of
    context kept (x); the cost/context frontier as a line; recommended, default and sliding labelled."""
    from zhin_cli.cache.cost import format_usd

    points = [p for p in sweep["policies"] if p["cost_per_request"] is not None]
    if not points:
        return ""
    left, right, top, bottom = 64, 16, 12, 36
    xs = [p["context_mean"] for p in points]
    ys = [p["cost_per_request"] for p in points]
    x_low, x_high = 0.0, max(xs) * 1.05 or 1.0
    y_low, y_high = 0.0, max(ys) * 1.1 or 1.0

    def x(value: float) -> float:
        return left + (value - x_low) / (x_high - x_low) * (width - left - right)

    def y(value: float) -> float:
        return height - bottom - (value - y_low) / (y_high - y_low) * (height - top - bottom)

    labels: dict[str, str] = {}  # policy name → its roles ("recommended = default" when they are one policy)
    for role, policy in (("recommended", sweep["recommended"]), ("default", sweep["default"]), ("sliding", sweep["sliding"])):
        name = policy["name"]
        labels[name] = f"{labels[name]} = {role}" if name in labels else role
    frontier = sorted((p for p in points if p["pareto"]), key=lambda p: p["context_mean"])
    line = " ".join(f"{x(p['context_mean']):.1f},{y(p['cost_per_request']):.1f}" for p in frontier)
    dots = []
    for p in points:
        role = labels.get(p["name"], "")
        dots.append(f'<circle class="{"pareto" if p["pareto"] else "policy"} {role.replace(" = ", " ")}" data-policy="{_e(p["name"])}" '
                    f'data-cost="{p["cost_per_request"]}" data-context="{p["context_mean"]}" cx="{x(p["context_mean"]):.1f}" '
                    f'cy="{y(p["cost_per_request"]):.1f}" r="{5 if role else 3.5}"><title>{_e(p["name"])}: '
                    f'{format_usd(p["cost_per_request"])} per request, context {p["context_mean"]:g} messages, '
                    f'later hits {_pct(p["hit_rate_later"])}</title></circle>')
        if role:
            dots.append(f'<text x="{x(p["context_mean"]) + 7:.1f}" y="{y(p["cost_per_request"]) - 6:.1f}">{role}: {_e(p["name"])}</text>')
    ticks = "".join(f'<text class="tick" x="{left - 6}" y="{y(y_high * f / 4) + 4:.1f}" text-anchor="end">'
                    f'{format_usd(y_high * f / 4)}</text>' for f in range(5))
    ticks += "".join(f'<text class="tick" x="{x(x_high * f / 4):.1f}" y="{height - bottom + 16}" text-anchor="middle">'
                     f'{x_high * f / 4:.0f}</text>' for f in range(5))
    return (f'<svg class="frontier" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="cost per request against messages of context, one dot per window policy">'
            f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" class="axis"/>'
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" class="axis"/>{ticks}'
            f'<polyline points="{line}" class="frontier-line"/>{"".join(dots)}'
            f'<text class="tick" x="{(left + width - right) / 2:.0f}" y="{height - 4}" text-anchor="middle">'
            f'messages of context kept (mean)</text></svg>')


def _window(sweep: WindowDoc | None, note: str = "") -> str:
    if sweep is None:
        return f'<section class="economy window"><h3>Window sweep</h3><p class="meta">{_e(note)}</p></section>' if note else ""
    chosen = sweep["recommended"]
    return (f'<section class="economy window"><h3>Window sweep <small>(report window; {_e(sweep["provider"])} '
            f'{_e(sweep["model"])}, {len(sweep["policies"])} policies)</small></h3>{frontier_svg(sweep)}'
            f'<p class="meta">Recommended: <b>{_e(chosen["name"])}</b>, the cheapest policy keeping at least '
            f'{sweep["min_context"]:g} messages of context on average. Every dot is one window policy replayed over '
            f'these sessions; the line joins the policies no other is both cheaper and longer than. Definitions: '
            f'docs/economy.md.</p></section>')


def _legend() -> str:
    """The chart's legend: its bars' two parts and its marks (the segment kinds have their own, ``_kind_legend``)."""
    return ('<p class="legend chart-legend"><b>chart:</b> <span><i class="l-cached"></i>cached</span>'
            '<span><i class="l-new"></i>new</span><span><i class="mark m-window_shift"></i>window shift</span>'
            '<span><i class="mark m-compaction"></i>compaction</span><span><i class="mark m-unexpected"></i>unexpected break</span>'
            ' · click a bar or a request’s title for its wire messages and diff</p>')


def _kind_legend(kinds: dict[str, int]) -> str:
    """The segment bars' legend: one colour per segment kind (none of them a chart colour)."""
    names = "".join(f'<span><i class="k{n}"></i>{_e(k)}</span>' for k, n in kinds.items())
    return f'<p class="legend kind-legend"><b>segment kinds:</b> {names}</p>'


def _y_ticks(top: int) -> str:
    """The chart's y axis: 0, half and the tallest bar's prompt tokens, each at its height."""
    values = sorted({0, top // 2, top}) if top else [0]
    return "".join(f'<span class="tick" data-value="{v}" style="bottom:{100 * v / top if top else 0:.1f}%">{_n(v)}</span>'
                   for v in values)


def _chart(index: int, page: SessionPage) -> str:
    """Prompt tokens per request as bars (cached / new), with a labelled y axis (prompt tokens, ticks) and x axis."""
    top = max((t.prompt_tokens for t in page.turns), default=0)
    labelled = len(page.turns) <= 60  # request numbers under the bars while they fit
    count = len(page.turns)
    wide = len(page.turns) > 150
    bars = "".join(_bar(index, i, count, turn, top, labelled) for i, turn in enumerate(page.turns))
    width = f' style="width:{3 * count}px"' if wide else ""
    return (f'<div class="chart{" wide" if wide else ""}{" labelled" if labelled else ""}" role="img" '
            f'aria-label="prompt tokens per {_e(page.unit)}, cached and new">'
            f'<span class="axis y-title">prompt tokens</span><div class="yaxis">{_y_ticks(top)}</div>'
            f'<div class="plot"{width}>{bars}</div></div>'
            f'<p class="axis x-title">{_e(page.unit)} (one bar each, in order)</p>')


def _warm(page: SessionPage) -> str:
    """The headline's cache figures: prefix-diff's (warm: each request right after the one before, as replayed)."""
    from zhin_cli.cache.cost import format_usd

    cost = page.summary.get("cost") if page.summary is not None else None
    share = page.summary["cached_share"] if page.summary is not None else round(page.cached_share(), 4)
    per_request = f' · {format_usd(cost["per_request"])} per request' if cost else ""
    hook = f' data-cost-per-request="{cost["per_request"]}"' if cost else ""
    return (f'<span class="warm" data-cached-share="{share}"{hook}>'
            f'warm (a replay, as prefix-diff): cached share {_pct(page.cached_share())}{per_request}</span>')


def _session(index: int, page: SessionPage, kinds: dict[str, int]) -> str:
    causes = ", ".join(f"{n} × {c.replace('_', ' ')}" for c, n in sorted(page.causes().items(), key=lambda kv: -kv[1]))
    unexpected = sum(1 for t in page.turns if t.unexpected)
    greeting = (f'<p class="meta">Turn {page.greeting_turn} is the greeting: no request was made for it, so it has '
                f'no section.</p>') if page.greeting_turn is not None else ""
    sections = "".join(_section(index, turn, kinds, page.unit) for turn in page.turns)
    return (f'<article class="session" id="s{index}" data-session="{_e(page.session_id)}" data-index="{index}" '
            f'data-unit="{_e(page.unit)}">'
            f'<h2>{_e(page.session_id)}</h2>'
            f'<p class="meta">{_e(redact_text(shown_source(page.source, Path.cwd())))} · {_e(page.provider)} · {_e(page.model)} · {len(page.turns)} requests · '
            f'{_warm(page)} · {_e(causes) or "no pairs"} · '
            f'<span class="{"bad" if unexpected else "ok"}">{unexpected} unexpected break(s)</span></p>{greeting}'
            f'{_chart(index, page)}{_legend()}{_kind_legend(kinds)}{_economy(page)}<div class="turns">{sections}</div></article>')


def _data_json(report: HtmlReport, kinds: dict[str, int]) -> str:
    # kinds: a segment's colour class k<n> names its kind (for scripts reading the data; the titles say it too)
    data = {"version": HTML_REPORT_VERSION, "kinds": list(kinds), "sessions": [page.as_json() for page in report.sessions]}
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # inside <script>: "<" only ever occurs in strings, where \u003c is the same character; no "</script>" can end it
    return escape_surrogates(text).replace("<", "\\u003c")


def source_hash(text: str) -> str:
    """A CSP hash source for an inline element's text (its UTF-8 bytes, as the browser hashes them)."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def page_csp(*, script: str, style: str, extra: str = "") -> str:
    """The policy allowing only ``script`` and ``style`` (hash or nonce sources) inline, and nothing fetched."""
    return (f"{CSP_BASE}; script-src {script}; style-src {style}; style-src-elem {style}; "
            f"style-src-attr 'unsafe-inline'{'; ' + extra if extra else ''}")


@dataclass(frozen=True)
class PageTemplate:
    """The page cut where its inline ``<style>`` and ``<script>`` tags take a nonce attribute: ``fill(None)`` is
    the file (its meta policy allows both by hash), ``fill(nonce)`` a served response (its header allows them by
    that nonce). Cut by construction, never by searching the text: session text cannot place a nonce."""

    parts: tuple[str, str, str]

    def fill(self, nonce: str | None) -> str:
        attribute = f' nonce="{nonce}"' if nonce else ""
        return attribute.join(self.parts)


def render(report: HtmlReport) -> str:
    """The report as one HTML document (CSS, script and data inlined)."""
    return render_template(report).fill(None)


def render_template(report: HtmlReport) -> PageTemplate:
    """The report's document, cut for a nonce (``PageTemplate``)."""
    kinds = _kinds(report.sessions)
    title = ", ".join(page.session_id for page in report.sessions[:3]) + (" …" if len(report.sessions) > 3 else "")
    nav = "".join(f'<a href="#s{i}">{_e(p.session_id)}</a>' for i, p in enumerate(report.sessions)) if len(report.sessions) > 1 else ""
    body = "".join(_session(i, page, kinds) for i, page in enumerate(report.sessions))
    style, script = _asset("report.css") + _kind_css(kinds), _asset("report.js")
    csp = page_csp(script=source_hash(script), style=source_hash(style))
    head = ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="generator" content="zhin report html v{HTML_REPORT_VERSION}">'
            f'<title>zhin report · {_e(title)}</title><style')
    middle = (f'>{style}</style></head>'
              f'<body><header><h1>zhin report</h1><p class="meta">What each request sent: prompt tokens per request '
              f'(cached / new, from the simulated prompt cache, warm), the segments of every request, and the wire messages '
              f'and diff of a request when you open it.</p><nav>{nav}</nav></header><main>{_window(report.window, report.window_note)}{body}</main>'
              f'<script type="application/json" id="zhin-data">{_data_json(report, kinds)}</script>'
              f'<script')
    return PageTemplate((head, middle, f'>{script}</script></body></html>\n'))


# --- serving (``zhin view``) ---------------------------------------------------------------------------------


# what socketserver hands a request handler: a TCP server's connection, or a UDP server's (data, socket)
Connection: TypeAlias = "socket.socket | tuple[bytes, socket.socket]"
IDLE_TIMEOUT = 10.0  # seconds a connection may stay silent (before or within its request) before it is closed
MAX_CONNECTIONS = 32  # connections served at once; more are answered 503 and closed at once, never queued
REQUEST_DEADLINE = 30.0  # seconds from connecting to the end of the request's headers (a trickle gets no more)
BUSY_TEXT = b"zhin view: too many connections\n"
BUSY_ANSWER = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
               b"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s" % (len(BUSY_TEXT), BUSY_TEXT))


def new_nonce() -> str:
    """A fresh CSP nonce (128 bits, base64url: a valid nonce-source)."""
    import secrets

    return secrets.token_urlsafe(16)


class _RequestReader(io.RawIOBase):
    """A connection's bytes, each read waiting at most ``idle`` seconds and none past ``deadline`` (a monotonic
    time): a client trickling a byte at a time cannot hold its connection longer than the deadline."""

    def __init__(self, connection: socket.socket, idle: float, deadline: float) -> None:
        super().__init__()
        self.connection, self.idle, self.deadline = connection, idle, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request did not arrive in time")  # http.server ends the connection
        self.connection.settimeout(min(self.idle, remaining))
        return self.connection.recv_into(buffer)


def page_server(page: PageTemplate, host: str = "127.0.0.1", port: int = 0, *,
                idle_timeout: float = IDLE_TIMEOUT, max_connections: int = MAX_CONNECTIONS,
                request_deadline: float = REQUEST_DEADLINE) -> ThreadingHTTPServer:
    """A bound (not yet serving) HTTP server answering ``GET /`` with ``page`` under a fresh CSP nonce per response;
    a request whose ``Host`` is not a loopback name is refused (DNS rebinding), every other path is 404.

    Bounded: a connection silent for ``idle_timeout`` seconds, or whose request is not whole ``request_deadline``
    seconds after it connected, is closed; at most ``max_connections`` are served at once (one thread each); one
    past the bound is answered 503 and closed, so idle or trickling sockets cannot pile up threads."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from zhin_cli.core.errors import ZhinError
    from zhin_cli.core.loopback import loopback_authority, loopback_host

    address = loopback_host(host, "zhin view")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is out of range (0-65535; 0 picks a free port)")
    parts = [part.encode("utf-8", errors="backslashreplace") for part in page.parts]
    slots = threading.BoundedSemaphore(max_connections)

    class Handler(BaseHTTPRequestHandler):
        server_version = "zhin-view"
        timeout = idle_timeout  # StreamRequestHandler: the socket's timeout; a silent read or write ends the connection

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # the socket's own reader (open, it would hold the socket open after close)
            self.rfile = io.BufferedReader(_RequestReader(self.connection, idle_timeout, time.monotonic() + request_deadline))

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass  # quiet: the terminal shows the URL, not a log

        def _answer(self, send_body: bool) -> None:
            nonce = new_nonce()
            hosts = self.headers.get_all("Host") or []
            if len(hosts) != 1 or not loopback_authority(hosts[0]):  # zhin serve's DNS-rebinding rule
                status, content, kind = 403, b"zhin view answers loopback names only\n", "text/plain; charset=utf-8"
            elif self.path.split("?", 1)[0] in ("/", "/index.html"):
                content = f' nonce="{nonce}"'.encode("ascii").join(parts)
                status, kind = 200, "text/html; charset=utf-8"
            else:
                status, content, kind = 404, b"not found\n", "text/plain; charset=utf-8"
            self.connection.settimeout(idle_timeout)  # the answer's writes: the idle timeout, not what the deadline left
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(content)))
            source = f"'nonce-{nonce}'"
            self.send_header("Content-Security-Policy", page_csp(script=source, style=source, extra=CSP_SERVED_ONLY))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if send_body:
                self.wfile.write(content)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._answer(True)

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer(False)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
        # the kernel's accept queue (socketserver's default 5 drops a burst's SYNs: a 1 s retry each); the loop
        # below drains it at once, serving or refusing each connection
        request_queue_size = max_connections

        def process_request(self, request: Connection, client_address: object) -> None:
            if not slots.acquire(blocking=False):
                _refuse(request)
                self.shutdown_request(request)
                return
            try:
                super().process_request(request, client_address)
            except BaseException:  # no thread started: its slot is free again
                slots.release()
                raise

        def handle_error(self, request: Connection, client_address: object) -> None:
            pass  # a client gone or silent mid-answer (reset, broken pipe, timeout) ends its connection, no traceback

        def process_request_thread(self, request: Connection, client_address: object) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                slots.release()

    try:
        return Server((address, port), Handler)
    except OSError as error:
        raise ZhinError(f"cannot listen on {address}:{port}: {error.strerror or error}") from None


def _refuse(request: Connection) -> None:
    """Tell a connection past the bound why it is closed, without ever waiting on it (the accepting thread)."""
    connection = request if isinstance(request, socket.socket) else request[1]  # a TCP server's is a socket
    try:
        connection.setblocking(False)
        connection.send(BUSY_ANSWER)
    except OSError:
        pass  # the client is gone or not reading: it is closed all the same


def server_url(server: ThreadingHTTPServer) -> str:
    host, port = server.socket.getsockname()[:2]  # the bound address (server_address, as TCPServer sets it)
    return f"http://{f'[{host}]' if ':' in str(host) else host}:{port}/"


def serve_page(page: PageTemplate, *, host: str = "127.0.0.1", port: int = 0,
               on_ready: Callable[[str], None] | None = None) -> None:
    """Serve ``page`` in the foreground until Ctrl-C or SIGTERM, the normal way to stop it (then return: exit 0,
    as ``zhin serve``); bounded as ``page_server`` says (``IDLE_TIMEOUT``, ``MAX_CONNECTIONS``)."""
    server = page_server(page, host, port)
    try:
        if on_ready is not None:
            on_ready(server_url(server))
        server.serve_forever()
    except KeyboardInterrupt:  # SIGINT, and SIGTERM (zhin_cli.signals.Terminated)
        pass
    finally:
        server.server_close()


def shown_source(source: str, cwd: Path) -> str:
    """The session's file as the page names it: relative to the folder the report was made in when the file is
    inside it (``.zhin/data.sqlite``), so a page passed around does not carry the maker's home folder; else as given."""
    path = Path(source)
    if not path.is_absolute():
        return source
    try:
        return path.resolve().relative_to(cwd.resolve()).as_posix()
    except (OSError, ValueError):
        return source

"""``zhin report economy`` as a library: what the ADR 0041 assembler costs and saves on real sessions.

Two questions, on the same sessions and one tokenizer (docs/economy.md):

1. **Header tokens** for three styles, counted on the content each request adds (a message's header is
   counted once, in the first request whose window shows it, as projected in that window):
   ``upstream`` — upstream zhin's ``[sender:id=… name=… roles=…]`` on every group user message;
   ``full`` — the ADR's full header on every member message (``project(always_full=True)``);
   ``adr`` — the ADR projection (full on a member's first appearance in the window, short after).
2. **Simulated prompt caching** per provider (OpenAI, Anthropic, DeepSeek; ``simulate`` takes any case) for
   two layouts: the ADR layout (what ``Assembler.replay`` renders) and a *flat* layout (system prompt + one user
   message holding the whole visible history as ``## 用户`` / ``## 助手`` text, the preset note's "before", in
   the provider's wire: ``WireFormat.flat``). Prompt tokens are the one definition (``zhin_cli.wire``,
   docs/tokens.md) and cached tokens the one cache simulator (``zhin_cli.cache.PrefixCache``), fed the
   session's requests in order as ``zhin serve`` would be; a request that starts a cache group
   (``cachegroups.first_of_group`` over the provider's ``lifetime_seconds``) finds a cold cache (a fresh
   simulator), so it reads 0. The *physical limit* of a request is ``1 − new / total``: ``new`` = tokens of
   the text pieces the previous request did not contain (no cache, however clever, can serve them).

Rates are token-weighted: Σ cached / Σ prompt tokens over the requests of a split (as ``stats cache`` reads
logged usage).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zhin_cli.cache import PrefixCache
from zhin_cli.core.model import Actor, AssistantMessage, EventMessage, Message, Session, ToolResultMessage, UserMessage
from zhin_cli.core.registry import Registry
from zhin_cli.core.tokens import DEFAULT_ENCODING, RANK_FILES, TokenCounter
from zhin_cli.core.tokens import counter as shared_counter
from zhin_cli.pipeline.assemble import AssembledRequest, Breakpoint
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.format import neutralize_body
from zhin_cli.pipeline.headers import SUMMARY_PREFIX, Aliases, project
from zhin_cli.pipeline.merge import Placed
from zhin_cli.pipeline.preset import TAIL_SEPARATOR
from zhin_cli.pipeline.providers import RenderedPart
from zhin_cli.pipeline.window import SessionIndex, WindowConfig, visible_window
from zhin_cli.tools.cachegroups import first_of_group
from zhin_cli.tools.cachereplay import new_tokens, with_encoding
from zhin_cli.tools.prefixdiff import Serialized, cached_tokens, diff_pair, serialize, wire_of

ECONOMY_VERSION = 1
STYLES = ("upstream", "full", "adr")
LAYOUTS = ("adr", "flat")
FLAT_SEPARATOR = "\n\n---\n\n"  # upstream's SECTION_SEP: how the flat "before" joins its context chunks


@dataclass(frozen=True)
class ProviderCase:
    """A provider to simulate, with the model whose cache rules apply."""

    provider: str
    model: str
    # Anthropic's minimum cacheable prefix depends on the model (providers.md §2.5); data, not code.
    min_tokens: int | None = None


# One model per provider, chosen for documented rules: gpt-4o (1024 min, 128 steps), Claude Sonnet 5
# (1,024-token minimum), deepseek-chat (64-token units). ``simulate`` takes any case (tests run Gemini too).
CASES: Registry[ProviderCase] = Registry("economy provider case")


def register_case(case: ProviderCase, *, replace: bool = False) -> ProviderCase:
    return CASES.add(case.provider, case, replace=replace)


register_case(ProviderCase("openai", "gpt-4o"))
register_case(ProviderCase("anthropic", "claude-sonnet-5", min_tokens=1024))
register_case(ProviderCase("deepseek", "deepseek-chat"))


# --- headers ------------------------------------------------------------------------------------------


def upstream_roles(actor: Actor) -> str:
    """Upstream's ``roles=``: product roles plus ``owner→scene_owner`` / ``admin→scene_admin`` (``member`` is
    dropped); ``user`` only when it is the only role (zhin-upstream.md §1.3)."""
    roles = [r for r in actor.roles if r != "user"]
    platform = {"owner": "scene_owner", "admin": "scene_admin"}.get(actor.platform_role or "")
    if platform:
        roles.append(platform)
    return ",".join(roles) or "user"


def upstream_name(name: str) -> str:
    """Runs of ``]`` or whitespace become ``_``; cut to 64 characters, no ellipsis (``buildSenderPrefix``)."""
    out: list[str] = []
    for char in name:
        bad = char == "]" or char.isspace()
        if bad and out and out[-1] == "_":
            continue
        out.append("_" if bad else char)
    return "".join(out)[:64]


def upstream_prefix(actor: Actor) -> str:
    """``[sender:id=<id> name=<name> roles=<r1,r2>]`` — what upstream puts before every group user message."""
    name = upstream_name(actor.display_name or "")
    return f"[sender:id={actor.subject_id} name={name} roles={upstream_roles(actor)}]"


@dataclass
class HeaderTokens:
    messages: int = 0  # member messages counted (each once)
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STYLES, 0))
    # tokens per header field (``key:value;`` counted alone), for "what each field costs"
    fields: dict[str, Counter[str]] = field(default_factory=lambda: {s: Counter() for s in STYLES})
    full_headers: int = 0  # ADR projection: how many of the counted headers were full
    short_headers: int = 0

    def per_message(self, style: str) -> float:
        return self.totals[style] / self.messages if self.messages else 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.totals)

    def detail(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "per_message": {s: round(self.per_message(s), 2) for s in STYLES},
            "adr_over_full": _ratio(self.totals["adr"], self.totals["full"]),
            "adr_over_upstream": _ratio(self.totals["adr"], self.totals["upstream"]),
            "adr_full_headers": self.full_headers,
            "adr_short_headers": self.short_headers,
            "fields": {s: dict(sorted(self.fields[s].items(), key=lambda kv: -kv[1])) for s in STYLES},
        }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def _header_fields(header: str) -> list[tuple[str, str]]:
    """``[k:v;k:v;]`` → ``[(k, "k:v;"), …]``; values never contain ``;`` (escaped)."""
    inner = header[1:-1]
    return [(piece.partition(":")[0], piece + ";") for piece in inner.split(";") if piece]


def _upstream_fields(prefix: str) -> list[tuple[str, str]]:
    inner = prefix[len("[sender:"):-1]
    keys = ("id", "name", "roles")
    pieces: list[tuple[str, str]] = [("sender", "[sender:]")]
    for piece in inner.split(" "):
        key = piece.partition("=")[0]
        pieces.append((key if key in keys else "name", piece + " "))
    return pieces


class _HeaderCounter:
    def __init__(self, session: Session, counter: TokenCounter, timezone: str) -> None:
        self.session = session
        self.counter = counter
        self.timezone = timezone
        self.aliases = Aliases.of(session)
        self.result = HeaderTokens()
        self.seen: set[int] = set()

    def add_window(self, window: Sequence[Message]) -> None:
        new = [m.row_id for m in window if m.row_id not in self.seen and isinstance(m, (UserMessage, AssistantMessage))]
        if not new:
            return
        fresh = set(new)
        self.seen.update(new)
        placed = [Placed(m, "history") for m in window]
        count = self.counter.count
        for style, always_full in (("full", True), ("adr", False)):
            projection = project(placed, aliases=self.aliases, bot=self.session.bot, timezone=self.timezone,
                                 always_full=always_full)
            for projected in projection.messages:
                if projected.header is None or not projected.rows or projected.rows[0] not in fresh:
                    continue
                self.result.totals[style] += count(projected.header)
                for key, piece in _header_fields(projected.header):
                    self.result.fields[style][key] += count(piece)
                if style == "adr":
                    if projected.header_kind == "full":
                        self.result.full_headers += 1
                    else:
                        self.result.short_headers += 1
                    self.result.messages += 1
        if not self.session.is_group:
            return  # upstream prefixes group and channel messages only
        for message in window:
            if message.row_id in fresh and isinstance(message, UserMessage) and message.actor is not None:
                prefix = upstream_prefix(message.actor)
                self.result.totals["upstream"] += count(prefix)
                for key, piece in _upstream_fields(prefix):
                    self.result.fields["upstream"][key] += count(piece)


# --- the flat layout --------------------------------------------------------------------------------


def flat_history(session: Session, window: Sequence[Message], summary: str | None) -> str:
    """The whole visible history as one text: ``## 用户`` / ``## 助手`` blocks, user lines with upstream's
    sender prefix (the preset note's "before": ``formatHistorySegment`` into one user message)."""
    blocks: list[str] = []
    if summary:
        blocks.append(SUMMARY_PREFIX + neutralize_body(summary))
    for message in window:
        if isinstance(message, UserMessage):
            prefix = upstream_prefix(message.actor) + " " if message.actor is not None and session.is_group else ""
            blocks.append(f"## 用户\n{prefix}{neutralize_body(message.text)}")
        elif isinstance(message, AssistantMessage):
            calls = "".join(f"\n[调用工具 {c.name} {json.dumps(c.arguments, ensure_ascii=False)}]" for c in message.tool_calls)
            blocks.append(f"## 助手\n{neutralize_body(message.text)}{calls}".rstrip())
        elif isinstance(message, ToolResultMessage):
            blocks.append(f"## 工具\n{neutralize_body(message.text)}")
        elif isinstance(message, EventMessage):
            blocks.append(f"## 系统\n{message.name}")
    return "\n\n".join(blocks)


def flat_request(adr: AssembledRequest, history: str) -> AssembledRequest:
    """The same request (system prompt, runtime tail, model) in the flat layout, in the provider's wire."""
    system = next((p.text for p in adr.parts if p.segment_id == "system"), "")
    tail = (adr.tail_text or "").removeprefix(TAIL_SEPARATOR)  # the tail as text, not as the wire joins it
    user = history + (FLAT_SEPARATOR + tail if tail else "")
    flat = wire_of(adr).flat({**adr.request, "model": adr.model}, system, user)
    parts = [RenderedPart(segment, text, index) for segment, text, index in flat.parts]
    return dataclasses.replace(adr, request=flat.body, parts=parts, cache_breakpoints=[Breakpoint.of(b) for b in flat.breakpoints],
                               tail_text=None)


# --- cache simulation -----------------------------------------------------------------------------


@dataclass
class RequestFigures:
    turn: int
    time: int  # ms epoch
    first: bool
    adr_prompt: int
    adr_cached: int
    flat_prompt: int
    flat_cached: int
    new_tokens: int  # ADR layout: tokens of pieces the previous request did not contain
    cause: str = ""  # ADR layout: prefix-diff's cause of the break against the previous request

    @property
    def limit(self) -> float:
        return 1 - self.new_tokens / self.adr_prompt if self.adr_prompt else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "first_of_group": self.first, "adr": {"prompt": self.adr_prompt, "cached": self.adr_cached},
                "flat": {"prompt": self.flat_prompt, "cached": self.flat_cached}, "new_tokens": self.new_tokens,
                "limit": round(self.limit, 4), "cause": self.cause}


@dataclass
class CacheFigures:
    provider: str
    model: str
    lifetime_seconds: int
    requests: list[RequestFigures] = field(default_factory=list)

    def _split(self, first: bool) -> list[RequestFigures]:
        return [r for r in self.requests if r.first == first]

    @staticmethod
    def _rate(rows: list[RequestFigures], cached: Callable[[RequestFigures], int], prompt: Callable[[RequestFigures], int]) -> float | None:
        total = sum(prompt(r) for r in rows)
        return round(sum(cached(r) for r in rows) / total, 4) if total else None

    def rate(self, layout: str, first: bool) -> float | None:
        rows = self._split(first)
        if layout == "adr":
            return self._rate(rows, lambda r: r.adr_cached, lambda r: r.adr_prompt)
        return self._rate(rows, lambda r: r.flat_cached, lambda r: r.flat_prompt)

    def limit(self, first: bool) -> float | None:
        rows = self._split(first)
        total = sum(r.adr_prompt for r in rows)
        return round(1 - sum(r.new_tokens for r in rows) / total, 4) if total else None

    def as_dict(self, per_request: bool = False) -> dict[str, Any]:
        later, first = self._split(False), self._split(True)
        data: dict[str, Any] = {
            "model": self.model,
            "lifetime_seconds": self.lifetime_seconds,
            "requests_first": len(first),
            "requests_later": len(later),
            "adr_later_hit_rate": self.rate("adr", False),
            "flat_later_hit_rate": self.rate("flat", False),
            "limit_later": self.limit(False),
            "adr_first_hit_rate": self.rate("adr", True),
            "flat_first_hit_rate": self.rate("flat", True),
            "limit_first": self.limit(True),
            "adr_prompt_tokens_per_request": _mean(r.adr_prompt for r in self.requests),
            "flat_prompt_tokens_per_request": _mean(r.flat_prompt for r in self.requests),
            "adr_cached_tokens_per_request": _mean(r.adr_cached for r in self.requests),
            "flat_cached_tokens_per_request": _mean(r.flat_cached for r in self.requests),
        }
        if per_request:
            data["per_request"] = [r.as_dict() for r in self.requests]
        return data


def _mean(values: Iterable[int]) -> float | None:
    items = list(values)
    return round(sum(items) / len(items), 1) if items else None


def simulate(session: Session, config: Config, case: ProviderCase, encoding: str = DEFAULT_ENCODING,
             headers: _HeaderCounter | None = None) -> CacheFigures:
    """Replay ``session`` for one provider; both layouts; cached tokens per request from one cache simulator
    per layout (a fresh one at each cache group: the session's prefix is cold there)."""
    with Pipeline.open(config, provider=case.provider, model=case.model) as pipeline:
        positions = [i for i, m in enumerate(session.messages) if isinstance(m, AssistantMessage)]
        times = [session.messages[i].timestamp for i in positions]
        requests = pipeline.replay(session)
        index = SessionIndex.of(session)
        timezone = pipeline.timezone(session)
        counter = shared_counter(encoding)
        figures: CacheFigures | None = None
        previous: tuple[AssembledRequest, Serialized] | None = None
        firsts: list[bool] = []
        adr_cache = flat_cache = PrefixCache()
        for position, request in zip(positions, requests, strict=True):
            with_encoding(request, encoding, case.min_tokens)
            if figures is None:
                lifetime = request.profile.cache.lifetime_seconds
                figures = CacheFigures(request.provider, request.model, lifetime)
                firsts = first_of_group([t // 1000 for t in times], lifetime)
            message = session.messages[position]
            window = visible_window(session, position, message.timestamp, config.window, index)
            if headers is not None:
                headers.timezone = timezone
                headers.add_window(window.messages)
            flat = flat_request(request, flat_history(session, window.messages, window.summary.summary if window.summary else None))
            first = firsts[len(figures.requests)]
            if first:  # a new cache group: nothing of this session is cached any more
                adr_cache, flat_cache = PrefixCache(), PrefixCache()
            adr_wire, flat_wire = serialize(request), serialize(flat)
            adr_cached = cached_tokens(adr_cache, request, adr_wire)
            flat_cached = cached_tokens(flat_cache, flat, flat_wire)
            cause = diff_pair(previous[0], request, previous[1], adr_wire, adr_cached).cause if previous else ""
            fresh = new_tokens(previous[0] if previous else None, request, counter,
                               (previous[1] if previous else None, adr_wire))
            figures.requests.append(RequestFigures(
                turn=request.turn, time=message.timestamp, first=first,
                adr_prompt=adr_wire.prompt_tokens, adr_cached=adr_cached,
                flat_prompt=flat_wire.prompt_tokens, flat_cached=flat_cached,
                new_tokens=min(adr_wire.prompt_tokens, fresh), cause=cause,
            ))
            previous = (request, adr_wire)
        return figures or CacheFigures(case.provider, case.model, 0)


# --- sessions -------------------------------------------------------------------------------------


@dataclass
class SessionEconomy:
    session_id: str
    messages: int
    requests: int
    headers: HeaderTokens
    cache: dict[str, CacheFigures]

    def as_dict(self, per_request: bool = False) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "messages": self.messages,
            "requests": self.requests,
            "header_tokens": self.headers.as_dict(),
            "headers": self.headers.detail(),
            "cache": {name: figures.as_dict(per_request) for name, figures in self.cache.items()},
        }


@dataclass
class EconomyReport:
    encoding: str
    window: dict[str, Any]
    sessions: list[SessionEconomy]

    def as_dict(self, per_request: bool = False) -> dict[str, Any]:
        return {"version": ECONOMY_VERSION, "encoding": self.encoding, "window": self.window,
                "sessions": [s.as_dict(per_request) for s in self.sessions]}


def session_economy(session: Session, config: Config, *, providers: Iterable[str] = tuple(CASES),
                    encoding: str = DEFAULT_ENCODING) -> SessionEconomy:
    counter = shared_counter(encoding)
    header_counter = _HeaderCounter(session, counter, session.timezone or "UTC")
    cache: dict[str, CacheFigures] = {}
    for number, name in enumerate(providers):
        # headers do not depend on the provider: count them during the first provider's replay
        cache[name] = simulate(session, config, CASES[name], encoding, header_counter if number == 0 else None)
    requests = sum(1 for m in session.messages if isinstance(m, AssistantMessage))
    return SessionEconomy(session.session_id, len(session.messages), requests, header_counter.result, cache)


def window_description(window: WindowConfig) -> dict[str, Any]:
    """The window settings as given, and what a cut keeps (the window stage's own rule: ``cut_to`` or half)."""
    return {**dataclasses.asdict(window), "kept_after_cut": window.keep_after_cut,
            "kept_blocks_after_cut": window.keep_blocks_after_cut}


def run_economy(
    refs: list[str],
    *,
    cwd: Path,
    db: str | None = None,
    config_path: Path | None = None,
    providers: Iterable[str] | None = None,
    encoding: str = DEFAULT_ENCODING,
    after_load: Callable[[], None] | None = None,
    jobs: int | None = 1,
    progress: Callable[[int, int], None] | None = None,
) -> EconomyReport:
    """``jobs``: sessions simulated at once in worker processes (``None``: every core; 1: here, one at a time);
    the report is the same for every value (core/parallel.py). ``progress(done, total)``: sessions simulated so
    far, first with 0 (so a bar shows its total at once), then after each one."""
    from zhin_cli.core.errors import UsageError
    from zhin_cli.core.parallel import check_jobs, ordered_map
    from zhin_cli.pipeline.config import load_config
    from zhin_cli.tools.prefixdiff import session_refs

    chosen = list(providers or tuple(CASES))
    unknown = [p for p in chosen if p not in CASES]
    if unknown:
        raise UsageError(f"--provider: no cache simulation for {', '.join(unknown)} (simulated: {', '.join(CASES)})")
    if encoding not in RANK_FILES:
        raise UsageError(f"--encoding: unknown encoding {encoding!r} (known: {', '.join(RANK_FILES)})")
    workers = check_jobs(jobs)
    config = load_config(config_path, cwd=cwd)
    job_list = [EconomyJob(ref, db, cwd, config, tuple(chosen), encoding, after_load)
                for ref in session_refs(refs, all_sessions=False, db=db, cwd=cwd)]
    if progress is not None:
        progress(0, len(job_list))
    return EconomyReport(encoding, window_description(config.window),
                         list(ordered_map(economy_job, job_list, jobs=workers, done=progress,
                                          prepare=functools.partial(shared_counter, encoding))))


@dataclass(frozen=True)
class EconomyJob:
    """One session of ``zhin report economy``, as a worker process receives it: data only (core/parallel.py);
    the ``Config`` carries its ``PluginSource``, so plugins are trusted exactly as in the sequential run."""

    ref: str
    db: str | None
    cwd: Path
    config: Config
    providers: tuple[str, ...]
    encoding: str
    after_load: Callable[[], None] | None = None


def economy_job(job: EconomyJob) -> SessionEconomy:
    """Load one session and simulate it; one at a time, so a report over many sessions holds one in memory."""
    from zhin_cli.store import load_session

    session = load_session(job.ref, db=job.db, cwd=job.cwd)
    if job.after_load is not None:
        job.after_load()
    return session_economy(session, job.config, providers=job.providers, encoding=job.encoding)


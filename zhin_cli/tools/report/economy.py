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

3. **Cost** (USD, input only): every request's ``CacheOutcome`` priced by ``Cost.of`` (the one cost definition,
   ``zhin_cli.cache.cost``) at the row of the case's (provider, model), summed per layout into the cost
   object: ``adr``, ``flat`` and ``sliding`` — the ADR layout again under upstream's window
   (``window.sliding``: cut to ``max_messages - 1``, so every turn past the limit moves it), replayed by the same
   ``cache.replay.replay_cache`` as the ADR layout, so the two differ by the window alone. Hit rate alone is the
   wrong target (a window without a cap hits more and costs more); the bill is what the operator pays.

4. **The bot's real bill** (``session_bill``): per stored reply, what its provider reported for the request —
   ``cache.usage.usage_record``, the reading ``trace`` shows as "the bot sent N prompt tokens, M cached" — as a
   ``CacheOutcome`` (``usage.billed_outcome``) priced by ``Cost.of``, beside the ADR layout's outcome of the same
   turn (item 2, the simulated case of the bot's provider), both at the price row of the model the bot used. A
   reply without usage has no figure, never 0; the totals cover the requests with both. The bot's prompts hold its
   own system prompt and tool schemas, which no database keeps (``BILL_CAVEAT``). Captured bodies (a capture
   folder, a JSONL of bodies: ``capture_bill``) have the bot's side only, from their recorded usage.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zhin_cli.cache import CacheOutcome, PrefixCache
from zhin_cli.cache.cost import Cost, CostTotals
from zhin_cli.cache.diff import diff_pair
from zhin_cli.cache.replay import cache_outcome, replay_cache
from zhin_cli.cache.serialize import Serialized, serialize, wire_of
from zhin_cli.cache.usage import NO_USAGE, billed_outcome, captured_usage, usage_record
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
from zhin_cli.pipeline.models import FALLBACK_MODEL, belongs, default_model
from zhin_cli.pipeline.preset import TAIL_SEPARATOR
from zhin_cli.pipeline.prices import Price, PriceChoice, PriceTable
from zhin_cli.pipeline.providers import PROVIDERS, ProviderSpec, RenderedPart, for_wire, unknown_provider

if TYPE_CHECKING:
    from zhin_cli.pipeline.context import RunContext
from zhin_cli.pipeline.window import SessionIndex, WindowConfig, sliding, visible_window
from zhin_cli.store.captures import SERVE_LOG, CaptureSet, is_body_jsonl, is_capture_folder, read_captures

ECONOMY_VERSION = 1
# Which cache the figures meet (docs/figures.md): cold at the first request of each cache group, warm after it.
CACHE_MODEL = "timed"  # under "cache_model", as trace and prefix-diff name theirs (cold, warm)
SAME_CACHING = 0.05  # cached shares closer than this (5 points) "cache about as well"
STYLES = ("upstream", "full", "adr")
LAYOUTS = ("adr", "flat")
COST_LAYOUTS = ("adr", "flat", "sliding")  # the cost object's keys: sliding = the ADR layout under upstream's window
FLAT_SEPARATOR = "\n\n---\n\n"  # upstream's SECTION_SEP: how the flat "before" joins its context chunks


@dataclass(frozen=True)
class ProviderCase:
    """A provider to simulate, with the model whose cache rules apply."""

    provider: str
    model: str
    # Anthropic's minimum cacheable prefix depends on the model (providers.md §2.5); data, not code.
    min_tokens: int | None = None


# The providers ``report economy`` simulates by default: the specs marked ``economy`` (ProviderSpec: one model per
# provider, chosen for documented rules — gpt-4o: 1,024 minimum, 128 steps; Claude Sonnet 5: 1,024-token minimum;
# deepseek-chat: 64-token units), registered here in the specs' order; a plugin may register its own case.
# ``--provider`` takes any registered provider (``provider_case``). ``simulate`` takes any case (tests run Gemini too).
CASES: Registry[ProviderCase] = Registry("economy provider case")


def register_case(case: ProviderCase, *, replace: bool = False) -> ProviderCase:
    return CASES.add(case.provider, case, replace=replace)


def spec_case(spec: ProviderSpec) -> ProviderCase:
    """A provider's economy case from its spec: its default model (else the fallback) and the minimum it sets."""
    return ProviderCase(spec.name, spec.default_model or FALLBACK_MODEL, spec.economy_min_tokens)


def provider_case(name: str) -> ProviderCase | None:
    """The registered case for ``name``, else the one its spec gives; None for a name no provider has."""
    found = CASES.get(name)
    if found is not None:
        return found
    spec = PROVIDERS.get(name)
    return spec_case(spec) if spec is not None else None


for _spec in PROVIDERS.values():
    if _spec.economy:
        register_case(spec_case(_spec))


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
    messages: int = 0  # messages with a header counted, the bot's too (each once)
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
    adr: CacheOutcome  # the ADR layout: what the provider's cache reads, writes and leaves uncached
    flat: CacheOutcome  # the flat layout, same request
    new_tokens: int  # ADR layout: tokens of pieces the previous request did not contain
    cause: str = ""  # ADR layout: prefix-diff's cause of the break against the previous request
    sliding: CacheOutcome | None = None  # upstream's sliding window, ADR layout (None: not replayed)
    row_id: int | None = None  # the stored assistant row this request produced (the bot's bill is keyed by it)

    @property
    def adr_prompt(self) -> int:
        return self.adr.prompt_tokens

    @property
    def adr_cached(self) -> int:
        return self.adr.read

    @property
    def flat_prompt(self) -> int:
        return self.flat.prompt_tokens

    @property
    def flat_cached(self) -> int:
        return self.flat.read

    @property
    def limit(self) -> float:
        return 1 - self.new_tokens / self.adr_prompt if self.adr_prompt else 0.0

    def outcome(self, layout: str) -> CacheOutcome | None:
        """The outcome of one of ``COST_LAYOUTS``."""
        return self.sliding if layout == "sliding" else self.adr if layout == "adr" else self.flat

    def as_dict(self, price: Price | None = None) -> dict[str, object]:
        data: dict[str, object] = {"turn": self.turn, "first_of_group": self.first}
        for layout in COST_LAYOUTS:
            outcome = self.outcome(layout)
            if outcome is not None:
                side: dict[str, object] = {"prompt": outcome.prompt_tokens, "cached": outcome.read,
                                           "written": dict(outcome.written_by_ttl)}
                if price is not None:
                    side["usd"] = round(Cost.of(outcome, price).usd, 8)
                data[layout] = side
        return {**data, "new_tokens": self.new_tokens, "limit": round(self.limit, 4), "cause": self.cause}


@dataclass
class CacheFigures:
    provider: str
    model: str
    lifetime_seconds: int
    requests: list[RequestFigures] = field(default_factory=list)
    price: PriceChoice | None = None  # the row the requests are billed at (None: the table has no rows for the provider)
    price_note: str | None = None  # why there is no cost, or that a default row was used

    @property
    def groups(self) -> int:
        """Cache groups: each starts with one cold request."""
        return sum(r.first for r in self.requests)

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
        if layout == "sliding":
            rows = [r for r in rows if r.sliding is not None]
            return self._rate(rows, lambda r: r.sliding.read if r.sliding else 0,
                              lambda r: r.sliding.prompt_tokens if r.sliding else 0)
        return self._rate(rows, lambda r: r.flat_cached, lambda r: r.flat_prompt)

    def limit(self, first: bool) -> float | None:
        rows = self._split(first)
        total = sum(r.adr_prompt for r in rows)
        return round(1 - sum(r.new_tokens for r in rows) / total, 4) if total else None

    def costs(self, layout: str) -> CostTotals | None:
        """Σ ``Cost.of`` over the requests of one layout (None: no price, or the layout was not replayed)."""
        if self.price is None:
            return None
        outcomes = [r.outcome(layout) for r in self.requests]
        if any(o is None for o in outcomes):
            return None
        return CostTotals.of(Cost.of(o, self.price.price) for o in outcomes if o is not None)

    def cost(self) -> dict[str, Any] | None:
        """``report economy --json``'s cost object: the price row and the totals of each layout (docs/economy.md)."""
        if self.price is None:
            return None
        data: dict[str, Any] = {"unit": "USD", "model": self.model, "price": self.price.price.as_dict()}
        for layout in COST_LAYOUTS:
            totals = self.costs(layout)
            data[layout] = totals.as_dict() if totals is not None else None
        return data

    def as_dict(self, per_request: bool = False) -> dict[str, Any]:
        later, first = self._split(False), self._split(True)
        data: dict[str, Any] = {
            "model": self.model,
            "lifetime_seconds": self.lifetime_seconds,
            "requests_first": len(first),
            "requests_later": len(later),
            "adr_later_hit_rate": self.rate("adr", False),
            "flat_later_hit_rate": self.rate("flat", False),
            "sliding_later_hit_rate": self.rate("sliding", False),
            "limit_later": self.limit(False),
            "adr_first_hit_rate": self.rate("adr", True),
            "flat_first_hit_rate": self.rate("flat", True),
            "limit_first": self.limit(True),
            "adr_prompt_tokens_per_request": _mean(r.adr_prompt for r in self.requests),
            "flat_prompt_tokens_per_request": _mean(r.flat_prompt for r in self.requests),
            "sliding_prompt_tokens_per_request": _mean(r.sliding.prompt_tokens for r in self.requests if r.sliding),
            "adr_cached_tokens_per_request": _mean(r.adr_cached for r in self.requests),
            "flat_cached_tokens_per_request": _mean(r.flat_cached for r in self.requests),
            "cost": self.cost(),
        }
        if per_request:
            price = self.price.price if self.price is not None else None
            data["per_request"] = [r.as_dict(price) for r in self.requests]
        return data


def groups_words(requests: int, groups: int) -> str:
    """``16 requests in 13 cache groups: 13 start cold, 3 later`` (each group starts with one cold request: its
    first; the others are *later*, docs/figures.md)."""
    return (f"{requests:,} request{'s' * (requests != 1)} in {groups:,} cache group{'s' * (groups != 1)}: "
            f"{groups:,} start{'s' * (groups == 1)} cold, {requests - groups:,} later")


def _share(cached: int, prompt: int) -> float:
    return cached / prompt if prompt else 0.0


def flat_vs_adr(figures: CacheFigures, headers: HeaderTokens | None = None) -> str | None:
    """Why one layout costs less per request than the other, from the figures: its prompt length against how much
    of it the cache serves (cold starts included). ``headers``: the session's header tokens, naming what makes the
    flat prompt shorter (upstream's one-line prefixes where ADR puts a header per message). None: no price."""
    adr_totals, flat_totals = figures.costs("adr"), figures.costs("flat")
    adr_usd = adr_totals.per_request if adr_totals is not None else None
    flat_usd = flat_totals.per_request if flat_totals is not None else None
    if adr_usd is None or flat_usd is None:
        return None
    if adr_usd == flat_usd:
        return "flat and ADR cost the same per request"
    cheaper, dearer = ("flat", "ADR") if flat_usd < adr_usd else ("ADR", "flat")
    prompts = {"ADR": sum(r.adr_prompt for r in figures.requests), "flat": sum(r.flat_prompt for r in figures.requests)}
    shares = {"ADR": _share(sum(r.adr_cached for r in figures.requests), prompts["ADR"]),
              "flat": _share(sum(r.flat_cached for r in figures.requests), prompts["flat"])}
    saving = 1 - min(adr_usd, flat_usd) / max(adr_usd, flat_usd)
    caching = f"{shares[cheaper]:.1%} vs {shares[dearer]:.1%} of prompt tokens cached"  # one decimal, as every cached share
    length = prompts[cheaper] / prompts[dearer] - 1 if prompts[dearer] else 0.0
    head = f"{cheaper} costs {saving:.0%} less per request than {dearer}: "
    if length < 0:
        why = f"its prompt is {-length:.0%} shorter{_shorter_because(cheaper, headers)}"
        if not shares[cheaper] and not shares[dearer]:
            return head + f"{why}, and neither has a token cached"
        if abs(shares[cheaper] - shares[dearer]) < SAME_CACHING:
            return head + f"{why}, and both cache about as much ({caching})"
        if shares[cheaper] < shares[dearer]:
            return head + f"{why}, which outweighs caching less ({caching})"
        return head + f"{why} and it caches more ({caching})"
    longer = f"its {length:.0%} longer prompt" if length > 0 else "a prompt as long"
    return head + f"it caches more ({caching}), which outweighs {longer}"


def _shorter_because(layout: str, headers: HeaderTokens | None) -> str:
    """What the flat prompt leaves out, in the session's header tokens (ADR's shorter prompt needs no reason)."""
    if layout != "flat" or headers is None or headers.totals["upstream"] >= headers.totals["adr"]:
        return ""
    if not headers.totals["upstream"]:  # upstream prefixes group messages only
        return f" (no sender prefix, where ADR's headers take {headers.totals['adr']:,} tokens over the session)"
    return (f" (its messages carry upstream's [sender:…] prefix, {headers.totals['upstream']:,} header tokens over the "
            f"session, where ADR's headers take {headers.totals['adr']:,})")


def _mean(values: Iterable[int]) -> float | None:
    items = list(values)
    return round(sum(items) / len(items), 1) if items else None


def _pipeline_config(config: Config, window: WindowConfig) -> Config:
    return config if window == config.window else dataclasses.replace(config, window=window)


def stored_model(session: Session) -> str | None:
    """The model the session's first stored reply names (None: no reply names one)."""
    return next((m.model for m in session.messages if isinstance(m, AssistantMessage) and m.model), None)


def case_for(case: ProviderCase, session: Session) -> ProviderCase:
    """``case`` with the model ``trace`` gives the session's requests for its provider (``pipeline/models.py``): a
    case on the provider's default model (the registered ones) takes the stored model when it is the provider's; a
    case naming another model is a model chosen, kept as ``--model`` is. The case's cache minimum belongs to its own
    model: another model keeps its profile's rule."""
    stored = stored_model(session)
    if stored is None or stored == case.model or case.model != default_model(case.provider) \
            or not belongs(case.provider, stored):
        return case
    return ProviderCase(case.provider, stored)


def price_for(case: ProviderCase, prices: PriceTable) -> tuple[PriceChoice | None, str | None]:
    """The row ``case`` is billed at and the note to show (a default row used, or no rows at all)."""
    choice = prices.choose(case.provider, case.model)
    if choice is None:
        return None, f"no prices for provider {case.provider}: its economy figures have no cost (add rows under prices: in zhin.yaml or --prices FILE)"
    return choice, choice.note


def simulate(session: Session, config: Config, case: ProviderCase, encoding: str = DEFAULT_ENCODING,
             headers: _HeaderCounter | None = None, prices: PriceTable | None = None) -> CacheFigures:
    """Replay ``session`` for one provider: the ADR layout through ``cache.replay.replay_cache`` (the loop
    ``report window`` shares), the flat layout of the same requests through its own simulator (a fresh one at
    each cache group: the session's prefix is cold there), and the ADR layout again under
    upstream's sliding window (``window.sliding``). Costs: ``prices`` (default: the config's table). The model is
    the session's stored one where it is ``case``'s provider's (``case_for``), as ``trace`` assembles and bills it."""
    case = case_for(case, session)
    choice, note = price_for(case, prices if prices is not None else config.price_table())
    with Pipeline.open(config, provider=case.provider, model=case.model) as pipeline:
        index = SessionIndex.of(session)
        timezone = pipeline.timezone(session)
        figures: CacheFigures | None = None
        previous: tuple[AssembledRequest, Serialized] | None = None
        flat_cache = PrefixCache()
        for replayed in replay_cache(session, pipeline, encoding, min_tokens=case.min_tokens):
            request, position = replayed.request, replayed.position
            if figures is None:
                figures = CacheFigures(request.provider, request.model, request.profile.cache.lifetime_seconds,
                                       price=choice, price_note=note)
            message = session.messages[position]
            window = visible_window(session, position, message.timestamp, config.window, index)
            if headers is not None:
                headers.timezone = timezone
                headers.add_window(window.messages)
            flat = flat_request(request, flat_history(session, window.messages, window.summary.summary if window.summary else None))
            if replayed.first:  # a new cache group: nothing of this session is cached any more
                flat_cache = PrefixCache()
            flat_outcome = cache_outcome(flat_cache, flat, serialize(flat))
            cause = diff_pair(previous[0], request, previous[1], replayed.wire, replayed.outcome.read).cause if previous else ""
            figures.requests.append(RequestFigures(
                turn=request.turn, time=replayed.time, first=replayed.first, adr=replayed.outcome, flat=flat_outcome,
                new_tokens=replayed.new_tokens, cause=cause, row_id=message.row_id,
            ))
            previous = (request, replayed.wire)
    if figures is None:
        return CacheFigures(case.provider, case.model, 0, price=choice, price_note=note)
    upstream = _pipeline_config(config, sliding(config.window))
    with Pipeline.open(upstream, provider=case.provider, model=case.model) as pipeline:
        replays = replay_cache(session, pipeline, encoding, min_tokens=case.min_tokens, limit=False)
        for row, replayed in zip(figures.requests, replays, strict=True):
            row.sliding = replayed.outcome
    return figures


# --- the bot's bill beside ADR 0041's ------------------------------------------------------------------


PAID_LABEL = "the bot paid (stored usage)"
RECORDED_LABEL = "the bot paid (recorded usage)"  # a captured body's: an exchange file's or zhin serve's log line
ADR_LABEL = "ADR 0041 would send (zhin's assembly)"
BILL_CAVEAT = ("the bot's prompts hold its own system prompt and tool schemas, which its database does not keep; "
               "ADR 0041's figures are zhin's assembly of the same requests, with zhin's system prompt and without the "
               "bot's tools: the two bills price the same requests, not the same text")


@dataclass(frozen=True)
class BillRow:
    """One request of the bot: what its stored usage says it paid, beside what the ADR layout's simulated request
    for the same turn costs; both billed at the row of the model the bot used."""

    turn: int | None  # None: a captured body (``capture`` names it)
    row_id: int | None  # the stored assistant row (its usage is the bot's side); None: a captured body
    provider: str  # as the stored reply names them (a captured body: its wire's provider)
    model: str
    price: PriceChoice | None  # the row both sides are billed at (None: no prices for the provider)
    paid: CacheOutcome | None  # the bot's stored usage (None: ``paid_missing`` says why)
    paid_missing: str | None
    adr: CacheOutcome | None  # report economy's ADR outcome of the same turn (None: ``adr_missing`` says why)
    adr_missing: str | None
    adr_case: str | None  # which simulated provider case gave it (its cache rules)
    capture: int | None = None  # a captured body's number (its usage: the exchange file or zhin serve's log)
    where: str | None = None  # its file
    recorded_prompt: int | None = None  # a captured body's real prompt tokens, where recorded (even with no bill)

    @property
    def compared(self) -> bool:
        return self.paid is not None and self.adr is not None

    def cost(self, side: CacheOutcome | None) -> Cost | None:
        return Cost.of(side, self.price.price) if side is not None and self.price is not None else None

    def as_dict(self) -> dict[str, object]:
        return {"turn": self.turn, "row_id": self.row_id, "provider": self.provider, "model": self.model,
                "price": None if self.price is None else {"provider": self.price.price.provider,
                                                          "model": self.price.price.model},
                "paid": _side_dict(self.paid, self.cost(self.paid)), "paid_missing": self.paid_missing,
                "adr": _side_dict(self.adr, self.cost(self.adr)), "adr_missing": self.adr_missing,
                "adr_case": self.adr_case, "capture": self.capture, "where": self.where,
                **({"recorded_prompt": self.recorded_prompt} if self.capture is not None else {})}


def _side_dict(outcome: CacheOutcome | None, cost: Cost | None) -> dict[str, object] | None:
    if outcome is None:
        return None
    return {"prompt": outcome.prompt_tokens, "cached": outcome.read, "written": written(outcome),
            "usd": None if cost is None else round(cost.usd, 8)}


def written(outcome: CacheOutcome) -> int:
    """The cache-write tokens a bill counts: those of a TTL (``Cost.of``'s ``cache_write_tokens``)."""
    return sum(outcome.written_by_ttl.values())


@dataclass
class SideTotals:
    """One side's sums over the compared requests: tokens always, cost over those with a price."""

    prompt: int = 0
    cached: int = 0
    written: int = 0
    cost: CostTotals = field(default_factory=CostTotals)

    def add(self, outcome: CacheOutcome, cost: Cost | None) -> None:
        self.prompt += outcome.prompt_tokens
        self.cached += outcome.read
        self.written += written(outcome)
        if cost is not None:
            self.cost.add(cost)

    def as_dict(self) -> dict[str, object]:
        return {"prompt": self.prompt, "cached": self.cached, "written": self.written,
                "cost": self.cost.as_dict() if self.cost.requests else None}


@dataclass
class SessionBill:
    """A session's requests, the bot's stored usage beside the ADR layout's simulation (``reason``: why the bot's
    side is empty — then ``rows`` is empty too)."""

    rows: list[BillRow] = field(default_factory=list)
    reason: str | None = None
    notes: list[str] = field(default_factory=list)  # price notes (a default row used, a provider without rows)
    no_adr: str | None = None  # why no request has an ADR side at all (a capture folder: no stored session)
    paid_label: str = PAID_LABEL

    def counted(self, row: BillRow) -> bool:
        """Whether a row is in the totals: both figures, or the bot's alone where the bill has no ADR side."""
        return row.paid is not None and (row.adr is not None or self.no_adr is not None)

    def totals(self) -> tuple[SideTotals, SideTotals]:
        """Both sides summed over the same requests (``counted``)."""
        paid, adr = SideTotals(), SideTotals()
        for row in filter(self.counted, self.rows):
            if row.paid is not None:
                paid.add(row.paid, row.cost(row.paid))
            if row.adr is not None:
                adr.add(row.adr, row.cost(row.adr))
        return paid, adr

    @property
    def without_usage(self) -> int:
        return sum(row.paid is None for row in self.rows)

    def as_dict(self) -> dict[str, object]:
        return {"paid_label": self.paid_label, "adr_label": ADR_LABEL, "caveat": BILL_CAVEAT, "reason": self.reason,
                "no_adr": self.no_adr, "requests": [row.as_dict() for row in self.rows],
                "totals": None if self.reason else self._totals_dict()}

    def _totals_dict(self) -> dict[str, object]:
        """Both sides over the compared requests; a bill with no ADR side (captures) has the bot's alone: the
        requests billed, no "compared" count and ``adr`` null (never a side of zeros)."""
        paid, adr = self.totals()
        counted = sum(map(self.counted, self.rows))
        if self.no_adr is not None:
            return {"requests_billed": counted, "requests_without_usage": self.without_usage,
                    "paid": paid.as_dict(), "adr": None}
        return {"requests_compared": counted, "requests_without_usage": self.without_usage,
                "paid": paid.as_dict(), "adr": adr.as_dict()}


def session_bill(session: Session, cache: dict[str, CacheFigures], prices: PriceTable) -> SessionBill:
    """Per stored reply: its usage (``cache.usage.usage_record``, the reading ``trace`` shows) and the ADR outcome of the
    same turn from the simulated case of the bot's provider, both priced by ``Cost.of`` at the bot's model's row."""
    replies = [m for m in session.messages if isinstance(m, AssistantMessage)]
    bill = SessionBill()
    choices: dict[tuple[str, str], PriceChoice | None] = {}
    # each case's requests by the stored row they produced (every case replays the same replies)
    by_row = {name: {r.row_id: r for r in figures.requests} for name, figures in cache.items()}
    turns = {row: r.turn for requests in by_row.values() for row, r in requests.items()}
    for number, message in enumerate(replies):
        record = usage_record(session.session_id, message)
        paid, missing = billed_outcome(record.usage)
        key = (record.provider, record.model)
        if key not in choices:
            choices[key], note = price_for(ProviderCase(*key), prices)
            if note and note not in bill.notes:
                bill.notes.append(note)
        request = by_row.get(record.provider, {}).get(message.row_id)
        adr_missing = None if request is not None else (
            f"provider {record.provider} is not simulated here (simulated: {', '.join(cache) or 'none'})")
        bill.rows.append(BillRow(turn=turns.get(message.row_id, number + 1), row_id=message.row_id, provider=record.provider,
                                 model=record.model, price=choices[key], paid=paid, paid_missing=missing,
                                 adr=request.adr if request is not None else None, adr_missing=adr_missing,
                                 adr_case=record.provider if request is not None else None))
    bill.reason = _no_bill_reason(bill.rows, len(replies))
    if bill.reason:
        bill.rows, bill.notes = [], []
    return bill


NO_SESSION = ("captured bodies hold no stored session for zhin to assemble: ADR 0041's side needs the bot's "
              "database (report economy SESSION --db FILE)")


@dataclass
class CaptureEconomy:
    """``report economy`` on a capture folder or a JSONL of bodies: what the bot paid per captured request."""

    source: str
    requests: int  # captured bodies
    bill: SessionBill
    notes: list[str] = field(default_factory=list)  # what the reader noticed (e.g. a log that does not match)

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "requests": self.requests, "bill": self.bill.as_dict()}


def _priced_provider(wire: str, model: str, prices: PriceTable) -> str:
    """Whose price list bills a captured body: its wire's provider, unless only another provider has a row for its
    model (a ``deepseek-chat`` body in OpenAI's wire is billed at DeepSeek's row)."""
    own = for_wire(wire).name if any(spec.wire == wire for spec in PROVIDERS.values()) else wire
    owners = [name for name, rows in prices.providers.items()
              if any(model == row or model.startswith(row + "-") for row in rows.models)]
    return own if own in owners or len(owners) != 1 else owners[0]


def capture_bill(captures: CaptureSet, prices: PriceTable) -> CaptureEconomy:
    """Per captured body: the usage recorded with it (``usage.captured_usage``) priced at its model's row."""
    bill = SessionBill(no_adr=NO_SESSION, paid_label=RECORDED_LABEL)
    choices: dict[tuple[str, str], PriceChoice | None] = {}
    for body in captures.bodies:
        usage = captured_usage(body)
        paid, missing = billed_outcome(usage)
        key = (_priced_provider(body.wire, body.model, prices), body.model)
        if key not in choices:
            choices[key], note = price_for(ProviderCase(*key), prices)
            if note and note not in bill.notes:
                bill.notes.append(note)
        prompt = usage.total_prompt if usage is not None else None
        bill.rows.append(BillRow(turn=None, row_id=None, provider=key[0], model=key[1], price=choices[key], paid=paid,
                                 paid_missing=_recorded_missing(missing, prompt), adr=None, adr_missing=None,
                                 adr_case=None, capture=body.number, where=body.where, recorded_prompt=prompt))
    bill.reason = _no_capture_bill_reason(bill.rows)
    if bill.reason and all(row.recorded_prompt is None for row in bill.rows):
        bill.rows, bill.notes = [], []
    return CaptureEconomy(captures.source, len(captures.bodies), bill, captures.notes)


NO_CACHED_COUNT = "its recorded usage does not report cached tokens"  # llama.cpp, many OpenAI-compatible servers


def _recorded_missing(missing: str | None, prompt: int | None) -> str | None:
    """Why a captured body has no bill, in the capture's words: its real prompt tokens named where recorded."""
    if missing is None:
        return None
    if missing == NO_USAGE:
        return "no usage recorded"
    if prompt is not None:
        return f"{prompt:,} prompt tokens; {NO_CACHED_COUNT}"
    return missing.replace("stored", "recorded")


def _no_capture_bill_reason(rows: list[BillRow]) -> str | None:
    """Why no captured body has a bill: nothing recorded, or usage recorded without a cache read (its prompt
    tokens are kept per row and summed here: the real figure is shown where it exists)."""
    if any(row.paid is not None for row in rows):
        return None
    prompts = [row.recorded_prompt for row in rows if row.recorded_prompt is not None]
    if prompts:
        return (f"{NO_CACHED_COUNT} ({len(prompts)} of {len(rows)} requests; {sum(prompts):,} prompt tokens recorded), "
                "so no request can be billed")
    return f"no usage recorded for any of its {len(rows)} requests (no exchange files, no {SERVE_LOG} that matches them)"


def _no_bill_reason(rows: list[BillRow], replies: int) -> str | None:
    if not replies:
        return "the session has no bot replies, so no request to bill"
    if any(row.paid is not None for row in rows):
        return None
    if all(row.paid_missing == NO_USAGE for row in rows):
        return f"no usage stored on any of its {replies} requests"
    return f"the stored usage of none of its {replies} requests reports both prompt and cached tokens"


# --- sessions -------------------------------------------------------------------------------------


@dataclass
class SessionEconomy:
    session_id: str
    messages: int
    requests: int
    headers: HeaderTokens
    cache: dict[str, CacheFigures]
    bill: SessionBill = field(default_factory=SessionBill)  # the bot's stored usage beside the ADR simulation

    def as_dict(self, per_request: bool = False) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "messages": self.messages,
            "requests": self.requests,
            "header_tokens": self.headers.as_dict(),
            "headers": self.headers.detail(),
            "cache": {name: {**figures.as_dict(per_request), "cache_groups": figures.groups,
                             "flat_vs_adr": flat_vs_adr(figures, self.headers)}
                      for name, figures in self.cache.items()},
            "bill": self.bill.as_dict(),
        }


@dataclass
class EconomyReport:
    encoding: str
    window: dict[str, object]  # window_description: shown (_cli's window_text) and passed through
    sessions: list[SessionEconomy]
    captures: list[CaptureEconomy] = field(default_factory=list)  # capture folders / JSONLs of bodies given

    @property
    def notes(self) -> list[str]:
        """Each price note once (a default row used, a provider without rows), in the order first met."""
        notes = [f.price_note for s in self.sessions for f in s.cache.values() if f.price_note]
        notes += [note for s in self.sessions for note in s.bill.notes]
        notes += [note for c in self.captures for note in (*c.notes, *c.bill.notes)]
        return list(dict.fromkeys(notes))

    def as_dict(self, per_request: bool = False) -> dict[str, object]:
        return {"version": ECONOMY_VERSION, "cache_model": CACHE_MODEL, "encoding": self.encoding, "window": self.window, "notes": self.notes,
                "sessions": [s.as_dict(per_request) for s in self.sessions],
                "captures": [c.as_dict() for c in self.captures]}


def session_economy(session: Session, config: Config, *, providers: Iterable[str] = tuple(CASES),
                    encoding: str = DEFAULT_ENCODING, prices: PriceTable | None = None) -> SessionEconomy:
    """``prices``: the table costs are computed with (default: ``config.price_table()``)."""
    counter = shared_counter(encoding)
    header_counter = _HeaderCounter(session, counter, session.timezone or "UTC")
    table = prices if prices is not None else config.price_table()
    cache: dict[str, CacheFigures] = {}
    for number, name in enumerate(providers):
        # headers do not depend on the provider: count them during the first provider's replay
        case = provider_case(name)
        assert case is not None, name  # run_economy refused unknown names
        cache[name] = simulate(session, config, case, encoding, header_counter if number == 0 else None, table)
    requests = sum(1 for m in session.messages if isinstance(m, AssistantMessage))
    return SessionEconomy(session.session_id, len(session.messages), requests, header_counter.result, cache,
                          session_bill(session, cache, table))


def window_description(window: WindowConfig) -> dict[str, object]:
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
    prices_file: Path | None = None,
    context: RunContext | None = None,
) -> EconomyReport:
    """``jobs``: sessions simulated at once in worker processes (``None``: every core; 1: here, one at a time);
    the report is the same for every value (core/parallel.py). ``progress(done, total)``: sessions simulated so
    far, first with 0 (so a bar shows its total at once), then after each one. ``prices_file``: ``--prices FILE``
(rows over the built-in table and ``zhin.yaml``'s ``prices:``). ``context``: the command's run context (it
replaces ``cwd``, ``db``, ``config_path`` and ``prices_file``): its config and prices are not read again."""
    from zhin_cli.core.errors import UsageError
    from zhin_cli.core.parallel import check_jobs, ordered_map
    from zhin_cli.pipeline.context import RunContext
    from zhin_cli.store.refs import session_refs

    chosen = list(providers or tuple(CASES))
    unknown = [p for p in chosen if provider_case(p) is None]
    if unknown:  # every registered provider can be simulated (its spec's case): only an unknown name is refused
        raise UsageError(f"--provider: {unknown_provider(unknown[0])}")
    if encoding not in RANK_FILES:
        raise UsageError(f"--encoding: unknown encoding {encoding!r} (known: {', '.join(RANK_FILES)})")
    workers = check_jobs(jobs)
    run = context or RunContext.load(config_path, cwd=cwd, db=db, prices_file=prices_file)
    config, cwd, db = run.config, run.cwd, run.db
    prices = run.prices  # read once, before any session: a bad row is one error, at once
    if not refs and db is None:
        raise UsageError("name the sessions, or give the database whose every session to report (--db)")
    capture_refs = [ref for ref in refs if is_captures(cwd / ref)]
    session_list = [ref for ref in refs if ref not in capture_refs]
    captures = [capture_bill(read_captures(cwd / ref), prices) for ref in capture_refs]
    job_list = [EconomyJob(ref, db, cwd, config, tuple(chosen), encoding, after_load, prices)
                for ref in (session_refs(session_list, all_sessions=not refs, db=db, cwd=cwd)
                            if session_list or not refs else [])]
    if progress is not None:
        progress(0, len(job_list))
    return EconomyReport(encoding, window_description(config.window),
                         list(ordered_map(economy_job, job_list, jobs=workers, done=progress,
                                          prepare=functools.partial(shared_counter, encoding))), captures)


def is_captures(path: Path) -> bool:
    """A capture folder (numbered request bodies) or a JSONL whose lines are request bodies, not a session. A name
    the file system cannot hold is neither (a 256+ character session id is looked up in the database, as
    ``store._is_file`` has it)."""
    try:
        return is_capture_folder(path) or is_body_jsonl(path)
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return False
        raise


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
    prices: PriceTable | None = None


def economy_job(job: EconomyJob) -> SessionEconomy:
    """Load one session and simulate it; one at a time, so a report over many sessions holds one in memory."""
    from zhin_cli.store import load_session

    session = load_session(job.ref, db=job.db, cwd=job.cwd)
    if job.after_load is not None:
        job.after_load()
    return session_economy(session, job.config, providers=job.providers, encoding=job.encoding, prices=job.prices)


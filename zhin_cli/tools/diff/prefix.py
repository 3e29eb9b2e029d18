"""``zhin prefix-diff`` as a library: where consecutive requests stop sharing bytes, why, and what the
provider's prompt cache would still hit (ADR 0041 §5; reference/providers.md §6).

A request is serialised once (``serialize``), in the wire model's cache order (``zhin_cli.wire``: tools →
system → messages; the model is compared on its own), two ways side by side: as JSON *chunks* (one per
top-level region and one per message, with the glue between them) for byte offsets and excerpts, and as the
cache simulator's token plan (``zhin_cli.cache.plan``) for tokens. Two requests are compared chunk by chunk
(``memcmp``), and only the first differing chunk byte by byte, so the work per pair is proportional to the
number of messages, not to their size. Tokens are counted on the text the model reads (memoised per block),
never by decoding bytes back; ``prompt_tokens`` is the one definition (docs/tokens.md) and the cached tokens
come from the one cache simulator (``zhin_cli.cache.PrefixCache``), fed the session's requests in order — the
same figures ``zhin serve`` answers for the same bodies.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from zhin_cli.cache import CacheOutcome, Plan, PrefixCache, cached_share, common_prefix_length, plan, shared_tokens
from zhin_cli.cache.prices import Cost, CostTotals, Price, PriceTable, format_share
from zhin_cli.core.terminaltext import MARK
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.providers import PROVIDERS, Capabilities
from zhin_cli.wire import WireFormat, wire_for

CAUSES = ("append", "tail", "window_shift", "system_changed", "tools_changed", "messages_changed", "model_changed")
EXPECTED = frozenset({"append", "tail", "window_shift"})
DEFAULT_FAIL_ON = tuple(cause for cause in CAUSES if cause not in EXPECTED)
DIFF_VERSION = 1
EXCERPT = 40

# What each cause means, for legends (text output, the HTML report): one sentence each.
CAUSE_MEANINGS: dict[str, str] = {
    "append": "only new messages were added: the previous request is a prefix of this one",
    "tail": "the previous runtime tail (scene and state lines at the end) was replaced; everything before it is "
            "unchanged (ADR 0045)",
    "window_shift": "the history window moved (tail limit or compaction): the history starts at another message",
    "system_changed": "the system prompt (or a fixed preset entry) changed: nothing after the change is cached",
    "tools_changed": "the tool definitions (or their order) changed: nothing after them is cached",
    "messages_changed": "an earlier history message was rewritten: nothing after it is cached",
    "model_changed": "another model: the cache is kept per model, so nothing is read",
}


@dataclass(frozen=True)
class Chunk:
    label: str  # "tools", "system", "message", "glue"
    data: bytes
    message_index: int = -1


@dataclass
class Serialized:
    """One request, serialised once: JSON chunks (bytes) and the cache's token plan."""

    model: str
    chunks: list[Chunk]
    plan: Plan

    @property
    def data(self) -> bytes:
        return b"".join(c.data for c in self.chunks)

    @property
    def prompt_tokens(self) -> int:
        return self.plan.prompt_tokens


def _dumps(value: Any) -> bytes:
    if isinstance(value, dict) and len(value) == 2 and isinstance(value.get("content"), str) and isinstance(value.get("role"), str):
        return _plain_message(*value.items())
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


@functools.lru_cache(maxsize=16384)
def _plain_message(first: tuple[str, str], second: tuple[str, str]) -> bytes:
    """A ``{"role", "content"}`` message's JSON, memoised: a replay sends the same history messages every turn."""
    return json.dumps(dict((first, second)), ensure_ascii=False, separators=(",", ":")).encode()


def wire_of(request: AssembledRequest) -> WireFormat:
    """The wire model of the profile that rendered ``request``."""
    return wire_for(request.profile.wire)


def serialize(request: AssembledRequest) -> Serialized:
    return serialize_body(request.request, wire_of(request), request.model, request.encoding)


def serialize_body(body: dict[str, Any], wire: WireFormat, model: str, encoding: str) -> Serialized:
    """A wire body serialised once (``serialize`` for zhin's own requests; a captured body is only its body)."""
    chunks: list[Chunk] = []
    first = True
    for key in wire.regions:
        if key not in body:
            continue
        glue = ("{" if first else ",") + json.dumps(key) + ":"
        first = False
        if key == wire.message_key:
            chunks.append(Chunk("glue", (glue + "[").encode()))
            for index, message in enumerate(body[key]):
                if index:
                    chunks.append(Chunk("glue", b","))
                chunks.append(Chunk("message", _dumps(message), index))
            chunks.append(Chunk("glue", b"]"))
        else:
            chunks.append(Chunk("glue", glue.encode()))
            chunks.append(Chunk("tools" if key == "tools" else "system", _dumps(body[key])))
    chunks.append(Chunk("glue", b"}"))
    return Serialized(model=model, chunks=chunks, plan=plan(body, wire, encoding))


@dataclass
class Divergence:
    offset: int  # first differing byte
    chunk: int  # index of the chunk it falls in (in the newer request)
    common_tokens: int


def _divergence(old: Serialized, new: Serialized) -> Divergence:
    offset = 0
    tokens = shared_tokens(old.plan, new.plan)
    for index, (a, b) in enumerate(zip(old.chunks, new.chunks, strict=False)):
        if a.data == b.data:
            offset += len(a.data)
            continue
        return Divergence(offset + common_prefix_length(a.data, b.data), index, tokens)
    index = min(len(old.chunks), len(new.chunks))
    return Divergence(offset, index, tokens)


@dataclass(frozen=True)
class RealUsage:
    """What the provider reported for a captured request (its usage object, or ``zhin serve``'s log line),
    shown beside the simulator's figures; None where the source did not say."""

    prompt_tokens: int | None
    cached_tokens: int | None
    written_tokens: int | None
    source: str  # "exchange" (serve --upstream's exchange file) | "zhin-serve.log"
    block_tokens: int = 1  # the simulated provider's cache granularity (``CacheRules.step_tokens``)

    def difference(self, simulated_cached: int) -> int | None:
        """The real cache read minus the simulator's (None: the real read is not known)."""
        return None if self.cached_tokens is None else self.cached_tokens - simulated_cached

    def tolerance(self, simulated_cached: int) -> int:
        """How far the two reads may differ and agree: one cache block, or the tokenizers' slack — the simulator
        counts with tiktoken, not the provider's tokenizer — whichever is larger."""
        larger = max(self.cached_tokens or 0, simulated_cached)
        return max(self.block_tokens, math.ceil(larger * TOKENIZER_SLACK))

    def agrees(self, simulated_cached: int) -> bool | None:
        """Both hit or both miss, their reads within ``tolerance`` (None: the real read is not known). A hit where
        the simulator sees none, or the reverse, never agrees: that is what to read (docs/captures.md)."""
        difference = self.difference(simulated_cached)
        if difference is None or self.cached_tokens is None:
            return None
        same_outcome = (self.cached_tokens > 0) == (simulated_cached > 0)
        return same_outcome and abs(difference) <= self.tolerance(simulated_cached)

    def as_dict(self, simulated_cached: int) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "cache_write_tokens": self.written_tokens, "source": self.source,
                "difference": self.difference(simulated_cached),
                "tolerance": None if self.cached_tokens is None else self.tolerance(simulated_cached),
                "agrees": self.agrees(simulated_cached)}


TOKENIZER_SLACK = 0.05  # a real cache read within 5 % of the simulator's agrees, whatever the cache's granularity


@dataclass
class PairDiff:
    from_turn: int
    to_turn: int
    cause: str
    common_prefix_bytes: int
    common_prefix_tokens: int
    prompt_tokens: int
    message_index: int | None
    segment: str | None
    before: str
    after: str
    cached_tokens: int
    cache_hit: bool
    detail: str = ""
    # index in ``before``/``after`` (characters) where the first differing byte's character starts
    excerpt_mark: int = 0
    # why nothing is cached although a prefix is shared (``uncached_reason``): a code and one sentence
    uncached_code: str = ""
    uncached_reason: str = ""
    cost: Cost | None = None  # the newer request's input cost (``Pricing``); None: no price for its provider
    real: RealUsage | None = None  # a captured request: what its provider really reported (None: not recorded)

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "from_turn": self.from_turn,
            "to_turn": self.to_turn,
            "cause": self.cause,
            "detail": self.detail,
            "common_prefix": {"bytes": self.common_prefix_bytes, "tokens": self.common_prefix_tokens},
            "first_divergence": {"offset": self.common_prefix_bytes, "message_index": self.message_index, "segment": self.segment,
                                 "excerpt_index": self.excerpt_mark},
            "before": self.before,
            "after": self.after,
            "cache": {"hit": self.cache_hit, "cached_tokens": self.cached_tokens, "prompt_tokens": self.prompt_tokens,
                      "cached_share": round(self.cached_share, 4),
                      "uncached_reason": {"code": self.uncached_code, "text": self.uncached_reason} if self.uncached_code else None},
            **({"cost": cost_dict(self.cost)} if self.cost is not None else {}),
            CACHE_MODEL: WARM,  # its cached tokens and cost: after every request before it (docs/figures.md)
            **({"real": self.real.as_dict(self.cached_tokens)} if self.real is not None else {}),
        }

    @property
    def marked_before(self) -> str:
        """``before`` with :data:`MARK` where the two requests start to differ."""
        return self.before[: self.excerpt_mark] + MARK + self.before[self.excerpt_mark :]

    @property
    def marked_after(self) -> str:
        return self.after[: self.excerpt_mark] + MARK + self.after[self.excerpt_mark :]


@dataclass
class Hint:
    segment: str
    kind: str  # clock_time, date, counter, reordered, changes
    turns: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"segment": self.segment, "kind": self.kind, "turns": self.turns[:20], "count": len(self.turns)}


def _tail_index(request: AssembledRequest) -> int | None:
    return next((p.message_index for p in request.parts if p.segment_id == "tail"), None)


def _messages(request: AssembledRequest) -> list[Any]:
    return wire_of(request).messages(request.request)


def _segment_at(request: AssembledRequest, chunk: Chunk, old: AssembledRequest) -> str | None:
    if chunk.label == "tools":
        return "tools"
    if chunk.label == "system" or (chunk.label == "message" and chunk.message_index == 0 and _is_system_message(request)):
        return _system_segment(old, request)
    if chunk.label == "message":
        ids = [p.segment_id for p in request.parts if p.message_index == chunk.message_index]
        return ids[0] if ids else None
    return None


def _is_system_message(request: AssembledRequest) -> bool:
    messages = _messages(request)
    return bool(messages) and isinstance(messages[0], dict) and messages[0].get("role") in ("system", "developer") and bool(request.system_texts)


def _is_fixed_message(request: AssembledRequest, index: int | None) -> bool:
    """A wire message made only of the system prompt or preset entries (``preset:<id>``): the fixed part a
    preset lays out around the history, so a change there is ``system_changed``, not ``messages_changed``."""
    ids = [p.segment_id for p in request.parts if p.message_index == index]
    return bool(ids) and all(i == "system" or i.startswith("preset:") for i in ids)


def _system_segment(old: AssembledRequest, new: AssembledRequest) -> str | None:
    """The first system-prompt segment whose text differs between the two requests."""
    for (old_id, old_text), (new_id, new_text) in zip(old.system_texts, new.system_texts, strict=False):
        if old_id != new_id or old_text != new_text:
            return new_id
    if len(old.system_texts) != len(new.system_texts):
        longer = new.system_texts if len(new.system_texts) > len(old.system_texts) else old.system_texts
        return longer[min(len(old.system_texts), len(new.system_texts))][0]
    return None


def _classify(old: AssembledRequest, new: AssembledRequest, a: Serialized, b: Serialized, div: Divergence) -> tuple[str, str]:
    if old.model != new.model:
        return "model_changed", f"{old.model} → {new.model}"
    if div.chunk >= len(b.chunks) or div.chunk >= len(a.chunks):
        return "append", ""
    chunk = b.chunks[div.chunk]
    if chunk.label == "tools":
        names_old, names_new = sorted(wire_of(old).tool_names(old.request)), sorted(wire_of(new).tool_names(new.request))
        return "tools_changed", "same tools, different order" if names_old == names_new else "tool definitions differ"
    if chunk.label == "system" or (chunk.label == "message" and chunk.message_index == 0 and _is_system_message(new)):
        return "system_changed", ""
    if chunk.label == "message" and _is_fixed_message(old, chunk.message_index) and _is_fixed_message(new, chunk.message_index):
        return "system_changed", ""
    moved = old.window_start != new.window_start
    if moved:
        kind = "compaction" if old.window.summary_anchor != new.window.summary_anchor else "tail limit"
        return "window_shift", kind
    if chunk.label == "glue" and a.chunks[div.chunk].data == b"]":
        return "append", ""
    old_messages, new_messages = _messages(old), _messages(new)
    index = chunk.message_index if chunk.label == "message" else len(old_messages)
    old_tail, new_tail = old.tail_text, new.tail_text
    old_wire, new_wire = wire_of(old), wire_of(new)
    same_rest = all(
        old_wire.without_tail(x, old_tail) == new_wire.without_tail(y, new_tail)
        for x, y in zip(old_messages[index:], new_messages[index : len(old_messages)], strict=False)
    )
    tail_index = _tail_index(old)
    if same_rest and tail_index is not None and index <= tail_index:
        return "tail", "the previous runtime tail was replaced (ADR 0045)"
    return "messages_changed", f"message {index} was rewritten"


class Routed(Protocol):
    """What the cache and the price table need of a request: zhin's own (``AssembledRequest``) or a captured body
    (``BodyRequest``)."""

    @property
    def profile(self) -> Capabilities: ...

    @property
    def model(self) -> str: ...

    @property
    def provider(self) -> str: ...


def cache_key(request: Routed) -> tuple[str, str]:
    """Whose cache entries a request may read: one profile and model (``zhin serve`` keys its cache the same)."""
    return (request.profile.name, request.model)


def cache_outcome(cache: PrefixCache, request: Routed, serialized: Serialized) -> CacheOutcome:
    """Replay ``request`` against ``cache`` (then remember it): what its provider would read, write and leave
    uncached (``Cost.of`` prices it)."""
    return cache.account(cache_key(request), serialized.plan, None, request.profile.cache)


# A profile billed at another provider's rows (the price table is keyed by the provider that sends the bill).


# The cache a figure's request meets (docs/figures.md): a JSON document names it beside the cached tokens and costs.
COLD = "cold"  # an empty cache: the request alone (``trace --turn N``)
WARM = "warm"  # one never-expiring cache fed every request before it in order: a replay (``trace --all``, prefix-diff)
CACHE_MODEL = "cache_model"  # the key that names it (``"cache"`` is a pair's own object of cached figures)


def cost_dict(cost: Cost) -> dict[str, Any]:
    """A request's cost as ``--json`` shows it: the three token counts and ``usd``."""
    return {"uncached_tokens": cost.uncached_tokens, "cached_tokens": cost.cached_tokens,
            "cache_write_tokens": cost.cache_write_tokens, "usd": round(cost.usd, 8)}


@dataclass
class Pricing:
    """What a replay's requests cost: the row of each (provider, model) chosen once, each note kept once (a
    default row used). A provider without rows (local servers, Gemini) has no cost and no note: nothing is shown."""

    table: PriceTable | None
    notes: list[str] = field(default_factory=list)
    _rows: dict[tuple[str, str], Price | None] = field(default_factory=dict, repr=False)

    def price(self, request: Routed) -> Price | None:
        key = (request.provider, request.model)  # PriceTable.choose maps profiles to price lists
        if key not in self._rows:
            choice = self.table.choose(*key) if self.table is not None else None
            if choice is not None and choice.note and choice.note not in self.notes:
                self.notes.append(choice.note)
            self._rows[key] = choice.price if choice is not None else None
        return self._rows[key]

    def cost(self, request: Routed, outcome: CacheOutcome) -> Cost | None:
        """``Cost.of`` at the request's row (the one cost definition), None without one."""
        price = self.price(request)
        return Cost.of(outcome, price) if price is not None else None


def cached_tokens(cache: PrefixCache, request: AssembledRequest, serialized: Serialized) -> int:
    """Replay ``request`` against ``cache`` (then remember it): the tokens its provider would read from it."""
    return cache_outcome(cache, request, serialized).read


def _excerpt_start(data: bytes, offset: int) -> int:
    """Where an excerpt around ``offset`` starts: ``EXCERPT`` bytes before it, moved to the start of a UTF-8
    character (never half a character, shown as U+FFFD)."""
    start = max(0, offset - EXCERPT)
    while 0 < start < len(data) and data[start] & 0xC0 == 0x80:
        start += 1
    return min(start, offset) if offset >= 0 else 0


def _excerpt(data: bytes, offset: int) -> str:
    end = offset + EXCERPT
    while end < len(data) and data[end] & 0xC0 == 0x80:  # the last character whole too
        end += 1
    return data[_excerpt_start(data, offset) : end].decode(errors="replace")


def _excerpt_mark(data: bytes, offset: int) -> int:
    """Where, in ``_excerpt(data, offset)``, the character holding byte ``offset`` starts (a shared first byte of
    two different UTF-8 characters is part of the divergence, not of the common text)."""
    start = _excerpt_start(data, offset)
    boundary = offset
    while boundary > start and boundary < len(data) and data[boundary] & 0xC0 == 0x80:
        boundary -= 1
    return len(data[start:boundary].decode(errors="replace"))


def provider_name(profile: str) -> str:
    """``OpenAI`` for ``openai``: how sentences name a provider profile (its spec's ``display``; else its name)."""
    spec = PROVIDERS.get(profile)
    return spec.title if spec is not None else profile


def uncached_reason(old: Routed, new: Routed, a: Plan, b: Plan, common: int, cached: int) -> tuple[str, str]:
    """Why the cache reads nothing of ``new`` although it shares ``common`` tokens with ``old``: ``(code, sentence)``,
    from the provider's cache rules (``zhin_cli.cache``); ``("", "")`` when something is cached or nothing is shared.

    Codes: ``model_changed``, ``no_cache``, ``below_minimum``, ``no_breakpoint``, ``before_breakpoint``,
    ``beyond_lookback``, ``not_remembered``."""
    if cached > 0 or common <= 0:
        return "", ""
    rules = new.profile.cache
    name = provider_name(new.profile.name)
    if cache_key(old) != cache_key(new):
        return "model_changed", f"{new.model}'s cache holds nothing {old.model} wrote (the cache is kept per model)"
    if rules.mechanism == "none":
        return "no_cache", f"{name} has no prompt cache"
    if rules.mechanism == "automatic":
        if common < rules.min_tokens:
            return "below_minimum", (f"the {common:,} shared tokens are below {name}'s {rules.min_tokens:,}-token minimum "
                                     "for a cache hit")
        return "not_remembered", "the earlier request is no longer in the simulated cache"
    # explicit (Anthropic): a request reads an entry an earlier breakpoint wrote
    if not b.breakpoints:
        return "no_breakpoint", "the request has no cache_control breakpoint: nothing of it is cached"
    written = [index for index, _ in a.breakpoints if a.ends[index] >= rules.min_tokens]
    if not written:
        ends = [a.ends[index] for index, _ in a.breakpoints]
        if not ends:
            return "no_breakpoint", "the previous request has no cache_control breakpoint: it wrote no cache entry"
        return "below_minimum", (f"the previous request's breakpoints end at {max(ends):,} tokens, below {name}'s "
                                 f"{rules.min_tokens:,}-token minimum: it wrote no cache entry")
    shared = [index for index in written if a.ends[index] <= common]
    if not shared:
        first = a.ends[min(written)]
        return "before_breakpoint", (f"the requests differ at token {common:,}, before the previous request's first cache "
                                     f"breakpoint (token {first:,}): no cache entry is a prefix of this request")
    from zhin_cli.cache import LOOKBACK_BLOCKS

    entry = max(shared)
    marks = [index for index, _ in b.breakpoints]
    if all(not 0 <= mark - entry < LOOKBACK_BLOCKS for mark in marks):
        return "beyond_lookback", (f"the shared cache entry ends at block {entry} (token {a.ends[entry]:,}), more than "
                                   f"{LOOKBACK_BLOCKS} blocks before this request's breakpoints (blocks "
                                   f"{', '.join(map(str, marks))}): {name} looks back {LOOKBACK_BLOCKS} blocks")
    return "not_remembered", "the earlier cache entry is no longer in the simulated cache"


def diff_pair(old: AssembledRequest, new: AssembledRequest, a: Serialized | None = None, b: Serialized | None = None,
              cached: int | None = None) -> PairDiff:
    """Compare two requests. ``cached``: what the session's cache simulator read for ``new`` (``diff_turns``);
    without it, a cache that saw only ``old``."""
    a = a or serialize(old)
    b = b or serialize(new)
    div = _divergence(a, b)
    cause, detail = _classify(old, new, a, b, div)
    chunk = b.chunks[div.chunk] if div.chunk < len(b.chunks) else None
    if cached is None:
        cache = PrefixCache()
        cached_tokens(cache, old, a)
        cached = cached_tokens(cache, new, b)
    data_a, data_b = a.data, b.data
    code, reason = uncached_reason(old, new, a.plan, b.plan, div.common_tokens, cached)
    return PairDiff(
        from_turn=old.turn,
        to_turn=new.turn,
        cause=cause,
        detail=detail,
        common_prefix_bytes=div.offset,
        common_prefix_tokens=div.common_tokens,
        prompt_tokens=b.prompt_tokens,
        message_index=chunk.message_index if chunk is not None and chunk.label == "message" else None,
        segment="tail" if cause == "tail" else (_segment_at(new, chunk, old) if chunk is not None else None),
        before=_excerpt(data_a, div.offset),
        after=_excerpt(data_b, div.offset),
        cached_tokens=cached,
        cache_hit=cached > 0,
        excerpt_mark=_excerpt_mark(data_b, div.offset),
        uncached_code=code,
        uncached_reason=reason,
    )


# --- captured bodies: requests known only by their wire body -------------------------------------------------


@dataclass(frozen=True)
class BodyRequest:
    """A request known only by its wire body (a captured one): no segments, no window, no runtime tail. ``turn``
    is its capture number (a JSONL's line number): what a pair's ``from_turn``/``to_turn`` name."""

    turn: int
    body: dict[str, Any]
    wire: WireFormat
    model: str
    provider: str
    profile: Capabilities
    encoding: str

    @property
    def messages(self) -> list[Any]:
        return self.wire.messages(self.body)

    @property
    def system_messages(self) -> int:
        """Leading system/developer messages (OpenAI puts the system prompt in the message list)."""
        messages = self.messages
        count = 0
        while count < len(messages) and self.wire.role(messages[count]) in ("system", "developer"):
            count += 1
        return count

    def serialize(self) -> Serialized:
        return serialize_body(self.body, self.wire, self.model, self.encoding)


def message_text(wire: WireFormat, message: Any) -> str:
    """A message's text blocks joined ("" for a message the wire model cannot read)."""
    try:
        return "\n".join(wire.message_texts(message))
    except (AttributeError, TypeError, KeyError):
        return ""


def continues(wire: WireFormat, old: Any, new: Any) -> bool:
    """The same message, or the same role with text added before or after the old text (a re-rendered row)."""
    if old == new:
        return True
    if wire.role(old) != wire.role(new):
        return False
    a, b = message_text(wire, old), message_text(wire, new)
    if not a or not b:
        return False
    shorter, longer = (a, b) if len(a) <= len(b) else (b, a)
    return longer.endswith(shorter) or longer.startswith(shorter)


def _tools_detail(old: BodyRequest, new: BodyRequest) -> str:
    names_old, names_new = old.wire.tool_names(old.body), new.wire.tool_names(new.body)
    if sorted(names_old) == sorted(names_new):
        return "same tools, different order" if names_old != names_new else "tool definitions differ"
    added = [n for n in names_new if n not in names_old]
    removed = [n for n in names_old if n not in names_new]
    change = ", ".join([*(f"+{n}" for n in added), *(f"-{n}" for n in removed)])
    return f"{len(names_old)} → {len(names_new)} tool schemas ({change})"


def _classify_bodies(old: BodyRequest, new: BodyRequest, a: Serialized, b: Serialized, div: Divergence) -> tuple[str, str]:
    """The cause of a break between two captured bodies: what zhin can tell from the bodies alone."""
    if old.model != new.model:
        return "model_changed", f"{old.model} → {new.model}"
    if div.chunk >= len(b.chunks) or div.chunk >= len(a.chunks):
        return "append", ""
    chunk = b.chunks[div.chunk]
    if chunk.label == "tools":
        return "tools_changed", _tools_detail(old, new)
    if chunk.label == "system" or (chunk.label == "message" and chunk.message_index < min(old.system_messages, new.system_messages)):
        return "system_changed", ""
    if chunk.label == "glue" and a.chunks[div.chunk].data == b"]":
        return "append", ""
    index = chunk.message_index if chunk.label == "message" else len(old.messages)
    if index <= max(old.system_messages, new.system_messages) and _history_dropped(old, new):
        return "window_shift", "the history starts at another message: the first ones were dropped"
    if old.messages[index + 1 :] == new.messages[index + 1 : len(old.messages)] and _dropped_tail(old, new, index):
        return "tail", "the end of the previous request's last message was dropped (a runtime tail)"
    role = new.wire.role(new.messages[index]) if index < len(new.messages) else "?"
    return "messages_changed", f"message {index} ({role}) was rewritten"


def _history_dropped(old: BodyRequest, new: BodyRequest) -> bool:
    """The previous request's first history message is nowhere in the new one, not even re-rendered: the history
    window moved (or was compacted) rather than a message being rewritten."""
    if old.system_messages >= len(old.messages):
        return False
    first = old.messages[old.system_messages]
    return not any(continues(old.wire, first, message) for message in new.messages[new.system_messages :])


def _dropped_tail(old: BodyRequest, new: BodyRequest, index: int) -> bool:
    """Message ``index`` comes back with only its end cut off (the text before it, and every later message of the
    previous request, unchanged): a runtime tail (ADR 0045) — not a rewrite, which changes or adds text before it."""
    if index >= len(new.messages):
        return False
    before, after = old.messages[index], new.messages[index]
    if old.wire.role(before) != new.wire.role(after):
        return False
    text_before, text_after = message_text(old.wire, before), message_text(new.wire, after)
    return bool(text_after) and len(text_after) < len(text_before) and text_before.startswith(text_after)


def diff_body_pair(old: BodyRequest, new: BodyRequest, a: Serialized, b: Serialized, cached: int) -> PairDiff:
    """Compare two captured bodies of one conversation (``cached``: what the capture run's one cache simulator
    read for ``new``)."""
    div = _divergence(a, b)
    cause, detail = _classify_bodies(old, new, a, b, div)
    chunk = b.chunks[div.chunk] if div.chunk < len(b.chunks) else None
    segment = None
    if chunk is not None and cause in ("tools_changed", "system_changed"):
        segment = "tools" if cause == "tools_changed" else "system"
    code, reason = uncached_reason(old, new, a.plan, b.plan, div.common_tokens, cached)
    data_a, data_b = a.data, b.data
    return PairDiff(
        from_turn=old.turn, to_turn=new.turn, cause=cause, detail=detail, common_prefix_bytes=div.offset,
        common_prefix_tokens=div.common_tokens, prompt_tokens=b.prompt_tokens,
        message_index=chunk.message_index if chunk is not None and chunk.label == "message" else None,
        segment=segment, before=_excerpt(data_a, div.offset), after=_excerpt(data_b, div.offset),
        cached_tokens=cached, cache_hit=cached > 0, excerpt_mark=_excerpt_mark(data_b, div.offset),
        uncached_code=code, uncached_reason=reason,
    )


_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(:\d{2})?\b")
_DATE = re.compile(r"\b\d{4}[-/.]\d{1,2}[-/.]\d{1,2}\b")
_NUMBER = re.compile(r"\d+")


def _hint_kind(old: str, new: str) -> str:
    if sorted(old.split()) == sorted(new.split()):
        return "reordered"
    if _CLOCK.sub("", old) == _CLOCK.sub("", new):
        return "clock_time"
    if _DATE.sub("", old) == _DATE.sub("", new):
        return "date"
    if _NUMBER.sub("", old) == _NUMBER.sub("", new):
        return "counter"
    return "changes"


@dataclass(frozen=True)
class SegmentSource:
    """Where a segment's text comes from, for annotations: a file and (where known) a line."""

    file: str | None = None
    line: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line}


@dataclass
class SessionDiff:
    session_id: str
    provider: str
    model: str
    turns: int = 0
    pairs: list[PairDiff] = field(default_factory=list)
    hints: dict[tuple[str, str], Hint] = field(default_factory=dict)
    # segment id (and "tools", "window") → where it is defined, for the segments its pairs name (``segment_sources``)
    sources: dict[str, SegmentSource] = field(default_factory=dict)
    costs: CostTotals | None = None  # every request's cost, the first included (None: no price)
    notes: list[str] = field(default_factory=list)  # price notes (a default row used)
    captured: bool = False  # a conversation of captured bodies: turns are capture numbers
    layout: str | None = None  # what assembled the requests (``trace.layout_name``); None for captured bodies

    def unexpected(self, fail_on: Iterable[str]) -> list[PairDiff]:
        causes = set(fail_on)
        return [p for p in self.pairs if p.cause in causes]

    def summary(self) -> dict[str, Any]:
        by_cause = {c: sum(1 for p in self.pairs if p.cause == c) for c in CAUSES}
        share = cached_share((p.prompt_tokens, p.cached_tokens) for p in self.pairs)  # a pair's request is a later one
        data = {"pairs": len(self.pairs), "causes": {c: n for c, n in by_cause.items() if n},
                "cache_hits": sum(1 for p in self.pairs if p.cache_hit), "cached_share": round(share, 4),
                CACHE_MODEL: WARM}
        if self.costs is not None:
            data["cost"] = {"unit": "USD", **self.costs.as_dict()}
        return data

    def pair_dict(self, pair: PairDiff) -> dict[str, Any]:
        """One pair as ``--json`` lists it and ``--jsonl`` streams it: the pair, named by its session."""
        return {"session_id": self.session_id, **pair.as_dict()}

    def as_dict(self, fail_on: Iterable[str]) -> dict[str, Any]:
        return {"session_id": self.session_id, "provider": self.provider, "model": self.model, "turns": self.turns,
                **({"captured": True} if self.captured else {}), **({"layout": self.layout} if self.layout else {}),
                "summary": self.summary(), "unexpected": len(self.unexpected(fail_on)),
                "pairs": [self.pair_dict(p) for p in self.pairs], "hints": [h.as_dict() for h in self.hints.values()],
                "sources": {k: v.as_dict() for k, v in self.sources.items()}}


def source_key(pair: PairDiff) -> str | None:
    """Which entry of ``SessionDiff.sources`` says where ``pair``'s break comes from: the window's config for a
    shift, no file for a model change, else the segment it falls in."""
    if pair.cause == "window_shift":
        return "window"
    if pair.cause == "model_changed":
        return None
    return pair.segment


def turn_ranges(turns: Iterable[int], limit: int = 8) -> str:
    """``3–17, 20, 22–23``: consecutive turns as ranges (at most ``limit`` ranges, then ``…``)."""
    ranges: list[tuple[int, int]] = []
    for turn in turns:
        if ranges and turn == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], turn)
        else:
            ranges.append((turn, turn))
    shown = [f"{a}–{b}" if b > a else str(a) for a, b in ranges[:limit]]
    return ", ".join(shown) + (", …" if len(ranges) > limit else "")


@dataclass
class PairGroup:
    """Pairs that tell the same story (the same break, or the same reason for 0 cached): shown once, first one shown."""

    key: tuple[str, ...]
    pairs: list[PairDiff] = field(default_factory=list)

    @property
    def first(self) -> PairDiff:
        return self.pairs[0]

    @property
    def turns(self) -> list[int]:
        return [p.to_turn for p in self.pairs]


def group_breaks(pairs: Iterable[PairDiff]) -> list[PairGroup]:
    """Identical breaks collapsed, in order of first appearance: same cause, segment and detail (a rewritten
    message's index aside)."""
    groups: dict[tuple[str, ...], PairGroup] = {}
    for pair in pairs:
        detail = "" if pair.cause == "messages_changed" else pair.detail
        key = (pair.cause, pair.segment or "", detail)
        groups.setdefault(key, PairGroup(key)).pairs.append(pair)
    return list(groups.values())


def group_uncached(pairs: Iterable[PairDiff]) -> list[PairGroup]:
    """Pairs whose cache reads nothing although a prefix is shared, grouped by the reason's code."""
    groups: dict[tuple[str, ...], PairGroup] = {}
    for pair in pairs:
        if pair.uncached_code:
            groups.setdefault((pair.uncached_code,), PairGroup((pair.uncached_code,))).pairs.append(pair)
    return list(groups.values())


class TurnDiffer:
    """A session's turn-to-turn diff, fed one request at a time: holds only the previous request and the cache
    simulator's bounded store (``diff_turns`` for one replay; ``diff_configs`` runs two side by side)."""

    def __init__(self, session_id: str, on_pair: Callable[[SessionDiff, PairDiff], None] | None = None,
                 prices: PriceTable | None = None) -> None:
        self.session_id = session_id
        self.on_pair = on_pair  # called with each pair as soon as it is diffed (``--jsonl`` streams it)
        self.cache = PrefixCache()
        self.pricing = Pricing(prices)
        self.previous: tuple[AssembledRequest, Serialized] | None = None
        self.diff: SessionDiff | None = None
        self.last_tail_shift: int | None = None

    def add(self, request: AssembledRequest, serialized: Serialized | None = None) -> PairDiff | None:
        serialized = serialized or serialize(request)
        outcome = cache_outcome(self.cache, request, serialized)
        cached = outcome.read
        if self.diff is None:
            self.diff = SessionDiff(self.session_id, request.provider, request.model, notes=self.pricing.notes)
        self.diff.turns += 1
        cost = self.pricing.cost(request, outcome)
        if cost is not None:
            self.diff.costs = self.diff.costs or CostTotals()
            self.diff.costs.add(cost)
        pair = None
        if self.previous is not None:
            previous = self.previous[0]
            pair = diff_pair(previous, request, self.previous[1], serialized, cached)
            pair.cost = cost
            self.diff.pairs.append(pair)
            self._hints(previous, request, pair)
            if self.on_pair is not None:
                self.on_pair(self.diff, pair)
        self.previous = (request, serialized)
        return pair

    def _hints(self, previous: AssembledRequest, request: AssembledRequest, pair: PairDiff) -> None:
        assert self.diff is not None
        if pair.cause == "window_shift" and pair.detail == "tail limit":
            # Hysteresis moves the window once per (max_messages - cut_to) messages. Shifts on two turns in a
            # row mean the step is shorter than a turn (a sliding window): a cache miss on every turn.
            if self.last_tail_shift == pair.from_turn:
                self.diff.hints.setdefault(("window", "tail_limit"), Hint("window", "tail_limit")).turns.append(request.turn)
            self.last_tail_shift = pair.to_turn
        for (old_id, old_text), (new_id, new_text) in zip(previous.system_texts, request.system_texts, strict=False):
            if old_id == new_id and old_text != new_text:
                kind = _hint_kind(old_text, new_text)
                self.diff.hints.setdefault((new_id, kind), Hint(new_id, kind)).turns.append(request.turn)

    def result(self) -> SessionDiff:
        return self.diff or SessionDiff(self.session_id, "", "")


def diff_turns(session_id: str, requests: Iterable[AssembledRequest],
               on_pair: Callable[[SessionDiff, PairDiff], None] | None = None,
               prices: PriceTable | None = None) -> SessionDiff:
    """Diff each request against the one before it; cached tokens from one cache simulator fed the requests in
    order, and each request's cost at ``prices`` (when its provider has rows). Streams: each request is
    serialised once and only the previous one is held (``on_pair`` sees each pair as it is made)."""
    differ = TurnDiffer(session_id, on_pair, prices)
    for request in requests:
        differ.add(request)
    return differ.result()


# --- two configurations ---------------------------------------------------------------------------


@dataclass
class SegmentDelta:
    id: str
    kind: str
    chars: int  # head − base
    tokens: int
    status: str  # changed | added | removed

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "status": self.status, "chars": self.chars, "tokens": self.tokens}


@dataclass
class ConfigDiff:
    session_id: str
    turns: int = 0
    differing_turns: list[int] = field(default_factory=list)
    first_divergence: dict[str, Any] | None = None
    segments: dict[str, SegmentDelta] = field(default_factory=dict)
    head_stability: SessionDiff | None = None
    base_stability: SessionDiff | None = None
    # a changed segment → where the head configuration defines it (the base's for a removed one)
    sources: dict[str, SegmentSource] = field(default_factory=dict)

    def as_dict(self, fail_on: Iterable[str]) -> dict[str, Any]:
        fail_on = list(fail_on)
        return {
            "session_id": self.session_id,
            "turns": self.turns,
            "differing_turns": self.differing_turns,
            "first_divergence": self.first_divergence,
            "segments": [s.as_dict() for s in self.segments.values()],
            "head_stability": self.head_stability.as_dict(fail_on) if self.head_stability else None,
            "base_unexpected": len(self.base_stability.unexpected(fail_on)) if self.base_stability else None,
            "sources": {k: v.as_dict() for k, v in self.sources.items()},
        }


def diff_configs(session_id: str, base: Iterator[AssembledRequest], head: Iterator[AssembledRequest]) -> ConfigDiff:
    """Every turn assembled under both configurations: what differs, by segment, and whether each is stable.

    Streams: the two replays advance in step; each request is serialised once and feeds both its configuration's
    turn-to-turn diff and the base/head comparison; only the previous request of each side is held."""
    result = ConfigDiff(session_id)
    base_differ, head_differ = TurnDiffer(session_id), TurnDiffer(session_id)
    while True:
        old, new = next(base, None), next(head, None)
        if old is None or new is None:  # a replay with more turns: its own diff goes on alone
            for first, rest, differ in ((old, base, base_differ), (new, head, head_differ)):
                for request in itertools.chain([first] if first is not None else [], rest):
                    differ.add(request)
            break
        a, b = serialize(old), serialize(new)
        base_differ.add(old, a)
        head_differ.add(new, b)
        _compare_configs(result, old, new, a, b)
    result.base_stability = base_differ.result()
    result.head_stability = head_differ.result()
    return result


def _compare_configs(result: ConfigDiff, old: AssembledRequest, new: AssembledRequest, a: Serialized, b: Serialized) -> None:
    result.turns += 1
    if a.data == b.data and old.model == new.model:
        return
    result.differing_turns.append(new.turn)
    if result.first_divergence is None:
        pair = diff_pair(old, new, a, b)
        result.first_divergence = {"turn": new.turn, "offset": pair.common_prefix_bytes, "segment": pair.segment,
                                   "message_index": pair.message_index, "before": pair.before, "after": pair.after,
                                   "excerpt_index": pair.excerpt_mark}
    base_segments = {s.id: s for s in old.segments}
    head_segments = {s.id: s for s in new.segments}
    for segment_id in dict.fromkeys([*base_segments, *head_segments]):
        s_old, s_new = base_segments.get(segment_id), head_segments.get(segment_id)
        if s_old and s_new and (s_old.chars, s_old.tokens) == (s_new.chars, s_new.tokens) and _same_text(old, new, segment_id):
            continue
        status = "added" if s_old is None else "removed" if s_new is None else "changed"
        kind = (s_new or s_old).kind  # type: ignore[union-attr]
        delta = SegmentDelta(segment_id, kind, (s_new.chars if s_new else 0) - (s_old.chars if s_old else 0),
                             (s_new.tokens if s_new else 0) - (s_old.tokens if s_old else 0), status)
        result.segments.setdefault(segment_id, delta)


def _same_text(old: AssembledRequest, new: AssembledRequest, segment_id: str) -> bool:
    old_text = dict(old.system_texts).get(segment_id)
    new_text = dict(new.system_texts).get(segment_id)
    if old_text is not None or new_text is not None:
        return old_text == new_text
    return [p.text for p in old.parts if p.segment_id == segment_id] == [p.text for p in new.parts if p.segment_id == segment_id]


def _reporting(requests: Iterator[AssembledRequest], session: Any, progress: Callable[[int, int], None] | None) -> Iterator[AssembledRequest]:
    total = sum(1 for m in session.messages if m.role == "assistant")
    for request in requests:
        if progress is not None:
            progress(request.turn, total)
        yield request


# --- the command, as a library call ----------------------------------------------------------------


def diff_session(pipeline: Pipeline, session: Any, progress: Callable[[int, int], None] | None = None,
                 on_pair: Callable[[SessionDiff, PairDiff], None] | None = None,
                 prices: PriceTable | None = None) -> SessionDiff:
    """One session's turn-to-turn diff under one pipeline (the unit of work per session)."""
    return diff_turns(session.session_id, _reporting(pipeline.replay(session), session, progress), on_pair, prices)


def segment_sources(pipeline: Pipeline, segment_ids: Iterable[str | None], preset: Any = None) -> dict[str, SegmentSource]:
    """Where each segment is defined, for GitHub annotations: a ``zhin.yaml`` segment (added, or a built-in's text
    replaced) at its key's line; a plugin's at the plugin file (the line that names its id, if any); a built-in at
    the line of zhin's module that names it; ``tools`` and ``window`` at their ``zhin.yaml`` keys; a preset entry
    (``preset:<id>``) at the preset file. Unknown ids are left out."""
    config = pipeline.config
    registry = pipeline.registry
    by_id = {segment.id: segment for segment in registry.ordered()}
    out: dict[str, SegmentSource] = {}
    for segment_id in dict.fromkeys(i for i in segment_ids if i):
        source = _segment_source(config, registry, by_id, segment_id, preset)
        if source is not None:
            out[segment_id] = source
    return out


def _config_line(config: Any, key: str) -> SegmentSource | None:
    where = config.where(key)
    if where is None:
        return None
    file, _, line = where.rpartition(":")
    return SegmentSource(file, int(line)) if file and line.isdigit() else SegmentSource(where)


def _segment_source(config: Any, registry: Any, by_id: dict[str, Any], segment_id: str, preset: Any) -> SegmentSource | None:
    import inspect
    import sys
    from pathlib import Path

    from zhin_cli.core.trust import plugin_file

    if segment_id == "window":
        return _config_line(config, "window.max_messages") if config.path is not None else None
    if segment_id == "tools":
        return _config_line(config, "tools") if config.path is not None and config.tools else None
    if segment_id.startswith("preset:"):
        path = preset if isinstance(preset, (str, Path)) else config.preset_path
        return SegmentSource(str(path)) if path is not None else None
    if segment_id in config.texts and config.path is not None:
        return _config_line(config, f"segments.texts.{segment_id}")
    if segment_id not in by_id:
        return None
    owner = registry.owner(segment_id)
    if owner == "zhin.yaml":
        index = next((i for i, s in enumerate(config.add_segments) if s.id == segment_id), None)
        return _config_line(config, f"segments.add[{index}]") if index is not None else None
    file: Path | None = None
    if owner == "builtin":
        file = Path(sys.modules["zhin_cli.pipeline.segments.builtin"].__file__ or "")
    else:
        base = config.path.parent if config.path is not None else Path.cwd()
        file = plugin_file(owner, base)
        if file is None:  # module:function
            module_file = getattr(sys.modules.get(owner.partition(":")[0]), "__file__", None)
            file = Path(module_file) if module_file else None
        if file is None:
            try:
                found = inspect.getsourcefile(type(by_id[segment_id]))
            except TypeError:
                found = None
            if not found:
                return None
            file = Path(found)
    return SegmentSource(str(file), _line_naming(file, segment_id))


def _line_naming(file: Any, segment_id: str) -> int | None:
    """The first line of ``file`` that names ``segment_id`` as a string literal."""
    try:
        lines = _source_lines(str(file), os.stat(file).st_mtime_ns)
    except (OSError, UnicodeDecodeError):
        return None
    quoted = (f'"{segment_id}"', f"'{segment_id}'")
    return next((number for number, text in enumerate(lines, start=1) if any(q in text for q in quoted)), None)


@functools.lru_cache(maxsize=64)
def _source_lines(file: str, mtime_ns: int) -> tuple[str, ...]:
    """A source file's lines, read once per version of the file (every session of a run asks for the same few)."""
    return tuple(Path(file).read_text(encoding="utf-8").splitlines())


def compare_session(base: Pipeline, head: Pipeline, session: Any) -> ConfigDiff:
    """One session under two configurations (the unit of work per session of ``--base/--head``)."""
    return diff_configs(session.session_id, base.replay(session), head.replay(session))


def _pair_keys(diff: SessionDiff) -> list[str | None]:
    return [source_key(p) for p in diff.pairs]


@dataclass
class PrefixDiffResult:
    mode: str  # turns | configs
    fail_on: list[str]
    sessions: list[SessionDiff] = field(default_factory=list)
    comparisons: list[ConfigDiff] = field(default_factory=list)
    base_label: str | None = None
    head_label: str | None = None
    config_path: Any = None  # the zhin.yaml read (turn to turn), None for the built-in defaults
    db: str | None = None  # the database sessions were read from, None if every session was a file
    captures: list[Any] = field(default_factory=list)  # capturediff.CaptureDiff of each capture folder / body JSONL

    @property
    def unexpected(self) -> int:
        if self.mode == "turns":
            return sum(len(s.unexpected(self.fail_on)) for s in self.sessions)
        # before a merge: a difference between the configurations is what was asked for; a break is an
        # unexpected cause in the head configuration's own turn-to-turn diff
        return sum(len(c.head_stability.unexpected(self.fail_on)) for c in self.comparisons if c.head_stability)

    @property
    def notes(self) -> list[str]:
        """Each price note once (a model billed at its provider's default row), then the captures' reading notes."""
        return list(dict.fromkeys([*(note for s in self.sessions for note in s.notes),
                                   *(note for c in self.captures for note in c.notes)]))

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": DIFF_VERSION, "mode": self.mode, "fail_on": self.fail_on, "unexpected": self.unexpected}
        if self.mode == "turns":
            data["notes"] = self.notes
            data["sessions"] = [s.as_dict(self.fail_on) for s in self.sessions]
            if self.captures:
                data["captures"] = [c.as_dict() for c in self.captures]
        else:
            data["base"], data["head"] = self.base_label, self.head_label
            data["sessions"] = [c.as_dict(self.fail_on) for c in self.comparisons]
        return data


# --- GitHub Actions ---------------------------------------------------------------------------------


def _break_annotation(session: SessionDiff, pair: PairDiff, where: str = "") -> Any:
    from zhin_cli.core.ghactions import Annotation

    source = session.sources.get(source_key(pair) or "") or SegmentSource()
    segment = f" in {pair.segment}" if pair.segment else ""
    detail = f" ({pair.detail})" if pair.detail else ""
    message = (f"{session.session_id}{where}: turn {pair.from_turn}→{pair.to_turn} breaks the cached prefix at byte "
               f"{pair.common_prefix_bytes:,}{segment}{detail}: {CAUSE_MEANINGS[pair.cause]}. "
               f"Cached {pair.cached_tokens:,} of {pair.prompt_tokens:,} tokens.\n"
               f"before: …{pair.marked_before}…\nafter:  …{pair.marked_after}…")
    return Annotation("error", message, title=f"prefix-diff: {pair.cause}{segment}", file=source.file,
                      line=source.line if source.file else None)


def github_annotations(result: PrefixDiffResult) -> list[Any]:
    """One ``error`` annotation per unexpected break — every one — at the source of the segment it falls in (where
    known); with ``--base/--head``, a ``notice`` per changed segment too, and the head's own breaks as errors."""
    from zhin_cli.core.ghactions import Annotation

    out: list[Any] = []
    if result.mode == "turns":
        for session in result.sessions:
            out.extend(_break_annotation(session, pair) for pair in session.unexpected(result.fail_on))
        return out
    for comparison in result.comparisons:
        for delta in comparison.segments.values():
            source = comparison.sources.get(delta.id) or SegmentSource()
            message = (f"{comparison.session_id}: segment {delta.id} {delta.status} between base {result.base_label} and "
                       f"head {result.head_label} ({delta.chars:+,} chars, {delta.tokens:+,} tokens); "
                       f"{len(comparison.differing_turns)} of {comparison.turns} turns differ")
            out.append(Annotation("notice", message, title=f"prefix-diff: {delta.id} {delta.status}", file=source.file,
                                  line=source.line if source.file else None))
        if comparison.head_stability is not None:
            out.extend(_break_annotation(comparison.head_stability, pair, " (head configuration)")
                       for pair in comparison.head_stability.unexpected(result.fail_on))
    return out


def github_summary(result: PrefixDiffResult) -> str:
    """The step summary: one table row per session."""
    from zhin_cli.core.ghactions import summary_cell

    def causes(session: SessionDiff) -> str:
        counts: dict[str, int] = {}
        for pair in session.unexpected(result.fail_on):
            counts[pair.cause] = counts.get(pair.cause, 0) + 1
        return ", ".join(f"{cause} {n}" for cause, n in counts.items()) or "none"

    lines = ["### zhin prefix-diff", ""]
    if result.mode == "turns":
        lines += ["| session | pairs | unexpected breaks | warm cached share |", "|---|---:|---|---:|"]
        for session in result.sessions:
            summary = session.summary()
            lines.append(f"| {summary_cell(session.session_id)} | {summary['pairs']} | {summary_cell(causes(session))} | "
                         f"{format_share(summary['cached_share'])} |")
    else:
        lines += [f"base {summary_cell(result.base_label or '')} → head {summary_cell(result.head_label or '')}", "",
                  "| session | requests that differ | changed segments | head: unexpected breaks | head: warm cached share |",
                  "|---|---:|---|---|---:|"]
        for comparison in result.comparisons:
            changed = ", ".join(f"{d.id} ({d.status}, {d.tokens:+,} tokens)" for d in comparison.segments.values()) or "none"
            head = comparison.head_stability
            lines.append(f"| {summary_cell(comparison.session_id)} | {len(comparison.differing_turns)}/{comparison.turns} | "
                         f"{summary_cell(changed)} | {summary_cell(causes(head)) if head else 'none'} | "
                         f"{format_share(head.summary()['cached_share'] if head else 0)} |")
    lines += ["", f"{result.unexpected} unexpected break(s) (fail on: {', '.join(result.fail_on) or 'nothing'})"]
    return "\n".join(lines) + "\n"


def session_refs(refs: list[str], *, all_sessions: bool, db: str | None, cwd: Any) -> list[str]:
    """Expand folders to their .jsonl files and ``--all`` to every session of the database."""
    from pathlib import Path

    from zhin_cli.core.errors import UsageError
    from zhin_cli.core.inputfiles import names_a_folder

    out: list[str] = []
    for ref in refs:
        path = Path(ref)
        if names_a_folder(path):
            files = sorted(str(p) for p in path.glob("*.jsonl"))
            if not files:
                raise UsageError(f"{ref}: no .jsonl files in this folder")
            out.extend(files)
        else:
            out.append(ref)
    if all_sessions:
        from zhin_cli.store.db import SessionDatabase, parse_db
        from zhin_cli.store.discovery import find_database

        with SessionDatabase(parse_db(find_database(db, cwd))) as database:
            out.extend(row["session_id"] for row in database.list_sessions())
    if not out:
        raise UsageError("name at least one session (a .jsonl file, a folder of them, or a session id), or pass --all")
    return out


def run_prefix_diff(
    refs: list[str],
    *,
    cwd: Any,
    db: str | None = None,
    config_path: Any = None,
    provider: str | None = None,
    model: str | None = None,
    base: str | None = None,
    head: str | None = None,
    all_sessions: bool = False,
    fail_on: Iterable[str] = DEFAULT_FAIL_ON,
    preset: Any = None,
    after_load: Callable[[], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    jobs: int | None = 1,
    on_pair: Callable[[SessionDiff, PairDiff], None] | None = None,
    on_comparison: Callable[[ConfigDiff], None] | None = None,
    prices_file: Path | None = None,
) -> PrefixDiffResult:
    """``preset``: a preset file (or ``Preset``) replacing each configuration's ``preset:`` (``--preset``).

    ``jobs``: sessions diffed at once in worker processes (``None``: every core; 1: here, one at a time). The
    result is the same for every value (core/parallel.py: input order, the same errors). ``progress`` counts
    turns with one job, sessions with several.

    Streaming (``--jsonl``): ``on_pair`` sees each pair of a turn-to-turn diff as it is made (with several jobs, a session's pairs
    when that session is done, in input order); ``on_comparison`` each session of ``--base/--head`` when done.

    Turn to turn, each request's cost at the config's price table (``prices_file``: ``--prices FILE`` over it)."""
    from zhin_cli.core.errors import UsageError
    from zhin_cli.core.parallel import check_jobs, ordered_map
    from zhin_cli.core.tokens import DEFAULT_ENCODING, counter
    from zhin_cli.pipeline.config import load_config

    fail = list(fail_on)
    unknown = sorted(set(fail) - set(CAUSES))
    if unknown:
        raise UsageError(f"--fail-on: unknown cause {', '.join(unknown)} (causes: {', '.join(CAUSES)})")
    if (base is None) != (head is None):
        raise UsageError("--base and --head go together")
    workers = check_jobs(jobs)
    captured, refs = split_capture_refs(refs, cwd)
    if captured and base is not None:
        raise UsageError("--base/--head compare two zhin configurations; captured bodies were assembled by another bot")
    # zhin-assembly options would silently do nothing to a captured body (it names its own model): refused, as trace does
    refused = [name for name, given in (("--preset", preset is not None), ("--model", model is not None)) if given]
    if captured and refused:
        raise UsageError(f"{', '.join(refused)}: not for captured bodies (each is diffed as sent, with the model it "
                         "names); diff zhin's sessions with them in a separate run")
    if captured and not refs and not all_sessions:
        config = load_config(config_path, cwd=cwd)
        result = PrefixDiffResult("turns", fail, config_path=config.path)
        _add_captures(result, captured, provider, config.price_table(prices_file), on_pair)
        return result
    chosen = session_refs(refs, all_sessions=all_sessions, db=db, cwd=cwd)
    from zhin_cli.store import database_read

    database = database_read(chosen, db=db, cwd=cwd, all_sessions=all_sessions)

    def run(configs: tuple[Any, ...], prices: PriceTable | None = None) -> Iterator[Any]:
        job_list = [SessionJob(ref, db, cwd, configs, provider, model, preset, after_load, prices) for ref in chosen]
        if workers == 1 or len(job_list) == 1:  # here: the progress bar follows the turns, pairs stream as made
            yield from ordered_map(functools.partial(run_session_job, progress=progress, on_pair=on_pair), job_list, jobs=1)
            return
        for item in ordered_map(run_session_job, job_list, jobs=workers, done=progress,
                                prepare=functools.partial(counter, DEFAULT_ENCODING)):  # most models' tokenizer
            if on_pair is not None and isinstance(item, SessionDiff):
                for pair in item.pairs:
                    on_pair(item, pair)
            yield item

    if base is None:
        config = load_config(config_path, cwd=cwd)
        result = PrefixDiffResult("turns", fail, config_path=config.path, db=database)
        result.sessions.extend(run((config,), config.price_table(prices_file)))
        _add_captures(result, captured, provider, config.price_table(prices_file), on_pair)
        return result

    from zhin_cli.pipeline.configsource import load_config_source

    assert head is not None
    with load_config_source(base, cwd=cwd) as base_source, load_config_source(head, cwd=cwd) as head_source:
        result = PrefixDiffResult("configs", fail, base_label=base_source.label, head_label=head_source.label, db=database)
        trees = tuple(Path(t) for t in (base_source.tempdir, head_source.tempdir) if t is not None)
        top = _git_top(cwd) if trees else ""  # once per run, not per session
        for comparison in run((base_source.config, head_source.config)):
            _rebase_sources(comparison, trees, top)
            if on_comparison is not None:
                on_comparison(comparison)
            result.comparisons.append(comparison)
    return result


def split_capture_refs(refs: list[str], cwd: Any) -> tuple[list[Path], list[str]]:
    """The refs that are captured bodies (a folder of ``NNNNN-<route>.json``, a JSONL of request bodies), and the rest."""
    from zhin_cli.store.captures import is_body_jsonl, is_capture_folder

    here = Path(cwd).resolve() == Path.cwd().resolve()  # name the files as the user did
    captured: list[Path] = []
    rest: list[str] = []
    for ref in refs:
        path = Path(cwd) / ref
        if is_capture_folder(path) or is_body_jsonl(path):
            captured.append(Path(ref) if here else path)
        else:
            rest.append(ref)
    return captured, rest


def _add_captures(result: PrefixDiffResult, paths: list[Path], provider: str | None, prices: PriceTable | None,
                  on_pair: Callable[[SessionDiff, PairDiff], None] | None) -> None:
    from zhin_cli.tools.capturediff import diff_capture_path

    for path in paths:
        diff = diff_capture_path(path, provider=provider, prices=prices, on_pair=on_pair)
        result.captures.append(diff)
        result.sessions.extend(diff.sessions)


def _git_top(cwd: Any) -> str:
    """The checkout's top level ("" outside a repository)."""
    import subprocess

    return subprocess.run(["git", "-C", str(cwd), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=False).stdout.strip()


def _rebase_sources(comparison: ConfigDiff, roots: tuple[Path, ...], top: str) -> None:
    """A git ref's files live in a temporary tree that is deleted when the run ends: name them in the checkout
    (``top``) instead (the tree is the repository's top level), where an annotation can point."""
    if not roots:
        return

    def rebased(source: SegmentSource) -> SegmentSource:
        if source.file is None:
            return source
        for root in roots:
            try:
                relative = Path(source.file).relative_to(root)
            except ValueError:
                continue
            return SegmentSource(str(Path(top) / relative) if top else str(relative), source.line)
        return source

    comparison.sources = {k: rebased(v) for k, v in comparison.sources.items()}
    for stability in (comparison.head_stability, comparison.base_stability):
        if stability is not None:
            stability.sources = {k: rebased(v) for k, v in stability.sources.items()}


@dataclass(frozen=True)
class SessionJob:
    """One session of a prefix-diff run, as a worker process receives it: data only (core/parallel.py). The
    configurations are loaded ``Config`` objects: each carries its ``PluginSource``, so a worker's
    ``Pipeline.open`` asks the same trust question the sequential run asks."""

    ref: str
    db: str | None
    cwd: Any
    configs: tuple[Any, ...]  # (config,) for turn-to-turn; (base, head) for --base/--head
    provider: str | None
    model: str | None
    preset: Any
    after_load: Callable[[], None] | None = None
    prices: PriceTable | None = None  # turn to turn: the costs' price table


def run_session_job(job: SessionJob, progress: Callable[[int, int], None] | None = None,
                    on_pair: Callable[[SessionDiff, PairDiff], None] | None = None) -> SessionDiff | ConfigDiff:
    """Load one session and diff it (turn to turn, or under two configurations); one at a time, so a run over many
    sessions holds one in memory. The segments its breaks name get their sources while the pipelines are open."""
    from contextlib import ExitStack

    from zhin_cli.store import load_session

    session = load_session(job.ref, db=job.db, cwd=job.cwd)
    if job.after_load is not None:
        job.after_load()
    with ExitStack() as stack:
        pipelines = [stack.enter_context(Pipeline.open(config, provider=job.provider, model=job.model, preset=job.preset))
                     for config in job.configs]
        if len(pipelines) == 1:
            from zhin_cli.tools.trace.trace import layout_name  # trace imports this module

            diff = diff_session(pipelines[0], session, progress, on_pair, job.prices)
            diff.sources = segment_sources(pipelines[0], _pair_keys(diff), job.preset)
            diff.layout = layout_name(pipelines[0].preset)
            return diff
        comparison = compare_session(pipelines[0], pipelines[1], session)
        if comparison.head_stability is not None:
            comparison.head_stability.sources = segment_sources(pipelines[1], _pair_keys(comparison.head_stability), job.preset)
        changed = [delta.id for delta in comparison.segments.values()]
        comparison.sources = {**segment_sources(pipelines[0], changed, job.preset),
                              **segment_sources(pipelines[1], changed, job.preset)}
        return comparison

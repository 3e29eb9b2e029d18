"""The prefix-break engine: where consecutive requests stop sharing bytes, why (the causes), and
what the provider's prompt cache would still hit (ADR 0041 §5; docs/spec/providers.md §6).

Two requests are compared on their serialisations (``zhin_cli.cache.serialize``); tokens are counted on the text
the model reads and the cached tokens come from the one cache simulator (``zhin_cli.cache.PrefixCache``), fed the
session's requests in order (``TurnDiffer``) — the same figures ``zhin serve`` answers for the same bodies. Used by
``prefix-diff``, ``trace``, ``report html`` and ``eval``; the commands' own results live with them in tools/
(moved out of tools/diff/prefix.py, issue 32)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Required, TypedDict

from zhin_cli.cache import Plan, PrefixCache, cached_share
from zhin_cli.cache.cost import Cost, CostTotals, CostTotalsDoc, Pricing, cost_dict
from zhin_cli.cache.replay import CACHE_MODEL, WARM, Routed, cache_key, cache_outcome, cached_tokens
from zhin_cli.cache.serialize import Chunk, Divergence, Serialized, divergence, serialize, serialize_body, wire_of
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.terminaltext import MARK
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.prices import PriceTable
from zhin_cli.pipeline.provenance import SegmentSource
from zhin_cli.pipeline.providers import PROVIDERS, Capabilities
from zhin_cli.wire import WireFormat

CAUSES = ("append", "tail", "window_shift", "system_changed", "tools_changed", "messages_changed", "model_changed")
EXPECTED = frozenset({"append", "tail", "window_shift"})
DEFAULT_FAIL_ON = tuple(cause for cause in CAUSES if cause not in EXPECTED)


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

    def as_dict(self, simulated_cached: int) -> dict[str, object]:
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

    def as_dict(self) -> dict[str, object]:
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


class SummaryCost(CostTotalsDoc):
    unit: str  # USD


class SessionSummary(TypedDict, total=False):
    """``SessionDiff.summary()``: a session's pairs in figures (``cost`` only with a price for its provider)."""

    pairs: Required[int]
    causes: Required[dict[str, int]]
    cache_hits: Required[int]
    cached_share: Required[float]
    cache_model: Required[str]  # CACHE_MODEL: warm
    cost: SummaryCost


@dataclass
class Hint:
    segment: str
    kind: str  # clock_time, date, counter, reordered, changes
    turns: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"segment": self.segment, "kind": self.kind, "turns": self.turns[:20], "count": len(self.turns)}


def _tail_index(request: AssembledRequest) -> int | None:
    return next((p.message_index for p in request.parts if p.segment_id == "tail"), None)


def _messages(request: AssembledRequest) -> list[JSON]:
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
    div = divergence(a, b)
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


@dataclass(frozen=True)
class BodyRequest:
    """A request known only by its wire body (a captured one): no segments, no window, no runtime tail. ``turn``
    is its capture number (a JSONL's line number): what a pair's ``from_turn``/``to_turn`` name."""

    turn: int
    body: JSONObject
    wire: WireFormat
    model: str
    provider: str
    profile: Capabilities
    encoding: str

    @property
    def messages(self) -> list[JSON]:
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


def message_text(wire: WireFormat, message: JSON) -> str:
    """A message's text blocks joined ("" for a message the wire model cannot read)."""
    try:
        return "\n".join(wire.message_texts(message))
    except (AttributeError, TypeError, KeyError):
        return ""


def continues(wire: WireFormat, old: JSON, new: JSON) -> bool:
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
    div = divergence(a, b)
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
    layout: str | None = None  # what assembled the requests (``provenance.layout_name``); None for captured bodies

    def unexpected(self, fail_on: Iterable[str]) -> list[PairDiff]:
        causes = set(fail_on)
        return [p for p in self.pairs if p.cause in causes]

    def summary(self) -> SessionSummary:
        by_cause = {c: sum(1 for p in self.pairs if p.cause == c) for c in CAUSES}
        share = cached_share((p.prompt_tokens, p.cached_tokens) for p in self.pairs)  # a pair's request is a later one
        data: SessionSummary = {"pairs": len(self.pairs), "causes": {c: n for c, n in by_cause.items() if n},
                "cache_hits": sum(1 for p in self.pairs if p.cache_hit), "cached_share": round(share, 4),
                CACHE_MODEL: WARM}
        if self.costs is not None:
            data["cost"] = {"unit": "USD", **self.costs.as_dict()}
        return data

    def pair_dict(self, pair: PairDiff) -> dict[str, object]:
        """One pair as ``--json`` lists it and ``--jsonl`` streams it: the pair, named by its session."""
        return {"session_id": self.session_id, **pair.as_dict()}

    def as_dict(self, fail_on: Iterable[str]) -> dict[str, object]:
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

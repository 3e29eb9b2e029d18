"""One session's requests replayed through one prompt cache: what each request reads, writes and leaves
uncached (``CacheOutcome``), whether it starts a cache group, and the tokens it adds (the physical limit).

The loop ``report economy`` (ADR layout, and upstream's sliding window) and ``report window`` (every policy of
the sweep) share, so a policy's figures are the economy's figures for the same window. One tokenizer for every
provider (``with_encoding``), a fresh simulator at each cache group (``cachegroups.first_of_group`` over the
provider's ``lifetime_seconds``: the session's prefix is cold there), requests in stored order as ``zhin serve``
would see them.

Also one request's side of it, shared by every command that replays requests: whose cache it may read
(``cache_key``), what it reads, writes and leaves uncached (``cache_outcome``, ``cached_tokens``), and the names of the
cache a figure meets (``COLD``, ``WARM``, ``CACHE_MODEL``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Protocol

from zhin_cli.cache import CacheOutcome, Plan, PrefixCache
from zhin_cli.cache import plan as cache_plan
from zhin_cli.cache.groups import first_of_group
from zhin_cli.cache.serialize import Serialized, serialize, wire_of
from zhin_cli.core.model import AssistantMessage, Session
from zhin_cli.core.tokens import TokenCounter
from zhin_cli.core.tokens import counter as shared_counter
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.providers import Capabilities, RenderedPart
from zhin_cli.wire import canonical


@dataclass(frozen=True)
class ReplayedRequest:
    """One request of the replay and what its provider's cache did with it."""

    request: AssembledRequest
    wire: Serialized
    outcome: CacheOutcome
    position: int  # of the stored assistant message in session.messages
    time: int  # ms epoch
    first: bool  # first of its cache group (cold cache)
    new_tokens: int  # tokens the previous request did not contain (0 … prompt tokens); -1 when not computed


def replay_cache(session: Session, pipeline: Pipeline, encoding: str, *, min_tokens: int | None = None,
                 limit: bool = True, chunks: bool = True) -> Iterator[ReplayedRequest]:
    """Replay ``session`` with ``pipeline`` (its window, provider and model) through one prompt-cache simulator;
    ``min_tokens``: the model's minimum cacheable prefix when it differs from the profile's (Anthropic, by
    model); ``limit``: compute ``new_tokens`` (the physical limit; costs a comparison with the previous request);
    ``chunks``: serialise each request's JSON chunks too (prefix-diff's byte view, which ``diff_pair`` needs);
    without them ``wire.chunks`` is empty and only the cache plan is built, straight from the body."""
    positions = [i for i, m in enumerate(session.messages) if isinstance(m, AssistantMessage)]
    counter = shared_counter(encoding)
    firsts: list[bool] | None = None
    cache = PrefixCache()
    previous: _Sent | None = None
    for number, (position, request) in enumerate(zip(positions, pipeline.replay(session), strict=True)):
        with_encoding(request, encoding, min_tokens)
        if firsts is None:
            firsts = first_of_group([session.messages[p].timestamp // 1000 for p in positions],
                                    request.profile.cache.lifetime_seconds)
        first = firsts[number]
        if first and number:
            cache = PrefixCache()
        wire = serialize(request) if chunks else Serialized(request.model, [], cache_plan(
            request.request, wire_of(request), request.encoding))
        outcome = cache_outcome(cache, request, wire)
        fresh = -1
        if limit:
            sent = _Sent.of(request, wire.plan)
            fresh = min(wire.prompt_tokens, _new_tokens(previous, sent, counter))
            previous = sent
        yield ReplayedRequest(request, wire, outcome, position, session.messages[position].timestamp, first, fresh)


def _block_tokens(plan: Plan) -> list[int]:
    return [end - start for start, end in zip([0, *plan.ends], plan.ends, strict=False)]


MessageKey = tuple[object, ...] | str
_TEXT_BLOCKS = "\x00text blocks"  # marks the key of a message whose content is text blocks only


def _message_key(message: object) -> MessageKey:
    """A key equal for two wire messages exactly when their ``canonical`` JSON is: the plain ``{"role", "content"}``
    message (most of a history) and one of text blocks only as tuples of their texts, without a JSON round trip;
    any other message as its canonical JSON (a string never equals a tuple, nor a 2-tuple a 3-tuple)."""
    if isinstance(message, dict) and len(message) == 2 and isinstance(role := message.get("role"), str):
        content = message.get("content")
        if isinstance(content, str):
            return (role, content)
        if isinstance(content, list) and all(isinstance(b, dict) and len(b) == 2 and b.get("type") == "text"
                                             and isinstance(b.get("text"), str) for b in content):
            return (_TEXT_BLOCKS, role, tuple(b["text"] for b in content))
    return canonical(message)


@dataclass(frozen=True)
class _Sent:
    """What ``new_tokens`` compares of one request, computed once: a replay's request is the current one of one
    comparison and the previous one of the next."""

    request: AssembledRequest
    plan: Plan
    keys: list[MessageKey]  # per wire message, without its own runtime tail and cache markers
    regions: frozenset[tuple[str, str]]  # (head, text) of its tool and system blocks
    pieces: Counter[str]  # its text pieces (system prompt, headers + bodies, tool calls, tail), with repeats

    @classmethod
    def of(cls, request: AssembledRequest, plan: Plan) -> _Sent:
        wire = wire_of(request)
        tail = request.tail_text
        keys = [_message_key(wire.without_tail(m, tail)) for m in wire.messages(request.request)]
        regions = frozenset((b.head, b.text) for b in plan.blocks if b.region != "messages")
        return cls(request, plan, keys, regions, Counter(p.text for p in request.parts))


def new_tokens(previous: AssembledRequest | None, current: AssembledRequest, counter: TokenCounter,
               plans: tuple[Plan | None, Plan | None] = (None, None)) -> int:
    """Tokens of ``current`` (its prompt tokens, the one definition) that ``previous`` did not contain
    (``plans``: the two requests' cache plans when the caller has them, else they are built).

    Per wire message: a message the previous request also sent (compared without the runtime tail and cache
    markers) is present, and so is a runtime tail equal to the previous one; any other message counts whole,
    minus the text pieces (system prompt, headers + bodies, tool calls, tail) the previous request carried —
    a multiset difference, so a repeated "+1" counts each time. A tool or system block the previous request had
    is present, and so is the reply framing (the previous request had it too).
    """
    def plan_of(request: AssembledRequest, given: Plan | None) -> Plan:
        return given if given is not None else cache_plan(request.request, wire_of(request), request.encoding)

    sent = _Sent.of(current, plan_of(current, plans[1]))
    before = _Sent.of(previous, plan_of(previous, plans[0])) if previous is not None else None
    return _new_tokens(before, sent, counter)


def _new_tokens(previous: _Sent | None, current: _Sent, counter: TokenCounter) -> int:
    plan = current.plan
    if previous is None:
        return plan.prompt_tokens
    count = counter.count
    previous_tail, tail = previous.request.tail_text, current.request.tail_text
    sent = Counter(previous.keys)
    pieces = previous.pieces.copy()  # used up as they are matched below
    parts_by_message: dict[int, list[RenderedPart]] = {}
    for part in current.request.parts:
        parts_by_message.setdefault(part.message_index, []).append(part)
    by_message: dict[int, int] = {}
    total = 0
    for block, tokens in zip(plan.blocks, _block_tokens(plan), strict=True):
        if block.region != "messages":
            total += 0 if (block.head, block.text) in previous.regions else tokens
        else:
            by_message[block.message_index] = by_message.get(block.message_index, 0) + tokens
    for index, tokens in by_message.items():
        own = parts_by_message.get(index, [])
        key = current.keys[index]
        if sent[key] > 0:
            sent[key] -= 1
            if tail and tail != previous_tail and any(p.segment_id == "tail" for p in own):
                total += count(tail)
            continue
        present = 0
        for part in own:
            if pieces[part.text] > 0:
                pieces[part.text] -= 1
                present += count(part.text)
        total += max(0, tokens - present)
    return total


def with_encoding(request: AssembledRequest, encoding: str, min_tokens: int | None) -> AssembledRequest:
    request.encoding = encoding  # diff_pair counts with the request's encoding: one tokenizer for every provider
    if min_tokens is not None and request.profile is not None:
        cache = dataclasses.replace(request.profile.cache, min_tokens=min_tokens)
        request.profile = dataclasses.replace(request.profile, cache=cache)
    return request


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


# The cache a figure's request meets (docs/figures.md): a JSON document names it beside the cached tokens and costs.
COLD = "cold"  # an empty cache: the request alone (``trace --turn N``)
WARM = "warm"  # one never-expiring cache fed every request before it in order: a replay (``trace --all``, prefix-diff)
CACHE_MODEL: Final = "cache_model"  # the key that names it (``"cache"`` is a pair's own object of cached figures)


def cached_tokens(cache: PrefixCache, request: AssembledRequest, serialized: Serialized) -> int:
    """Replay ``request`` against ``cache`` (then remember it): the tokens its provider would read from it."""
    return cache_outcome(cache, request, serialized).read

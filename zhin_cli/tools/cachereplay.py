"""One session's requests replayed through one prompt cache: what each request reads, writes and leaves
uncached (``CacheOutcome``), whether it starts a cache group, and the tokens it adds (the physical limit).

The loop ``report economy`` (ADR layout, and upstream's sliding window) and ``report window`` (every policy of
the sweep) share, so a policy's figures are the economy's figures for the same window. One tokenizer for every
provider (``with_encoding``), a fresh simulator at each cache group (``cachegroups.first_of_group`` over the
provider's ``lifetime_seconds``: the session's prefix is cold there), requests in stored order as ``zhin serve``
would see them.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from zhin_cli.cache import CacheOutcome, Plan, PrefixCache
from zhin_cli.core.model import AssistantMessage, Session
from zhin_cli.core.tokens import TokenCounter
from zhin_cli.core.tokens import counter as shared_counter
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.providers import RenderedPart
from zhin_cli.tools.cachegroups import first_of_group
from zhin_cli.tools.prefixdiff import Serialized, cache_outcome, serialize, wire_of
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
                 limit: bool = True) -> Iterator[ReplayedRequest]:
    """Replay ``session`` with ``pipeline`` (its window, provider and model) through one prompt-cache simulator;
    ``min_tokens``: the model's minimum cacheable prefix when it differs from the profile's (Anthropic, by
    model); ``limit``: compute ``new_tokens`` (the physical limit; costs a comparison with the previous request)."""
    positions = [i for i, m in enumerate(session.messages) if isinstance(m, AssistantMessage)]
    counter = shared_counter(encoding)
    firsts: list[bool] | None = None
    cache = PrefixCache()
    previous: tuple[AssembledRequest, Serialized] | None = None
    for number, (position, request) in enumerate(zip(positions, pipeline.replay(session), strict=True)):
        with_encoding(request, encoding, min_tokens)
        if firsts is None:
            firsts = first_of_group([session.messages[p].timestamp // 1000 for p in positions],
                                    request.profile.cache.lifetime_seconds)
        first = firsts[number]
        if first and number:
            cache = PrefixCache()
        wire = serialize(request)
        outcome = cache_outcome(cache, request, wire)
        fresh = -1
        if limit:
            fresh = min(wire.prompt_tokens, new_tokens(previous[0] if previous else None, request, counter,
                                                       (previous[1] if previous else None, wire)))
        yield ReplayedRequest(request, wire, outcome, position, session.messages[position].timestamp, first, fresh)
        previous = (request, wire)


def _block_tokens(plan: Plan) -> list[int]:
    return [end - start for start, end in zip([0, *plan.ends], plan.ends, strict=False)]


def new_tokens(previous: AssembledRequest | None, current: AssembledRequest, counter: TokenCounter,
               serialized: tuple[Serialized | None, Serialized | None] = (None, None)) -> int:
    """Tokens of ``current`` (its prompt tokens, the one definition) that ``previous`` did not contain.

    Per wire message: a message the previous request also sent (compared without the runtime tail and cache
    markers) is present, and so is a runtime tail equal to the previous one; any other message counts whole,
    minus the text pieces (system prompt, headers + bodies, tool calls, tail) the previous request carried —
    a multiset difference, so a repeated "+1" counts each time. A tool or system block the previous request had
    is present, and so is the reply framing (the previous request had it too).
    """
    count = counter.count
    plan = (serialized[1] or serialize(current)).plan
    if previous is None:
        return plan.prompt_tokens
    wire = wire_of(current)
    previous_tail, tail = previous.tail_text, current.tail_text
    sent = Counter(canonical(wire.without_tail(m, previous_tail)) for m in wire.messages(previous.request))
    previous_plan = (serialized[0] or serialize(previous)).plan
    regions = {(b.head, b.text) for b in previous_plan.blocks if b.region != "messages"}
    pieces = Counter(p.text for p in previous.parts)
    parts_by_message: dict[int, list[RenderedPart]] = {}
    for part in current.parts:
        parts_by_message.setdefault(part.message_index, []).append(part)
    by_message: dict[int, int] = {}
    total = 0
    for block, tokens in zip(plan.blocks, _block_tokens(plan), strict=True):
        if block.region != "messages":
            total += 0 if (block.head, block.text) in regions else tokens
        else:
            by_message[block.message_index] = by_message.get(block.message_index, 0) + tokens
    messages = wire.messages(current.request)
    for index, tokens in by_message.items():
        own = parts_by_message.get(index, [])
        key = canonical(wire.without_tail(messages[index], tail))
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

"""Captured request bodies as sessions: grouped into conversations, diffed pair by pair, cached tokens replayed
through one prompt cache across conversations, and the provider's real usage beside the simulator's
(docs/captures.md).

**Conversations.** A body's routing fields — ``prompt_cache_key``, ``user``, ``metadata.user_id`` — and its wire
format narrow the candidates: a conversation whose requests carried other values is never joined. They do not
suffice (one bot may send one ``prompt_cache_key`` for every chat). Among the candidates, a request joins the
conversation whose last request it *continues*: their non-system messages match from the start, a message
matching when it is equal or one's text is the other's with text added before or after it (a bot that re-renders
an old row with a prefix, as upstream zhin does with ``[sender:…]``); the most matching leading messages win, ties
go to the conversation seen last. A history window that moved (the new request's first message is a later one of
the last request) continues too. Otherwise the request starts a new conversation.

**One cache.** A provider caches across conversations that share a prefix (the same system prompt and tools, the
same routing key), so the bodies are replayed through one ``PrefixCache`` in capture order — as ``zhin serve``
does — not one cold cache per conversation. zhin's own per-session replays keep their cold start (a session
replayed alone has no neighbours to share with).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from zhin_cli.cache import PrefixCache
from zhin_cli.cache.cost import Cost, CostTotals, Pricing, cost_dict
from zhin_cli.cache.diff import BodyRequest, PairDiff, RealUsage, SessionDiff, continues, diff_body_pair
from zhin_cli.cache.replay import cache_outcome
from zhin_cli.cache.serialize import Serialized
from zhin_cli.cache.usage import normalize_usage
from zhin_cli.core.jsontext import JSON
from zhin_cli.core.tokens import encoding_for_model
from zhin_cli.pipeline.prices import PriceTable
from zhin_cli.pipeline.providers import for_wire, resolve_profile
from zhin_cli.store.captures import CapturedBody, CaptureSet, read_captures
from zhin_cli.wire import WireFormat, canonical, wire_for


@dataclass
class Conversation:
    """The bodies of one conversation, in capture order."""

    route: tuple[str | None, ...]
    bodies: list[CapturedBody] = field(default_factory=list)

    @property
    def numbers(self) -> list[int]:
        return [b.number for b in self.bodies]


def route_of(body: CapturedBody) -> tuple[str | None, ...]:
    """The fields that narrow a body's conversation: wire format, ``prompt_cache_key``, ``user``, ``metadata.user_id``."""
    metadata = body.body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    return (body.wire, *(str(v) if v is not None else None
                         for v in (body.body.get("prompt_cache_key"), body.body.get("user"), user_id)))


def _history(body: CapturedBody, wire: WireFormat) -> list[JSON]:
    """The non-system messages of a body."""
    messages = wire.messages(body.body)
    start = 0
    while start < len(messages) and wire.role(messages[start]) in ("system", "developer"):
        start += 1
    return messages[start:]


def continuation_score(wire: WireFormat, last: list[JSON], new: list[JSON]) -> int:
    """How many leading messages of ``new`` continue ``last`` (from its start, or from a later message of it, unchanged,
    when the history window moved); 0: not the same conversation. Whole messages are compared first (in C): the
    text test runs only where they differ."""
    if not new or not last:
        return 0
    if continues(wire, last[0], new[0]):
        start = 0
    else:
        try:
            start = last.index(new[0], 1)
        except ValueError:
            return 0
    score = 0
    for old, fresh in zip(last[start:], new, strict=False):
        if old != fresh and not continues(wire, old, fresh):
            break
        score += 1
    return score


SHARED_MESSAGES = 2  # whole messages a request must share with a conversation's last one to join it without continuing it


def shared_messages(last: list[JSON], new: list[JSON]) -> int:
    """How many of ``new``'s messages occur, whole and unchanged, in ``last``."""
    seen = {canonical(message) for message in last}
    return sum(1 for message in new if canonical(message) in seen)


def _best(candidates: list[int], scores: list[int], minimum: int) -> int | None:
    """The candidate with the highest score of at least ``minimum`` (a tie: the first, i.e. the latest)."""
    best, chosen = minimum - 1, None
    for index, value in zip(candidates, scores, strict=True):
        if value > best:
            best, chosen = value, index
    return chosen


def group_conversations(bodies: Iterable[CapturedBody]) -> list[Conversation]:
    """Bodies grouped into conversations (the rule is the module's docstring), in order of their first body."""
    conversations: list[Conversation] = []
    lasts: dict[int, list[JSON]] = {}  # conversation index → the non-system messages of its last body
    for body in bodies:
        wire = wire_for(body.wire)
        route = route_of(body)
        history = _history(body, wire)
        candidates = [i for i in range(len(conversations) - 1, -1, -1) if conversations[i].route == route]  # latest first
        chosen = _best(candidates, [continuation_score(wire, lasts[i], history) for i in candidates], 1)
        if chosen is None:  # a window that moved and re-rendered its first message: whole messages still shared
            chosen = _best(candidates, [shared_messages(lasts[i], history) for i in candidates], SHARED_MESSAGES)
        if chosen is None:
            conversations.append(Conversation(route))
            chosen = len(conversations) - 1
        conversations[chosen].bodies.append(body)
        lasts[chosen] = history
    return conversations


def real_usage(body: CapturedBody, block_tokens: int = 1) -> RealUsage | None:
    """What the provider reported for a body: its exchange file's usage, else ``zhin serve``'s log line
    (``block_tokens``: the simulated provider's cache granularity, what agreement allows for)."""
    if body.usage is not None:
        usage = normalize_usage(wire_for(body.wire).usage_kind or body.wire, body.usage)
        return RealUsage(usage.total_prompt, usage.cache_read, usage.cache_write, "exchange", block_tokens)
    if body.logged is not None:
        return RealUsage(body.logged.prompt_tokens, body.logged.read, body.logged.written, "zhin-serve.log", block_tokens)
    return None


def body_request(body: CapturedBody, provider: str | None) -> BodyRequest:
    # no --provider: the body's wire format's own provider (ProviderSpec.wire_default)
    name = provider or for_wire(body.wire).name
    profile = resolve_profile(name, body.model)  # an unknown name: the one "unknown provider … (known: …)" error
    return BodyRequest(body.number, body.body, wire_for(body.wire), body.model, profile.name, profile,
                       encoding_for_model(body.model))


@dataclass
class CaptureRequest:
    """One captured request as the report shows it: the simulator's figures and, where recorded, the real ones."""

    number: int
    conversation: str
    prompt_tokens: int
    cached_tokens: int
    real: RealUsage | None
    cost: Cost | None = None  # the request's input cost at the simulator's figures (None: no price)

    def as_dict(self) -> dict[str, object]:
        return {"capture": self.number, "session_id": self.conversation, "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens,
                "real": self.real.as_dict(self.cached_tokens) if self.real is not None else None,
                **({"cost": cost_dict(self.cost)} if self.cost is not None else {})}


@dataclass
class CaptureDiff:
    """A capture set diffed: one ``SessionDiff`` per conversation, and every request's cache figures."""

    source: str
    sessions: list[SessionDiff]
    requests: list[CaptureRequest]
    notes: list[str]

    @property
    def disagreements(self) -> list[CaptureRequest]:
        """Requests whose real cache read differs from the simulator's: each one a finding."""
        return [r for r in self.requests if r.real is not None and r.real.agrees(r.cached_tokens) is False]

    @property
    def first_requests(self) -> list[CaptureRequest]:
        """The first request of each conversation (what it read came from another conversation, if anything)."""
        seen: set[str] = set()
        out = []
        for request in self.requests:
            if request.conversation not in seen:
                seen.add(request.conversation)
                out.append(request)
        return out

    @property
    def recorded(self) -> list[CaptureRequest]:
        """Requests whose recorded usage reports the cached tokens: what agreement is judged on."""
        return [r for r in self.requests if r.real is not None and r.real.cached_tokens is not None]

    @property
    def without_cached(self) -> list[CaptureRequest]:
        """Requests with recorded usage that does not report cached tokens (llama.cpp, many OpenAI-compatible
        servers): their real prompt tokens are known, their cache read is not."""
        return [r for r in self.requests if r.real is not None and r.real.cached_tokens is None]

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "conversations": [s.session_id for s in self.sessions],
                "requests": [r.as_dict() for r in self.requests], "with_real_usage": len(self.recorded),
                "without_real_cached": [r.number for r in self.without_cached],
                "disagreements": [r.number for r in self.disagreements], "notes": self.notes}


def conversation_id(source: str, conversation: Conversation) -> str:
    return f"{source}#{conversation.bodies[0].number}"


def diff_captures(captures: CaptureSet, *, provider: str | None = None, prices: PriceTable | None = None,
                  shared_cache: bool = True,
                  on_pair: Callable[[SessionDiff, PairDiff], None] | None = None) -> CaptureDiff:
    """Each conversation's consecutive pairs diffed; every body replayed in capture order through one prompt
    cache (``shared_cache=False``: a cold cache per conversation, what zhin's own replays do)."""
    conversations = group_conversations(captures.bodies)
    name = Path(captures.source).name or captures.source
    owner = {b.number: index for index, c in enumerate(conversations) for b in c.bodies}
    pricing = Pricing(prices)
    sessions = [SessionDiff(conversation_id(name, c), "", c.bodies[0].model, notes=pricing.notes, captured=True)
                for c in conversations]
    caches = [PrefixCache() for _ in conversations] if not shared_cache else []
    cache = PrefixCache()
    previous: dict[int, tuple[BodyRequest, Serialized]] = {}
    requests: list[CaptureRequest] = []
    for body in captures.bodies:
        index = owner[body.number]
        session = sessions[index]
        request = body_request(body, provider)
        serialized = request.serialize()
        outcome = cache_outcome(cache if shared_cache else caches[index], request, serialized)
        real = real_usage(body, request.profile.cache.step_tokens)
        session.provider = session.provider or request.provider
        session.turns += 1
        cost = pricing.cost(request, outcome)
        if cost is not None:
            session.costs = session.costs or CostTotals()
            session.costs.add(cost)
        requests.append(CaptureRequest(body.number, session.session_id, outcome.prompt_tokens, outcome.read, real, cost))
        if index in previous:
            old, old_serialized = previous[index]
            pair = diff_body_pair(old, request, old_serialized, serialized, outcome.read)
            pair.real, pair.cost = real, cost
            session.pairs.append(pair)
            if on_pair is not None:
                on_pair(session, pair)
        previous[index] = (request, serialized)
    return CaptureDiff(captures.source, sessions, requests, list(captures.notes))


def diff_capture_path(path: Path, *, provider: str | None = None, prices: PriceTable | None = None,
                      shared_cache: bool = True,
                      on_pair: Callable[[SessionDiff, PairDiff], None] | None = None) -> CaptureDiff:
    return diff_captures(read_captures(path), provider=provider, prices=prices, shared_cache=shared_cache, on_pair=on_pair)

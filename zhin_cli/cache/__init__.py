"""The one prompt-cache simulator: what a provider's prompt cache would serve of a request, given the earlier
requests it saw (docs/spec/providers.md §2.5, §3, §4.4, §6; docs/tokens.md).

``plan(body, wire, counter)`` turns a request into the token sequence the provider's cache hashes: the wire
model's blocks (``zhin_cli.wire``) in cache order, each as its framing tokens (pseudo-tokens derived from the
block's head, so a changed role or id breaks the prefix where it is) followed by its text tokens. Its length
plus the reply framing is ``prompt_tokens`` — the same figure ``zhin_cli.wire.prompt_tokens`` computes.

``PrefixCache.account(key, plan, rules)`` replays one request against the cache and stores it:

* ``automatic`` (OpenAI, DeepSeek, Gemini implicit, local servers): the read is the longest common token
  prefix with the last ``size`` requests of the same key (profile, model); 0 below ``min_tokens``, else down to
  a multiple of ``step_tokens`` (OpenAI 1,024 / 128; DeepSeek 64-token units; Gemini 1,024 or 4,096 / 1);
* ``explicit`` (Anthropic): each breakpoint of a request writes an entry for the exact prefix up to its block
  (if ≥ ``min_tokens``); a request reads the longest stored entry that ends at one of its block boundaries at
  most ``LOOKBACK_BLOCKS`` blocks before one of its breakpoints; a match that ends mid-block is no hit;
  nothing after the last breakpoint is cached (``uncached``);
* ``none``: never a hit.

**``prompt_cache_key``.** OpenAI routes a request to a cache machine by a hash of its first ~256 tokens *and* its
``prompt_cache_key`` (providers.md §6); a machine's cache is its own. So for a provider whose rules route by the
key (``CacheRules.routes_by_key``: OpenAI's profiles) a request reads only the prefixes of earlier requests with
the same key — another key, or a key where the earlier request sent none, shares nothing. The key is the wire's
``cache_route`` (``Plan.route``). Not simulated: the overflow of one prefix + key beyond ~15 requests a minute
to further machines, whose caches are cold. DeepSeek, Anthropic and the rest ignore the field.

``zhin serve`` keeps one ``PrefixCache`` per server; prefix-diff and ``zhin report economy`` keep one per
replayed session (economy starts a fresh one at each cache group). Same class, same arithmetic: for the same
requests in the same order they report the same cached and prompt tokens.
"""

from __future__ import annotations

import array
import functools
import hashlib
import threading
import zlib
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.tokens import TokenCounter
from zhin_cli.wire import Block, WireFormat, text_tokens, wire_for

STORE_SIZE = 64  # requests remembered per cache (automatic caching); explicit entries: 4 per request
STORE_TOKENS = 8_000_000  # tokens remembered across those requests (4 bytes each); the oldest go first
SEQUENCE_TOKENS = 2_000_000  # a longer prompt is remembered up to here (no model reads more)
LOOKBACK_BLOCKS = 20  # how far back an Anthropic breakpoint looks for an earlier cache entry (providers.md §2.5)


class Rules(Protocol):
    """What the simulator needs of a profile's ``CacheRules``."""

    @property
    def mechanism(self) -> Literal["automatic", "explicit", "none"]: ...

    @property
    def min_tokens(self) -> int: ...

    @property
    def step_tokens(self) -> int: ...


def common_prefix_length(a: Sequence[object], b: Sequence[object]) -> int:
    """Length of the common prefix of two sequences (bytes, token tuples): binary search over C-speed slice
    comparisons (``memcmp`` for bytes)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_tokens(a: bytes, b: bytes) -> int:
    """Common prefix of two packed token sequences, in tokens."""
    return common_prefix_length(a, b) // 4


@functools.lru_cache(maxsize=16384)
def _packed(encoding: str, head: str, text: str, framing: int) -> bytes:
    """A block's tokens, packed: ``framing`` pseudo-tokens (≥ 2^31, outside every vocabulary) that stand for the
    head, then the text's tokens. Memoised: a replay sends the same history blocks turn after turn."""
    mark = 0x8000_0000 | zlib.crc32(head.encode("utf-8", "surrogatepass"))
    return array.array("I", [mark] * framing).tobytes() + text_tokens(encoding, text)


@dataclass(frozen=True)
class Plan:
    """A request as its prompt cache sees it."""

    tokens: bytes  # packed uint32 tokens of every block, in cache order
    ends: list[int]  # token offset at the end of each block
    digests: list[bytes]  # hash of the exact blocks up to and including each one
    breakpoints: list[tuple[int, str]]  # (block index, ttl) of cache markers, in order
    reply_framing: int = 0
    blocks: list[Block] = field(default_factory=list, repr=False)
    route: str | None = None  # the body's cache routing key (``WireFormat.cache_route``), if any

    @property
    def prompt_tokens(self) -> int:
        return len(self.tokens) // 4 + self.reply_framing


def cached_share(later: Iterable[tuple[int, int]]) -> float:
    """The cached share of a session's requests: Σ cached ÷ Σ prompt tokens over ``(prompt, cached)`` of the
    requests *after the first* (the caller leaves the first out: it finds the session's prefix cold by
    construction, so counting it would only measure the run's length). The one definition that ``prefix-diff``,
    ``trace --all`` and ``report html`` print as "cached share"."""
    prompt = cached = 0
    for prompt_tokens, cached_tokens in later:
        prompt += prompt_tokens
        cached += cached_tokens
    return cached / prompt if prompt else 0.0


def shared_tokens(a: Plan, b: Plan) -> int:
    """The common token prefix of two plans: whole equal blocks found by their prefix digests (binary search: a
    prefix equal up to block k is equal up to every block before it), then the diverging block token by token."""
    n = min(len(a.digests), len(b.digests))
    equal = n if n and a.digests[n - 1] == b.digests[n - 1] else 0
    if not equal:
        lo, hi = 0, n - 1 if n else 0  # lo blocks known equal, hi an upper bound
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if a.digests[mid - 1] == b.digests[mid - 1]:
                lo = mid
            else:
                hi = mid - 1
        equal = lo
    start = a.ends[equal - 1] if equal else 0
    if equal < len(a.ends) and equal < len(b.ends):
        return start + common_tokens(a.tokens[start * 4 : a.ends[equal] * 4], b.tokens[start * 4 : b.ends[equal] * 4])
    return start


def _kept(request: Plan) -> Plan:
    """What the cache remembers of a request: its tokens, block ends and digests, up to ``SEQUENCE_TOKENS``."""
    blocks = len(request.ends)
    if request.ends and request.ends[-1] > SEQUENCE_TOKENS:
        blocks = next(i for i, end in enumerate(request.ends) if end > SEQUENCE_TOKENS)
    end = request.ends[blocks - 1] if blocks else 0
    return Plan(request.tokens[: end * 4], request.ends[:blocks], request.digests[:blocks], [], request.reply_framing)


def plan_blocks(blocks: Iterable[Block], encoding: str, reply_framing: int = 0, route: str | None = None) -> Plan:
    kept = list(blocks)
    pieces: list[bytes] = []
    ends: list[int] = []
    digests: list[bytes] = []
    breakpoints: list[tuple[int, str]] = []
    running = hashlib.blake2b(digest_size=16)
    position = 0
    for index, block in enumerate(kept):
        packed = _packed(encoding, block.head, block.text, block.framing)
        pieces.append(packed)
        position += len(packed) // 4
        ends.append(position)
        running.update(packed)
        running.update(block.head.encode("utf-8", "surrogatepass") + b"\x00")
        digests.append(running.digest())
        if block.ttl is not None:
            breakpoints.append((index, block.ttl))
    return Plan(b"".join(pieces), ends, digests, breakpoints, reply_framing, kept, route)


def plan(body: JSONObject, wire: str | WireFormat | None, counter: TokenCounter | str) -> Plan:
    """The cache's view of a request body in a wire format (``counter``: a TokenCounter or an encoding name)."""
    model = wire if isinstance(wire, WireFormat) else wire_for(wire)
    encoding = counter if isinstance(counter, str) else counter.encoding
    return plan_blocks(model.blocks(body), encoding, model.reply_framing, model.cache_route(body))


@dataclass(frozen=True)
class PrefixPlan:
    """Raw text blocks in cache order (no wire format): for tests and callers that have only texts."""

    blocks: list[str]
    breakpoints: list[tuple[int, str]] = field(default_factory=list)

    def plan(self, encoding: str) -> Plan:
        marks = dict(self.breakpoints)
        return plan_blocks((Block("raw", -1, "", text, 0, marks.get(i)) for i, text in enumerate(self.blocks)), encoding)


@dataclass(frozen=True)
class CacheOutcome:
    prompt_tokens: int
    read: int = 0
    written: int = 0
    written_by_ttl: dict[str, int] = field(default_factory=dict)

    @property
    def uncached(self) -> int:
        return self.prompt_tokens - self.read - self.written


class PrefixCache:
    """A provider's prompt cache: bounded, thread-safe, keyed (profile, model) so models never share entries."""

    def __init__(self, size: int = STORE_SIZE) -> None:
        self._lock = threading.Lock()
        self._sequences: deque[tuple[Hashable, Plan]] = deque()  # earlier requests (tokens, block ends, digests)
        # (key, digest of a prefix of whole blocks) → the stored requests that start with exactly that prefix
        self._prefixes: dict[tuple[Hashable, bytes], dict[int, Plan]] = {}
        self._size = size
        self._stored = 0  # token bytes in _sequences
        self._entries: OrderedDict[tuple[Hashable, bytes], int] = OrderedDict()
        self._max_entries = size * 4

    def account(self, key: Hashable, request: Plan | PrefixPlan, counter: TokenCounter | None = None,
                rules: Rules | None = None) -> CacheOutcome:
        """Replay one request: what it reads, writes and leaves uncached; then remember it."""
        if rules is None:
            raise TypeError("account() needs the profile's cache rules")
        if isinstance(request, PrefixPlan):
            request = request.plan(counter.encoding if counter is not None else "o200k_base")
        if getattr(rules, "routes_by_key", False):  # optional in ``Rules``: CacheRules has it, a test's rules may not
            key = (key, request.route)  # a machine per key (None, no key, is one too): only its requests share
        step = max(rules.step_tokens, 1)
        if rules.mechanism == "automatic":
            return self._automatic(key, request, rules.min_tokens, step)
        if rules.mechanism == "explicit":
            return self._explicit(key, request, rules.min_tokens, step)
        return CacheOutcome(prompt_tokens=request.prompt_tokens)

    def _automatic(self, key: Hashable, request: Plan, min_tokens: int, step: int) -> CacheOutcome:
        kept = _kept(request)
        with self._lock:
            shared = self._longest_prefix(key, request)
            self._remember(key, kept)
        read = 0 if shared < min_tokens else shared // step * step
        return CacheOutcome(prompt_tokens=request.prompt_tokens, read=read)

    def _longest_prefix(self, key: Hashable, request: Plan) -> int:
        """The longest common token prefix with a stored request of ``key``: the most whole blocks some stored
        request shares (binary search over the prefix index — sharing k blocks implies sharing every j < k), then
        the best partial match inside the next block among the requests sharing those blocks."""
        digests, ends = request.digests, request.ends
        lo, hi = 0, len(digests)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if (key, digests[mid - 1]) in self._prefixes:
                lo = mid
            else:
                hi = mid - 1
        start = ends[lo - 1] if lo else 0
        if lo == len(ends):
            return start
        if lo:
            candidates: Iterable[Plan] = self._prefixes[(key, digests[lo - 1])].values()
        else:
            candidates = (plan for k, plan in self._sequences if k == key)
        block = request.tokens[start * 4 : ends[lo] * 4]
        partial = max((common_tokens(block, other.tokens[start * 4 : other.ends[lo] * 4])
                       for other in candidates if len(other.ends) > lo), default=0)
        return start + partial

    def _remember(self, key: Hashable, kept: Plan) -> None:
        self._sequences.append((key, kept))
        self._stored += len(kept.tokens)
        for digest in kept.digests:
            self._prefixes.setdefault((key, digest), {})[id(kept)] = kept
        while len(self._sequences) > self._size or self._stored > STORE_TOKENS * 4:
            old_key, old = self._sequences.popleft()
            self._stored -= len(old.tokens)
            for digest in old.digests:
                holders = self._prefixes[(old_key, digest)]
                holders.pop(id(old), None)
                if not holders:
                    del self._prefixes[(old_key, digest)]

    def _explicit(self, key: Hashable, request: Plan, min_tokens: int, step: int) -> CacheOutcome:
        ends, digests = request.ends, request.digests
        total = request.prompt_tokens
        breakpoints = sorted(dict(request.breakpoints).items())
        if not breakpoints:
            return CacheOutcome(prompt_tokens=total)
        candidates = {j for index, _ in breakpoints for j in range(max(0, index - LOOKBACK_BLOCKS + 1), index + 1)}
        with self._lock:
            hits = [j for j in candidates if (key, digests[j]) in self._entries]
            read_block = max(hits, key=lambda j: ends[j], default=None)
            if read_block is not None:
                self._entries.move_to_end((key, digests[read_block]))
            for index, _ in breakpoints:
                if ends[index] >= min_tokens:
                    self._entries[(key, digests[index])] = ends[index]
                    self._entries.move_to_end((key, digests[index]))
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        read = 0 if read_block is None or ends[read_block] < min_tokens else ends[read_block] // step * step
        last_end = ends[breakpoints[-1][0]]
        if last_end < min_tokens or last_end <= read:
            return CacheOutcome(prompt_tokens=total, read=read)
        by_ttl: dict[str, int] = {}
        start = read
        for index, ttl in breakpoints:
            if ends[index] > start:
                by_ttl[ttl] = by_ttl.get(ttl, 0) + ends[index] - start
                start = ends[index]
        return CacheOutcome(prompt_tokens=total, read=read, written=last_end - read, written_by_ttl=by_ttl)

"""Provider usage objects → one normalized shape, for cache-hit accounting (docs/spec/providers.md §6).

Every provider reports prompt caching differently: OpenAI counts cached tokens *inside* ``prompt_tokens``,
Anthropic reports three *disjoint* counts, DeepSeek reports hit and miss, Gemini counts the cached part inside
``promptTokenCount``. ``normalize_usage(kind, usage)`` turns each into a ``NormalizedUsage`` with

* ``uncached``     prompt tokens neither read from nor written to the cache (billed at the plain input rate),
* ``cache_read``   prompt tokens read from the cache,
* ``cache_write``  prompt tokens written to the cache (only APIs that report writes: Anthropic, OpenAI GPT-5.6+),
* ``total_prompt`` all prompt tokens (``uncached + cache_read + cache_write`` whenever all three are known),
* ``output``       generated tokens (reasoning / thinking included, as each API bills them).

A field the API did not report is ``None`` — never ``0``: "no hit" and "not reported" are different answers,
and a hit rate over unreported fields would be a lie (providers.md §6, last bullet). A field that is present but
not a non-negative integer (``null``, a string, a bool) counts as not reported.

Kinds are a registry (``USAGE_KINDS``, filled by ``@usage_kind``), keyed by the wire names the provider profiles
use (``openai-chat``, ``anthropic-messages``, ``gemini-generate`` …) plus short aliases; the keys each kind gives
(``USAGE_SHAPES``) tell which kind a stored usage object is (``usage_kind_of``).

**zhin's stored upstream shape** (``{"input", "output", "cacheRead", "cacheWrite", "totalTokens"}``, kind
``zhin-upstream``): we read ``input`` as the *whole* prompt, cache reads and writes included, i.e. OpenAI's
``prompt_tokens``. That is what every stored row in ``fixtures/*.jsonl`` and the DESIGN.md §3 example say:
``totalTokens == input + output`` on all of them, and ``cacheRead < input``. Libraries with the same field
names (pi-ai style) store ``input`` *without* the cached part and ``totalTokens = input + output + cacheRead +
cacheWrite``; a row whose ``totalTokens`` adds up that way — or whose ``cacheRead + cacheWrite`` exceed
``input``, which is impossible if ``input`` contains them — is read with that exclusive meaning instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from zhin_cli.cache import CacheOutcome
from zhin_cli.core.errors import ConfigError
from zhin_cli.core.model import AssistantMessage, Session
from zhin_cli.core.registry import Registry
from zhin_cli.store.captures import CapturedBody

NO_USAGE = "no usage stored"  # a request whose reply carries no usage object: never a zero


@dataclass(frozen=True)
class NormalizedUsage:
    uncached: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    total_prompt: int | None = None
    output: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return {
            "uncached": self.uncached,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "total_prompt": self.total_prompt,
            "output": self.output,
        }


UsageNormalizer = Callable[[Mapping[str, object]], NormalizedUsage]
USAGE_KINDS: Registry[UsageNormalizer] = Registry("usage kind")
# Which keys tell that a stored usage object is of a kind, by the kind's canonical name (``usage_kind_of``). A
# registry of its own, so a plugin's shape is released with the plugin, like its normalizer.
USAGE_SHAPES: Registry[tuple[str, ...]] = Registry("usage shape")


def usage_kind(*names: str, keys: tuple[str, ...] = (), replace: bool = False) -> Callable[[UsageNormalizer], UsageNormalizer]:
    """Register a normalizer under one or more kind names (the first is canonical, the rest are aliases).

    ``keys``: the usage object's keys that identify the kind, so ``usage_kind_of`` can choose it for a stored
    object (any one present is enough); without them the kind is only used when named."""
    if isinstance(keys, str):  # a bare string would register each of its characters as a key
        raise TypeError("usage_kind(keys=...) takes a tuple of key names")

    def add(normalizer: UsageNormalizer) -> UsageNormalizer:
        USAGE_KINDS.adding(*names, replace=replace)(normalizer)
        if keys:
            USAGE_SHAPES.add(names[0], tuple(keys), replace=replace)
        return normalizer

    return add


def normalize_usage(provider_kind: str, usage: Mapping[str, object]) -> NormalizedUsage:
    """Normalize one provider ``usage`` object (see the module docstring for the field meanings)."""
    normalizer = USAGE_KINDS.get(provider_kind)
    if normalizer is None:
        raise ConfigError(f"unknown usage kind {provider_kind!r} (known: {', '.join(sorted(USAGE_KINDS))})")
    if not isinstance(usage, Mapping):
        raise ConfigError(f"usage must be a JSON object, got {type(usage).__name__}")
    return normalizer(usage)


def usage_kind_of(usage: Mapping[str, object]) -> str | None:
    """The usage kind whose shape ``usage`` has (any of its registered ``keys`` present), or ``None`` for an object
    no registered kind recognises. The newest shape is tried first: where shapes share keys the later, more
    specific one wins (DeepSeek's over OpenAI's ``prompt_tokens``), and a plugin's kind wins over the built-ins."""
    for kind, keys in reversed(list(USAGE_SHAPES.items())):  # a snapshot: plugins may register on other threads
        if any(key in usage for key in keys):
            return kind
    return None


def hit_rate(usage: NormalizedUsage) -> float | None:
    """``cache_read / total_prompt``; ``None`` when either is not reported or the prompt is empty."""
    if usage.cache_read is None or not usage.total_prompt:
        return None
    return usage.cache_read / usage.total_prompt


# --- helpers -----------------------------------------------------------------------------------------------


def _count(value: object) -> int | None:
    """A reported token count, or None: bools, negatives, non-integral numbers and strings are not counts."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    return None


def _field(usage: Mapping[str, object], *path: str) -> int | None:
    node: object = usage
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return _count(node)


def _add(*values: int | None) -> int | None:
    """Sum of counts; None if any is None."""
    if any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _minus(total: int | None, *parts: int | None) -> int | None:
    """``total - parts`` where every part is known; None if unknown, or if the report is inconsistent (< 0)."""
    if total is None or any(p is None for p in parts):
        return None
    rest = total - sum(p for p in parts if p is not None)
    return rest if rest >= 0 else None


def _inclusive(total_prompt: int | None, cache_read: int | None, cache_write: int | None, output: int | None) -> NormalizedUsage:
    """Reports whose prompt count contains the cached parts (OpenAI, Gemini): uncached is the remainder.

    An unreported write count means "no write metric" (pre-GPT-5.6 OpenAI, Gemini), so it does not block the
    remainder; an unreported read count does.
    """
    parts = (cache_read,) if cache_write is None else (cache_read, cache_write)
    return NormalizedUsage(
        uncached=_minus(total_prompt, *parts),
        cache_read=cache_read,
        cache_write=cache_write,
        total_prompt=total_prompt,
        output=output,
    )


# --- providers ---------------------------------------------------------------------------------------------


# Registered least specific first: ``usage_kind_of`` tries the newest shape first, so DeepSeek's (which also has
# prompt_tokens) is tried before OpenAI's, the Responses API's (which also has input_tokens) before Anthropic's.


@usage_kind("gemini-generate", "gemini", keys=("usageMetadata", "promptTokenCount"))
def _gemini(usage: Mapping[str, object]) -> NormalizedUsage:
    # Accept the response's usageMetadata or the whole response. promptTokenCount contains
    # cachedContentTokenCount; thoughts are billed as output, so they count as output here.
    wrapped = usage.get("usageMetadata")
    meta: Mapping[str, object] = wrapped if isinstance(wrapped, Mapping) else usage
    candidates = _field(meta, "candidatesTokenCount")
    thoughts = _field(meta, "thoughtsTokenCount")
    output = candidates if thoughts is None or candidates is None else candidates + thoughts
    return _inclusive(_field(meta, "promptTokenCount"), _field(meta, "cachedContentTokenCount"), None, output)


@usage_kind("anthropic-messages", "anthropic", keys=("cache_read_input_tokens", "cache_creation_input_tokens", "input_tokens"))
def _anthropic(usage: Mapping[str, object]) -> NormalizedUsage:
    # Three disjoint counts: input_tokens is what is after the last breakpoint (neither read nor written).
    uncached = _field(usage, "input_tokens")
    cache_write = _field(usage, "cache_creation_input_tokens")
    cache_read = _field(usage, "cache_read_input_tokens")
    return NormalizedUsage(
        uncached=uncached,
        cache_read=cache_read,
        cache_write=cache_write,
        total_prompt=_add(uncached, cache_write, cache_read),
        output=_field(usage, "output_tokens"),
    )


@usage_kind("openai-responses", keys=("input_tokens_details",))
def _openai_responses(usage: Mapping[str, object]) -> NormalizedUsage:
    return _inclusive(
        _field(usage, "input_tokens"),
        _field(usage, "input_tokens_details", "cached_tokens"),
        _field(usage, "input_tokens_details", "cache_write_tokens"),
        _field(usage, "output_tokens"),
    )


@usage_kind("openai-chat", "openai", keys=("prompt_tokens",))
def _openai_chat(usage: Mapping[str, object]) -> NormalizedUsage:
    # prompt_tokens contains prompt_tokens_details.cached_tokens; GPT-5.6+ add cache_write_tokens next to it
    # (openai-python CompletionUsage.PromptTokensDetails). Some gateways put cache_write_tokens at the top level.
    cache_write = _field(usage, "prompt_tokens_details", "cache_write_tokens")
    if cache_write is None:
        cache_write = _field(usage, "cache_write_tokens")
    return _inclusive(
        _field(usage, "prompt_tokens"),
        _field(usage, "prompt_tokens_details", "cached_tokens"),
        cache_write,
        _field(usage, "completion_tokens"),
    )


@usage_kind("deepseek", keys=("prompt_cache_hit_tokens", "prompt_cache_miss_tokens"))
def _deepseek(usage: Mapping[str, object]) -> NormalizedUsage:
    # prompt_tokens = prompt_cache_hit_tokens + prompt_cache_miss_tokens (providers.md §4.4); no write metric.
    hit = _field(usage, "prompt_cache_hit_tokens")
    miss = _field(usage, "prompt_cache_miss_tokens")
    prompt = _field(usage, "prompt_tokens")
    total = prompt if prompt is not None else _add(hit, miss)
    if hit is None and miss is not None and prompt is not None:
        hit = _minus(prompt, miss)
    if miss is None and hit is not None:
        miss = _minus(prompt, hit)
    return NormalizedUsage(uncached=miss, cache_read=hit, cache_write=None, total_prompt=total,
                           output=_field(usage, "completion_tokens"))


@usage_kind("zhin-upstream", "upstream", keys=("cacheRead", "cacheWrite", "totalTokens", "input"))
def _upstream(usage: Mapping[str, object]) -> NormalizedUsage:
    prompt = _field(usage, "input")
    output = _field(usage, "output")
    cache_read = _field(usage, "cacheRead")
    cache_write = _field(usage, "cacheWrite")
    total_tokens = _field(usage, "totalTokens")
    cached = (cache_read or 0) + (cache_write or 0)
    exclusive = False
    if prompt is not None and cached:
        if total_tokens is not None and output is not None and total_tokens == prompt + output:
            exclusive = False
        elif total_tokens is not None and output is not None and total_tokens == prompt + output + cached:
            exclusive = True
        else:  # no usable total: only an impossible inclusive reading decides
            exclusive = cached > prompt
    if exclusive:  # pi-ai style: input is the uncached remainder
        return NormalizedUsage(uncached=prompt, cache_read=cache_read, cache_write=cache_write,
                               total_prompt=_add(prompt, cache_read, cache_write), output=output)
    return _inclusive(prompt, cache_read, cache_write, output)


# --- what a reported usage bills ---------------------------------------------------------------------------

# The TTL a reported cache write is billed at: usage objects do not say which TTL wrote (Anthropic's default
# ``cache_control`` lifetime is 5 minutes; OpenAI's rows name no write price, so a write there is plain input).
REPORTED_WRITE_TTL = "5m"


def billed_outcome(usage: NormalizedUsage | None) -> tuple[CacheOutcome | None, str | None]:
    """What a provider's reported usage bills, as the cache outcome ``Cost.of`` prices (the same arithmetic as
    zhin's simulated requests), or None and why: a bill needs the prompt and the cached tokens (an unreported
    write count is "no write metric", i.e. 0, as in ``_inclusive``)."""
    if usage is None:
        return None, NO_USAGE
    if usage.total_prompt is None:
        return None, "its stored usage does not report prompt tokens"
    if usage.cache_read is None:
        return None, "its stored usage does not report cached tokens"
    written = usage.cache_write or 0
    by_ttl = {REPORTED_WRITE_TTL: written} if written else {}
    return CacheOutcome(usage.total_prompt, usage.cache_read, written, by_ttl), None


def captured_usage(body: CapturedBody) -> NormalizedUsage | None:
    """The usage recorded with a captured body: the provider's usage object (an exchange file; read as its wire's
    kind) or ``zhin serve``'s log line (prompt tokens including the read and written ones); None: none recorded."""
    if body.usage is not None:
        return normalize_usage(body.wire if body.wire in USAGE_KINDS else usage_kind_of(body.usage) or body.wire,
                               body.usage)
    if body.logged is not None:
        logged = body.logged
        return NormalizedUsage(uncached=logged.prompt_tokens - logged.read - logged.written, cache_read=logged.read,
                               cache_write=logged.written, total_prompt=logged.prompt_tokens)
    return None


UNKNOWN = "?"


@dataclass(frozen=True)
class UsageRecord:
    """One logged request: an assistant message and the usage it reported (if any)."""

    session_id: str
    row_id: int
    timestamp: int  # ms
    provider: str
    model: str
    kind: str | None  # usage kind, None when nothing usable was logged
    usage: NormalizedUsage | None


def usage_records(session: Session) -> Iterator[UsageRecord]:
    for message in session.messages:
        if isinstance(message, AssistantMessage):
            yield usage_record(session.session_id, message)


def usage_record(session_id: str, message: AssistantMessage) -> UsageRecord:
    """What one stored assistant message says its request used: the one reading of stored usage (``trace`` shows
    the same record beside its own figures)."""
    kind = usage_kind_of(message.usage) if isinstance(message.usage, dict) else None
    usage = normalize_usage(kind, message.usage) if kind is not None and message.usage is not None else None
    return UsageRecord(session_id, message.row_id, message.timestamp, message.provider or UNKNOWN,
                       message.model or UNKNOWN, kind, usage)

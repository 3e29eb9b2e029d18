"""The wire-format model's types: ``WireFormat`` (the base every format subclasses), ``Block``, ``FlatRequest`` and the
helpers the formats share. The format modules import this module, never the package: the package (the registry)
imports them, so nothing here imports back (issue 32: no module-level import cycle).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.tokens import counter as shared_counter


class Block(NamedTuple):
    """One unit the provider tokenizes and caches: a tool definition, a system block, a message content block.
    (A tuple: a replay makes tens of thousands of them per session.)"""

    region: str  # "tools" | "system" | "messages"
    message_index: int  # index in the body's message list; -1 outside it
    head: str  # the non-text fields that make it this block (role, ids, type): blocks with other heads share no token
    text: str  # the text the model reads
    framing: int  # tokens the API adds around it (role markers, separators), estimated
    ttl: str | None = None  # a cache_control marker on this block (explicit caching): its TTL


class CacheOutcomeLike(Protocol):
    """What a usage shape needs of a cache outcome (``zhin_cli.cache.CacheOutcome``)."""

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def read(self) -> int: ...

    @property
    def written(self) -> int: ...

    @property
    def written_by_ttl(self) -> dict[str, int]: ...

    @property
    def uncached(self) -> int: ...


def canonical(value: object) -> str:
    """The compact, key-sorted JSON of a value: a stable text for block heads and digests."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def dumps(value: object) -> str:
    """The compact JSON of a value in its own key order (what prefix-diff shows byte by byte)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def as_list(value: JSON) -> list[JSON]:
    """A JSON value read as a list: itself if it is one, else no items."""
    return value if isinstance(value, list) else []


@dataclass
class FlatRequest:
    """The flat layout of a request (system prompt + one user message), as the wire sends it."""

    body: JSONObject
    # (segment id, text, message index) of what it is made of, as RenderedPart would say
    parts: list[tuple[str, str, int]] = field(default_factory=list)
    breakpoints: list[JSONObject] = field(default_factory=list)


class WireFormat:
    """The base wire model; a format module subclasses it and overrides what differs."""

    name = ""
    regions: tuple[str, ...] = ("tools", "messages")
    message_key = "messages"
    usage_kind = ""  # the cache/usage.py normaliser for this API's usage object
    # Where the system prompt goes when the format has no system message (``zhin providers``); None = a message in
    # the provider's ``system_prompt_role``.
    system_place: str | None = None
    message_framing = 3  # every message: role marker + separators (OpenAI's documented 3 per message)
    block_framing = 1  # every further content block of a message, every tool definition
    reply_framing = 3  # the tokens that prime the reply

    # --- messages ---------------------------------------------------------------------------------------

    def messages(self, body: JSONObject) -> list[JSON]:
        return as_list(body.get(self.message_key))

    def role(self, message: object) -> str:
        return str(message.get("role", "?")) if isinstance(message, dict) else "?"

    def is_tool_call(self, message: object) -> bool:
        raise NotImplementedError

    def is_tool_result(self, message: object) -> bool:
        raise NotImplementedError

    def user_text(self, role: str, text: str) -> JSONObject:
        """A standalone message holding ``text`` (``role`` where the format has free roles)."""
        raise NotImplementedError

    def take_text(self, message: JSON, text: str) -> bool:
        """Remove the block carrying ``text`` from a merged message; True if the whole message is that text.
        (A message that is not a JSON object holds no block: nothing is removed.)"""
        raise NotImplementedError

    def message_texts(self, message: object) -> list[str]:
        """The text blocks of a message, in order."""
        raise NotImplementedError

    def without_tail(self, message: JSON, tail: str | None) -> JSON:
        """The message without the runtime tail (``tail``: the tail piece exactly as rendered) and without cache
        markers (they move with the tail)."""
        raise NotImplementedError

    def tool_names(self, body: JSONObject) -> list[str]:
        return [str(t.get("name", "")) for t in as_list(body.get("tools")) if isinstance(t, dict)]

    def role_problem(self, messages: list[JSON]) -> str | None:
        """The role order the format requires, checked independently of the validator."""
        raise NotImplementedError

    # --- the cache's view -------------------------------------------------------------------------------

    def blocks(self, body: JSONObject) -> Iterator[Block]:
        raise NotImplementedError

    def cache_route(self, body: JSONObject) -> str | None:
        """The body's field that picks the cache machine beside the prefix (OpenAI's ``prompt_cache_key``), if the
        format has one and the body sets it: a provider that routes by it shares no prefix across its values."""
        return None

    # --- flat layout and usage --------------------------------------------------------------------------

    def flat(self, source: JSONObject, system: str, user: str) -> FlatRequest:
        raise NotImplementedError

    def usage(self, outcome: CacheOutcomeLike, output_tokens: int) -> JSONObject:
        raise NotImplementedError


class ContentBlocksFormat(WireFormat):
    """A format whose message text is ``content``: a string, or a list of blocks with ``text`` (OpenAI Chat,
    Anthropic Messages). Their merged-message edits are one rule, so they live here once."""

    def take_text(self, message: JSON, text: str) -> bool:
        if not isinstance(message, dict):
            return False
        content = message.get("content")
        if isinstance(content, str) or content is None:
            return True
        kept = [b for b in as_list(content) if not (isinstance(b, dict) and b.get("text") == text)]
        if not kept:
            return True
        message["content"] = kept
        return False

    def message_texts(self, message: object) -> list[str]:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return [content]
        return [str(b.get("text", "")) for b in as_list(content) if isinstance(b, dict) and "text" in b]


def alternation_problem(roles: list[str], reply_role: str) -> str | None:
    """The strict ``user``/``reply_role`` alternation, starting with ``user`` (Anthropic's ``assistant``, Gemini's
    ``model``): the first place it breaks, or None."""
    if roles and roles[0] != "user":
        return f"first message is {roles[0]!r}, expected 'user'"
    for i in range(1, len(roles)):
        if roles[i] == roles[i - 1] or roles[i] not in ("user", reply_role):
            return f"roles do not alternate user/{reply_role} at message {i}: {' '.join(roles)}"
    return None


class Counter(Protocol):
    @property
    def encoding(self) -> str: ...


@functools.lru_cache(maxsize=16384)
def text_tokens(encoding: str, text: str) -> bytes:
    """A block text's tokens, packed (4 bytes each), memoised: ``prompt_tokens`` counts them and the cache
    simulator compares them, so each text of a replay is tokenized once for both."""
    return shared_counter(encoding).encode_packed(text)

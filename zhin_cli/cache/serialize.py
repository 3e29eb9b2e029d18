"""A request as the prompt cache sees it: serialised once, in the wire model's cache order
(``zhin_cli.wire``: tools → system → messages; the model is compared on its own), two ways side by side — as JSON
*chunks* (one per top-level region and one per message, with the glue between them) for byte offsets and excerpts,
and as the cache simulator's token plan (``zhin_cli.cache.plan``) for tokens — and where two such requests stop
sharing bytes (``divergence``: chunk by chunk, then only the first differing chunk byte by byte).

Shared by ``prefix-diff``, ``trace``, ``report economy``/``window``/``html`` and ``eval`` (moved out of
tools/diff/prefix.py, issue 32)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from zhin_cli.cache import Plan, common_prefix_length, plan, shared_tokens
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.wire import WireFormat, wire_for


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


def _dumps(value: object) -> bytes:
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


def serialize_body(body: JSONObject, wire: WireFormat, model: str, encoding: str) -> Serialized:
    """A wire body serialised once (``serialize`` for zhin's own requests; a captured body is only its body)."""
    chunks: list[Chunk] = []
    first = True
    for key in wire.regions:
        if key not in body:
            continue
        glue = ("{" if first else ",") + json.dumps(key) + ":"
        first = False
        if key == wire.message_key:
            messages = body[key]
            if not isinstance(messages, list):  # store.captures.shape_problem refuses such a body; zhin renders a list
                raise TypeError(f"{key!r} is not a list")
            chunks.append(Chunk("glue", (glue + "[").encode()))
            for index, message in enumerate(messages):
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


def divergence(old: Serialized, new: Serialized) -> Divergence:
    offset = 0
    tokens = shared_tokens(old.plan, new.plan)
    for index, (a, b) in enumerate(zip(old.chunks, new.chunks, strict=False)):
        if a.data == b.data:
            offset += len(a.data)
            continue
        return Divergence(offset + common_prefix_length(a.data, b.data), index, tokens)
    index = min(len(old.chunks), len(new.chunks))
    return Divergence(offset, index, tokens)

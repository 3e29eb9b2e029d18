"""One wire model per API format: everything zhin knows about one request/response format, in one module.

A *wire format* (``WireFormat``) answers, for its API, the questions the tools used to answer with
``if wire == …`` chains spread over prefix-diff, serve, usage, eval and economy:

* ``regions`` — the top-level keys the provider hashes for its prompt cache, **in hashing order**
  (OpenAI ``tools → messages``, Anthropic ``tools → system → messages``, Gemini
  ``tools → systemInstruction → contents``), and ``message_key`` (where the message list is);
* ``blocks(body)`` — the request as the provider's tokenizer and cache see it: one ``Block`` per tool
  definition, system block and message content block, in cache order, with the text the model reads, an
  estimate of the framing tokens the API adds around it, and its cache marker (``cache_control``);
  ``cache_route(body)`` the field that routes the request to a cache machine (OpenAI's ``prompt_cache_key``);
* tool-call / tool-result recognition, roles, how a standalone user text is written, a message without a text
  piece, the flat one-user-message layout (``zhin report economy``);
* ``usage(…)`` — the API's usage object for a given cache outcome (``zhin serve``), and ``usage_kind`` (the
  ``cache/usage.py`` normaliser that reads it back).

``prompt_tokens(body, wire, counter)`` is the one definition of a request's prompt tokens (docs/tokens.md):
our estimate of the input tokens the provider bills for that body, Σ over ``blocks`` of (text tokens +
framing) + ``reply_framing``. trace, prefix-diff, ``zhin serve``'s usage and ``zhin report economy`` all call
it (through ``zhin_cli.cache.plan`` where the token sequence is needed too), so they report the same figure.

Adding a format (say OpenAI Responses) is adding one module here that subclasses ``WireFormat`` (``wire/base.py``)
and naming its instance in ``BUILTIN_FORMATS`` below (a plugin calls ``register_wire``); no tool changes. This
package imports nothing from the pipeline or the tools; the format modules import ``wire.base``, never this
registry, so there is no import cycle.
"""

from __future__ import annotations

import importlib

from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.registry import Registry
from zhin_cli.wire.base import (
    Block,
    CacheOutcomeLike,
    ContentBlocksFormat,
    Counter,
    FlatRequest,
    WireFormat,
    alternation_problem,
    as_list,
    canonical,
    dumps,
    text_tokens,
)

__all__ = ["BUILTIN_FORMATS", "WIRES", "Block", "CacheOutcomeLike", "ContentBlocksFormat", "Counter", "FlatRequest",
           "WireFormat", "alternation_problem", "as_list", "canonical", "dumps", "prompt_tokens", "register_wire",
           "text_tokens", "wire_for"]

WIRES: Registry[WireFormat] = Registry("wire format")


def register_wire(wire: WireFormat, *, replace: bool = False) -> WireFormat:
    return WIRES.add(wire.name, wire, replace=replace)


def wire_for(name: str | None) -> WireFormat:
    """The wire model for a profile's ``wire`` (OpenAI Chat when none is named)."""
    found = WIRES.get(name or "openai-chat")
    if found is None:
        raise KeyError(f"unknown wire format {name!r} (known: {', '.join(sorted(WIRES))})")
    return found


def prompt_tokens(body: JSONObject, wire: str | WireFormat, counter: Counter) -> int:
    """Our estimate of the provider's billed input tokens for ``body``: Σ (text tokens + framing) over the
    wire's blocks, plus the reply framing (docs/tokens.md). The one definition every tool reports."""
    model = wire if isinstance(wire, WireFormat) else wire_for(wire)
    encoding = counter.encoding
    return sum(len(text_tokens(encoding, b.text)) // 4 + b.framing for b in model.blocks(body)) + model.reply_framing


# The built-in formats, "module:instance": registered here, by the registry, so no format module imports it.
BUILTIN_FORMATS = ("zhin_cli.wire.openai_chat:OPENAI_CHAT", "zhin_cli.wire.anthropic_messages:ANTHROPIC_MESSAGES",
                   "zhin_cli.wire.gemini_generate:GEMINI_GENERATE")


def _register_builtins() -> None:
    for target in BUILTIN_FORMATS:
        module, _, name = target.partition(":")
        register_wire(getattr(importlib.import_module(module), name))


_register_builtins()

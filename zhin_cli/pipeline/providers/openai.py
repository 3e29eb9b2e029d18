"""OpenAI Chat Completions and the OpenAI-shaped APIs (DeepSeek, OpenRouter, Groq, vLLM, Ollama)."""

from __future__ import annotations

import hashlib
import json
import re
import string
from typing import Any, cast

from zhin_cli.core.errors import ConfigError
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.pipeline.format import STATE_CHANGE_PREFIX, host_header
from zhin_cli.pipeline.headers import Projected
from zhin_cli.pipeline.preset import TAIL_SEPARATOR, Layout, PresetMessage
from zhin_cli.pipeline.providers.capabilities import Capabilities
from zhin_cli.pipeline.providers.rendered import RenderedPart, RenderedRequest
from zhin_cli.pipeline.providers.shaping import joined
from zhin_cli.pipeline.providers.specs.deepseek import (  # the R1-era rules live with the deepseek provider:
    R1_ERA_MODELS,  # re-exported for their old readers
    R1_ERA_RULES,
    is_r1_era,
    set_r1_era_models,
)
from zhin_cli.pipeline.providers.specs.openai import OPENAI_CACHE
from zhin_cli.pipeline.segments import RuntimeView
from zhin_cli.wire.types import OpenAIChatBody, OpenAIMessage, OpenAITool, OpenAIToolCall, as_json

WIRE = "openai-chat"
_ALNUM = string.ascii_letters + string.digits
# The fields a ``prompt_cache_key`` template may name. Upstream zhin sends ``zhin:<label>:<provider>:<model>``
# (``zhin:orchestrator:{provider}:{model}``: one key for every session of the agent); ``{session_key}`` gives each
# conversation its own key (the session id when the session has no key), ``{session_id}`` each stored session.
PROMPT_CACHE_KEY_FIELDS = ("provider", "model", "session_id", "session_key")


def check_prompt_cache_key(template: Any, profile: Capabilities) -> None:
    """A ``prompt_cache_key`` override is a text whose ``{…}`` fields are ``PROMPT_CACHE_KEY_FIELDS``, on a profile
    that sends Chat Completions (null: send none). Anything else is a ConfigError, before any request is made."""
    if template is None:
        return
    if profile.wire != WIRE:
        raise ConfigError(f"prompt_cache_key is an OpenAI Chat Completions field; provider {profile.name!r} sends "
                          f"{profile.wire}")
    if not isinstance(template, str) or not template:
        raise ConfigError(f"prompt_cache_key must be a non-empty text, got {template!r}")
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)
                  if name is not None]
    except ValueError as exc:  # a lone "{" or "}"
        raise ConfigError(f"prompt_cache_key {template!r}: {exc} (write {{{{ and }}}} for braces)") from None
    for name, spec, conversion in fields:
        if name not in PROMPT_CACHE_KEY_FIELDS or spec or conversion:
            raise ConfigError(f"prompt_cache_key {template!r}: unknown field {{{name}}} (known: "
                              f"{', '.join('{' + field + '}' for field in PROMPT_CACHE_KEY_FIELDS)})")


def prompt_cache_key(template: str, runtime: RuntimeView) -> str:
    """The ``prompt_cache_key`` of one request: ``template`` with the request's provider, model and session."""
    return template.format(provider=runtime.provider, model=runtime.model, session_id=runtime.session_id,
                           session_key=runtime.session_key or runtime.session_id)


def state_lines(message: Projected, mode: str) -> str:
    """System/developer: ``[state change] …`` lines. Downgraded (``none``): every line carries the
    host-only header, so several events in one message keep one header each (ADR 0041 §2)."""
    if mode in ("system", "developer"):
        return "\n".join(f"{STATE_CHANGE_PREFIX} {e.line}" for e in message.events)
    return "\n".join(f"{host_header(e.alias, e.time)} {STATE_CHANGE_PREFIX} {e.line}" for e in message.events)


def short_id(call_id: str, length: int = 9) -> str:
    """A stable alphanumeric id of ``length`` characters (Mistral templates demand exactly 9)."""
    if len(call_id) == length and all(c in _ALNUM for c in call_id):
        return call_id
    number = int.from_bytes(hashlib.sha256(call_id.encode()).digest(), "big")
    out = []
    for _ in range(length):
        number, digit = divmod(number, len(_ALNUM))
        out.append(_ALNUM[digit])
    return "".join(out)


class _Wire:
    """Collects wire messages and the attributed text parts."""

    def __init__(self, profile: Capabilities) -> None:
        self.profile = profile
        self.messages: list[OpenAIMessage] = []
        self.parts: list[RenderedPart] = []

    def call_id(self, call_id: str) -> str:
        return short_id(call_id) if self.profile.tool_call_id == "alnum9" else call_id

    def add(self, message: OpenAIMessage, pieces: list[tuple[str, str]]) -> None:
        """Append (or, for profiles that need alternation, merge into the previous same-role turn)."""
        previous = self.messages[-1] if self.messages else None
        mergeable = (
            self.profile.alternation == "merge"
            and previous is not None
            and previous["role"] == message["role"] in ("user", "assistant")
            and not previous.get("tool_calls") and not message.get("tool_calls")
            and len(self.messages) > 1  # never into the system prompt
        )
        if mergeable:
            assert previous is not None
            previous["content"] = f"{previous['content'] or ''}\n{message['content'] or ''}"
            pieces = [("", "\n"), *pieces]
        else:
            self.messages.append(message)
        index = len(self.messages) - 1
        self.parts.extend(RenderedPart(segment, text, index) for segment, text in pieces if segment)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def client_arguments(arguments: Any) -> str:
    """A tool call's ``arguments`` as OpenAI-compatible clients send them: a stored string as it is, byte for byte
    (the model wrote it; clients pass it back untouched); a stored object the way the AI SDK writes it
    (``JSON.stringify(part.input)``: no spaces, non-ASCII kept, a lone surrogate escaped as ``\\udxxx``). The
    captures of upstream zhin's requests show exactly this (``{"query":"weather"}``); ``json.dumps``'s default
    ``", "``/``": "`` would make zhin count and compare bytes nobody sent."""
    if isinstance(arguments, str):
        return arguments
    text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    # json.dumps leaves a lone surrogate raw (it cannot be encoded as UTF-8); JSON.stringify escapes it. Outside
    # strings JSON has no such character, so every match is inside a string, where the escape means the same.
    return _LONE_SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _tool_call(call: Any, wire: _Wire) -> OpenAIToolCall:
    arguments = client_arguments(call.arguments)
    return {"id": wire.call_id(call.id), "type": "function", "function": {"name": call.name, "arguments": arguments}}


def _with_tail(layout: Layout, index: int, text: str, segment: str) -> tuple[str, list[tuple[str, str]]]:
    if index == layout.tail_index and layout.tail:
        return text + TAIL_SEPARATOR + layout.tail, [(segment, text), ("tail", TAIL_SEPARATOR + layout.tail)]
    return text, [(segment, text)]


def _named(entry: OpenAIMessage, message: PresetMessage) -> OpenAIMessage:
    if message.name:
        entry["name"] = message.name
    return entry


def render_openai(layout: Layout, profile: Capabilities, runtime: RuntimeView) -> RenderedRequest:
    wire = _Wire(profile)
    mode = profile.mid_conversation_system
    # ``none``: no system message after the first, so the leading entries are one (ST's semi join, A6)
    leading = joined(layout.leading) if mode == "none" else layout.leading
    for block in leading:
        wire.add(_named({"role": profile.system_prompt_role, "content": block.text}, block), list(block.pieces))
    used_state = False
    for index, message in enumerate(layout.messages):
        if isinstance(message, PresetMessage):
            # fit_layout has made a system entry user text unless the profile takes system here
            role = mode if message.role == "system" else message.role
            wire.add(_named({"role": role, "content": message.text}, message), list(message.pieces))
        elif message.role == "state":
            text = state_lines(message, mode)
            wire.add({"role": mode if mode != "none" else "user", "content": text}, [(message.segment_id, text)])
            used_state = True
        elif message.role == "tool":
            call_id = wire.call_id(message.tool_call_id or "")
            wire.add({"role": "tool", "tool_call_id": call_id, "content": message.body}, [(message.segment_id, message.body)])
        elif message.role == "assistant":
            text, pieces = _with_tail(layout, index, message.text, message.segment_id)
            content: str | None = text or (None if profile.null_content == "null" else "")
            entry: OpenAIMessage = {"role": "assistant", "content": content}
            if message.tool_calls:
                entry["tool_calls"] = [_tool_call(c, wire) for c in message.tool_calls]
                pieces += [(message.segment_id, c["function"]["name"] + c["function"]["arguments"]) for c in entry["tool_calls"]]
            wire.add(entry, pieces)
        else:  # user, summary
            text, pieces = _with_tail(layout, index, message.text, message.segment_id)
            wire.add({"role": "user", "content": text}, pieces)
    if layout.tail and layout.tail_index is None:
        wire.add({"role": "user", "content": layout.tail}, [("tail", layout.tail)])
    body: OpenAIChatBody
    if profile.prompt_cache_key is not None:  # before the messages, where OpenAI's SDKs put their settings
        key = prompt_cache_key(profile.prompt_cache_key, runtime)
        body = {"model": runtime.model, "prompt_cache_key": key, "messages": wire.messages}
    else:
        body = {"model": runtime.model, "messages": wire.messages}
    if runtime.tools:
        # zhin.yaml's tools, checked by the config schema, are sent as configured (byte for byte)
        body["tools"] = cast("list[OpenAITool]", list(runtime.tools))
    tail_message = next((p.message_index for p in wire.parts if p.segment_id == "tail"), len(wire.messages))
    breakpoints: list[JSONObject] = [{"after": "system", "message_index": len(leading) - 1, "explicit": False}] if leading else []
    breakpoints.append({"before": "tail", "message_index": tail_message, "explicit": False})
    return RenderedRequest(
        body=as_json(body),
        state_rendering=("user" if mode == "none" else mode) if used_state else "none-needed",
        cache_breakpoints=breakpoints,
        parts=wire.parts,
    )


__all__ = ["OPENAI_CACHE", "R1_ERA_MODELS", "R1_ERA_RULES", "is_r1_era", "render_openai", "set_r1_era_models"]

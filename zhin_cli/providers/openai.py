"""OpenAI Chat Completions and the OpenAI-shaped APIs (DeepSeek, OpenRouter, Groq, vLLM, Ollama)."""

from __future__ import annotations

import json
from typing import Any

from zhin_cli.format import STATE_CHANGE_PREFIX, host_header
from zhin_cli.headers import Projected
from zhin_cli.preset import Layout
from zhin_cli.providers import CacheRules, Capabilities, RenderedRequest, register_profile, register_renderer
from zhin_cli.segments import RuntimeView

WIRE = "openai-chat"


def state_message(message: Projected, mode: str) -> dict[str, Any]:
    if mode in ("system", "developer"):
        return {"role": mode, "content": "\n".join(f"{STATE_CHANGE_PREFIX} {e.line}" for e in message.events)}
    # Downgraded: a user message whose every line carries the host-only header (ADR 0041 §2, `none`).
    lines = [f"{host_header(e.alias, e.time)} {STATE_CHANGE_PREFIX} {e.line}" for e in message.events]
    return {"role": "user", "content": "\n".join(lines)}


def _tool_call(call: Any) -> dict[str, Any]:
    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False)
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


@register_renderer(WIRE)
def render_openai(layout: Layout, profile: Capabilities, runtime: RuntimeView) -> RenderedRequest:
    messages: list[dict[str, Any]] = []
    origins: list[str] = []
    if layout.system:
        messages.append({"role": profile.system_prompt_role, "content": layout.system})
        origins.append("system")
    used_state = False
    for index, message in enumerate(layout.messages):
        if message.role == "state":
            messages.append(state_message(message, profile.mid_conversation_system))
            used_state = True
        elif message.role == "tool":
            messages.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.body})
        elif message.role == "assistant":
            text = layout.text_of(index)
            wire: dict[str, Any] = {"role": "assistant", "content": text or None}
            if message.tool_calls:
                wire["tool_calls"] = [_tool_call(c) for c in message.tool_calls]
            messages.append(wire)
        else:  # user, summary
            messages.append({"role": "user", "content": layout.text_of(index)})
        origins.append(message.segment_id)
    if layout.tail and layout.tail_index is None:
        messages.append({"role": "user", "content": layout.tail})
        origins.append("tail")
    body: dict[str, Any] = {"model": runtime.model, "messages": messages}
    if runtime.tools:
        body["tools"] = list(runtime.tools)
    mode = profile.mid_conversation_system
    breakpoints = [{"after": "system", "message_index": 0, "explicit": False}] if layout.system else []
    tail_at = layout.tail_index if layout.tail_index is not None else len(layout.messages)
    breakpoints.append({"before": "tail", "message_index": tail_at + (1 if layout.system else 0), "explicit": False})
    return RenderedRequest(
        body=body,
        state_rendering=("user" if mode == "none" else mode) if used_state else "none-needed",
        cache_breakpoints=breakpoints,
        origins=origins,
    )


OPENAI_CACHE = CacheRules(mechanism="automatic", min_tokens=1024, step_tokens=128)

register_profile(
    Capabilities(
        name="openai",
        wire=WIRE,
        mid_conversation_system="system",
        cache=OPENAI_CACHE,
        model_rules=(
            # o1-mini / o1-preview reject both system and developer: downgrade (providers.md §1.2)
            (r"^o1-(mini|preview)", {"mid_conversation_system": "none", "system_prompt_role": "user"}),
            (r"^o\d", {"mid_conversation_system": "developer", "system_prompt_role": "developer"}),
        ),
        description="OpenAI Chat Completions; o-series models switch to developer messages",
    )
)
register_profile(
    Capabilities(
        name="openai-reasoning",
        wire=WIRE,
        mid_conversation_system="developer",
        system_prompt_role="developer",
        cache=OPENAI_CACHE,
        description="OpenAI o-series reasoning models: developer messages",
    )
)
register_profile(
    Capabilities(
        name="openai-compatible",
        wire=WIRE,
        mid_conversation_system="system",
        cache=CacheRules(mechanism="none", min_tokens=0, step_tokens=1),
        description="OpenRouter, Groq and other OpenAI-compatible gateways: system by default",
    )
)
register_profile(
    Capabilities(
        name="deepseek",
        wire=WIRE,
        mid_conversation_system="none",
        cache=CacheRules(mechanism="automatic", min_tokens=64, step_tokens=64),
        description="DeepSeek: state changes downgraded to user messages by default",
    )
)

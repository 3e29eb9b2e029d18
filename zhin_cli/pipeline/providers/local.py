"""vLLM and Ollama: OpenAI-shaped, but what they accept is decided by the model's chat template
(docs/spec/providers.md §5). The model id selects its family; the family sets the rules our renderer
follows so that the real template accepts the request, and names the validator (``served:<family>``:
the template after the server's own normalisation of the body) that answers as the server would.

Both default to ``mid_conversation_system: none`` (ADR 0041 §2); a model whose template takes system
messages anywhere (Llama 3.x, Qwen2.5, Qwen3) may opt in per model in ``zhin.yaml``.

Some templates cannot take parts of the history at all, whatever their order (``TEMPLATE_NEEDS``); the local
profiles render through the OpenAI renderer wrapped by ``render_local_chat`` (registered for the same wire), which
reshapes the layout before and the body after it, so that every turn of the history is still sent:

* no tool role (Mixtral, Gemma 2 and 3), or tool calls the served template cannot take (DeepSeek R1/V3.1
  concatenate ``arguments`` as strings, but vLLM and Ollama hand them parsed objects; DeepSeek V3 drops calls
  whose content is not null, and vLLM sends ``""``): tool calls and results are sent as host-only text lines
  inside the assistant and user turns (``[tool call id:…;name:…;] {json}``, ``[tool result id:…;name:…;] …``;
  docs/design-notes.md "Local templates without a tool role"), and a warning on the request says so;
* no system role (Gemma 2), or one only some revisions of the template take (Mixtral's first revision raises on
  any system message, Gemma 3's first revision crashes on a string one): the leading system text opens the first
  user turn, joined by a blank line — which is exactly where the later revisions put it themselves;
* the system text only inside a last user message (Mistral v0.3, Nemo): a request that ends elsewhere (a tool
  result) gets it at the start of its last user turn — where the request it continues had it, so that prompt
  stays this one's prefix — and a preset's trailing prefill goes as user text (``prefill: False``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from zhin_cli.core.jsontext import JSON
from zhin_cli.pipeline.format import _LINE_BREAKS, tool_call_line, tool_result_line
from zhin_cli.pipeline.headers import Projected
from zhin_cli.pipeline.preset import Layout
from zhin_cli.pipeline.preset.layout import Item
from zhin_cli.pipeline.providers.capabilities import Capabilities
from zhin_cli.pipeline.providers.openai import render_openai
from zhin_cli.pipeline.providers.rendered import RenderedRequest
from zhin_cli.pipeline.providers.specs.local import FAMILY_PATTERNS, FAMILY_RULES  # the tables, with the profiles
from zhin_cli.pipeline.segments import RuntimeView
from zhin_cli.wire.types import OpenAIMessage


@dataclass(frozen=True)
class TemplateNeeds:
    """What a template cannot take at all, and the renderer therefore sends another way (module docstring)."""

    text_tools: str | None = None  # why tool calls and results go as text (None: native tool messages)
    system_in_first_user: bool = False  # the leading system text opens the first user turn
    call_text_apart: bool = False  # the bot's text (and header) beside a tool call gets its own assistant message
    # the template renders the leading system text only inside a last message that is a user turn: a request ending
    # on anything else (a tool result) gets it in its last user turn from us, where the previous request had it
    system_in_last_user: bool = False


NO_TOOL_ROLE = "the template has no tool role"
TEMPLATE_NEEDS: dict[str, TemplateNeeds] = {
    "mixtral": TemplateNeeds(NO_TOOL_ROLE, system_in_first_user=True),
    "gemma": TemplateNeeds(NO_TOOL_ROLE, system_in_first_user=True),
    "gemma2": TemplateNeeds(NO_TOOL_ROLE, system_in_first_user=True),
    "deepseek": TemplateNeeds("the template concatenates arguments as strings; the server parses them into objects"),
    "deepseek-v3.1": TemplateNeeds("the template concatenates arguments as strings; the server parses them into objects"),
    "deepseek-v3": TemplateNeeds("the template drops tool calls whose content is not null; the server sends \"\""),
    "mistral": TemplateNeeds(system_in_last_user=True),
    # Llama 3.x renders only the call of a tool-call message; it takes consecutive assistant turns
    "llama3": TemplateNeeds(call_text_apart=True),
}


def template_family(model: str) -> str | None:
    """The chat-template family (validator ``template:<family>``) of an HF id or an Ollama tag."""
    for pattern, family in FAMILY_PATTERNS:
        if re.search(pattern, model, flags=re.IGNORECASE):
            return family
    return None


def profile_family(profile: Capabilities) -> str | None:
    """The template family a profile speaks to: the one its validator (``served:<family>`` or
    ``template:<family>``) names, so a ``zhin.yaml`` validator override carries the renderer along."""
    prefix, _, family = profile.validator.partition(":")
    return family if prefix in ("served", "template") and family in FAMILY_RULES else None


def _arguments_text(arguments: JSON) -> str:
    """One JSON line: parsed and re-serialised when it is JSON text, else the raw text as a JSON string —
    never a line break, so no argument can start a line of its own. ``json.dumps`` escapes the C0 breaks but
    leaves U+0085, U+2028 and U+2029 raw; every character zhin reads as a line break (``format._LINE_BREAKS``)
    becomes its ``\\uXXXX`` escape, which is the same JSON (they only occur inside strings)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    return json.dumps(arguments, ensure_ascii=False).translate(_BREAK_ESCAPES)


_BREAK_ESCAPES = {ord(char): f"\\u{ord(char):04x}" for char in _LINE_BREAKS}


def tools_as_text(layout: Layout) -> tuple[Layout, int, int]:
    """Each assistant tool call becomes a ``[tool call …]`` line after the message's text, each tool result a
    user turn opening with ``[tool result …]``: (layout, calls, results). Message positions do not change, so
    the tail stays on the current input; the renderer's alternation merge joins the new user turns with the
    member messages around them."""
    names = {call.id: call.name for m in layout.messages if isinstance(m, Projected) for call in m.tool_calls}
    messages: list[Item] = []
    calls = results = 0
    for message in layout.messages:
        if isinstance(message, Projected) and message.role == "assistant" and message.tool_calls:
            lines = [tool_call_line(c.id, c.name, _arguments_text(c.arguments)) for c in message.tool_calls]
            calls += len(lines)
            body = "\n".join([message.body, *lines] if message.body else lines)
            message = replace(message, body=body, tool_calls=[])
        elif isinstance(message, Projected) and message.role == "tool":
            call_id = message.tool_call_id or ""
            line = tool_result_line(call_id, names.get(call_id, ""), message.body)
            results += 1
            message = replace(message, role="user", body=line, header=None, header_kind=None, tool_call_id=None)
        messages.append(message)
    return replace(layout, messages=messages), calls, results


def call_text_apart(layout: Layout) -> Layout:
    """An assistant message with tool calls and text becomes two: its text (with its header) first, then its
    calls alone — for templates that render a tool-call message's calls but not its text (Llama 3.x)."""
    messages: list[Item] = []
    tail_index = layout.tail_index
    for index, message in enumerate(layout.messages):
        if isinstance(message, Projected) and message.role == "assistant" and message.tool_calls and message.text:
            messages.append(replace(message, tool_calls=[]))
            message = replace(message, header=None, header_kind=None, body="")
            if tail_index is not None and tail_index > index:
                tail_index += 1
        messages.append(message)
    return replace(layout, messages=messages, tail_index=tail_index)


def _leading_system(messages: list[OpenAIMessage]) -> tuple[int, str]:
    """How many system messages lead, and their text joined by a blank line."""
    leading = 0
    while leading < len(messages) and messages[leading]["role"] == "system":
        leading += 1
    return leading, "\n\n".join(str(m["content"] or "") for m in messages[:leading])


def _move_leading_system(rendered: RenderedRequest, leading: int, text: str, target: int | None) -> None:
    """The ``leading`` system messages leave the list; their ``text`` opens the user message at ``target`` (its
    index before the move), or becomes a user turn of its own at the start (``target`` None). Parts and cache
    breakpoints follow their messages; the system parts are now inside the target turn."""
    messages: list[OpenAIMessage] = rendered.body["messages"]  # render_openai's body
    if target is None:
        messages[:leading] = [{"role": "user", "content": text}]
        shift, into = leading - 1, 0
    else:
        messages[target] = {**messages[target], "content": f"{text}\n\n{messages[target]['content'] or ''}"}
        del messages[:leading]
        shift, into = leading, target - leading

    def moved(index: int) -> int:
        return into if 0 <= index < leading else index - shift if index >= leading else index

    parts = [replace(p, message_index=moved(p.message_index)) for p in rendered.parts]
    # stable: the system text's parts stay in front of the text of the turn they now open
    rendered.parts = sorted(parts, key=lambda p: p.message_index)
    for breakpoint in rendered.cache_breakpoints:
        index = breakpoint["message_index"]
        if isinstance(index, int):  # always (the renderer wrote it)
            breakpoint["message_index"] = moved(index)


def system_into_first_user(rendered: RenderedRequest) -> None:
    """The leading system message(s) open the first user turn (the system text, a blank line, the user text); with no user turn to open
    (the history starts with the bot, or is empty) they become that user turn."""
    messages: list[OpenAIMessage] = rendered.body["messages"]  # render_openai's body
    leading, text = _leading_system(messages)
    if leading:
        first_user = leading < len(messages) and messages[leading]["role"] == "user"
        _move_leading_system(rendered, leading, text, leading if first_user else None)


def system_into_last_user(rendered: RenderedRequest) -> bool:
    """For a request that does not end on a user turn (a tool-loop continuation): the leading system text opens the
    last user turn — where the template put it in the request this one continues, so that request's prompt stays
    this one's prefix — or, with no user turn at all, becomes the first turn. True if it moved."""
    messages: list[OpenAIMessage] = rendered.body["messages"]  # render_openai's body
    leading, text = _leading_system(messages)
    if not leading or messages[-1]["role"] == "user" or leading == len(messages):
        return False  # the template places it itself (or there is nothing to place it in)
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    _move_leading_system(rendered, leading, text, last_user)
    return True


# The openai-chat wire's renderer (rendered.RENDERERS): render_openai, plus what a template family needs
def render_local_chat(layout: Layout, profile: Capabilities, runtime: RuntimeView) -> RenderedRequest:
    """The OpenAI-chat renderer, plus what the profile's template family needs (``TEMPLATE_NEEDS``); for
    every other profile exactly ``render_openai``."""
    family = profile_family(profile)
    needs = TEMPLATE_NEEDS.get(family or "")
    if family is None:
        return render_openai(layout, profile, runtime)
    calls = results = 0
    if needs and needs.text_tools:
        layout, calls, results = tools_as_text(layout)
    if needs and needs.call_text_apart:
        layout = call_text_apart(layout)
    rendered = render_openai(layout, profile, runtime)
    if needs and needs.system_in_first_user:
        system_into_first_user(rendered)
    if needs and needs.system_in_last_user and system_into_last_user(rendered):
        rendered.warnings.append(
            f"the system prompt opens the last user turn ({family}: the template renders it only inside a last user "
            f"message, and this request ends on a {rendered.body['messages'][-1]['role']!r} message; "
            "docs/design-notes.md \"Local templates without a tool role\")")
    if calls or results:
        rendered.warnings.append(
            f"{calls} tool call(s) and {results} tool result(s) sent as text lines in the user/assistant turns "
            f"({family}: {needs.text_tools if needs else ''}; docs/design-notes.md \"Local templates without a tool role\")")
    return rendered  # what the template then drops is the validator's verdict (its warnings join the request's)


__all__ = ["FAMILY_PATTERNS", "FAMILY_RULES", "render_local_chat"]

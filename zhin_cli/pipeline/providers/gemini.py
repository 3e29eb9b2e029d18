"""Gemini generateContent (docs/spec/providers.md §3).

System text goes to ``systemInstruction``; roles are ``user`` and ``model``. A function-call turn is
answered by one ``user`` content holding exactly one ``functionResponse`` part per call, right after it.
Consecutive same-role contents are merged, except that user text is never mixed into a function-response
content (Gemini 3 misbehaves on that): user-side messages that arrive during a tool loop are held until
the loop's reply (``hold_during_tool_loop``, see ``shaping.py``).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from zhin_cli.core.jsontext import JSONObject
from zhin_cli.pipeline.preset import Layout, PresetMessage
from zhin_cli.pipeline.providers.capabilities import Capabilities
from zhin_cli.pipeline.providers.openai import state_lines
from zhin_cli.pipeline.providers.rendered import RenderedPart, RenderedRequest
from zhin_cli.pipeline.providers.shaping import tool_input
from zhin_cli.pipeline.segments import RuntimeView
from zhin_cli.wire.types import GeminiBody, GeminiContent, GeminiFunctionDeclaration, GeminiHead, GeminiPart, as_json

WIRE = "gemini-generate"


class _Contents:
    def __init__(self) -> None:
        self.contents: list[GeminiContent] = []
        self.parts: list[RenderedPart] = []

    def add(self, role: Literal["user", "model"], part: GeminiPart, segment: str, text: str) -> None:
        last = self.contents[-1] if self.contents else None
        responding = "functionResponse" in part
        if (
            last is not None
            and last["role"] == role
            and responding == any("functionResponse" in p for p in last["parts"])
        ):
            last["parts"].append(part)
        else:
            self.contents.append({"role": role, "parts": [part]})
        self.parts.append(RenderedPart(segment, text, len(self.contents) - 1))


def _declaration(tool: dict[str, Any]) -> GeminiFunctionDeclaration:
    function = tool.get("function", tool)
    out: GeminiFunctionDeclaration = {"name": function.get("name")}
    if function.get("description"):
        out["description"] = function["description"]
    if function.get("parameters"):
        out["parameters"] = function["parameters"]
    return out


def render_gemini(layout: Layout, profile: Capabilities, runtime: RuntimeView) -> RenderedRequest:
    out = _Contents()
    head: GeminiHead = {}  # what comes before contents, in the wire's key order
    parts: list[RenderedPart] = []
    leading = layout.leading
    if leading:
        head["systemInstruction"] = {"parts": [{"text": block.spoken_text()} for block in leading]}
        parts.extend(RenderedPart(segment, text, -1) for block in leading for segment, text in block.spoken_pieces() if segment)
    if runtime.tools:
        head["tools"] = [{"functionDeclarations": [_declaration(t) for t in runtime.tools]}]
    names: dict[str, str] = {}
    used_state = False
    for index, message in enumerate(layout.messages):
        if isinstance(message, PresetMessage):  # no system role inside contents: system entries are user text
            role: Literal["user", "model"] = "model" if message.role == "assistant" else "user"
            pieces = [piece for piece in message.spoken_pieces() if piece[0]]
            out.add(role, {"text": message.spoken_text()}, pieces[0][0] if pieces else "", pieces[0][1] if pieces else "")
            out.parts.extend(RenderedPart(segment, text, len(out.contents) - 1) for segment, text in pieces[1:])
        elif message.role == "state":
            text = state_lines(message, "none")  # no system role inside contents
            out.add("user", {"text": text}, message.segment_id, text)
            used_state = True
        elif message.role == "tool":
            name = names.get(message.tool_call_id or "", "tool")
            out.add("user", {"functionResponse": {"name": name, "response": {"content": message.body}}}, message.segment_id, message.body)
        elif message.role == "assistant":
            if message.text:
                out.add("model", {"text": message.text}, message.segment_id, message.text)
            for call in message.tool_calls:
                names[call.id] = call.name
                args = tool_input(call.arguments)
                out.add("model", {"functionCall": {"name": call.name, "args": args}}, message.segment_id,
                        call.name + json.dumps(args, ensure_ascii=False))
        else:
            out.add("user", {"text": message.text}, message.segment_id, message.text)
            if index == layout.tail_index and layout.tail:
                out.add("user", {"text": layout.tail}, "tail", layout.tail)
    if layout.tail and layout.tail_index is None:
        out.add("user", {"text": layout.tail}, "tail", layout.tail)
    body: GeminiBody = {**head, "contents": out.contents}
    tail_at = next((p.message_index for p in out.parts if p.segment_id == "tail"), len(out.contents))
    breakpoints: list[JSONObject] = [{"after": "system", "message_index": -1, "explicit": False}] if leading else []
    breakpoints.append({"before": "tail", "message_index": tail_at, "explicit": False})
    return RenderedRequest(body=as_json(body), state_rendering="user" if used_state else "none-needed",
                           cache_breakpoints=breakpoints, parts=parts + out.parts)

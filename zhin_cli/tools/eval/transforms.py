"""Request transforms: what a naive assembler would have sent instead, for negative controls.

A transform takes the assembled request and returns another wire body; the runner validates that body with
the same provider validator, so a case can show that the naive layout is rejected with the API's exact 400.
"""

from __future__ import annotations

import copy
from typing import Any

from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.tools.eval.registry import transform

STATE_SEGMENT = "history.state"


def _is_call(wire: str, message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    if wire == "anthropic-messages":
        return any(isinstance(b, dict) and b.get("type") == "tool_use" for b in message.get("content") or [])
    if wire == "gemini-generate":
        return any(isinstance(p, dict) and "functionCall" in p for p in message.get("parts") or [])
    return bool(message.get("tool_calls"))


def _is_result(wire: str, message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    if wire == "anthropic-messages":
        return any(isinstance(b, dict) and b.get("type") == "tool_result" for b in message.get("content") or [])
    if wire == "gemini-generate":
        return any(isinstance(p, dict) and "functionResponse" in p for p in message.get("parts") or [])
    return message.get("role") == "tool"


def _standalone(wire: str, role: str, text: str) -> dict[str, Any]:
    if wire == "anthropic-messages":
        return {"role": "user", "content": [{"type": "text", "text": text}]}
    if wire == "gemini-generate":
        return {"role": "user", "parts": [{"text": text}]}
    return {"role": role, "content": text}


def _take_text(wire: str, message: dict[str, Any], text: str) -> bool:
    """Remove the block carrying ``text`` from a merged message; True if the whole message is that text."""
    key = "parts" if wire == "gemini-generate" else "content"
    blocks = message.get(key)
    if isinstance(blocks, str) or blocks is None:
        return True
    kept = [b for b in blocks if not (isinstance(b, dict) and b.get("text") == text)]
    if not kept:
        return True
    message[key] = kept
    return False


@transform("place_events_by_time")
def place_events_by_time(request: AssembledRequest, spec: dict[str, Any]) -> dict[str, Any]:
    """Move each state-change message that the assembler placed after a tool group back to where its timestamp
    puts it: right after the tool-call message, inside the group (the naive placement ADR 0041 §2 forbids)."""
    wire = request.profile.wire if request.profile else "openai-chat"
    body = copy.deepcopy(request.request)
    key = "contents" if "contents" in body else "messages"
    messages: list[Any] = body[key]
    state_parts = [p for p in request.parts if p.segment_id == STATE_SEGMENT and p.message_index >= 0]
    moves: list[tuple[int, dict[str, Any]]] = []
    removed: set[int] = set()
    for part in state_parts:
        call = next((i for i in range(part.message_index - 1, -1, -1) if _is_call(wire, messages[i])), None)
        # Only an event that directly follows a tool group's results (it arrived during the call).
        if call is None or not all(_is_result(wire, m) for m in messages[call + 1 : part.message_index]):
            continue
        original = messages[part.message_index]
        role = str(original.get("role", "user")) if isinstance(original, dict) else "user"
        moves.append((call, _standalone(wire, role, part.text)))
        if _take_text(wire, original, part.text):
            removed.add(part.message_index)
    if not moves:
        return body
    rebuilt: list[Any] = []
    for index, message in enumerate(messages):
        if index not in removed:
            rebuilt.append(message)
        rebuilt.extend(moved for call, moved in moves if call == index)
    body[key] = rebuilt
    return body


@transform("name_field")
def name_field(request: AssembledRequest, spec: dict[str, Any]) -> dict[str, Any]:
    """Set the provider ``name`` field on every member message to its sender's user_id, as ADR 0041's first
    draft did (revised: headers go in the text and ``name`` is never set)."""
    from zhin_cli.pipeline.format import parse_header

    body = copy.deepcopy(request.request)
    key = "contents" if "contents" in body else "messages"
    for message in body[key]:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content") if key == "messages" else message.get("parts")
        text = content if isinstance(content, str) else next(
            (b.get("text", "") for b in content or [] if isinstance(b, dict) and "text" in b), "")
        fields = dict(parse_header(text) or [])
        if "user_id" in fields:
            message["name"] = fields["user_id"]
    return body

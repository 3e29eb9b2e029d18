"""Request transforms: what a naive assembler would have sent instead, for negative controls.

A transform takes the assembled request and returns another wire body; the runner validates that body with
the same provider validator, so a case can show that the naive layout is rejected with the API's exact 400.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.tools.eval.registry import transform
from zhin_cli.wire import wire_for

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSON, JSONObject

STATE_SEGMENT = "history.state"


@transform("place_events_by_time")
def place_events_by_time(request: AssembledRequest, spec: JSONObject) -> JSONObject:
    """Move each state-change message that the assembler placed after a tool group back to where its timestamp
    puts it: right after the tool-call message, inside the group (the naive placement ADR 0041 §2 forbids)."""
    wire = wire_for(request.profile.wire)
    body: JSONObject = copy.deepcopy(request.request)
    key = wire.message_key
    messages = wire.messages(body)
    state_parts = [p for p in request.parts if p.segment_id == STATE_SEGMENT and p.message_index >= 0]
    moves: list[tuple[int, JSONObject]] = []
    removed: set[int] = set()
    for part in state_parts:
        call = next((i for i in range(part.message_index - 1, -1, -1) if wire.is_tool_call(messages[i])), None)
        # Only an event that directly follows a tool group's results (it arrived during the call).
        if call is None or not all(wire.is_tool_result(m) for m in messages[call + 1 : part.message_index]):
            continue
        original = messages[part.message_index]
        role = str(original.get("role", "user")) if isinstance(original, dict) else "user"
        moves.append((call, wire.user_text(role, part.text)))
        if wire.take_text(original, part.text):
            removed.add(part.message_index)
    if not moves:
        return body
    rebuilt: list[JSON] = []
    for index, message in enumerate(messages):
        if index not in removed:
            rebuilt.append(message)
        rebuilt.extend(moved for call, moved in moves if call == index)
    body[key] = rebuilt
    return body


@transform("name_field")
def name_field(request: AssembledRequest, spec: JSONObject) -> JSONObject:
    """Set the provider ``name`` field on every member message to its sender's user_id, as ADR 0041's first
    draft did (revised: headers go in the text and ``name`` is never set)."""
    from zhin_cli.pipeline.format import parse_header

    wire = wire_for(request.profile.wire)
    body: JSONObject = copy.deepcopy(request.request)
    for message in wire.messages(body):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        text = next(iter(wire.message_texts(message)), "")
        fields = dict(parse_header(text) or [])
        if "user_id" in fields:
            message["name"] = fields["user_id"]
    return body

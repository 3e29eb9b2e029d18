"""Provider-specific reshaping: of the neutral history before the preset stage (``shape``), and of the
preset's layout before the renderer (``fit_layout``).

Some APIs and chat templates cannot take the history as the ADR orders it; these steps make it legal
for them without changing what the model is told:

* ``hold_during_tool_loop`` (Gemini; strict templates such as Mistral): user-side messages (members,
  state changes) that arrive while a tool loop runs are held until the loop's closing assistant message
  and sent right after it. A request that continues the loop does not carry them yet (a warning says so).
  ADR §2 only requires "after the tool group"; this is after it too, and never between a function call
  and its response, nor between the response and the reply.
* ``single_tool_call`` (Llama 3.x templates): an assistant message with several tool calls becomes one
  assistant message per call, each followed by its result.

Preset items (issue 15 A6, A7; docs/design-notes.md "Preset system entries under strict providers (A6)" and
"name on example dialogue (A7)") follow the profile exactly like state changes:

* a preset system entry after the first message, where the profile takes no system message there
  (``mid_conversation_system: none``), becomes user text opening with the host-only header ``[user_id:system;]``
  (a state change's header without id and time: the entry has neither), so that it can never read as a
  member's words, also when a strict template merges it into a member's turn;
* example turns keep ST's ``name`` only where ``example_names`` says the wire has it and ST sends it; elsewhere
  they say who speaks in the text (``Name: ``), as ST's converters do;
* strict templates (``strict_turns``) get ST's strict placeholder user turn when the first message after the
  system text is not a user one; profiles that ``hold_during_tool_loop`` get a user-side preset entry that would
  sit between a tool result and the loop's reply before the loop instead (where ST's Mistral converter puts it:
  in the last user turn); a trailing assistant entry is not sent as prefill where the model rejects prefill.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from zhin_cli.pipeline.format import PRESET_HOST_HEADER
from zhin_cli.pipeline.headers import Projected
from zhin_cli.pipeline.preset import Item, Layout, PresetMessage
from zhin_cli.pipeline.preset.model import PLACEHOLDER
from zhin_cli.pipeline.providers.capabilities import Capabilities

USER_SIDE = ("user", "state", "summary")
LEADING_JOIN = "\n\n"  # leading system entries joined into one message: ST's merge/semi join
PLACEHOLDER_SEGMENT = "preset:placeholder"


def shape(messages: list[Projected], profile: Capabilities) -> tuple[list[Projected], list[str]]:
    warnings: list[str] = []
    if profile.single_tool_call:
        messages = split_tool_calls(messages)
    if profile.hold_during_tool_loop:
        messages, held = hold_during_tool_loops(messages)
        if held:
            warnings.append(
                f"{held} message(s) that arrived during the running tool loop are held until it ends "
                f"({profile.name} cannot take user turns between a tool result and the reply)"
            )
    return messages, warnings


def split_tool_calls(messages: list[Projected]) -> list[Projected]:
    results = {m.tool_call_id: m for m in messages if m.role == "tool"}
    moved = {c.id for m in messages if m.role == "assistant" and len(m.tool_calls) > 1 for c in m.tool_calls}
    out: list[Projected] = []
    for message in messages:
        if message.role == "tool" and message.tool_call_id in moved:
            continue  # re-emitted right after its own call below
        if message.role == "assistant" and len(message.tool_calls) > 1:
            for index, call in enumerate(message.tool_calls):
                if index == 0:
                    out.append(replace(message, tool_calls=[call]))
                else:  # the text and header travel with the first call only
                    out.append(replace(message, tool_calls=[call], header=None, header_kind=None, body=""))
                if call.id in results:
                    out.append(results[call.id])
            continue
        out.append(message)
    return out


def hold_during_tool_loops(messages: list[Projected]) -> tuple[list[Projected], int]:
    out: list[Projected] = []
    held: list[Projected] = []
    in_loop = False  # after a tool result, until the next assistant message
    for message in messages:
        if message.role == "tool":
            in_loop = True
            out.append(message)
        elif message.role == "assistant":
            out.append(message)
            if in_loop and not message.tool_calls:
                out.extend(held)
                held = []
                in_loop = False
        elif in_loop and message.role in USER_SIDE:
            held.append(message)
        else:
            out.append(message)
    return out, len(held)


# --- preset items (fit_layout) -------------------------------------------------------------------------


def spoken(message: PresetMessage) -> PresetMessage:
    """The entry without the ``name`` field: a named example turn says who speaks in its text."""
    if not message.name:
        return message
    return replace(message, pieces=message.spoken_pieces(), name=None, speaker=None)


def downgraded(message: PresetMessage) -> PresetMessage:
    """A preset entry sent as user text where the profile cannot take its role: the host-only header first."""
    message = spoken(message)
    return replace(message, role="user", pieces=[(message.segment_id, PRESET_HOST_HEADER + " "), *message.pieces])


def joined(blocks: list[PresetMessage]) -> list[PresetMessage]:
    """The leading system entries as one system message (``LEADING_JOIN``), for profiles that take one."""
    if len(blocks) < 2:
        return blocks
    pieces: list[tuple[str, str]] = []
    for block in blocks:
        if pieces:
            pieces.append(("", LEADING_JOIN))
        pieces.extend(spoken(block).pieces)
    return [PresetMessage("system", pieces, exempt=True)]


def _user_side(item: Item) -> bool:
    return item.role in ("user", "system") if isinstance(item, PresetMessage) else item.role in USER_SIDE


def _before_tool_loops(messages: list[Item]) -> list[Item]:
    """User-side preset items between a tool result and the loop's reply (an in-chat injection whose depth falls
    there, post-history entries during a running loop) move in front of the loop's first call, to the end of
    the turn that started it — where ST's Mistral converter puts a user message that follows a tool message (in
    the last user turn). A running loop's continuation request then repeats the first request's prefix."""
    out: list[Item] = []
    loop_start: int | None = None  # where the current loop's first call sits in ``out``
    after_result = False
    for item in messages:
        if item.role == "assistant":
            if isinstance(item, Projected) and item.tool_calls:
                loop_start = len(out) if loop_start is None else loop_start
            elif isinstance(item, Projected):
                loop_start = None  # the loop's reply
            after_result = False
        elif isinstance(item, Projected) and item.role == "tool":
            after_result = True
        elif after_result and loop_start is not None and isinstance(item, PresetMessage) and _user_side(item):
            out.insert(loop_start, item)
            loop_start += 1
            continue
        out.append(item)
    return out


def without_prefill(messages: list[Item], tail_alone: bool) -> list[Item]:
    """A trailing assistant preset entry becomes user text (ST does the same for Gemini models that reject
    prefill); nothing changes if the runtime tail travels alone after it."""
    if messages and not tail_alone and isinstance(messages[-1], PresetMessage) and messages[-1].role == "assistant":
        return [*messages[:-1], downgraded(messages[-1])]
    return messages


def fit_layout(layout: Layout, profile: Capabilities) -> Layout:
    """The preset's items as the profile takes them (module docstring). A layout without preset items (the
    default preset: one system block, the history) passes unchanged."""
    if not any(isinstance(m, PresetMessage) for m in layout.messages) and not any(b.name for b in layout.leading):
        return layout
    current = layout.messages[layout.tail_index] if layout.tail_index is not None else None
    leading = list(layout.leading)
    if not profile.example_names:
        leading = [spoken(block) for block in leading]
    messages: list[Item] = []
    for item in layout.messages:
        if isinstance(item, PresetMessage):
            if not profile.example_names:
                item = spoken(item)
            if item.role == "system" and profile.mid_conversation_system == "none":
                item = downgraded(item)
        messages.append(item)
    if not profile.prefill:  # first: a downgraded prefill after a tool result then moves before the loop (Mistral)
        messages = without_prefill(messages, tail_alone=bool(layout.tail) and layout.tail_index is None)
    if profile.hold_during_tool_loop:
        messages = _before_tool_loops(messages)
    if profile.strict_turns and messages and not _user_side(messages[0]):
        messages.insert(0, downgraded(PresetMessage("system", [(PLACEHOLDER_SEGMENT, PLACEHOLDER)])))
    tail_index = next((i for i, m in enumerate(messages) if m is current), None) if current is not None else None
    return replace(layout, messages=messages, tail_index=tail_index, system_blocks=leading)


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the JSON object Anthropic's ``input`` and Gemini's ``args`` carry: a JSON text is
    parsed; anything else (not JSON, nested too deeply, not an object) is kept verbatim under one key."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):  # not JSON, or nested too deeply: kept verbatim
            return {"arguments": arguments}
        return value if isinstance(value, dict) else {"value": value}
    return {"value": arguments}

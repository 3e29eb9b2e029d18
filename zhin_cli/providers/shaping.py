"""Provider-specific reshaping of the neutral history, before layout and render.

Some APIs and chat templates cannot take the history as the ADR orders it; these steps make it legal
for them without changing what the model is told:

* ``hold_during_tool_loop`` (Gemini; strict templates such as Mistral): user-side messages (members,
  state changes) that arrive while a tool loop runs are held until the loop's closing assistant message
  and sent right after it. A request that continues the loop does not carry them yet (a warning says so).
  ADR §2 only requires "after the tool group"; this is after it too, and never between a function call
  and its response, nor between the response and the reply.
* ``single_tool_call`` (Llama 3.x templates): an assistant message with several tool calls becomes one
  assistant message per call, each followed by its result.
"""

from __future__ import annotations

from dataclasses import replace

from zhin_cli.headers import Projected
from zhin_cli.providers import Capabilities

USER_SIDE = ("user", "state", "summary")


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

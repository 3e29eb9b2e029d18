"""Anthropic Messages (docs/spec/providers.md §2).

* The system prompt is top-level ``system``; tools → system → messages is the cache order.
* Tool results are ``tool_result`` blocks at the *start* of the next user turn; anything user-side that
  follows (downgraded state changes, member messages) comes after them in the same turn.
* Mid-conversation ``role: "system"`` only for allow-listed models and only where the API accepts it:
  right after a user turn (a tool_result turn counts) and before an assistant turn or at the end.
  Anywhere else the state change is downgraded to user text with the host-only header.
* ``cache_control`` breakpoints (never more than 4): the end of the stable system prompt, the last
  block before the runtime tail, and the last block before the newest assistant message (where the request that
  produced it marked its tail: read however many blocks came since; ``PLACEMENTS``, docs/design-notes.md
  "Anthropic breakpoint placement").
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from zhin_cli.core.jsontext import JSONObject
from zhin_cli.pipeline.headers import Projected
from zhin_cli.pipeline.preset import Layout, PresetMessage
from zhin_cli.pipeline.providers.capabilities import Capabilities
from zhin_cli.pipeline.providers.openai import state_lines
from zhin_cli.pipeline.providers.rendered import RenderedPart, RenderedRequest
from zhin_cli.pipeline.providers.shaping import downgraded, spoken, tool_input
from zhin_cli.pipeline.providers.specs.anthropic import (  # the model tables, re-exported for their old readers
    CACHE_MINIMUMS,
    MAX_BREAKPOINTS,
    MID_SYSTEM_MODELS,
    PREFILL_REJECTED_FROM,
    accepts_mid_system,
    claude_version,
    rejects_prefill,
)
from zhin_cli.pipeline.segments import RuntimeView
from zhin_cli.wire.types import (
    AnthropicBlock,
    AnthropicBody,
    AnthropicHead,
    AnthropicMessage,
    AnthropicTextBlock,
    AnthropicTool,
    AnthropicToolUseBlock,
    CacheControl,
    as_json,
)

WIRE = "anthropic-messages"


def ephemeral() -> CacheControl:
    """A fresh ``cache_control`` marker (each block gets its own dict: a later edit of one moves no other)."""
    return {"type": "ephemeral"}

DEFAULT_MAX_TOKENS = 1024
def tool_use_id(call_id: str) -> str:
    """tool_use ids must match ^[a-zA-Z0-9_-]+$."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", call_id) or "_"


def _tool(tool: dict[str, Any]) -> AnthropicTool:
    function = tool.get("function", tool)
    out: AnthropicTool = {"name": function.get("name"), "input_schema": function.get("parameters") or {"type": "object"}}
    if function.get("description"):
        out["description"] = function["description"]
    return out


def _mid_system_ok(layout: Layout, index: int, profile: Capabilities, model: str) -> bool:
    if profile.mid_conversation_system != "system" or not accepts_mid_system(model):
        return False
    before = layout.messages[index - 1] if index > 0 else None
    after = layout.messages[index + 1] if index + 1 < len(layout.messages) else None
    follows_user = before is not None and before.role in ("user", "summary", "tool")  # a tool_result turn is a user turn
    ends_array = after is None and not (layout.tail and layout.tail_index is None)
    return follows_user and (ends_array or (after is not None and after.role == "assistant"))


class _Turns:
    def __init__(self) -> None:
        self.messages: list[AnthropicMessage] = []
        self.parts: list[RenderedPart] = []

    def add(self, role: Literal["user", "assistant"], block: AnthropicBlock, segment: str, text: str) -> AnthropicBlock:
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == role and role in ("user", "assistant"):
            last["content"].append(block)
        else:
            self.messages.append({"role": role, "content": [block]})
        if segment:
            self.parts.append(RenderedPart(segment, text, len(self.messages) - 1))
        return block

    def add_pieces(self, role: Literal["user", "assistant"], block: AnthropicBlock, pieces: list[tuple[str, str]]) -> None:
        self.add(role, block, "", "")
        self.parts.extend(RenderedPart(segment, text, len(self.messages) - 1) for segment, text in pieces if segment)


# --- cache breakpoints ----------------------------------------------------------------------------------------
# Where the message breakpoints go (docs/design-notes.md "Anthropic breakpoint placement": the experiment and its
# numbers, benchmarks/anthropic_breakpoints.py). Each rule names one breakpoint; the system prompt's is always there.
#   "tail"      the last history block before the runtime tail (the newest member message): what the next request
#               reads when its own look-back (LOOKBACK_BLOCKS) reaches it;
#   "previous"  the last block before the newest assistant message: exactly where the request that produced that
#               message put its "tail" breakpoint, so this request reads that entry however many blocks came since;
#   "lookback"  LOOKBACK_BLOCKS - 1 blocks before the "tail" one, so the look-back reaches twice as far back;
#   "cut"       the block ending the first CUT_ANCHOR_MESSAGES window rows: fixed between two window cuts.
PlacementRule = Literal["tail", "previous", "lookback", "cut"]
PLACEMENTS: dict[str, tuple[PlacementRule, ...]] = {
    "tail": ("tail",),
    "tail+cut": ("tail", "cut"),
    "tail+lookback": ("tail", "lookback"),
    "tail+cut+lookback": ("tail", "cut", "lookback"),
    "tail+previous": ("tail", "previous"),
    "tail+previous+lookback": ("tail", "previous", "lookback"),
}
PLACEMENT = "tail+previous"  # the renderer's behaviour (the measured cheapest); the benchmark sets others
CUT_ANCHOR_MESSAGES = 40  # the default window's keep_after_cut (WindowConfig: max_messages 80 // 2)
_LOOKBACK_STEP = 19  # LOOKBACK_BLOCKS (zhin_cli.cache) - 1: the farthest block a breakpoint's look-back reaches


def _history_breakpoints(messages: list[AnthropicMessage], before_tail: tuple[int, int] | None,
                         cut_block: tuple[int, int] | None, placement: str) -> list[JSONObject]:
    """Mark the message blocks ``placement``'s rules choose (at most MAX_BREAKPOINTS - 1 besides the system's) and
    return their ``cache_breakpoints`` entries, in block order."""
    rules = PLACEMENTS[placement]
    flat = [(i, j) for i, message in enumerate(messages) for j in range(len(message["content"]))]
    chosen: dict[tuple[int, int], str] = {}
    if "tail" in rules and before_tail is not None:
        chosen[before_tail] = "tail"
    if "previous" in rules:
        newest = next((i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "assistant"), None)
        if newest is not None and newest > 0 and messages[newest - 1]["role"] == "user":
            spot = (newest - 1, len(messages[newest - 1]["content"]) - 1)
            # only before the "tail" one: after it (a tool loop's results) it would write what today stays uncached
            # — 1.25× for tokens the next request mostly does not read — and the runtime tail is never marked
            if before_tail is not None and spot < before_tail:
                chosen.setdefault(spot, "previous turn")
    if "cut" in rules and cut_block is not None and (before_tail is None or cut_block < before_tail):
        chosen.setdefault(cut_block, "window cut")
    if "lookback" in rules and before_tail is not None:
        at = flat.index(before_tail) - _LOOKBACK_STEP
        if at >= 0:  # nearer the start, the system prompt's breakpoint already looks back there
            chosen.setdefault(flat[at], "look-back")
    assert len(chosen) < MAX_BREAKPOINTS  # the system prompt's is the fourth
    out: list[JSONObject] = []
    for (i, j), label in sorted(chosen.items()):
        messages[i]["content"][j]["cache_control"] = ephemeral()
        out.append({"before": "tail", "message_index": i, "explicit": True} if label == "tail"
                   else {"after": label, "message_index": i, "explicit": True})
    return out


def render_anthropic(layout: Layout, profile: Capabilities, runtime: RuntimeView) -> RenderedRequest:
    turns = _Turns()
    head: AnthropicHead = {"model": runtime.model, "max_tokens": DEFAULT_MAX_TOKENS}  # messages come last
    if runtime.tools:
        head["tools"] = [_tool(t) for t in runtime.tools]
    parts: list[RenderedPart] = []
    breakpoints: list[JSONObject] = []
    leading = layout.leading
    if leading:
        # leading system entries become the top-level system, one text block each (ST use_sysprompt)
        system: list[AnthropicTextBlock] = [{"type": "text", "text": block.spoken_text()} for block in leading]
        system[-1]["cache_control"] = ephemeral()
        head["system"] = system
        parts.extend(RenderedPart(segment, text, -1) for block in leading for segment, text in block.spoken_pieces() if segment)
        breakpoints.append({"after": "system", "message_index": -1, "explicit": True})
    modes: set[str] = set()  # a trailing prefill the model rejects is gone already (fit_layout, profile.prefill)
    before_tail: tuple[int, int] | None = None  # (message, block) of the last history block before the runtime tail
    cut_block: tuple[int, int] | None = None  # ``"cut"`` placement: the block ending CUT_ANCHOR_MESSAGES rows
    history_rows = 0
    for index, message in enumerate(layout.messages):
        if isinstance(message, PresetMessage):
            if message.role == "system" and _mid_system_ok(layout, index, profile, runtime.model):
                turns.messages.append({"role": "system", "content": [{"type": "text", "text": message.spoken_text()}]})
                turns.parts.extend(RenderedPart(seg, piece, len(turns.messages) - 1) for seg, piece in message.spoken_pieces() if seg)
            else:  # mid-conversation system is user text unless the model accepts it there (like state changes)
                message = downgraded(message) if message.role == "system" else spoken(message)
                role: Literal["user", "assistant"] = "assistant" if message.role == "assistant" else "user"
                turns.add_pieces(role, {"type": "text", "text": message.text}, list(message.pieces))
        elif message.role == "state":
            if _mid_system_ok(layout, index, profile, runtime.model):
                text = state_lines(message, "system")
                turns.messages.append({"role": "system", "content": [{"type": "text", "text": text}]})
                turns.parts.append(RenderedPart(message.segment_id, text, len(turns.messages) - 1))
                modes.add("system")
            else:
                text = state_lines(message, "none")
                turns.add("user", {"type": "text", "text": text}, message.segment_id, text)
                modes.add("user")
        elif message.role == "tool":
            turns.add("user", {"type": "tool_result", "tool_use_id": tool_use_id(message.tool_call_id or ""),
                               "content": message.body}, message.segment_id, message.body)
        elif message.role == "assistant":
            if message.text:
                turns.add("assistant", {"type": "text", "text": message.text}, message.segment_id, message.text)
            for call in message.tool_calls:
                use: AnthropicToolUseBlock = {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name,
                                              "input": tool_input(call.arguments)}
                turns.add("assistant", use, message.segment_id, call.name + json.dumps(use["input"], ensure_ascii=False))
        else:
            turns.add("user", {"type": "text", "text": message.text}, message.segment_id, message.text)
            if index == layout.tail_index and layout.tail:
                before_tail = (len(turns.messages) - 1, len(turns.messages[-1]["content"]) - 1)
                turns.add("user", {"type": "text", "text": layout.tail}, "tail", layout.tail)
        if isinstance(message, Projected):
            history_rows += len(message.rows)
            if cut_block is None and history_rows >= CUT_ANCHOR_MESSAGES and turns.messages:
                cut_block = (len(turns.messages) - 1, len(turns.messages[-1]["content"]) - 1)
    if layout.tail and layout.tail_index is None:
        turns.add("user", {"type": "text", "text": layout.tail}, "tail", layout.tail)
    body: AnthropicBody = {**head, "messages": turns.messages}
    breakpoints.extend(_history_breakpoints(turns.messages, before_tail, cut_block, PLACEMENT))
    assert len(breakpoints) <= MAX_BREAKPOINTS
    state = "none-needed" if not modes else ("system" if modes == {"system"} else "user")
    return RenderedRequest(body=as_json(body), state_rendering=state, cache_breakpoints=breakpoints, parts=parts + turns.parts)


__all__ = ["CACHE_MINIMUMS", "MID_SYSTEM_MODELS", "PREFILL_REJECTED_FROM", "accepts_mid_system", "claude_version",
           "rejects_prefill", "render_anthropic", "tool_use_id"]

"""Anthropic Messages (reference/providers.md §2).

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
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any, Literal

from zhin_cli.pipeline.headers import Projected
from zhin_cli.pipeline.preset import Layout, PresetMessage
from zhin_cli.pipeline.providers import (
    CacheRules,
    Capabilities,
    RenderedPart,
    RenderedRequest,
    register_profile,
    register_renderer,
)
from zhin_cli.pipeline.providers.openai import state_lines
from zhin_cli.pipeline.providers.shaping import downgraded, spoken
from zhin_cli.pipeline.segments import RuntimeView

WIRE = "anthropic-messages"
EPHEMERAL = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4
DEFAULT_MAX_TOKENS = 1024
# Models documented to accept mid-conversation system messages (providers.md §2.1): data, not code. One list for the
# profile, the renderer and the validator (validate/anthropic.py reads it): fnmatch patterns against the lower-cased
# model id. (The renderer had regex prefixes of its own, so a dated or longer id — claude-opus-4-8-20260528,
# claude-opus-4-80 — was sent mid-conversation system messages that the validator, and the API, refuse.)
MID_SYSTEM_MODELS: tuple[str, ...] = ("claude-opus-4-8", "claude-fable-5*", "claude-mythos-5*")


def accepts_mid_system(model: str) -> bool:
    """Whether ``model`` takes ``role: "system"`` inside ``messages``; everything else answers "role 'system' is not
    supported on this model"."""
    lowered = model.lower()
    return any(fnmatchcase(lowered, pattern) for pattern in MID_SYSTEM_MODELS)


# Prefill (a trailing assistant message) is rejected from this Claude version on (§2.3 [R]:
# "Claude 4.6 and later models reject a trailing assistant message"). The version comes from the model
# id via _VERSION_PATTERNS; an id without a recognisable version is treated as accepting prefill
# (reject only on evidence). Resulting family table:
#
#   model id                                               version   trailing assistant
#   claude-3-haiku-…, claude-3-5-sonnet-…, claude-3-7-…    3.x       accepted
#   claude-opus-4-20250514, claude-sonnet-4-…              4.0       accepted
#   claude-opus-4-1, claude-sonnet-4-5, claude-haiku-4-5   4.1–4.5   accepted
#   claude-opus-4-6, claude-sonnet-4-6, claude-opus-4-7,   4.6–4.8   rejected
#   claude-opus-4-8
#   claude-sonnet-5, claude-opus-5-5, claude-fable-5-1,    5.x       rejected
#   claude-mythos-5, …
#   claude-mythos-preview, anything unparsable             unknown   accepted
PREFILL_REJECTED_FROM: tuple[int, int] = (4, 6)
_VERSION_PATTERNS: tuple[re.Pattern[str], ...] = (
    # current ids: family first, then major[-minor]; a dated suffix (-20250514) is not a minor version
    re.compile(r"claude-(?:opus|sonnet|haiku|fable|mythos)-(\d+)(?:[-.](\d{1,2})(?!\d))?(?!\d)"),
    # Claude 3.x ids: version first (claude-3-5-sonnet-20241022, claude-3-opus-20240229)
    re.compile(r"claude-(\d+)(?:[-.](\d))?-(?:opus|sonnet|haiku)"),
)


def claude_version(model: str) -> tuple[int, int] | None:
    """(major, minor) parsed from a Claude model id, or None when the id carries no version."""
    lowered = model.lower()
    for pattern in _VERSION_PATTERNS:
        match = pattern.search(lowered)
        if match:
            return int(match.group(1)), int(match.group(2) or 0)
    return None


def rejects_prefill(model: str) -> bool:
    """Whether ``model`` refuses a trailing assistant message (prefill): the profile's ``prefill`` and the
    validator's 400 both follow it."""
    version = claude_version(model)
    return version is not None and version >= PREFILL_REJECTED_FROM


def tool_use_id(call_id: str) -> str:
    """tool_use ids must match ^[a-zA-Z0-9_-]+$."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", call_id) or "_"


def _input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):  # not JSON, or nested too deeply: kept verbatim
            return {"arguments": arguments}
        return value if isinstance(value, dict) else {"value": value}
    return {"value": arguments}


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function", tool)
    out: dict[str, Any] = {"name": function.get("name"), "input_schema": function.get("parameters") or {"type": "object"}}
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
        self.messages: list[dict[str, Any]] = []
        self.parts: list[RenderedPart] = []

    def add(self, role: str, block: dict[str, Any], segment: str, text: str) -> dict[str, Any]:
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == role and role in ("user", "assistant"):
            last["content"].append(block)
        else:
            self.messages.append({"role": role, "content": [block]})
        if segment:
            self.parts.append(RenderedPart(segment, text, len(self.messages) - 1))
        return block

    def add_pieces(self, role: str, block: dict[str, Any], pieces: list[tuple[str, str]]) -> None:
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


def _history_breakpoints(messages: list[dict[str, Any]], before_tail: tuple[int, int] | None,
                         cut_block: tuple[int, int] | None, placement: str) -> list[dict[str, Any]]:
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
    out: list[dict[str, Any]] = []
    for (i, j), label in sorted(chosen.items()):
        messages[i]["content"][j]["cache_control"] = dict(EPHEMERAL)
        out.append({"before": "tail", "message_index": i, "explicit": True} if label == "tail"
                   else {"after": label, "message_index": i, "explicit": True})
    return out


@register_renderer(WIRE)
def render_anthropic(layout: Layout, profile: Capabilities, runtime: RuntimeView) -> RenderedRequest:
    turns = _Turns()
    body: dict[str, Any] = {"model": runtime.model, "max_tokens": DEFAULT_MAX_TOKENS}
    if runtime.tools:
        body["tools"] = [_tool(t) for t in runtime.tools]
    parts: list[RenderedPart] = []
    breakpoints: list[dict[str, Any]] = []
    leading = layout.leading
    if leading:
        # leading system entries become the top-level system, one text block each (ST use_sysprompt)
        body["system"] = [{"type": "text", "text": block.spoken_text()} for block in leading]
        body["system"][-1]["cache_control"] = dict(EPHEMERAL)
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
                turns.add_pieces(message.role, {"type": "text", "text": message.text}, list(message.pieces))
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
                block = {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": _input(call.arguments)}
                turns.add("assistant", block, message.segment_id, call.name + json.dumps(block["input"], ensure_ascii=False))
        else:
            block = turns.add("user", {"type": "text", "text": message.text}, message.segment_id, message.text)
            if index == layout.tail_index and layout.tail:
                before_tail = (len(turns.messages) - 1, len(turns.messages[-1]["content"]) - 1)
                turns.add("user", {"type": "text", "text": layout.tail}, "tail", layout.tail)
        if isinstance(message, Projected):
            history_rows += len(message.rows)
            if cut_block is None and history_rows >= CUT_ANCHOR_MESSAGES and turns.messages:
                cut_block = (len(turns.messages) - 1, len(turns.messages[-1]["content"]) - 1)
    if layout.tail and layout.tail_index is None:
        turns.add("user", {"type": "text", "text": layout.tail}, "tail", layout.tail)
    body["messages"] = turns.messages
    breakpoints.extend(_history_breakpoints(turns.messages, before_tail, cut_block, PLACEMENT))
    assert len(breakpoints) <= MAX_BREAKPOINTS
    state = "none-needed" if not modes else ("system" if modes == {"system"} else "user")
    return RenderedRequest(body=body, state_rendering=state, cache_breakpoints=breakpoints, parts=parts + turns.parts)


# Minimum cacheable prompt length by model, where it is not the profile's 1,024 (providers.md §2.5, newest docs text
# seen): 512 for Opus 5 / Fable 5 / Mythos 5 and their 5.x versions; 2,048 for Mythos Preview and Opus 4.7; 4,096 for
# Opus 4.6, Opus 4.5 and Haiku 4.5. First match wins.
CACHE_MINIMUMS: tuple[tuple[str, int], ...] = (
    (r"^claude-mythos-preview", 2048),
    (r"^claude-(opus|fable|mythos)-5", 512),
    (r"^claude-opus-4-7", 2048),
    (r"^claude-(opus-4-6|opus-4-5|haiku-4-5)", 4096),
)


@dataclass(frozen=True)
class _AnthropicCapabilities(Capabilities):
    """The Anthropic profile: ``prefill`` follows the model's Claude version (``rejects_prefill``'s table,
    §2.3), decided here once when the profile is resolved for a model — before ``zhin.yaml`` overrides, which
    ``resolve_profile`` applies after — so the renderer, like every other, reads only ``profile.prefill``."""

    def for_model(self, model: str) -> Capabilities:
        profile = super().for_model(model)
        if accepts_mid_system(model):
            profile = replace(profile, mid_conversation_system="system")
        return replace(profile, prefill=False) if rejects_prefill(model) else profile


register_profile(
    _AnthropicCapabilities(
        name="anthropic",
        wire=WIRE,
        validator="anthropic-messages",
        mid_conversation_system="none",
        mid_system_models=MID_SYSTEM_MODELS,
        cache=CacheRules(mechanism="explicit", min_tokens=1024, step_tokens=1, max_breakpoints=MAX_BREAKPOINTS),
        # the minimum cacheable prefix by model (providers.md §2.5): below it nothing is cached, no error
        model_rules=tuple((pattern, {"cache": CacheRules(mechanism="explicit", min_tokens=minimum, step_tokens=1,
                                                         max_breakpoints=MAX_BREAKPOINTS)})
                          for pattern, minimum in CACHE_MINIMUMS),
        description="Anthropic Messages: top-level system, tool_result first, state changes as user text "
        "(role system only where allow-listed models accept it)",
    )
)

"""Anthropic Messages API request rules (docs/spec/providers.md §2), with the API's exact 400 texts.

Every rejection answers HTTP 400 with ``{"type": "error", "error": {"type": "invalid_request_error",
"message": …}}``. Checks run in this order and the first failure wins (the API's own order is not
documented; left to right inside each step):

1. shape: ``messages`` non-empty, role literal, no ``name`` key, ``tool_use.id`` pattern;
2. the request-wide cache_control count (tools + system blocks + message blocks);
3. one left-to-right pass over the conversation: role ``system`` support and placement, empty content,
   ``tool_use`` → ``tool_result`` pairing;
4. model gate: trailing assistant message (prefill) on Claude 4.6 and later.

Consecutive ``user`` or ``assistant`` messages are never an error: the API combines them into one turn
(§2.2 [V]), and tool pairing is checked on those combined turns — a tool_result turn split over two user
messages is one turn, and a user text message placed before the tool_result message makes the combined
turn start with text ("Did not find …").

Not rejected, by design: "first message must use the user role" (2024 only, status unknown [U]);
"Requests which include tool_use or tool_result blocks must define tools" ([U], 2024); whether the
top-level automatic ``cache_control`` counts toward the 4 breakpoints ([U], not counted).
"""

from __future__ import annotations

import re

from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.pipeline.providers.specs.anthropic import (  # the model tables live with the profile: one decision, and the
    MID_SYSTEM_MODELS,  # providers never import the validators (tests/test_layers.py)
    accepts_mid_system,
    rejects_prefill,
)
from zhin_cli.pipeline.validate.verdict import ACCEPTED, Verdict

# Models that accept ``role: "system"`` inside ``messages`` (mid-conversation system messages, §2.1 [V]): the one
# list the profile and the renderer use too (providers/anthropic.py).
MID_CONVERSATION_SYSTEM_MODELS = MID_SYSTEM_MODELS

_ROLES = ("user", "assistant", "system")
_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")

PREFILL_MESSAGE = "This model does not support assistant message prefill. The conversation must end with a user message."


def _error(message: str) -> Verdict:
    return Verdict(
        ok=False,
        status=400,
        message=message,
        type="invalid_request_error",
        envelope={"type": "error", "error": {"type": "invalid_request_error", "message": message}},
    )


supports_mid_conversation_system = accepts_mid_system


def _blocks(content: JSON) -> list[JSONObject]:
    """Content as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, dict)]
    return []


def _count_cache_control(body: JSONObject) -> int:
    def in_blocks(blocks: JSON) -> int:
        if not isinstance(blocks, list):
            return 0
        total = 0
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("cache_control"):
                total += 1
            # blocks nested in tool_result / mid_conv_system content carry their own markers
            total += in_blocks(block.get("content"))
        return total

    tools = body.get("tools")
    total = sum(1 for tool in tools if isinstance(tool, dict) and tool.get("cache_control")) if isinstance(tools, list) else 0
    total += in_blocks(body.get("system"))
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            total += in_blocks(message.get("content"))
    return total


def _is_directive_only(message: JSONObject, body: JSONObject) -> bool:
    # "the directive-only form (content: [] with output_config) is accepted at any position" [R, 2 sources]
    return message.get("content") == [] and ("output_config" in message or "output_config" in body)


class _Turn:
    """Consecutive messages of one role (user/assistant merge; a run of system messages is one section)."""

    def __init__(self, role: str, first: int) -> None:
        self.role = role
        self.indices: list[int] = [first]


def _turns(messages: list[JSONObject]) -> list[_Turn]:
    turns: list[_Turn] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if turns and turns[-1].role == role:
            turns[-1].indices.append(index)
        else:
            turns.append(_Turn(str(role), index))
    return turns


def _ends_with_server_tool_result(turn: _Turn, messages: list[JSONObject]) -> bool:
    blocks = _blocks(messages[turn.indices[-1]].get("content"))
    if not blocks:
        return False
    kind = str(blocks[-1].get("type", ""))
    return kind.endswith("_tool_result") and kind != "tool_result"


def _check_shape(messages: list[JSON]) -> Verdict | None:
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            # [U] text: the API's schema rejects other roles; wording modelled on its pydantic-style errors
            return _error(f"messages.{index}.role: Input should be 'user', 'assistant' or 'system'")
        if "name" in message:
            # [U] our own rule: member names are never sent to Anthropic (they live in the message text).
            # The API's schema rejects unknown message fields; the exact wording is not captured.
            return _error(f"messages.{index}.name: Extra inputs are not permitted")
        for position, block in enumerate(_blocks(message.get("content"))):
            if block.get("type") == "tool_use" and not _TOOL_USE_ID.match(str(block.get("id", ""))):
                return _error(f"messages.{index}.content.{position}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
    return None


def _check_content(index: int, message: JSONObject, final: bool) -> Verdict | None:
    if message.get("role") == "system":
        return None
    content = message.get("content")
    final_assistant = final and message.get("role") == "assistant"
    if content in ("", []) or content is None:
        if final_assistant:
            return None
        return _error(f"messages.{index}: all messages must have non-empty content except for the optional final assistant message")
    for block in _blocks(content):
        if block.get("type") != "text":
            continue
        text = block.get("text")
        if text == "" or text is None:
            return _error("messages: text content blocks must be non-empty")
        if isinstance(text, str) and not text.strip() and not final_assistant:
            # [R] not in providers.md: several 2024–2026 reports quote the live API with this text
            return _error("messages: text content blocks must contain non-whitespace text")
    return None


def _tool_uses(turn: _Turn, messages: list[JSONObject]) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for index in turn.indices:
        for block in _blocks(messages[index].get("content")):
            if block.get("type") == "tool_use":
                found.append((index, str(block.get("id"))))
    return found


def _missing_results(uses: list[tuple[int, str]], answered: set[str]) -> Verdict | None:
    missing = [(index, tool_id) for index, tool_id in uses if tool_id not in answered]
    if not missing:
        return None
    ids = ", ".join(tool_id for _, tool_id in missing)
    return _error(
        f"messages.{missing[0][0]}: `tool_use` ids were found without `tool_result` blocks immediately after: {ids}. "
        "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    )


def _check_tool_results(turn: _Turn, previous: _Turn | None, messages: list[JSONObject]) -> Verdict | None:
    """``turn`` is a user turn; ``previous`` the turn right before it (if any)."""
    uses = _tool_uses(previous, messages) if previous is not None and previous.role == "assistant" else []
    expected = {tool_id for _, tool_id in uses}
    # (message index, block index, tool_use_id) of every tool_result in the combined turn, in order
    results: list[tuple[int, int, str]] = []
    ordered: list[JSONObject] = []
    for index in turn.indices:
        for position, block in enumerate(_blocks(messages[index].get("content"))):
            ordered.append(block)
            if block.get("type") == "tool_result":
                results.append((index, position, str(block.get("tool_use_id"))))
    missing = _missing_results(uses, {tool_id for _, _, tool_id in results})
    if missing is not None:
        return missing
    unexpected = [(index, position, tool_id) for index, position, tool_id in results if tool_id not in expected]
    if unexpected:
        index, position, _ = unexpected[0]
        ids = ", ".join(tool_id for _, _, tool_id in unexpected)
        return _error(
            f"messages.{index}.content.{position}: unexpected `tool_use_id` found in `tool_result` blocks: {ids}. "
            "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
        )
    if uses:
        # [U] N = the number of tool_use blocks in the previous turn ("a matching number"); every report says 1.
        # The backticks are in the live API's text (claude-code#37, apify/tester-mcp-client#12), though
        # providers.md quotes this one without them.
        leading = ordered[: len(uses)]
        if len(leading) < len(uses) or any(block.get("type") != "tool_result" for block in leading):
            return _error(
                f"messages.{turn.indices[0]}: Did not find {len(uses)} `tool_result` block(s) at the beginning of this message. "
                "Messages following `tool_use` blocks must begin with a matching number of `tool_result` blocks."
            )
    return None


def _check_system_section(
    turn: _Turn, previous: _Turn | None, following: _Turn | None, messages: list[JSONObject], body: JSONObject, model: str
) -> Verdict | None:
    if not supports_mid_conversation_system(model):
        return _error("role 'system' is not supported on this model")
    if all(_is_directive_only(messages[index], body) for index in turn.indices):
        return None
    first = turn.indices[0]
    follows_user = previous is not None and (
        previous.role == "user" or (previous.role == "assistant" and _ends_with_server_tool_result(previous, messages))
    )
    if not follows_user:
        return _error(f"messages.{first}: role 'system' must follow a 'user' message or an 'assistant' message ending in a server tool result")
    if following is not None and following.role != "assistant":
        return _error(f"messages.{first}: role 'system' must precede an 'assistant' message or end the array")
    return None


def validate_messages(body: JSONObject, model: str) -> Verdict:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        return _error("messages: at least one message is required")
    shape = _check_shape(raw)
    if shape is not None:
        return shape
    messages = [message for message in raw if isinstance(message, dict)]  # all of them: _check_shape said so
    found = _count_cache_control(body)
    if found > 4:
        return _error(f"A maximum of 4 blocks with cache_control may be provided. Found {found}.")

    turns = _turns(messages)
    last = len(messages) - 1
    for position, turn in enumerate(turns):
        previous = turns[position - 1] if position > 0 else None
        following = turns[position + 1] if position + 1 < len(turns) else None
        if turn.role == "system":
            verdict = _check_system_section(turn, previous, following, messages, body, model)
            if verdict is None and previous is not None and previous.role == "assistant":
                # an accepted section (directive-only, or after a server tool result) still separates
                # the assistant's tool_use blocks from any tool_result after it
                verdict = _missing_results(_tool_uses(previous, messages), set())
            if verdict is not None:
                return verdict
            continue
        for index in turn.indices:
            verdict = _check_content(index, messages[index], index == last)
            if verdict is not None:
                return verdict
        if turn.role == "user":
            verdict = _check_tool_results(turn, previous, messages)
            if verdict is not None:
                return verdict
        elif following is None:
            # trailing assistant turn: its tool_use blocks can have no tool_result after them
            verdict = _missing_results(_tool_uses(turn, messages), set())
            if verdict is not None:
                return verdict

    if messages[last].get("role") == "assistant" and rejects_prefill(model):
        return _error(PREFILL_MESSAGE)
    return ACCEPTED

"""Anthropic Messages (``anthropic-messages``).

Cache order ``tools → system → messages``; a hit needs a byte-identical prefix up to a ``cache_control``
breakpoint (on a tool, a system block, a content block — also nested in a ``tool_result`` — or top-level:
"the last cacheable block"), docs/spec/providers.md §2.5. Markers are not part of the prefix: moving a
breakpoint does not change what is cached. Billed tokens are estimated like OpenAI's (Anthropic publishes no
formula; ``messages/count_tokens`` is online only): text + 3 per message, 1 per further block and tool, no
reply priming (``input_tokens`` of a request whose last block is a breakpoint is 0).
"""

from __future__ import annotations

from collections.abc import Iterator

from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.wire.base import (
    Block,
    CacheOutcomeLike,
    ContentBlocksFormat,
    FlatRequest,
    alternation_problem,
    as_list,
    canonical,
)
from zhin_cli.wire.types import AnthropicUsage, as_json

_TEXT_FIELDS = ("text", "content", "input", "cache_control")


def without_cache_control(value: JSON) -> JSON:
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def cache_marker(value: JSON) -> JSONObject | None:
    """The first cache_control marker in a block (on it or on a nested block, e.g. inside tool_result content)."""
    if isinstance(value, dict):
        marker = value.get("cache_control")
        if isinstance(marker, dict):
            return marker
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found = cache_marker(item)
            if found is not None:
                return found
    return None


def _ttl(block: JSON) -> str | None:
    marker = cache_marker(block)
    return None if marker is None else str(marker.get("ttl") or "5m")


def _block_text(block: JSON) -> str:
    """What the model reads of one content block."""
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return canonical(block)
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_use":
        return f"{block.get('name', '')}{canonical(block.get('input', {}))}"
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            return content
        return "".join(_block_text(b) for b in as_list(content))
    return canonical(without_cache_control(block))


class AnthropicMessages(ContentBlocksFormat):
    name = "anthropic-messages"
    regions = ("tools", "system", "messages")
    message_key = "messages"
    usage_kind = "anthropic-messages"
    system_place = "top-level system"
    # input_tokens counts what follows the last breakpoint: a request marked on its last block reports 0
    reply_framing = 0

    def _content(self, message: object) -> list[JSON]:
        return as_list(message.get("content")) if isinstance(message, dict) else []

    def is_tool_call(self, message: object) -> bool:
        return any(isinstance(b, dict) and b.get("type") == "tool_use" for b in self._content(message))

    def is_tool_result(self, message: object) -> bool:
        return any(isinstance(b, dict) and b.get("type") == "tool_result" for b in self._content(message))

    def user_text(self, role: str, text: str) -> JSONObject:
        return {"role": "user", "content": [{"type": "text", "text": text}]}

    def without_tail(self, message: JSON, tail: str | None) -> JSON:
        if not isinstance(message, dict):
            return message
        message = {k: v for k, v in message.items() if k != "cache_control"}
        content = message.get("content")
        if isinstance(content, str) and tail and content.endswith(tail):
            message["content"] = content[: -len(tail)]
        elif isinstance(content, list):
            message["content"] = [without_cache_control(b) for b in content
                                  if not (isinstance(b, dict) and tail and b.get("text") == tail)]
        return message

    def role_problem(self, messages: list[JSON]) -> str | None:
        return alternation_problem([self.role(m) for m in messages], "assistant")

    def blocks(self, body: JSONObject) -> Iterator[Block]:
        out: list[Block] = []
        for tool in as_list(body.get("tools")):
            out.append(Block("tools", -1, "tool", canonical(without_cache_control(tool)), self.block_framing, _ttl(tool)))
        system = body.get("system")
        for number, block in enumerate(system if isinstance(system, list) else ([system] if system is not None else [])):
            head = "system" if isinstance(block, str) else canonical(
                {k: v for k, v in block.items() if k not in _TEXT_FIELDS}) if isinstance(block, dict) else "system?"
            out.append(Block("system", -1, f"system {head}", _block_text(block),
                             self.message_framing if number == 0 else self.block_framing, _ttl(block)))
        for index, message in enumerate(self.messages(body)):
            role = message.get("role") if isinstance(message, dict) else None
            content = message.get("content") if isinstance(message, dict) else message
            for number, block in enumerate(content if isinstance(content, list) else [content]):
                fields = {k: v for k, v in block.items() if k not in _TEXT_FIELDS} if isinstance(block, dict) else {}
                inner = block.get("content") if isinstance(block, dict) else None
                if isinstance(inner, list):  # tool_result: inner block types
                    fields["content"] = [{k: v for k, v in b.items() if k not in _TEXT_FIELDS} if isinstance(b, dict) else 0
                                         for b in inner]
                head = canonical({"role": role, "number": number, **fields})
                out.append(Block("messages", index, head, _block_text(block),
                                 self.message_framing if number == 0 else self.block_framing, _ttl(block)))
        automatic = body.get("cache_control")  # top-level: a marker on the last cacheable block
        if isinstance(automatic, dict) and out:
            last = out[-1]
            out[-1] = Block(last.region, last.message_index, last.head, last.text, last.framing, str(automatic.get("ttl") or "5m"))
        return iter(out)

    def flat(self, source: JSONObject, system: str, user: str) -> FlatRequest:
        body: JSONObject = {"model": source.get("model")}
        if "tools" in source:
            body["tools"] = source["tools"]
        body["max_tokens"] = source.get("max_tokens")
        # upstream marks the system prompt (and the last tool) with cache_control; nothing in the messages
        body["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        body["messages"] = [{"role": "user", "content": [{"type": "text", "text": user}]}]
        return FlatRequest(body, [("system", system, -1), ("flat", user, 0)],
                           [{"after": "system", "message_index": -1, "explicit": True}])

    def usage(self, outcome: CacheOutcomeLike, output_tokens: int) -> JSONObject:
        usage: AnthropicUsage = {
            "input_tokens": outcome.uncached,
            "cache_creation_input_tokens": outcome.written,
            "cache_read_input_tokens": outcome.read,
            "cache_creation": {"ephemeral_5m_input_tokens": outcome.written_by_ttl.get("5m", 0),
                               "ephemeral_1h_input_tokens": outcome.written_by_ttl.get("1h", 0)},
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }
        return as_json(usage)


ANTHROPIC_MESSAGES = AnthropicMessages()

"""OpenAI Chat Completions (``openai-chat``): also the wire of DeepSeek, OpenAI-compatible gateways and local
chat-template servers (their bodies are Chat Completions bodies; the template is applied server-side).

Cache order ``tools → messages`` (the ``model`` is compared on its own). Billed tokens, as OpenAI's cookbook
counts them: each message's text plus 3 framing tokens (``<|start|>role … <|end|>``; 1 more with ``name``),
each tool call's name and arguments plus 1, each tool definition's JSON plus 1, and 3 that prime the reply.
"""

from __future__ import annotations

from collections.abc import Iterator

from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.wire.base import Block, CacheOutcomeLike, ContentBlocksFormat, FlatRequest, as_list, canonical
from zhin_cli.wire.types import OpenAIUsage, as_json


def _head(message: JSONObject) -> str:
    """The non-text fields of a message (role, name, tool_call_id …) as a stable text; the plain
    ``{"role", "content"}`` message (most of a history) without a JSON round trip."""
    role = message.get("role")
    if len(message) <= 2 and "content" in message and isinstance(role, str):
        return role
    return canonical({k: v for k, v in message.items() if k not in ("content", "tool_calls")})


def _id_text(value: JSON) -> str:
    """A tool call's id as text (ids are strings; anything else by its JSON, so ids compare and sort as one type)."""
    return value if isinstance(value, str) else canonical(value)


class OpenAIChat(ContentBlocksFormat):
    name = "openai-chat"
    regions = ("tools", "messages")
    message_key = "messages"
    usage_kind = "openai-chat"

    def is_tool_call(self, message: object) -> bool:
        return isinstance(message, dict) and bool(message.get("tool_calls"))

    def is_tool_result(self, message: object) -> bool:
        return isinstance(message, dict) and message.get("role") == "tool"

    def user_text(self, role: str, text: str) -> JSONObject:
        return {"role": role, "content": text}

    def without_tail(self, message: JSON, tail: str | None) -> JSON:
        if not isinstance(message, dict):
            return message
        content = message.get("content")
        if isinstance(content, str) and tail and content.endswith(tail):
            return {**message, "content": content[: -len(tail)]}
        if isinstance(content, list):
            return {**message, "content": [b for b in content if not (isinstance(b, dict) and tail and b.get("text") == tail)]}
        return message

    def tool_names(self, body: JSONObject) -> list[str]:
        names = []
        for tool in as_list(body.get("tools")):
            function = (tool.get("function") or tool) if isinstance(tool, dict) else None
            if isinstance(function, dict):
                names.append(str(function.get("name", "")))
        return names

    def role_problem(self, messages: list[JSON]) -> str | None:
        for i, message in enumerate(messages):
            if self.role(message) == "tool":
                j = i - 1
                while j >= 0 and self.role(messages[j]) == "tool":
                    j -= 1
                if j < 0 or not self.is_tool_call(messages[j]):
                    return f"tool message {i} does not follow an assistant tool call"
            if isinstance(message, dict) and self.is_tool_call(message):
                ids = {_id_text(c.get("id")) for c in as_list(message.get("tool_calls")) if isinstance(c, dict)}
                after = []
                for follower in messages[i + 1 :]:
                    if not isinstance(follower, dict) or self.role(follower) != "tool":
                        break
                    after.append(_id_text(follower.get("tool_call_id")))
                if ids - set(after):
                    return f"assistant message {i}: tool calls {sorted(ids - set(after))} not answered right after it"
        return None

    def blocks(self, body: JSONObject) -> Iterator[Block]:
        for tool in as_list(body.get("tools")):
            yield Block("tools", -1, "tool", canonical(tool), self.block_framing)
        for index, message in enumerate(self.messages(body)):
            if not isinstance(message, dict):
                yield Block("messages", index, "?", canonical(message), self.message_framing)
                continue
            head = _head(message)
            framing = self.message_framing + (1 if message.get("name") else 0)
            content = message.get("content")
            pieces = [content] if isinstance(content, str) else as_list(content) or [""]
            for number, piece in enumerate(pieces):
                text = piece if isinstance(piece, str) else str(piece.get("text", "")) if isinstance(piece, dict) and \
                    piece.get("type") == "text" else canonical(piece)
                yield Block("messages", index, head if number == 0 else f"{head}+{number}", text,
                            framing if number == 0 else self.block_framing)
            for call in as_list(message.get("tool_calls")):
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(call, dict) or not isinstance(function, dict):
                    yield Block("messages", index, "call", canonical(call), self.block_framing)
                    continue
                call_head = canonical({k: v for k, v in call.items() if k != "function"})
                yield Block("messages", index, f"call {call_head}", f"{function.get('name', '')}{function.get('arguments', '')}",
                            self.block_framing)

    def cache_route(self, body: JSONObject) -> str | None:
        key = body.get("prompt_cache_key")  # OpenAI: routed with the prefix hash; providers that ignore it say so
        return key if isinstance(key, str) else None

    def flat(self, source: JSONObject, system: str, user: str) -> FlatRequest:
        body: JSONObject = {"model": source.get("model")}
        if "tools" in source:
            body["tools"] = source["tools"]
        messages = self.messages(source)
        role = messages[0].get("role", "system") if messages and isinstance(messages[0], dict) else "system"
        body["messages"] = [{"role": role, "content": system}, {"role": "user", "content": user}]
        return FlatRequest(body, [("system", system, 0), ("flat", user, 1)],
                           [{"after": "system", "message_index": 0, "explicit": False}])

    def usage(self, outcome: CacheOutcomeLike, output_tokens: int) -> JSONObject:
        usage: OpenAIUsage = {
            "prompt_tokens": outcome.prompt_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": outcome.prompt_tokens + output_tokens,
            "prompt_tokens_details": {"cached_tokens": outcome.read, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
        }
        return as_json(usage)


OPENAI_CHAT = OpenAIChat()

"""Gemini ``generateContent`` (``gemini-generate``).

Cache order ``tools → systemInstruction → contents`` (implicit caching, Gemini 2.5+: the longest common
prefix with an earlier request, above a per-model minimum; docs/spec/providers.md §3). Roles are ``user`` and
``model``; function calls and responses are parts. Billed tokens are estimated like OpenAI's (the real
tokenizer is online only, ``countTokens``): text + 3 per content, 1 per further part and tool.
"""

from __future__ import annotations

from collections.abc import Iterator

from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.wire.base import Block, CacheOutcomeLike, FlatRequest, WireFormat, alternation_problem, as_list, canonical
from zhin_cli.wire.types import GeminiUsage, GeminiUsageMetadata, as_json


def _part_text(part: JSON) -> str:
    if not isinstance(part, dict):
        return canonical(part)
    if "text" in part:
        return str(part["text"])
    for key in ("functionCall", "functionResponse"):
        call = part.get(key)
        if isinstance(call, dict):
            rest = {k: v for k, v in call.items() if k not in ("name", "id")}
            return f"{call.get('name', '')}{canonical(rest)}"
    return canonical(part)


def _part_head(part: JSON) -> JSONObject:
    if not isinstance(part, dict):
        return {}
    head: JSONObject = {k: v for k, v in part.items() if k not in ("text", "functionCall", "functionResponse")}
    for key in ("functionCall", "functionResponse"):
        call = part.get(key)
        if isinstance(call, dict):
            head[key] = call.get("id", "")
    return head


class GeminiGenerate(WireFormat):
    name = "gemini-generate"
    regions = ("tools", "systemInstruction", "contents")
    message_key = "contents"
    usage_kind = "gemini-generate"
    system_place = "systemInstruction"

    def _parts(self, message: object) -> list[JSON]:
        return as_list(message.get("parts")) if isinstance(message, dict) else []

    def is_tool_call(self, message: object) -> bool:
        return any(isinstance(p, dict) and "functionCall" in p for p in self._parts(message))

    def is_tool_result(self, message: object) -> bool:
        return any(isinstance(p, dict) and "functionResponse" in p for p in self._parts(message))

    def user_text(self, role: str, text: str) -> JSONObject:
        return {"role": "user", "parts": [{"text": text}]}

    def take_text(self, message: JSON, text: str) -> bool:
        if not isinstance(message, dict):
            return False
        parts = message.get("parts")
        if parts is None:
            return True
        kept = [p for p in as_list(parts) if not (isinstance(p, dict) and p.get("text") == text)]
        if not kept:
            return True
        message["parts"] = kept
        return False

    def message_texts(self, message: object) -> list[str]:
        return [str(p.get("text", "")) for p in self._parts(message) if isinstance(p, dict) and "text" in p]

    def without_tail(self, message: JSON, tail: str | None) -> JSON:
        parts = message.get("parts") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(parts, list):
            return message
        return {**message, "parts": [p for p in parts if not (isinstance(p, dict) and tail and p.get("text") == tail)]}

    def tool_names(self, body: JSONObject) -> list[str]:
        names: list[str] = []
        for tool in as_list(body.get("tools")):
            declarations = as_list(tool.get("functionDeclarations")) if isinstance(tool, dict) else []
            names.extend(str(d.get("name", "")) for d in declarations if isinstance(d, dict))
        return names

    def role_problem(self, messages: list[JSON]) -> str | None:
        return alternation_problem([self.role(m) for m in messages], "model")

    def blocks(self, body: JSONObject) -> Iterator[Block]:
        for tool in as_list(body.get("tools")):
            yield Block("tools", -1, "tool", canonical(tool), self.block_framing)
        system = body.get("systemInstruction")
        parts = as_list(system.get("parts")) if isinstance(system, dict) else []
        for number, part in enumerate(parts):
            yield Block("system", -1, canonical({"system": number, **_part_head(part)}), _part_text(part),
                        self.message_framing if number == 0 else self.block_framing)
        for index, content in enumerate(self.messages(body)):
            role = content.get("role") if isinstance(content, dict) else None
            for number, part in enumerate(self._parts(content) or [""]):
                head = canonical({"role": role, "number": number, **_part_head(part)})
                yield Block("messages", index, head, _part_text(part) if part != "" else "",
                            self.message_framing if number == 0 else self.block_framing)

    def flat(self, source: JSONObject, system: str, user: str) -> FlatRequest:
        body: JSONObject = {}
        if "tools" in source:
            body["tools"] = source["tools"]
        body["systemInstruction"] = {"parts": [{"text": system}]}
        body["contents"] = [{"role": "user", "parts": [{"text": user}]}]
        return FlatRequest(body, [("system", system, -1), ("flat", user, 0)], [])

    def usage(self, outcome: CacheOutcomeLike, output_tokens: int) -> JSONObject:
        meta: GeminiUsageMetadata = {"promptTokenCount": outcome.prompt_tokens, "candidatesTokenCount": output_tokens,
                                "totalTokenCount": outcome.prompt_tokens + output_tokens}
        if outcome.read:  # Gemini omits the field when nothing hit
            meta["cachedContentTokenCount"] = outcome.read
        usage: GeminiUsage = {"usageMetadata": meta}
        return as_json(usage)


GEMINI_GENERATE = GeminiGenerate()

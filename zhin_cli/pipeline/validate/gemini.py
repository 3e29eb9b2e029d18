"""Gemini ``generateContent`` request rules (docs/spec/providers.md §3), with the API's exact 400 texts.

Every rejection answers HTTP 400 with ``{"error": {"code": 400, "message": …, "status": "INVALID_ARGUMENT"}}``.
Checks run in three passes and the first failure wins:

1. every ``contents[].role`` is ``user`` or ``model`` (an absent role counts as ``user``, the API default);
2. alternation: two consecutive ``user`` contents are rejected. The reference tags this [R] with unclear
   conditions (2024 reports, and 2026 reports for N separate functionResponse contents after one parallel
   call, hermes-agent#55125/#55623 — which is why this pass runs before the function-call pass: that shape
   answers the alternation error, not the part-count error). Our safe policy rejects consecutive ``user``
   contents and lets consecutive ``model`` contents through (no report of a rejection);
3. function calling: a function response turn must come right after a function call turn with the same
   number of parts; a function call turn must come right after a user turn (text or function response).

Not rejected (reported, conditions unclear or model-gated): "multiturn requests ends with a user role or a
function response" (2023), Gemini 3's missing ``thoughtSignature`` on replayed functionCall parts.
"""

from __future__ import annotations

from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.pipeline.validate.verdict import ACCEPTED, Verdict

ROLE_MESSAGE = "Please use a valid role: user, model."
ALTERNATION_MESSAGE = "Please ensure that multiturn requests alternate between user and model."
RESPONSE_AFTER_CALL_MESSAGE = "Please ensure that function response turn comes immediately after a function call turn."
PART_COUNT_MESSAGE = (
    "Please ensure that the number of function response parts is equal to the number of function call parts "
    "of the function call turn."
)
CALL_AFTER_USER_MESSAGE = (
    "Please ensure that function call turn comes immediately after a user turn or after a function response turn."
)


def _error(message: str) -> Verdict:
    return Verdict(
        ok=False,
        status=400,
        message=message,
        type="INVALID_ARGUMENT",
        code=400,
        envelope={"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}},
    )


def _role(content: JSONObject) -> JSON:
    role = content.get("role")
    return "user" if role in (None, "") else role


def _count(content: JSONObject, camel: str, snake: str) -> int:
    parts = content.get("parts")
    if not isinstance(parts, list):
        return 0
    # the REST API accepts both the JSON (camelCase) and the proto (snake_case) field names
    return sum(1 for part in parts if isinstance(part, dict) and (camel in part or snake in part))


def _calls(content: JSONObject) -> int:
    return _count(content, "functionCall", "function_call")


def _responses(content: JSONObject) -> int:
    return _count(content, "functionResponse", "function_response")


def validate_generate(body: JSONObject, model: str) -> Verdict:
    raw = body.get("contents")
    contents = [content for content in raw if isinstance(content, dict)] if isinstance(raw, list) else []
    for content in contents:
        if _role(content) not in ("user", "model"):
            return _error(ROLE_MESSAGE)
    for earlier, content in zip(contents, contents[1:], strict=False):
        if _role(earlier) == "user" and _role(content) == "user":
            return _error(ALTERNATION_MESSAGE)
    for index, content in enumerate(contents):
        previous = contents[index - 1] if index > 0 else None
        if _responses(content):
            if previous is None or _role(previous) != "model" or not _calls(previous):
                return _error(RESPONSE_AFTER_CALL_MESSAGE)
            if _responses(content) != _calls(previous):
                return _error(PART_COUNT_MESSAGE)
        if _role(content) == "model" and _calls(content) and (previous is None or _role(previous) != "user"):
            return _error(CALL_AFTER_USER_MESSAGE)
    return ACCEPTED

"""DeepSeek Chat Completions request rules (docs/spec/providers.md §4), with DeepSeek's exact 400 texts.

The body is OpenAI-shaped, but DeepSeek answers in its own words (§4.3: do not reuse OpenAI's strings) and
every rejection has the body ``{"error": {"message": …, "type": "invalid_request_error", "param": null,
"code": "invalid_request_error"}}``, HTTP 400. Checks, first failure wins:

1. schema: a ``tool`` message without ``tool_call_id`` fails deserialization (serde text with the position,
   see ``_serde_column``);
2. tool ordering (§4.3 [R]);
3. R1-era ``deepseek-reasoner`` ordering (§4.1 [R]) — only for models in ``R1_ERA_MODELS`` or configured with
   ``set_r1_era_models``.

Tool pairing is counted, not matched by id: DeepSeek's text says "(insufficient tool messages following
tool_calls message)", so an assistant message with N ``tool_calls`` needs at least N ``tool`` messages right
after it. A tool message whose id matches no call, when the count is satisfied, is not rejected (no report
either way [U]).

Not modelled: thinking-mode ``reasoning_content`` pass-back (§4.2, V3.2/V4 thinking mode).
"""

from __future__ import annotations

import json

from zhin_cli.core.jsontext import JSON, JSONObject

# Models validated with the R1-era ``deepseek-reasoner`` ordering rules (Jan–Apr 2025): the list and
# ``set_r1_era_models`` live with the deepseek profile, whose renderer rules follow ``is_r1_era`` too
# (providers/openai.py ``_DeepSeekCapabilities``; the providers never import the validators). Today's
# ``deepseek-reasoner`` alias points at V4 thinking mode, where these checks are not known to apply [U], so the
# plain alias is *not* listed. A deployment that still serves R1 under another id adds it with
# ``set_r1_era_models``: validator and renderer both follow.
from zhin_cli.pipeline.providers.specs.deepseek import is_r1_era
from zhin_cli.pipeline.validate.verdict import ACCEPTED, Verdict

INSUFFICIENT_TOOLS_MESSAGE = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
    "(insufficient tool messages following tool_calls message)"
)
TOOL_WITHOUT_CALLS_MESSAGE = "Messages with role 'tool' must be a response to a preceding message with 'tool_calls'"
R1_SYSTEM_MESSAGE = "The system message of deepseek-reasoner must be put on the beginning of the message sequence"
R1_LAST_MESSAGE = (
    "The last message of deepseek-reasoner must be a user message, or an assistant message with prefix mode on "
    "(refer to https://api-docs.deepseek.com/guides/chat_prefix_completion)."
)


def _error(message: str) -> Verdict:
    return Verdict(
        ok=False,
        status=400,
        message=message,
        type="invalid_request_error",
        code="invalid_request_error",
        envelope={"error": {"message": message, "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}},
    )


def _compact(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _serde_column(body: JSONObject, messages: list[JSON], index: int) -> int:
    """serde_json's column for an error raised when message ``index`` has been read.

    serde reports a missing field after consuming the object's closing brace, so the (one-based) column is
    the byte offset just past that brace. We assume the body is sent as compact UTF-8 JSON on one line —
    what httpx ≥ 0.28 (the OpenAI/DeepSeek Python clients) sends; another serialisation moves the column.
    """
    marker = "\u0000zhin-marker\u0000"
    probe = dict(body)
    probe["messages"] = [marker if position == index else message for position, message in enumerate(messages)]
    start = _compact(probe).index(_compact(marker))
    return start + len(_compact(messages[index]))


def _check_schema(body: JSONObject, messages: list[JSON]) -> Verdict | None:
    """``messages``: ``body["messages"]``, a list."""
    for index, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "tool" and "tool_call_id" not in message:
            # [R] the 2025 reports show HTTP 422, the late-2025/2026 ones HTTP 400 with the usual error body
            column = _serde_column(body, messages, index)
            return _error(
                f"Failed to deserialize the JSON body into the target type: messages[{index}]: "
                f"missing field `tool_call_id` at line 1 column {column}"
            )
    return None


def _check_tools(messages: list[JSONObject]) -> Verdict | None:
    expected = 0  # tool_calls of the assistant message the current run of tool messages answers
    seen = 0
    in_run = False  # inside the contiguous run of tool messages right after an assistant with tool_calls
    for message in messages:
        role = message.get("role")
        if role == "tool":
            if not in_run:
                return _error(TOOL_WITHOUT_CALLS_MESSAGE)
            seen += 1
            continue
        if in_run and seen < expected:
            return _error(INSUFFICIENT_TOOLS_MESSAGE)
        calls = message.get("tool_calls") if role == "assistant" else None
        in_run = bool(calls)
        expected = len(calls) if isinstance(calls, list) else 0
        seen = 0
    if in_run and seen < expected:
        return _error(INSUFFICIENT_TOOLS_MESSAGE)
    return None


def _check_r1_order(messages: list[JSONObject]) -> Verdict | None:
    # Order of the four checks is ours [U]; each text is verbatim from the R1-era API [R].
    started = False
    for message in messages:
        if message.get("role") == "system":
            if started:
                return _error(R1_SYSTEM_MESSAGE)
        else:
            started = True
    dialogue = [message for message in messages if message.get("role") != "system"]
    if dialogue and dialogue[0].get("role") != "user":
        first = str(dialogue[0].get("role"))
        article = "an" if first[:1] in ("a", "e", "i", "o", "u") else "a"
        return _error(
            f"The first message (except the system message) of deepseek-reasoner must be a user message, but {article} {first} message detected."
        )
    for index in range(len(messages) - 1):
        role = messages[index].get("role")
        if role in ("user", "assistant") and messages[index + 1].get("role") == role:
            return _error(
                f"deepseek-reasoner does not support successive user or assistant messages (messages[{index}] and "
                f"messages[{index + 1}] in your input). You should interleave the user/assistant messages in the message sequence."
            )
    last: JSONObject = messages[-1] if messages else {}
    if not (last.get("role") == "user" or (last.get("role") == "assistant" and last.get("prefix") is True)):
        return _error(R1_LAST_MESSAGE)
    return None


def validate_chat(body: JSONObject, model: str) -> Verdict:
    raw = body.get("messages")
    if not isinstance(raw, list):
        return ACCEPTED  # nothing this validator models
    messages = [message for message in raw if isinstance(message, dict)]
    verdict = _check_schema(body, raw) or _check_tools(messages)
    if verdict is None and is_r1_era(model):
        verdict = _check_r1_order(messages)
    return verdict or ACCEPTED

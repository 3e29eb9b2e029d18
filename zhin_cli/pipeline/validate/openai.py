"""OpenAI Chat Completions request rules (docs/spec/providers.md §1), with the API's exact 400 texts."""

from __future__ import annotations

import re

from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.pipeline.validate.verdict import ACCEPTED, Verdict

_ROLES = ("developer", "system", "user", "assistant", "tool", "function")
_NAME_PATTERN = re.compile(r"^[^\s<|\\/>]+$")


def _error(message: str, param: str | None, code: str | None = None) -> Verdict:
    return Verdict(ok=False, status=400, message=message, param=param, type="invalid_request_error", code=code)


_JSON_KINDS = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"), (list, "an array"),
               (dict, "an object"))


def _invalid_type(path: str, expected: str, value: JSON) -> Verdict:
    """A value of the wrong JSON type where the schema wants ``expected`` ("an object") — [U] wording modelled on
    the API's "Invalid type for 'messages[0]': expected an object, but got a string instead."."""
    got = next((kind for python_type, kind in _JSON_KINDS if isinstance(value, python_type)), "null")
    return _error(f"Invalid type for '{path}': expected {expected}, but got {got} instead.", path, "invalid_type")


def _call_ids(index: int, message: JSONObject) -> list[str] | Verdict:
    """The ids of an assistant message's ``tool_calls`` (none when absent or empty), or the error for a malformed one."""
    calls = message.get("tool_calls")
    if not calls:
        return []
    if not isinstance(calls, list):
        return _invalid_type(f"messages[{index}].tool_calls", "an array", calls)
    ids: list[str] = []
    for position, call in enumerate(calls):
        path = f"messages[{index}].tool_calls[{position}]"
        if not isinstance(call, dict):
            return _invalid_type(path, "an object", call)
        if "id" not in call:
            return _error(f"Missing required parameter: '{path}.id'.", f"{path}.id", "missing_required_parameter")
        call_id = call["id"]
        if not isinstance(call_id, str):
            return _invalid_type(f"{path}.id", "a string", call_id)
        ids.append(call_id)
    return ids


def validate_chat(body: JSONObject, model: str) -> Verdict:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return _error("[] is too short - 'messages'", "messages")
    rejects_system = re.match(r"^o1-(mini|preview)", model) is not None
    pending: list[str] = []  # tool_call_ids of the last assistant message still waiting for results
    pending_index = -1
    answered: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            return _invalid_type(f"messages[{index}]", "an object", message)
        role = message.get("role")
        if role not in _ROLES:
            return _error(
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.",
                f"messages[{index}].role",
                "invalid_value",
            )
        if rejects_system and role in ("system", "developer"):
            return _error(
                f"Unsupported value: 'messages[{index}].role' does not support '{role}' with this model.",
                f"messages[{index}].role",
                "unsupported_value",
            )
        if "name" in message and role != "function":
            name = message["name"]
            if not isinstance(name, str) or not _NAME_PATTERN.match(name):
                return _error(
                    f"Invalid 'messages[{index}].name': string does not match pattern. Expected a string that matches the pattern '^[^\\s<|\\\\/>]+$'.",
                    f"messages[{index}].name",
                    "invalid_value",
                )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not call_id:
                return _error(
                    "Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.",
                    f"messages.[{index}].tool_call_id",
                )
            if pending_index < 0:
                return _error(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
                    f"messages.[{index}].role",
                )
            if call_id not in pending and call_id not in answered:
                return _error(f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' of previous message.", None)
            if call_id in pending:
                pending.remove(call_id)
                answered.add(call_id)
            continue
        if pending:
            return _error(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
                f"messages.[{pending_index}].role",
            )
        pending_index = -1
        answered = set()
        if role == "assistant":
            ids = _call_ids(index, message)
            if isinstance(ids, Verdict):
                return ids
            if message.get("content") is None and not message.get("tool_calls"):
                return _error("Invalid value for 'content': expected a string, got null.", f"messages.[{index}].content")
            if ids:
                pending = ids
                pending_index = index
    if pending:
        return _error(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
            f"messages.[{pending_index}].role",
        )
    return ACCEPTED

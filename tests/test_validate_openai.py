"""The offline OpenAI Chat validator: each rule rejects with the API's exact text, and accepts the valid case."""

from __future__ import annotations

from typing import Any

import pytest

from zhin_cli.pipeline.validate import validate


def body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": list(messages)}


CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_A", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": "call_B", "type": "function", "function": {"name": "g", "arguments": "{}"}},
]}
USER = {"role": "user", "content": "hi"}


def tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def test_valid_tool_group_is_accepted() -> None:
    assert validate("openai-chat", body(USER, CALL, tool("call_B"), tool("call_A"), USER), "gpt-4o").ok


@pytest.mark.parametrize(
    ("messages", "message", "param"),
    [
        ((USER, CALL, tool("call_A")),
         "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
         "The following tool_call_ids did not have response messages: call_B", "messages.[1].role"),
        ((USER, CALL, USER, tool("call_A"), tool("call_B")),
         "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
         "The following tool_call_ids did not have response messages: call_A, call_B", "messages.[1].role"),
        ((USER, tool("call_A")),
         "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
         "messages.[1].role"),
        ((USER, CALL, tool("call_A"), tool("call_B"), tool("call_C")),
         "Invalid parameter: 'tool_call_id' of 'call_C' not found in 'tool_calls' of previous message.", None),
        ((USER, CALL, {"role": "tool", "content": "x"}),
         "Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.", "messages.[2].tool_call_id"),
        ((USER, {"role": "assistant", "content": None}),
         "Invalid value for 'content': expected a string, got null.", "messages.[1].content"),
        ((USER, {"role": "user", "content": "x", "name": "小 明"}),
         "Invalid 'messages[1].name': string does not match pattern. Expected a string that matches the pattern '^[^\\s<|\\\\/>]+$'.",
         "messages[1].name"),
    ],
)
def test_each_rule_rejects_with_the_exact_text(messages: tuple[dict[str, Any], ...], message: str, param: str | None) -> None:
    verdict = validate("openai-chat", body(*messages), "gpt-4o")
    assert (verdict.ok, verdict.status, verdict.message, verdict.param) == (False, 400, message, param)


def test_o1_mini_rejects_system_and_developer_roles() -> None:
    verdict = validate("openai-chat", body({"role": "developer", "content": "x"}, USER), "o1-mini")
    assert verdict.message == "Unsupported value: 'messages[0].role' does not support 'developer' with this model."
    assert validate("openai-chat", body({"role": "system", "content": "x"}, USER), "gpt-4o").ok

"""The offline DeepSeek validator: DeepSeek's own wording and error body for tool ordering, the serde schema
error, and the R1-era deepseek-reasoner ordering checks (only for configured models)."""

from __future__ import annotations

from typing import Any

import pytest

from zhin_cli.pipeline.providers.specs import deepseek as openai_profiles
from zhin_cli.pipeline.validate import validate


def body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "deepseek-chat", "messages": list(messages)}


SYSTEM = {"role": "system", "content": "group chat"}
USER = {"role": "user", "content": "hi"}
ASSISTANT = {"role": "assistant", "content": "hello"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_A", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": "call_B", "type": "function", "function": {"name": "g", "arguments": "{}"}},
]}


def tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def expect(request: dict[str, Any], model: str, message: str) -> None:
    verdict = validate("deepseek-chat", request, model)
    assert verdict.as_dict() == {
        "ok": False,
        "status": 400,
        "body": {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}},
    }


INSUFFICIENT = ("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
                "(insufficient tool messages following tool_calls message)")
NO_CALLS = "Messages with role 'tool' must be a response to a preceding message with 'tool_calls'"


def test_valid_tool_group_and_mid_conversation_system_pass() -> None:
    request = body(SYSTEM, USER, CALL, tool("call_B"), tool("call_A"), ASSISTANT, {"role": "system", "content": "x"}, USER, USER)
    assert validate("deepseek-chat", request, "deepseek-chat").ok
    assert validate("deepseek-chat", request, "deepseek-reasoner").ok  # today's alias is not R1-era


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ((USER, CALL, tool("call_A"), USER), INSUFFICIENT),
        ((USER, CALL, tool("call_A")), INSUFFICIENT),
        ((USER, CALL, USER, tool("call_A"), tool("call_B")), INSUFFICIENT),
        ((USER, tool("call_A")), NO_CALLS),
        ((USER, CALL, tool("call_A"), tool("call_B"), USER, tool("call_C")), NO_CALLS),
    ],
)
def test_tool_ordering_uses_deepseek_wording(messages: tuple[dict[str, Any], ...], message: str) -> None:
    expect(body(*messages), "deepseek-chat", message)


def test_missing_tool_call_id_is_a_serde_error_with_the_byte_column() -> None:
    request = {"model": "deepseek-chat", "messages": [{"role": "user", "content": "小明"}, {"role": "tool", "content": "x"}]}
    # compact one-line JSON: {"model":"deepseek-chat","messages":[{"role":"user","content":"小明"},{"role":"tool","content":"x"}]}
    # the second message starts at byte 72 (37 + 34 + 1; 小明 is 6 bytes in UTF-8) and is 29 bytes long, so its
    # closing brace is the 101st byte: serde reports column 101
    wire = '{"model":"deepseek-chat","messages":[{"role":"user","content":"小明"},{"role":"tool","content":"x"}]}'.encode()
    assert wire.index(b'{"role":"tool"') + len(b'{"role":"tool","content":"x"}') == 101
    expect(request, "deepseek-chat",
           "Failed to deserialize the JSON body into the target type: messages[1]: missing field `tool_call_id` at line 1 column 101")


R1 = "deepseek-reasoner-r1"


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ((SYSTEM, USER, ASSISTANT, SYSTEM, USER),
         "The system message of deepseek-reasoner must be put on the beginning of the message sequence"),
        ((SYSTEM, ASSISTANT, USER),
         "The first message (except the system message) of deepseek-reasoner must be a user message, but an assistant message detected."),
        ((SYSTEM, USER, USER),
         "deepseek-reasoner does not support successive user or assistant messages (messages[1] and messages[2] in your input). "
         "You should interleave the user/assistant messages in the message sequence."),
        ((USER, ASSISTANT, ASSISTANT, USER),
         "deepseek-reasoner does not support successive user or assistant messages (messages[1] and messages[2] in your input). "
         "You should interleave the user/assistant messages in the message sequence."),
        ((USER, ASSISTANT),
         "The last message of deepseek-reasoner must be a user message, or an assistant message with prefix mode on "
         "(refer to https://api-docs.deepseek.com/guides/chat_prefix_completion)."),
    ],
)
def test_r1_era_ordering(messages: tuple[dict[str, Any], ...], message: str) -> None:
    expect(body(*messages), R1, message)
    assert validate("deepseek-chat", body(*messages), "deepseek-chat").ok  # not R1-era: accepted


def test_r1_era_accepts_alternation_and_prefix_mode() -> None:
    assert validate("deepseek-chat", body(SYSTEM, SYSTEM, USER, ASSISTANT, USER), R1).ok
    assert validate("deepseek-chat", body(USER, {"role": "assistant", "content": "```python\n", "prefix": True}), R1).ok


def test_r1_era_models_are_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert openai_profiles.R1_ERA_MODELS == ("deepseek-reasoner-r1",)
    monkeypatch.setattr(openai_profiles, "_configured_r1_models", ())  # restored after the test (the list lives there)
    assert validate("deepseek-chat", body(USER, USER), "deepseek-reasoner").ok
    openai_profiles.set_r1_era_models(["deepseek-reasoner"])
    assert openai_profiles.is_r1_era("deepseek-reasoner")
    assert not validate("deepseek-chat", body(USER, USER), "deepseek-reasoner").ok

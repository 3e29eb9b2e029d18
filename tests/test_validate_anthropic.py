"""The offline Anthropic Messages validator: each rule rejects with the API's exact text and body; valid shapes pass."""

from __future__ import annotations

from typing import Any

import pytest

from zhin_cli.pipeline.providers.anthropic import claude_version, rejects_prefill
from zhin_cli.pipeline.validate import validate
from zhin_cli.pipeline.validate.anthropic import MID_CONVERSATION_SYSTEM_MODELS

OLD = "claude-sonnet-4-5"  # no mid-conversation system, prefill allowed
MID = "claude-opus-4-8"  # mid-conversation system allowed, prefill rejected (4.8 ≥ 4.6)

USER = {"role": "user", "content": "hi"}
ASSISTANT = {"role": "assistant", "content": "hello"}
SYSTEM = {"role": "system", "content": "[state change] 10001 is now admin"}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def use(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids]}


def result(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}


def results(*ids: str) -> dict[str, Any]:
    return {"role": "user", "content": [result(i) for i in ids]}


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "system": "You are in a group chat.", "messages": list(messages), **extra}


def expect(verdict_body: dict[str, Any], model: str, message: str) -> None:
    verdict = validate("anthropic-messages", verdict_body, model)
    assert verdict.as_dict() == {
        "ok": False,
        "status": 400,
        "body": {"type": "error", "error": {"type": "invalid_request_error", "message": message}},
    }
    assert (verdict.message, verdict.type) == (message, "invalid_request_error")


def test_valid_group_chat_with_tools_and_cache_control_passes() -> None:
    request = body(
        {"role": "user", "content": [text("[10001] hi", cache_control={"type": "ephemeral"})]},
        {"role": "user", "content": "[10002] weather?"},  # consecutive user turns are merged, not rejected
        use("toolu_A", "toolu_B"),
        results("toolu_B", "toolu_A"),
        {"role": "user", "content": [text("[10001] thanks")]},  # same turn as the results, after them
        ASSISTANT,
        {"role": "assistant", "content": "more"},  # consecutive assistant turns merge too
        USER,
        system=[text("rules", cache_control={"type": "ephemeral"})],
        tools=[{"name": "f", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
    )
    assert validate("anthropic-messages", request, OLD).ok
    assert validate("anthropic-messages", request, MID).ok


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ((), "messages: at least one message is required"),
        (({"role": "tool", "content": "x"},), "messages.0.role: Input should be 'user', 'assistant' or 'system'"),
        ((USER, {"role": "user", "content": "x", "name": "alice"}), "messages.1.name: Extra inputs are not permitted"),
        ((USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "call 1", "name": "f", "input": {}}]}),
         "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"),
        ((USER, {"role": "assistant", "content": ""}, USER),
         "messages.1: all messages must have non-empty content except for the optional final assistant message"),
        (({"role": "user", "content": []},),
         "messages.0: all messages must have non-empty content except for the optional final assistant message"),
        (({"role": "user", "content": [text("")]},), "messages: text content blocks must be non-empty"),
        (({"role": "user", "content": [text(" \n")]},), "messages: text content blocks must contain non-whitespace text"),
        ((USER, use("toolu_A", "toolu_B")),
         "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A, toolu_B. "
         "Each `tool_use` block must have a corresponding `tool_result` block in the next message."),
        ((USER, use("toolu_A", "toolu_B"), results("toolu_A"), ASSISTANT),
         "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_B. "
         "Each `tool_use` block must have a corresponding `tool_result` block in the next message."),
        ((USER, use("toolu_A"), USER, ASSISTANT),
         "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A. "
         "Each `tool_use` block must have a corresponding `tool_result` block in the next message."),
        # a downgraded state change merged before the result: the combined user turn starts with text
        ((USER, use("toolu_A"), {"role": "user", "content": "[state change]"}, results("toolu_A")),
         "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message. "
         "Messages following `tool_use` blocks must begin with a matching number of `tool_result` blocks."),
        ((USER, use("toolu_A", "toolu_B"), {"role": "user", "content": [result("toolu_A"), text("x"), result("toolu_B")]}),
         "messages.2: Did not find 2 `tool_result` block(s) at the beginning of this message. "
         "Messages following `tool_use` blocks must begin with a matching number of `tool_result` blocks."),
        ((USER, use("toolu_A"), {"role": "user", "content": [result("toolu_A"), result("toolu_X")]}),
         "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_X. "
         "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."),
        ((USER, ASSISTANT, results("toolu_A")),
         "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_A. "
         "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."),
    ],
)
def test_each_rule_rejects_with_the_exact_text(messages: tuple[dict[str, Any], ...], message: str) -> None:
    expect(body(*messages), OLD, message)


def test_missing_messages_key_is_the_empty_case() -> None:
    expect({"model": "m", "max_tokens": 1}, OLD, "messages: at least one message is required")


def test_final_assistant_may_be_empty_on_models_that_allow_prefill() -> None:
    assert validate("anthropic-messages", body(USER, {"role": "assistant", "content": ""}), OLD).ok
    assert validate("anthropic-messages", body(USER, {"role": "assistant", "content": [text("The answer is")]}), OLD).ok


def test_more_than_four_cache_control_blocks_counting_tools_system_and_messages() -> None:
    marker = {"type": "ephemeral"}
    request = body(
        {"role": "user", "content": [text("a", cache_control=marker), text("b", cache_control=marker)]},
        ASSISTANT,
        USER,
        system=[text("rules", cache_control=marker)],
        tools=[{"name": "f", "input_schema": {}, "cache_control": marker}, {"name": "g", "input_schema": {}}],
    )
    assert validate("anthropic-messages", request, OLD).ok  # 4 markers: at the limit
    request["messages"][2] = {"role": "user", "content": [text("c", cache_control=marker)]}
    expect(request, OLD, "A maximum of 4 blocks with cache_control may be provided. Found 5.")


def test_cache_control_inside_tool_result_content_counts() -> None:
    marker = {"type": "ephemeral"}
    nested = {"type": "tool_result", "tool_use_id": "toolu_A", "content": [text("r", cache_control=marker)] * 5}
    expect(body(USER, use("toolu_A"), {"role": "user", "content": [nested]}), OLD,
           "A maximum of 4 blocks with cache_control may be provided. Found 5.")


def test_role_system_on_a_model_without_the_feature() -> None:
    expect(body(USER, SYSTEM, ASSISTANT), OLD, "role 'system' is not supported on this model")
    expect(body(USER, SYSTEM, ASSISTANT), "claude-sonnet-5", "role 'system' is not supported on this model")


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ((SYSTEM, USER),
         "messages.0: role 'system' must follow a 'user' message or an 'assistant' message ending in a server tool result"),
        ((USER, ASSISTANT, SYSTEM, USER),
         "messages.2: role 'system' must follow a 'user' message or an 'assistant' message ending in a server tool result"),
        ((USER, SYSTEM, USER),
         "messages.1: role 'system' must precede an 'assistant' message or end the array"),
        # a run of system messages is one section: the rule applies to it as a whole
        ((USER, SYSTEM, SYSTEM, USER),
         "messages.1: role 'system' must precede an 'assistant' message or end the array"),
        # never between tool_use and its tool_result
        ((USER, use("toolu_A"), SYSTEM, results("toolu_A")),
         "messages.2: role 'system' must follow a 'user' message or an 'assistant' message ending in a server tool result"),
    ],
)
def test_mid_conversation_system_placement(messages: tuple[dict[str, Any], ...], message: str) -> None:
    expect(body(*messages), MID, message)


@pytest.mark.parametrize("model", ["claude-opus-4-8", "claude-fable-5", "claude-fable-5-1", "claude-mythos-5"])
def test_mid_conversation_system_accepted_where_the_docs_allow_it(model: str) -> None:
    server_result = {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
    ]}
    for messages in (
        (USER, SYSTEM, ASSISTANT, USER),
        (USER, SYSTEM),  # may end the array
        (USER, SYSTEM, SYSTEM, ASSISTANT, USER),
        (USER, use("toolu_A"), results("toolu_A"), SYSTEM, ASSISTANT, USER),  # after the tool_result turn
        (USER, server_result, SYSTEM, ASSISTANT, USER),
    ):
        assert validate("anthropic-messages", body(*messages), model).ok, messages


def test_directive_only_system_message_is_accepted_anywhere() -> None:
    directive = {"role": "system", "content": [], "output_config": {"effort": "low"}}
    assert validate("anthropic-messages", body(USER, ASSISTANT, directive, USER), MID).ok


def test_allow_list_is_a_module_tuple() -> None:
    assert MID_CONVERSATION_SYSTEM_MODELS == ("claude-opus-4-8", "claude-fable-5*", "claude-mythos-5*")


PREFILL = "This model does not support assistant message prefill. The conversation must end with a user message."


@pytest.mark.parametrize("model", ["claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-7", "claude-opus-4-8", "claude-sonnet-5",
                                   "claude-fable-5-1"])
def test_prefill_rejected_from_claude_4_6(model: str) -> None:
    expect(body(USER, {"role": "assistant", "content": "The answer is"}), model, PREFILL)


@pytest.mark.parametrize("model", ["claude-sonnet-4-5-20250929", "claude-haiku-4-5", "claude-opus-4-20250514",
                                   "claude-3-5-sonnet-20241022", "claude-mythos-preview"])
def test_prefill_accepted_before_4_6_and_for_unknown_versions(model: str) -> None:
    assert validate("anthropic-messages", body(USER, {"role": "assistant", "content": "The answer is"}), model).ok


def test_model_version_table() -> None:
    assert claude_version("claude-opus-4-20250514") == (4, 0)
    assert claude_version("claude-sonnet-4-5-20250929") == (4, 5)
    assert claude_version("claude-3-5-haiku-20241022") == (3, 5)
    assert claude_version("claude-mythos-5-1") == (5, 1)
    assert claude_version("claude-mythos-preview") is None
    assert rejects_prefill("claude-opus-4-6") and not rejects_prefill("claude-opus-4-5")

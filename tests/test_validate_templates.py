"""The local chat-template validators: each template's raise (or crash) text in vLLM's error body, the shapes each
template accepts, and the model id → family map."""

from __future__ import annotations

from typing import Any

import pytest

from zhin_cli.validate import VALIDATORS, validate
from zhin_cli.validate.templates import FAMILIES, template_family

SYSTEM = {"role": "system", "content": "group chat rules"}
STATE = {"role": "system", "content": "[state change] 10001 is now admin"}
USER = {"role": "user", "content": "hi"}
ASSISTANT = {"role": "assistant", "content": "hello"}
NULL_ASSISTANT = {"role": "assistant", "content": None}


def calls(*ids: str, arguments: Any = "{}", content: Any = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": arguments}} for i in ids
    ]}


def tool(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "local", "messages": list(messages), **extra}


def expect(family: str, request: dict[str, Any], message: str) -> None:
    verdict = validate(f"template:{family}", request, "local")
    assert verdict.as_dict() == {
        "ok": False,
        "status": 400,
        "body": {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}},
    }


def accepts(family: str, request: dict[str, Any]) -> bool:
    return validate(f"template:{family}", request, "local").ok


def test_one_registered_validator_per_family() -> None:
    assert set(FAMILIES) == {"mistral", "mixtral", "gemma", "llama3", "qwen2.5", "qwen3", "qwen3.5", "deepseek"}
    assert {f"template:{family}" for family in FAMILIES} <= set(VALIDATORS)


ALTERNATION = "After the optional system message, conversation roles must alternate user/assistant/user/assistant/..."
ROLES = "Only user and assistant roles are supported, with the exception of an initial optional system message!"
TOOL_ID = "Tool call IDs should be alphanumeric strings with length 9!"


def test_mistral_accepts_alternation_with_tool_calls_skipped() -> None:
    assert accepts("mistral", body(SYSTEM, USER, calls("abcDEF123", "ghiJKL456"), tool("abcDEF123"), tool("ghiJKL456"),
                                   ASSISTANT, USER))
    assert accepts("mistral", body(USER, calls("call_1234"), tool("call_1234"), ASSISTANT, USER))  # length is all it checks
    assert accepts("mistral", body(USER, {"role": "assistant", "content": "x", "tool_calls": None}, USER))  # null = absent


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ((SYSTEM, USER, ASSISTANT, STATE, USER), ALTERNATION),  # system in a user slot
        ((USER, STATE, USER), ROLES),  # system in an assistant slot passes alternation, then fails rendering
        ((USER, USER), ALTERNATION),
        ((ASSISTANT, USER), ALTERNATION),
        ((USER, calls("abcDEF123"), tool("abcDEF123"), USER), ALTERNATION),  # tool turns are skipped: user, user
        ((USER, calls("call_abc123"), tool("call_abc123"), ASSISTANT), TOOL_ID),
        ((USER, calls("abcDEF123"), tool("abc"), ASSISTANT), TOOL_ID),
        ((USER, {"role": "developer", "content": "x"}, USER), ROLES),
    ],
)
def test_mistral_rejects(messages: tuple[dict[str, Any], ...], message: str) -> None:
    expect("mistral", body(*messages), message)


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ((USER, ASSISTANT, STATE, USER), ALTERNATION),
        ((USER, STATE), ROLES),
        ((USER, USER), ALTERNATION),
        ((ASSISTANT,), ALTERNATION),
        ((USER, calls("a", content="x"), tool("a")), ALTERNATION),  # tool in a user slot
        ((USER, tool("a")), ROLES),  # tool in an assistant slot
        ((USER, NULL_ASSISTANT, USER), 'can only concatenate str (not "NoneType") to str'),  # crash
    ],
)
def test_mixtral_rejects(messages: tuple[dict[str, Any], ...], message: str) -> None:
    expect("mixtral", body(*messages), message)


def test_mixtral_accepts_a_leading_system_message() -> None:
    assert accepts("mixtral", body(SYSTEM, USER, ASSISTANT, USER))


GEMMA_ALTERNATION = "Conversation roles must alternate user/assistant/user/assistant/..."


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ((SYSTEM, USER, ASSISTANT, STATE, USER), GEMMA_ALTERNATION),
        ((USER, USER), GEMMA_ALTERNATION),
        ((ASSISTANT, USER), GEMMA_ALTERNATION),
        ((USER, calls("a", content=""), tool("a")), GEMMA_ALTERNATION),
        ((USER, NULL_ASSISTANT, USER), "Invalid content type"),
    ],
)
def test_gemma_rejects(messages: tuple[dict[str, Any], ...], message: str) -> None:
    expect("gemma", body(*messages), message)


def test_gemma_accepts_leading_system_string_or_parts_and_non_user_roles_in_model_slots() -> None:
    assert accepts("gemma", body(SYSTEM, USER, ASSISTANT, USER))
    assert accepts("gemma", body({"role": "system", "content": [{"type": "text", "text": "rules"}]}, USER))
    # the template's only role check is (role == 'user') != even index: a system message in a model slot is
    # rendered as its own <start_of_turn>system turn, not rejected
    assert accepts("gemma", body(USER, STATE, USER))


def test_llama3_one_tool_call_per_message() -> None:
    expect("llama3", body(SYSTEM, USER, calls("a", "b"), tool("a"), tool("b")), "This model only supports single tool-calls at once!")
    assert accepts("llama3", body(SYSTEM, USER, calls("a"), tool("a"), STATE, USER, USER))


def test_llama3_tools_need_a_first_user_message() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    expect("llama3", body(SYSTEM, tools=tools), "Cannot put tools in the first user message when there's no first user message!")
    assert accepts("llama3", body(SYSTEM, USER, tools=tools))
    assert accepts("llama3", body(SYSTEM))  # without tools nothing is consumed


def test_qwen25_accepts_system_anywhere_and_any_order() -> None:
    assert accepts("qwen2.5", body(ASSISTANT, USER, USER, STATE, calls("a", "b"), tool("a"), tool("b"), NULL_ASSISTANT))


def test_qwen3_null_assistant_content_crashes() -> None:
    expect("qwen3", body(USER, calls("a"), tool("a")), "argument of type 'NoneType' is not iterable")
    assert accepts("qwen3", body(SYSTEM, USER, calls("a", content=""), tool("a"), ASSISTANT, STATE, USER))


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ((), "No messages provided."),
        ((SYSTEM, USER, ASSISTANT, STATE, USER), "System message must be at the beginning."),
        ((USER, {"role": "developer", "content": "x"}), "Unexpected message role."),
        ((SYSTEM, ASSISTANT), "No user query found in messages."),
        (({"role": "user", "content": "<tool_response>\nx\n</tool_response>"},), "No user query found in messages."),
        ((USER, calls("a", arguments='{"q": 1}', content=""), tool("a")), "Can only get item pairs from a mapping."),
        (({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},), "Unexpected item type in content."),
        (({"role": "user", "content": 42},), "Unexpected content type."),
    ],
)
def test_qwen35_rejects(messages: tuple[dict[str, Any], ...], message: str) -> None:
    expect("qwen3.5", body(*messages), message)


def test_qwen35_accepts_a_leading_system_and_mapping_arguments() -> None:
    assert accepts("qwen3.5", body(SYSTEM, USER, calls("a", arguments={"q": 1}), tool("a"), ASSISTANT, USER, USER))


def test_deepseek_accepts_and_relocates_system_messages() -> None:
    assert accepts("deepseek", body(ASSISTANT, USER, USER, STATE, calls("a", "b"), tool("a"), tool("b"), NULL_ASSISTANT))


def test_deepseek_object_arguments_crash() -> None:
    expect("deepseek", body(USER, calls("a", arguments={"q": 1}), tool("a")), 'can only concatenate str (not "dict") to str')


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral"),
        ("mistral-nemo", "mistral"),
        ("mistralai/Mistral-Nemo-Instruct-2407", "mistral"),
        ("mistral:7b", "mistral"),
        ("mistral", "mistral"),
        ("mixtral-8x7b", "mixtral"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral"),
        ("mistralai/Mistral-7B-Instruct-v0.2", "mixtral"),
        ("google/gemma-3-1b-it", "gemma"),
        ("gemma3:270m", "gemma"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3"),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama3"),
        ("llama3.2", "llama3"),
        ("llama3.1:8b", "llama3"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5"),
        ("qwen2.5:7b", "qwen2.5"),
        ("qwen3:0.6b", "qwen3"),
        ("Qwen/Qwen3-0.6B", "qwen3"),
        ("Qwen/Qwen3.5-4B", "qwen3.5"),
        ("qwen3.5:4b", "qwen3.5"),
        ("deepseek-r1", "deepseek"),
        ("deepseek-r1:7b", "deepseek"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "deepseek"),
        ("deepseek-ai/DeepSeek-V3", "deepseek"),
        ("gpt-4o", None),
        ("google/gemma-2-2b-it", None),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", None),
        ("Qwen/Qwen3.6-27B", None),
        ("mistral-small:24b", None),
        ("llama3", None),
    ],
)
def test_template_family(model: str, family: str | None) -> None:
    assert template_family(model) == family


def test_served_variant_applies_the_servers_normalisation_first() -> None:
    """vLLM/Ollama turn null content into "" and JSON-string arguments into objects before templating."""
    from zhin_cli.validate import validate

    null_content = body(USER, calls("a", content=None), tool("a"))
    assert not validate("template:qwen3", null_content, "qwen3").ok
    assert validate("served:qwen3", null_content, "qwen3").ok
    string_args = body(USER, calls("a", arguments='{"q": 1}', content=""), tool("a"))
    assert not validate("template:qwen3.5", string_args, "qwen3.5").ok
    assert validate("served:qwen3.5", string_args, "qwen3.5").ok
    # …and the DeepSeek template, which concatenates arguments as strings, then crashes on every tool call
    assert validate("template:deepseek", string_args, "deepseek-r1").ok
    served = validate("served:deepseek", string_args, "deepseek-r1")
    assert (served.ok, served.message) == (False, 'can only concatenate str (not "dict") to str')

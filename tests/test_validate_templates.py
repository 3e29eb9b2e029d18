"""The local chat-template validators: each template's raise (or crash) text in vLLM's error body, the shapes each
template accepts, and the model id → family map."""

from __future__ import annotations

from typing import Any

import pytest

from zhin_cli.pipeline.providers.local import template_family
from zhin_cli.pipeline.validate import VALIDATORS, validate
from zhin_cli.pipeline.validate.templates import FAMILIES

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
    assert set(FAMILIES) == {"mistral", "mixtral", "gemma", "gemma2", "llama3", "qwen2.5", "qwen3", "qwen3.5", "deepseek",
                             "deepseek-v3", "deepseek-v3.1"}
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
    assert accepts("qwen2.5", body(ASSISTANT, USER, USER, STATE, calls("a", "b"), tool("a"), tool("b"), ASSISTANT))


def test_qwen25_null_content_outside_a_tool_call_turn_crashes() -> None:
    """``'\n' + message.content`` for every turn but a tool-call one (issue 15 C4: was accepted)."""
    expect("qwen2.5", body(USER, NULL_ASSISTANT, USER), 'can only concatenate str (not "NoneType") to str')
    assert accepts("qwen2.5", body(USER, calls("a", content=None), tool("a")))  # negative control: the call branch
    assert validate("served:qwen2.5", body(USER, NULL_ASSISTANT, USER), "qwen2.5").ok  # vLLM sends ""


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
    assert accepts("deepseek", body(ASSISTANT, USER, USER, STATE, calls("a", "b"), tool("a"), tool("b"), ASSISTANT))


def test_deepseek_null_content_crashes_where_the_template_uses_it() -> None:
    """R1/V3.1 search a plain reply for ``</think>``; V3 renders a null plain reply as an (empty) call turn."""
    for family in ("deepseek", "deepseek-v3.1"):
        expect(family, body(USER, NULL_ASSISTANT, USER), "argument of type 'NoneType' is not iterable")
    assert accepts("deepseek-v3", body(USER, NULL_ASSISTANT, USER))
    for family in ("deepseek", "deepseek-v3", "deepseek-v3.1"):
        expect(family, body(USER, {"role": "user", "content": None}), 'can only concatenate str (not "NoneType") to str')
        assert accepts(family, body(USER, calls("a", content=None), tool("a"), ASSISTANT))  # negative control


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
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),  # V3 and V3.1 ship their own templates (issue 15 C4)
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
        ("deepseek-v3:671b", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3.1"),
        ("deepseek-v3.1:671b", "deepseek-v3.1"),
        # V3.2-Exp ships V3.1's template (same rules as the R1 family it fell into before); V3.2 ships none at all
        # (DeepSeek's Python encoder, not in §5): no family, plain OpenAI rules
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-v3.1"),
        ("deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek-v3.1"),
        ("deepseek-ai/DeepSeek-V3.2", None),
        ("deepseek-ai/DeepSeek-V3.2-Speciale", None),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek"),
        ("deepseek-ai/DeepSeek-V4-Flash", None),
        ("gpt-4o", None),
        ("google/gemma-2-2b-it", "gemma2"),  # issue 15 C1: Gemma 2 had no family
        ("google/gemma-2-9b-it", "gemma2"),
        ("gemma2:2b", "gemma2"),
        ("gemma2", "gemma2"),
        ("google/gemma-2-27b-it", "gemma2"),
        # Gemma 1 ships the template Gemma 2 kept (system raises, strict parity): the gemma2 family
        ("google/gemma-2b-it", "gemma2"),
        ("google/gemma-7b-it", "gemma2"),
        ("google/gemma-1.1-2b-it", "gemma2"),
        ("google/gemma-1.1-7b-it", "gemma2"),
        ("gemma:7b", "gemma2"),
        ("gemma:2b", "gemma2"),
        ("gemma:7b-instruct-v1.1-q4_0", "gemma2"),
        ("gemma", "gemma2"),
        ("gemma:latest", "gemma2"),
        # … and not their relatives with templates of their own, nor Gemma 3 / 4
        ("google/codegemma-7b-it", None),
        ("codegemma:7b", None),
        ("google/recurrentgemma-9b-it", None),
        ("google/gemma-3-4b-it", "gemma"),
        ("gemma3", "gemma"),
        ("gemma3n:e4b", "gemma"),
        ("google/gemma-4-31B-it", None),
        ("gemma4:e4b", None),
        ("google/gemma-3-270m-it", "gemma"),
        ("gemma-4-e2b-it", None),
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
    from zhin_cli.pipeline.validate import validate

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


GEMMA2_SYSTEM = "System role not supported"


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ((SYSTEM, USER), GEMMA2_SYSTEM),  # not even at index 0
        ((SYSTEM,), GEMMA2_SYSTEM),
        ((USER, USER), GEMMA_ALTERNATION),
        ((ASSISTANT, USER), GEMMA_ALTERNATION),
        ((USER, calls("a", content=""), tool("a")), GEMMA_ALTERNATION),
    ],
)
def test_gemma2_rejects(messages: tuple[dict[str, Any], ...], message: str) -> None:
    expect("gemma2", body(*messages), message)


def test_gemma2_accepts_alternation_and_a_system_message_in_a_model_slot() -> None:
    assert accepts("gemma2", body(USER, ASSISTANT, USER))
    assert accepts("gemma2", body(USER, STATE, USER))  # rendered as <start_of_turn>system, unchecked
    assert accepts("gemma2", body())


def test_vllm_gemma2_is_checked_by_its_template_not_plain_openai_rules() -> None:
    from zhin_cli.pipeline.providers import resolve_profile

    profile = resolve_profile("vllm", "google/gemma-2-2b-it")
    assert (profile.validator, profile.alternation, profile.mid_conversation_system) == ("served:gemma2", "merge", "none")


DROPPED = "the template drops the tool call of message 1"


def test_deepseek_v3_served_drops_the_tool_call_with_a_warning_not_a_400() -> None:
    """Issue 15 C4: vLLM turns null content into "", the V3 template then skips the call branch — no error."""
    request = body(USER, calls("a", arguments='{"q": 1}'), tool("a"), ASSISTANT)
    served = validate("served:deepseek-v3", request, "deepseek-ai/DeepSeek-V3")
    assert served.as_dict() == {"ok": True, "status": 200, "warnings": [DROPPED]}
    # the raw template sees content null: the call branch, with the JSON string concatenated — no drop
    assert validate("template:deepseek-v3", request, "deepseek-ai/DeepSeek-V3").as_dict() == {"ok": True, "status": 200}
    # negative controls: object arguments with null content do reach the concatenation; R1 and V3.1 crash served
    objects = body(USER, calls("a", arguments={"q": 1}), tool("a"))
    expect("deepseek-v3", objects, 'can only concatenate str (not "dict") to str')
    for family in ("deepseek", "deepseek-v3.1"):
        verdict = validate(f"served:{family}", request, "deepseek")
        assert (verdict.ok, verdict.message) == (False, 'can only concatenate str (not "dict") to str')


def test_templates_without_a_tool_branch_warn_about_the_dropped_calls() -> None:
    two = "the template drops the tool calls of message 1"
    for family in ("mixtral", "gemma", "gemma2"):
        verdict = validate(f"served:{family}", body(USER, calls("a", "b", content="x"), USER), "m")
        assert (verdict.ok, verdict.warnings) == (True, (two,)), family
        assert validate(f"served:{family}", body(USER, ASSISTANT, USER), "m").warnings == ()  # negative control


def test_call_text_and_system_prompt_drops_are_warnings() -> None:
    text = "the template drops the text of message 2 (it renders only the tool calls of an assistant message)"
    verdict = validate("served:llama3", body(SYSTEM, USER, calls("a", content="looking"), tool("a")), "llama3.1")
    assert verdict.warnings == (text,)
    assert validate("served:llama3", body(SYSTEM, USER, calls("a", content=""), tool("a")), "llama3.1").warnings == ()
    mistral = validate("served:mistral", body(SYSTEM, USER, calls("abcDEF123", content="looking"), tool("abcDEF123")), "m")
    assert mistral.warnings == (
        "the template drops the system message (it renders it only inside a last user message, and the last message is 'tool')",
        text,
    )
    # ending on a user turn, the system message is rendered (inside it): no warning
    ok = body(SYSTEM, USER, calls("abcDEF123", content=""), tool("abcDEF123"), ASSISTANT, USER)
    assert validate("served:mistral", ok, "m").as_dict() == {"ok": True, "status": 200}
    # a rejected body says its 400, not the drops
    assert validate("served:mistral", body(SYSTEM, USER, USER, calls("abcDEF123", content="x")), "m").warnings == ()
    # the system message alone: the template renders nothing after it, so nothing of it
    alone = validate("served:mistral", body(SYSTEM), "m")
    assert alone.ok and alone.warnings == ("the template drops the system message (it renders it only inside a last "
                                           "user message, and the last message is 'system')",)

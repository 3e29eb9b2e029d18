"""Wire bodies for every built-in profile: Anthropic, Gemini, and the template-driven local servers."""

from __future__ import annotations

from typing import Any

import pytest
from builders import SEC, T0, History, request_for_next

from zhin_cli.pipeline.providers import PROFILES, resolve_profile
from zhin_cli.pipeline.providers.local import template_family
from zhin_cli.pipeline.providers.openai import short_id


def tool_loop() -> History:
    h = History()
    h.user(T0, "10007", "@bot weather?")
    h.assistant(T0 + 2 * SEC, "let me check", calls=[("call_1", "weather"), ("call:2", "air")])
    h.result(T0 + 5 * SEC, "call_1", "rain")
    h.result(T0 + 6 * SEC, "call:2", "good")
    h.event(T0 + 4 * SEC, "member_joined", "10010 join 1048877509 on 09:00 by self")  # during the tool call
    return h


def test_anthropic_body_top_level_system_tool_result_first_then_downgraded_event() -> None:
    request = request_for_next(tool_loop(), T0 + 8 * SEC, provider="anthropic", model="claude-sonnet-5")
    body = request.request
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user"]
    assistant = body["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["text", "tool_use", "tool_use"]
    assert assistant[2]["id"] == "call_2"  # sanitized to ^[a-zA-Z0-9_-]+$
    after = body["messages"][2]["content"]
    assert [b["type"] for b in after] == ["tool_result", "tool_result", "text"]
    assert after[2]["text"] == "[id:e1;user_id:system;time:09:00;] [state change] 10010 join 1048877509 on 09:00 by self"
    assert request.state_rendering == "user"
    breakpoints = sum(1 for m in body["messages"] for b in m["content"] if "cache_control" in b) + 1
    assert breakpoints == 2 <= 4
    first = body["messages"][0]["content"]
    assert "cache_control" in first[0] and first[1]["text"].startswith("[scene_id:")  # breakpoint before the tail


def test_anthropic_mid_conversation_system_only_on_allow_listed_models_and_legal_positions() -> None:
    def history() -> History:
        h = History()
        h.user(T0, "10002", "hi")
        h.event(T0 + SEC, "member_joined", "10009 join 1048877509 on 09:00 by self")
        h.assistant(T0 + 2 * SEC, "welcome")
        h.user(T0 + 3 * SEC, "10009", "thanks")
        return h

    allowed = request_for_next(history(), T0 + 4 * SEC, provider="anthropic", model="claude-opus-4-8")
    roles = [m["role"] for m in allowed.request["messages"]]
    assert roles == ["user", "system", "assistant", "user"]
    assert allowed.state_rendering == "system"
    other = request_for_next(history(), T0 + 4 * SEC, provider="anthropic", model="claude-sonnet-5")
    assert [m["role"] for m in other.request["messages"]] == ["user", "assistant", "user"]


@pytest.mark.parametrize(("model", "mid_system"), [
    ("claude-opus-4-8", True), ("claude-fable-5-1", True), ("Claude-Mythos-5", True),  # the allow list
    ("claude-opus-4-8-20260528", False), ("claude-opus-4-80", False), ("claude-sonnet-5", False),  # not on it
])
def test_anthropic_renderer_profile_and_validator_share_one_mid_system_list(model: str, mid_system: bool) -> None:
    """The renderer used regex prefixes of its own (^claude-opus-4-8), the validator the documented ids: a longer id
    got a mid-conversation system message that its own validator — and the API — refuse."""
    h = History()
    h.user(T0, "10002", "hi")
    h.event(T0 + SEC, "member_joined", "10009 join 1048877509 on 09:00 by self")
    request = request_for_next(h, T0 + 2 * SEC, provider="anthropic", model=model)
    assert request.verdict.ok, request.verdict.message
    assert ("system" in [m["role"] for m in request.request["messages"]]) is mid_system
    assert (resolve_profile("anthropic", model).mid_conversation_system == "system") is mid_system


def test_anthropic_event_followed_by_more_user_traffic_is_downgraded_even_when_allowed() -> None:
    h = History()
    h.user(T0, "10002", "hi")
    h.event(T0 + SEC, "member_joined", "10009 join 1048877509 on 09:00 by self")
    h.user(T0 + 2 * SEC, "10009", "hello all")
    request = request_for_next(h, T0 + 3 * SEC, provider="anthropic", model="claude-opus-4-8")
    assert [m["role"] for m in request.request["messages"]] == ["user"]
    assert request.state_rendering == "user"


def test_gemini_body_system_instruction_function_pairing_and_held_event() -> None:
    h = tool_loop()
    h.assistant(T0 + 9 * SEC, "rain and good air")
    h.user(T0 + 10 * SEC, "10010", "hi all")
    request = request_for_next(h, T0 + 11 * SEC, provider="gemini", model="gemini-2.5-flash")
    body = request.request
    assert body["systemInstruction"]["parts"][0]["text"].startswith("You are a member")
    contents = body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model", "user"]
    assert [next(iter(p)) for p in contents[1]["parts"]] == ["text", "functionCall", "functionCall"]
    assert [p["functionResponse"]["name"] for p in contents[2]["parts"]] == ["weather", "air"]
    # the join that arrived during the tool call comes after the loop's reply, merged with the next user turn
    assert contents[4]["parts"][0]["text"].startswith("[id:e1;user_id:system;")
    assert contents[4]["parts"][1]["text"].startswith("[id:m4;user_id:10010;")


def test_gemini_continuation_request_holds_the_event_and_says_so() -> None:
    request = request_for_next(tool_loop(), T0 + 8 * SEC, provider="gemini", model="gemini-2.5-flash")
    contents = request.request["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert all("functionResponse" in p for p in contents[2]["parts"])
    assert any("held until it ends" in w for w in request.warnings)


def test_mistral_on_vllm_merges_user_turns_keeps_headers_and_uses_9_char_ids() -> None:
    h = History()
    h.user(T0, "10002", "a")
    h.event(T0 + SEC, "member_left", "10008 leave 1048877509 on 09:00 by 10001")
    h.user(T0 + 2 * SEC, "10003", "b")
    h.assistant(T0 + 3 * SEC, "", calls=[("call_abcdefghijk", "weather")])
    h.result(T0 + 4 * SEC, "call_abcdefghijk", "rain")
    h.assistant(T0 + 5 * SEC, "it rains")
    h.user(T0 + 6 * SEC, "10002", "c")
    request = request_for_next(h, T0 + 7 * SEC, provider="vllm", model="mistralai/Mistral-7B-Instruct-v0.3")
    messages = request.request["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    lines = messages[1]["content"].split("\n")
    assert lines[0].startswith("[id:m1;user_id:10002;") and lines[1].startswith("[id:e1;user_id:system;")
    assert lines[2].startswith("[id:m2;user_id:10003;")
    call_id = messages[2]["tool_calls"][0]["id"]
    assert len(call_id) == 9 and call_id.isalnum() and messages[3]["tool_call_id"] == call_id
    assert call_id == short_id("call_abcdefghijk")


def test_llama3_splits_parallel_tool_calls() -> None:
    request = request_for_next(tool_loop(), T0 + 8 * SEC, provider="ollama", model="llama3.2")
    roles = [m["role"] for m in request.request["messages"]]
    # the bot's text first, in a turn of its own: the template renders only the call of a tool-call message
    assert roles == ["system", "user", "assistant", "assistant", "tool", "assistant", "tool", "user"]
    assert request.request["messages"][2]["content"].endswith("let me check")
    assert all(len(m.get("tool_calls", [])) <= 1 for m in request.request["messages"])


def test_qwen3_sends_empty_string_not_null_content() -> None:
    h = History()
    h.user(T0, "10002", "q")
    h.assistant(T0 + SEC, "", calls=[("call_1", "weather")])
    h.result(T0 + 2 * SEC, "call_1", "ok")
    request = request_for_next(h, T0 + 3 * SEC, provider="vllm", model="Qwen/Qwen3-0.6B")
    assert request.request["messages"][2]["content"] == ""
    openai = request_for_next(h, T0 + 3 * SEC, provider="openai")
    assert openai.request["messages"][2]["content"] is None


def test_template_family_table() -> None:
    assert template_family("mistralai/Mistral-7B-Instruct-v0.3") == "mistral"
    assert template_family("mixtral:8x7b") == "mixtral"
    assert template_family("google/gemma-3-1b-it") == "gemma"
    assert template_family("meta-llama/Llama-3.1-8B-Instruct") == "llama3"
    assert template_family("Qwen/Qwen2.5-7B-Instruct") == "qwen2.5"
    assert template_family("qwen3:0.6b") == "qwen3"
    assert template_family("mistral:7b") == "mistral"
    assert template_family("Qwen/Qwen3.5-4B") == "qwen3.5"
    assert template_family("deepseek-r1:7b") == "deepseek"
    assert template_family("some-unknown-model") is None
    assert resolve_profile("vllm", "Qwen/Qwen3.5-4B").validator == "served:qwen3.5"
    assert resolve_profile("ollama", "mistral-nemo").tool_call_id == "alnum9"


def test_local_opt_in_to_mid_conversation_system_per_model() -> None:
    overrides: dict[str, Any] = {"models": {"(?i)llama": {"mid_conversation_system": "system"}}}
    assert resolve_profile("vllm", "meta-llama/Llama-3.1-8B-Instruct", overrides).mid_conversation_system == "system"
    assert resolve_profile("vllm", "Qwen/Qwen3-0.6B", overrides).mid_conversation_system == "none"
    # a template that rejects system after index 0 never gets it, whatever the config says
    assert resolve_profile("vllm", "mistralai/Mistral-7B-Instruct-v0.3", {"mid_conversation_system": "system"}).mid_conversation_system == "none"


def test_every_builtin_profile_is_registered() -> None:
    assert {"openai", "openai-reasoning", "openai-compatible", "deepseek", "vllm", "ollama", "anthropic", "gemini"} <= set(PROFILES)

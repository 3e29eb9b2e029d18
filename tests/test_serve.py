"""``zhin serve``: the real ``openai`` client and plain HTTP against the loopback conformance server.

Every test starts its own server on a free port (port 0) and shuts it down when it ends, so the file runs under
pytest-xdist. All requests go to 127.0.0.1; clients ignore proxy variables (``trust_env=False``).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import openai
import pytest
from conftest import clean_env, default_sigint

from zhin_cli.cache import PrefixCache, PrefixPlan
from zhin_cli.core.errors import UsageError
from zhin_cli.core.tokens import TokenCounter
from zhin_cli.pipeline.providers import PROFILES, CacheRules, Capabilities, register_profile
from zhin_cli.pipeline.validate import VALIDATORS, Verdict, register_validator
from zhin_cli.tools.serve.server import make_server, running_server

TIMEOUT = 20.0
MISSING_RESULT = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
    "The following tool_call_ids did not have response messages: call_1"
)
COUNTER = TokenCounter("o200k_base")  # gpt-4o's encoding, and the server's choice for Claude


def long_text(tokens: int, tag: str = "rule") -> str:
    """Plain text of at least ``tokens`` o200k tokens (no characters JSON would escape)."""
    words: list[str] = []
    index = 0
    while COUNTER.count(" ".join(words)) < tokens:
        words += [f"{tag} {index}: greet member {index} politely and keep answers short."] * 10
        index += 1
    return " ".join(words)


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0, timeout=TIMEOUT,
                         http_client=openai.DefaultHttpxClient(trust_env=False, timeout=TIMEOUT))


def http() -> httpx2.Client:
    return httpx2.Client(trust_env=False, timeout=TIMEOUT)


@pytest.fixture
def openai_server() -> Iterator[tuple[str, openai.OpenAI]]:
    with running_server(provider="openai", port=0) as (base_url, _server), client(base_url) as api:
        assert base_url.startswith("http://127.0.0.1:")
        yield base_url, api


# --- OpenAI Chat Completions through the real client ----------------------------------------------------------


def test_valid_request_gets_a_chat_completion(openai_server: tuple[str, openai.OpenAI]) -> None:
    _, api = openai_server
    messages: list[Any] = [{"role": "system", "content": "You are Zhin."}, {"role": "user", "content": "[id:m1] hi"}]
    reply = api.chat.completions.create(model="gpt-4o", messages=messages)
    assert reply.object == "chat.completion"
    assert reply.model == "gpt-4o"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.role == "assistant"
    assert re.fullmatch(r"ok [0-9a-f]{8}", reply.choices[0].message.content or "")
    usage = reply.usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 0
    again = api.chat.completions.create(model="gpt-4o", messages=messages)
    assert again.choices[0].message.content == reply.choices[0].message.content  # deterministic
    other = api.chat.completions.create(model="gpt-4o", messages=[*messages, {"role": "user", "content": "more"}])
    assert other.choices[0].message.content != reply.choices[0].message.content


def test_state_change_between_tool_call_and_result_is_openais_400(openai_server: tuple[str, openai.OpenAI]) -> None:
    _, api = openai_server
    messages: list[Any] = [
        {"role": "system", "content": "You are Zhin."},
        {"role": "user", "content": "[id:m59] 北京天气？"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"北京"}'}}]},
        {"role": "system", "content": '[state change] 10003 changed 10010 role to "member"'},
        {"role": "tool", "tool_call_id": "call_1", "content": "晴 21°C"},
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        api.chat.completions.create(model="gpt-4o", messages=messages)
    error = caught.value
    assert error.status_code == 400
    assert MISSING_RESULT in error.message
    assert error.body == {"message": MISSING_RESULT, "type": "invalid_request_error", "param": "messages.[2].role", "code": None}
    # The same conversation with the state change after the tool result is accepted.
    fixed = [*messages[:3], messages[4], messages[3]]
    assert api.chat.completions.create(model="gpt-4o", messages=fixed).choices[0].message.content


def test_shared_long_prefix_reports_cached_tokens_in_128_steps(openai_server: tuple[str, openai.OpenAI]) -> None:
    _, api = openai_server
    system = long_text(1500)
    shared = COUNTER.count(system)
    assert shared >= 1500
    first = api.chat.completions.create(model="gpt-4o", messages=[{"role": "system", "content": system},
                                                                  {"role": "user", "content": "first question"}])
    second = api.chat.completions.create(model="gpt-4o", messages=[{"role": "system", "content": system},
                                                                   {"role": "user", "content": "another one"}])
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0  # nothing to share with yet
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached is not None and cached > 0
    assert cached % 128 == 0
    # The requests share the system text plus a few tokens of JSON framing, and nothing of the user turn.
    assert cached <= shared + 32
    assert cached >= shared - 128 - 32
    assert cached < second.usage.prompt_tokens


def test_append_only_history_hits_everything_but_the_new_tail(openai_server: tuple[str, openai.OpenAI]) -> None:
    _, api = openai_server
    history: list[Any] = [{"role": "system", "content": long_text(1200)}, {"role": "user", "content": "[id:m1] 早"}]
    first = api.chat.completions.create(model="gpt-4o", messages=history)
    history += [{"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "[id:m3] 今天吃什么"}]
    second = api.chat.completions.create(model="gpt-4o", messages=history)
    assert first.usage is not None and second.usage is not None and second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached is not None and cached % 128 == 0
    assert first.usage.prompt_tokens - 128 < cached <= first.usage.prompt_tokens


def test_shared_prefix_below_1024_tokens_is_not_cached(openai_server: tuple[str, openai.OpenAI]) -> None:
    _, api = openai_server
    system = long_text(600)
    assert COUNTER.count(system) < 1024 - 64
    for question in ("one", "two", "three"):
        reply = api.chat.completions.create(model="gpt-4o", messages=[{"role": "system", "content": system},
                                                                      {"role": "user", "content": question}])
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        assert reply.usage.prompt_tokens_details.cached_tokens == 0


def test_cache_is_per_model(openai_server: tuple[str, openai.OpenAI]) -> None:
    _, api = openai_server
    messages: list[Any] = [{"role": "system", "content": long_text(1300)}, {"role": "user", "content": "x"}]
    api.chat.completions.create(model="gpt-4o", messages=messages)
    other = api.chat.completions.create(model="gpt-4.1", messages=messages)
    assert other.usage is not None and other.usage.prompt_tokens_details is not None
    assert other.usage.prompt_tokens_details.cached_tokens == 0


def test_changing_the_tools_invalidates_the_prefix(openai_server: tuple[str, openai.OpenAI]) -> None:
    _, api = openai_server
    messages: list[Any] = [{"role": "system", "content": long_text(1300)}, {"role": "user", "content": "x"}]

    def tool(name: str) -> Any:
        return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}

    api.chat.completions.create(model="gpt-4o", messages=messages, tools=[tool("weather")])
    changed = api.chat.completions.create(model="gpt-4o", messages=messages, tools=[tool("search_news")])
    same = api.chat.completions.create(model="gpt-4o", messages=messages, tools=[tool("weather")])
    assert changed.usage is not None and changed.usage.prompt_tokens_details is not None
    assert same.usage is not None and same.usage.prompt_tokens_details is not None
    assert changed.usage.prompt_tokens_details.cached_tokens == 0
    assert (same.usage.prompt_tokens_details.cached_tokens or 0) >= 1024


def test_streaming_with_usage(openai_server: tuple[str, openai.OpenAI]) -> None:
    _, api = openai_server
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    text, usage = "", None
    stream = api.chat.completions.create(model="gpt-4o", messages=messages, stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage is not None:
            usage = chunk.usage
    assert text == api.chat.completions.create(model="gpt-4o", messages=messages, stream=False).choices[0].message.content
    assert usage is not None and usage.prompt_tokens > 0 and usage.prompt_tokens_details is not None


def test_deepseek_profile_uses_its_own_cache_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    validator = PROFILES["deepseek"].validator
    if validator not in VALIDATORS:  # test-local stand-in until DeepSeek's own validator is registered
        monkeypatch.setitem(VALIDATORS, validator, VALIDATORS["openai-chat"])
    system = long_text(300)
    with running_server(provider="deepseek") as (base_url, _), client(base_url) as api:
        api.chat.completions.create(model="deepseek-chat", messages=[{"role": "system", "content": system},
                                                                    {"role": "user", "content": "a"}])
        second = api.chat.completions.create(model="deepseek-chat", messages=[{"role": "system", "content": system},
                                                                             {"role": "user", "content": "b"}])
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached is not None and cached >= 256 and cached % 64 == 0  # min 64, step 64: below OpenAI's 1024


def test_profile_without_caching_never_hits() -> None:
    messages: list[Any] = [{"role": "system", "content": long_text(1300)}, {"role": "user", "content": "a"}]
    with running_server(provider="openai-compatible") as (base_url, _), client(base_url) as api:
        api.chat.completions.create(model="llama-3.3-70b", messages=messages)
        again = api.chat.completions.create(model="llama-3.3-70b", messages=messages)
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == 0


def test_concurrent_requests(openai_server: tuple[str, openai.OpenAI]) -> None:
    _, api = openai_server
    results: list[str] = []
    errors: list[BaseException] = []

    def ask(index: int) -> None:
        try:
            reply = api.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": f"q{index}"}])
            results.append(reply.choices[0].message.content or "")
        except BaseException as error:  # noqa: BLE001 — surfaced below
            errors.append(error)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert not errors and len(set(results)) == 8


# --- OpenAI-shaped errors over plain HTTP -------------------------------------------------------------------


def test_malformed_json_is_a_400_in_openais_envelope(openai_server: tuple[str, openai.OpenAI]) -> None:
    base_url, _ = openai_server
    with http() as web:
        response = web.post(f"{base_url}/chat/completions", content=b'{"model": "gpt-4o", "messages": [',
                            headers={"Content-Type": "application/json"})
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and "not valid JSON" in error["message"]
        assert web.post(f"{base_url}/chat/completions", json=[1, 2]).status_code == 400


def test_missing_model_unknown_path_and_get(openai_server: tuple[str, openai.OpenAI]) -> None:
    base_url, _ = openai_server
    with http() as web:
        missing = web.post(f"{base_url}/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        assert missing.status_code == 400 and missing.json()["error"]["message"] == "you must provide a model parameter"
        unknown = web.post(f"{base_url}/completions", json={"model": "gpt-4o"})
        assert unknown.status_code == 404 and unknown.json()["error"]["message"] == "Invalid URL (POST /v1/completions)"
        assert web.get(f"{base_url}/chat/completions").status_code == 404


def test_chunked_request_body(openai_server: tuple[str, openai.OpenAI]) -> None:
    base_url, _ = openai_server
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "chunked"}]}).encode()
    with http() as web:
        response = web.post(f"{base_url}/chat/completions", content=iter([body[:10], body[10:]]),
                            headers={"Content-Type": "application/json"})
    assert response.status_code == 200 and response.json()["object"] == "chat.completion"


def test_validator_rejection_keeps_the_validators_status_and_body(openai_server: tuple[str, openai.OpenAI]) -> None:
    base_url, _ = openai_server
    with http() as web:
        response = web.post(f"{base_url}/chat/completions", json={"model": "gpt-4o", "messages": []})
    assert response.status_code == 400
    assert response.json() == {"error": {"message": "[] is too short - 'messages'", "type": "invalid_request_error",
                                         "param": "messages", "code": None}}


# --- Anthropic Messages over plain HTTP ------------------------------------------------------------------------


TOOL_USE_UNANSWERED = "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_A"


def _stand_in_anthropic_validator(body: dict[str, Any], model: str) -> Verdict:
    """Test-only stand-in until zhin_cli.pipeline.validate has an ``anthropic-messages`` validator: one [R] rule (§2.4)."""
    messages = body.get("messages") or []
    for index, message in enumerate(messages[:-1]):
        content = message.get("content")
        ids = [b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"] if isinstance(content, list) else []
        following = messages[index + 1].get("content")
        answered = {b.get("tool_use_id") for b in following if isinstance(b, dict) and b.get("type") == "tool_result"} \
            if isinstance(following, list) else set()
        missing = [i for i in ids if i not in answered]
        if missing:
            text = (f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.")
            return Verdict(ok=False, status=400, message=text, type="invalid_request_error",
                           envelope={"type": "error", "error": {"type": "invalid_request_error", "message": text}})
    return Verdict(ok=True)


@pytest.fixture
def anthropic_profile() -> Iterator[None]:
    """The ``anthropic`` profile and ``anthropic-messages`` validator, registered only if missing (and removed after)."""
    added_profile = "anthropic" not in PROFILES
    if added_profile:
        register_profile(Capabilities(name="anthropic", wire="anthropic-messages", validator="anthropic-messages",
                                      mid_conversation_system="none",
                                      cache=CacheRules(mechanism="explicit", min_tokens=1024, step_tokens=1, max_breakpoints=4)))
    added_validator = "anthropic-messages" not in VALIDATORS
    if added_validator:
        register_validator("anthropic-messages")(_stand_in_anthropic_validator)
    try:
        yield
    finally:
        if added_validator:
            VALIDATORS.pop("anthropic-messages", None)
        if added_profile:
            PROFILES.pop("anthropic", None)


@pytest.fixture
def messages_api(anthropic_profile: None) -> Iterator[Callable[..., httpx2.Response]]:
    with running_server(provider="openai") as (base_url, _), http() as web:
        def post(body: Any, **kwargs: Any) -> httpx2.Response:
            if isinstance(body, bytes):
                return web.post(f"{base_url}/messages", content=body, headers={"Content-Type": "application/json"}, **kwargs)
            return web.post(f"{base_url}/messages", json=body, headers={"anthropic-version": "2023-06-01", "x-api-key": "test-key"},
                            **kwargs)

        yield post


def user(text: str, cache: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if cache:
        block["cache_control"] = {"type": "ephemeral"}
    return {"role": "user", "content": [block]}


def test_messages_answers_an_anthropic_message(messages_api: Callable[..., httpx2.Response]) -> None:
    response = messages_api({"model": "claude-sonnet-4-5", "max_tokens": 256, "system": "You are Zhin.", "messages": [user("hi")]})
    assert response.status_code == 200, response.text
    message = response.json()
    assert message["type"] == "message" and message["role"] == "assistant" and message["model"] == "claude-sonnet-4-5"
    assert message["id"].startswith("msg_") and message["stop_reason"] == "end_turn"
    assert re.fullmatch(r"ok [0-9a-f]{8}", message["content"][0]["text"])
    usage = message["usage"]
    assert set(usage) >= {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"}
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["cache_creation_input_tokens"] == 0 and usage["cache_read_input_tokens"] == 0


def test_messages_cache_write_then_read_up_to_the_breakpoint(messages_api: Callable[..., httpx2.Response]) -> None:
    system = [{"type": "text", "text": long_text(1500), "cache_control": {"type": "ephemeral"}}]
    first = messages_api({"model": "claude-sonnet-4-5", "max_tokens": 64, "system": system, "messages": [user("first")]}).json()["usage"]
    second = messages_api({"model": "claude-sonnet-4-5", "max_tokens": 64, "system": system, "messages": [user("second, longer")]}).json()["usage"]
    assert first["cache_read_input_tokens"] == 0
    assert first["cache_creation_input_tokens"] >= 1500
    assert first["cache_creation"] == {"ephemeral_5m_input_tokens": first["cache_creation_input_tokens"], "ephemeral_1h_input_tokens": 0}
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]  # exactly the prefix up to the breakpoint
    assert second["cache_creation_input_tokens"] == 0
    assert 0 < second["input_tokens"] < 32  # only the user turn after the breakpoint


def test_messages_moving_breakpoint_reads_the_earlier_entry(messages_api: Callable[..., httpx2.Response]) -> None:
    history = [user(long_text(1300, "line"), cache=True)]
    first = messages_api({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": history}).json()["usage"]
    plain_history = [user(long_text(1300, "line"))]  # the breakpoint moves on: the marker itself is not part of the prefix
    history = [*plain_history, {"role": "assistant", "content": "ok"}, user("[id:m3] 然后呢", cache=True)]
    second = messages_api({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": history}).json()["usage"]
    assert first["cache_creation_input_tokens"] >= 1300 and first["input_tokens"] == 0
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert 0 < second["cache_creation_input_tokens"] < 64  # the two new turns are written
    assert second["input_tokens"] == 0  # nothing after the last breakpoint


def test_messages_partial_match_inside_a_block_is_no_hit(messages_api: Callable[..., httpx2.Response]) -> None:
    text = long_text(1500)
    first = messages_api({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [user(text, cache=True)]}).json()["usage"]
    second = messages_api({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [user(text + " and more", cache=True)]}).json()["usage"]
    assert first["cache_creation_input_tokens"] > 0
    assert second["cache_read_input_tokens"] == 0 and second["cache_creation_input_tokens"] > 1500


def test_messages_below_minimum_or_without_breakpoint_caches_nothing(messages_api: Callable[..., httpx2.Response]) -> None:
    small = [{"type": "text", "text": long_text(300), "cache_control": {"type": "ephemeral"}}]
    big = long_text(1500)
    for _ in range(2):
        usage = messages_api({"model": "claude-sonnet-4-5", "max_tokens": 64, "system": small, "messages": [user("x")]}).json()["usage"]
        assert usage["cache_creation_input_tokens"] == 0 and usage["cache_read_input_tokens"] == 0
        usage = messages_api({"model": "claude-sonnet-4-5", "max_tokens": 64, "system": big, "messages": [user("x")]}).json()["usage"]
        assert usage["cache_creation_input_tokens"] == 0 and usage["cache_read_input_tokens"] == 0
        assert usage["input_tokens"] >= 1500


def test_messages_top_level_cache_control_marks_the_last_block(messages_api: Callable[..., httpx2.Response]) -> None:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "cache_control": {"type": "ephemeral", "ttl": "1h"},
            "system": long_text(1200), "messages": [user("x")]}
    first = messages_api(body).json()["usage"]
    second = messages_api(body).json()["usage"]
    assert first["input_tokens"] == 0 and first["cache_creation"]["ephemeral_1h_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"] and second["cache_creation_input_tokens"] == 0


def test_messages_validator_rejection(messages_api: Callable[..., httpx2.Response]) -> None:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [
        user("天气？"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_A", "name": "weather", "input": {"city": "北京"}}]},
        user("[state change] 10010 joined"),
    ]}
    response = messages_api(body)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert TOOL_USE_UNANSWERED in error["error"]["message"]


def test_messages_malformed_json_and_missing_model(messages_api: Callable[..., httpx2.Response]) -> None:
    broken = messages_api(b"{not json")
    assert broken.status_code == 400
    assert broken.json()["type"] == "error" and broken.json()["error"]["type"] == "invalid_request_error"
    missing = messages_api({"max_tokens": 64, "messages": [user("x")]})
    assert missing.status_code == 400 and missing.json()["error"]["message"] == "model: Field required"


def test_messages_stream_events(messages_api: Callable[..., httpx2.Response]) -> None:
    response = messages_api({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": True, "messages": [user("hi")]})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [line[len("event: "):] for line in response.text.splitlines() if line.startswith("event: ")]
    assert events == ["message_start", "content_block_start", "ping", "content_block_delta", "content_block_stop",
                      "message_delta", "message_stop"]
    data = [json.loads(line[len("data: "):]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert set(data[0]["message"]["usage"]) >= {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"}
    assert data[3]["delta"]["text"].startswith("ok ")


def test_messages_without_an_anthropic_profile_is_404(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(PROFILES, "anthropic", raising=False)
    with running_server() as (base_url, _), http() as web:
        response = web.post(f"{base_url}/messages", json={"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [user("x")]})
    assert response.status_code == 404
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "not_found_error"
    assert "no provider profile for anthropic-messages is registered" in error["error"]["message"]


def test_profile_whose_validator_is_missing_is_501(monkeypatch: pytest.MonkeyPatch, anthropic_profile: None) -> None:
    monkeypatch.delitem(VALIDATORS, "anthropic-messages")
    with running_server() as (base_url, _), http() as web:
        response = web.post(f"{base_url}/messages", json={"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [user("x")]})
    assert response.status_code == 501
    assert "validator 'anthropic-messages'" in response.json()["error"]["message"]


# --- the cache on its own ---------------------------------------------------------------------------------------


def test_prefix_store_is_bounded() -> None:
    cache = PrefixCache(size=4)
    rules = CacheRules(mechanism="automatic", min_tokens=16, step_tokens=8)
    shared = PrefixPlan([long_text(40)])
    assert cache.account("k", shared, COUNTER, rules).read == 0
    for index in range(4):  # push the shared request out of a 4-entry store
        cache.account("k", PrefixPlan([f"unrelated {index} " * 20]), COUNTER, rules)
    assert cache.account("k", shared, COUNTER, rules).read == 0
    hit = cache.account("k", shared, COUNTER, rules)
    assert hit.read > 0 and hit.read % 8 == 0


# --- starting it -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com", "::"])
def test_non_loopback_hosts_are_refused(host: str) -> None:
    with pytest.raises(UsageError, match="not a loopback address"):
        make_server(host=host)


def test_loopback_spellings_are_accepted() -> None:
    for host in ("localhost", "127.0.0.1"):
        server = make_server(host=host)
        try:
            assert server.base_url.startswith("http://127.0.0.1:")
        finally:
            server.server_close()


def test_provider_must_exist_and_speak_the_openai_wire() -> None:
    with pytest.raises(UsageError, match="unknown provider 'nope'"):
        make_server(provider="nope")
    with pytest.raises(UsageError, match="needs an openai-chat profile"):
        make_server(provider="anthropic" if "anthropic" in PROFILES else "gemini")


def test_cli_refuses_a_public_host(zhin: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    proc = zhin("serve", "--host", "0.0.0.0")
    assert proc.returncode == 2
    assert "not a loopback address" in proc.stderr


def test_cli_serves_until_ctrl_c() -> None:
    process = subprocess.Popen([sys.executable, "-m", "zhin_cli", "serve", "--port", "0"], env=clean_env(),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=default_sigint)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+/v1)", line)
        assert match, line
        with client(match.group(1)) as api:
            reply = api.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert (reply.choices[0].message.content or "").startswith("ok ")
        assert "POST /v1/chat/completions 200" in process.stderr.readline()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_cli_port_in_use_cannot_run(zhin: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    with running_server() as (_, server):
        proc = zhin("serve", "--port", server.server_address[1], timeout=60)
    assert proc.returncode == 3
    assert "cannot listen on 127.0.0.1" in proc.stderr

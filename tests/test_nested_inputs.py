"""Deeply nested JSON hidden inside *strings* of a session (issue 14 §3, "never a traceback").

The JSONL reader bounds the nesting of each line, but two strings are parsed as JSON again later:

* an assistant ``toolCall``'s ``arguments`` string, parsed by the Anthropic and Gemini renderers (``tool_use.input``
  and ``functionCall.args`` must be objects). A string json.loads cannot take (not JSON, or nested past the
  recursion limit) is kept verbatim as ``{"arguments": "<the string>"}`` — the non-JSON-arguments path; OpenAI
  forwards the string as is.
* a legacy ``[User]{…}`` text prefix (ADR 0041 §7). An object nested too deeply to parse is not a legacy header:
  the text stays untouched and no actor is taken from it, like any other malformed prefix.

Each run is the CLI as a user runs it; each has a negative control (a shallow value that is parsed).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.store import legacy

Run = Callable[..., subprocess.CompletedProcess[str]]
T0 = 1_700_000_000_000
DEEP = 100_000
SESSION = {"type": "session", "session_id": "test:1:group:42#1", "session_key": "test:1:group:42",
           "timezone": "UTC", "bot": {"user_id": "1", "name": "Bot"}, "scene": {"scene_id": "42", "scene_type": "group"}}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def tool_session(path: Path, arguments: str) -> Path:
    lines: list[dict[str, Any]] = [
        SESSION,
        {"type": "message", "role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": T0 + 1,
         "actor": {"subjectId": "10002", "displayName": "Alice", "roles": [], "scope": "group"}, "id": 1},
        {"type": "message", "role": "assistant", "timestamp": T0 + 2, "provider": "openai", "model": "gpt-4o",
         "stopReason": "toolCalls", "id": 2,
         "content": [{"type": "toolCall", "id": "call_1", "name": "weather", "arguments": arguments}]},
        {"type": "message", "role": "toolResult", "toolCallId": "call_1", "toolName": "weather", "timestamp": T0 + 3,
         "content": [{"type": "text", "text": "sunny"}], "isError": False, "id": 3},
        {"type": "message", "role": "user", "content": [{"type": "text", "text": "thanks"}], "timestamp": T0 + 4,
         "actor": {"subjectId": "10002", "displayName": "Alice", "roles": [], "scope": "group"}, "id": 4},
        {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "ok"}], "timestamp": T0 + 5,
         "provider": "openai", "model": "gpt-4o", "stopReason": "stop", "id": 5},
    ]
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def legacy_session(path: Path, text: str) -> Path:
    lines: list[dict[str, Any]] = [
        SESSION,
        {"type": "message", "role": "user", "content": [{"type": "text", "text": text}], "timestamp": T0 + 1, "id": 1},
        {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "ok"}], "timestamp": T0 + 2,
         "provider": "openai", "model": "gpt-4o", "stopReason": "stop", "id": 2},
    ]
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def assert_clean(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 0, result.stderr[-2000:]


def tool_input(body: dict[str, Any], provider: str) -> Any:
    """The tool call's arguments as the request carries them."""
    text = json.dumps(body)
    if provider == "anthropic":
        blocks = [b for m in body["messages"] for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        assert len(blocks) == 1, text[:2000]
        return blocks[0]["input"]
    if provider == "gemini":
        calls = [p["functionCall"] for c in body["contents"] for p in c["parts"] if "functionCall" in p]
        assert len(calls) == 1, text[:2000]
        return calls[0]["args"]
    calls = [c for m in body["messages"] for c in m.get("tool_calls") or []]
    assert len(calls) == 1, text[:2000]
    return calls[0]["function"]["arguments"]


def trace_body(zhin: Run, path: Path, provider: str) -> dict[str, Any]:
    result = zhin("trace", path, "--provider", provider, "--json")
    assert_clean(result)
    body: dict[str, Any] = json.loads(result.stdout)["requests"][-1]["request"]
    return body


@pytest.mark.parametrize("provider", ["anthropic", "gemini", "openai"])
def test_tool_arguments_nested_past_the_recursion_limit_are_kept_verbatim(zhin: Run, tmp_path: Path, provider: str) -> None:
    deep = nested(DEEP)
    body = trace_body(zhin, tool_session(tmp_path / "deep.jsonl", deep), provider)
    value = tool_input(body, provider)
    assert value == (deep if provider == "openai" else {"arguments": deep})


@pytest.mark.parametrize("provider", ["anthropic", "gemini", "openai"])
def test_shallow_tool_arguments_are_still_parsed(zhin: Run, tmp_path: Path, provider: str) -> None:
    # negative control: a JSON object string becomes the object, a nested list is wrapped as a value
    body = trace_body(zhin, tool_session(tmp_path / "ok.jsonl", '{"city": "上海"}'), provider)
    assert tool_input(body, provider) == ('{"city": "上海"}' if provider == "openai" else {"city": "上海"})
    body = trace_body(zhin, tool_session(tmp_path / "list.jsonl", nested(20)), provider)
    assert tool_input(body, provider) == (nested(20) if provider == "openai" else {"value": json.loads(nested(20))})


def test_a_legacy_user_prefix_nested_too_deeply_is_not_a_header(zhin: Run, tmp_path: Path) -> None:
    text = '[User]{"a":' + nested(DEEP) + "} hello"
    result = zhin("trace", legacy_session(tmp_path / "deep.jsonl", text), "--provider", "openai", "--json")
    assert_clean(result)
    assert json.dumps(text)[1:-1] in result.stdout  # the text reaches the request untouched
    stripped, actor = legacy.strip_text_prefix(text)
    assert (stripped, actor) == (text, None)
    # an id before the deep value does not make it a header either (it is not parseable JSON)
    with_id = '[User]{"id":"10007","a":' + nested(DEEP) + "} hello"
    assert legacy.strip_text_prefix(with_id) == (with_id, None)


def test_a_shallow_legacy_user_prefix_is_still_a_header(zhin: Run, tmp_path: Path) -> None:
    # negative control: the same shape, shallow, is stripped and becomes the sender
    text = '[User]{"id":"10007","name":"Dave","a":' + nested(5) + "} hello"
    stripped, actor = legacy.strip_text_prefix(text)
    assert stripped == "hello"
    assert actor is not None and actor.subject_id == "10007"
    result = zhin("trace", legacy_session(tmp_path / "ok.jsonl", text), "--provider", "openai", "--json")
    assert_clean(result)
    assert "[User]" not in result.stdout

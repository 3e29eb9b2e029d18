"""The wire TypedDicts (issue 32, Build 4) describe what zhin really sends: every body each built-in provider renders,
and every usage object ``WireFormat.usage`` writes, conforms to its TypedDict — no key it does not declare, every
required key present, every value of the declared type — and the provider overrides' TypedDict is the loader's
``OVERRIDABLE`` set. A conformance checker with its own negative controls, so the types cannot drift silently."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest
from builders import SEC, T0, History, request_for_next

from zhin_cli.wire import types as wire_types
from zhin_cli.wire.types import (
    AnthropicBody,
    AnthropicUsage,
    GeminiBody,
    GeminiUsage,
    OpenAIChatBody,
    OpenAIUsage,
    ProviderOverrides,
)


def problems(value: Any, kind: Any, where: str = "body") -> list[str]:
    """Where ``value`` breaks ``kind`` (a TypedDict, list[X], a union, a Literal, a plain type or Any)."""
    if kind is Any or kind is object:
        return []
    if is_typeddict(kind):
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        hints = get_type_hints(kind)
        found = [f"{where}.{key}: not declared" for key in value if key not in hints]
        found += [f"{where}.{key}: missing" for key in kind.__required_keys__ if key not in value]
        return found + [p for key in value if key in hints for p in problems(value[key], hints[key], f"{where}.{key}")]
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        answers = [problems(value, option, where) for option in get_args(kind)]
        return [] if any(not a for a in answers) else min(answers, key=len)
    if origin is Literal:
        return [] if value in get_args(kind) else [f"{where}: {value!r} not in {get_args(kind)}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        return [p for i, item in enumerate(value) for p in problems(item, get_args(kind)[0], f"{where}[{i}]")]
    if origin is dict:
        return [] if isinstance(value, dict) else [f"{where}: not an object"]
    if kind is type(None):
        return [] if value is None else [f"{where}: not null"]
    if kind is int and isinstance(value, bool):
        return [f"{where}: a boolean, not an integer"]
    return [] if isinstance(value, kind) else [f"{where}: {type(value).__name__}, not {kind.__name__}"]


def test_the_checker_finds_an_undeclared_key_a_missing_one_and_a_wrong_type() -> None:  # negative controls
    good = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert problems(good, OpenAIChatBody) == []
    assert problems({**good, "temprature": 1}, OpenAIChatBody) == ["body.temprature: not declared"]
    assert problems({"model": "m"}, OpenAIChatBody) == ["body.messages: missing"]
    assert problems({"model": "m", "messages": [{"role": "user", "content": 3}]}, OpenAIChatBody)
    assert problems({"contents": [{"role": "assistant", "parts": []}]}, GeminiBody)  # Gemini says "model"
    assert problems({"prompt_tokens": True, "completion_tokens": 1, "total_tokens": 1}, OpenAIUsage)


def tool_history() -> History:
    h = History()
    h.user(T0, "10007", "@小知 今晚下雨吗", display_name="小明")
    h.assistant(T0 + 2 * SEC, "", calls=[("call_1", "weather")])
    h.result(T0 + 6 * SEC, "call_1", "小雨")
    h.event(T0 + 4 * SEC, "member_joined", "10010 join 1048877509 on 09:00 by 10003")
    h.assistant(T0 + 7 * SEC, "今晚有小雨，记得带伞")
    h.user(T0 + 8 * SEC, "10010", "大家好")
    return h


BODY_TYPES = {"openai-chat": OpenAIChatBody, "anthropic-messages": AnthropicBody, "gemini-generate": GeminiBody}
CASES = [("openai", "gpt-4o"), ("openai", "o1-mini"), ("openai-compatible", "x"), ("deepseek", "deepseek-chat"),
         ("deepseek", "deepseek-reasoner-r1"), ("anthropic", "claude-sonnet-5"), ("anthropic", "claude-opus-4-8"),
         ("gemini", "gemini-2.5-flash"), ("vllm", "mistralai/Mistral-7B-Instruct-v0.3"), ("ollama", "gemma3:1b"),
         ("llama-cpp", "qwen3:0.6b")]


@pytest.mark.parametrize(("provider", "model"), CASES)
def test_every_rendered_body_conforms_to_its_wire_type(provider: str, model: str) -> None:
    from zhin_cli.pipeline.providers import provider as spec_of

    request = request_for_next(tool_history(), T0 + 9 * SEC, provider=provider, model=model)
    assert problems(request.request, BODY_TYPES[spec_of(provider).wire]) == []


class _Outcome:
    prompt_tokens, read, written, written_by_ttl, uncached = 1200, 1024, 100, {"5m": 100}, 76


@pytest.mark.parametrize(("wire", "kind"), [("openai-chat", OpenAIUsage), ("anthropic-messages", AnthropicUsage),
                                            ("gemini-generate", GeminiUsage)])
def test_every_usage_object_conforms_to_its_type(wire: str, kind: Any) -> None:
    from zhin_cli.wire import wire_for

    usage = wire_for(wire).usage(_Outcome(), 7)
    assert problems(usage, kind) == []
    other = OpenAIUsage if kind is not OpenAIUsage else AnthropicUsage
    assert problems(usage, other) != []  # negative control: another API's usage shape does not fit


def test_provider_overrides_are_the_overridable_keys_and_models() -> None:
    from zhin_cli.pipeline.providers.spec import BOOLEAN_OVERRIDES, OVERRIDABLE, OVERRIDE_VALUES

    hints = get_type_hints(ProviderOverrides)
    assert set(hints) == OVERRIDABLE | {"models"}
    assert {key for key, kind in hints.items() if kind is bool} == BOOLEAN_OVERRIDES
    assert {key: get_args(hints[key]) for key in OVERRIDE_VALUES} == OVERRIDE_VALUES
    assert problems({"prefill": False, "models": {"^o": {"mid_conversation_system": "developer"}}}, ProviderOverrides) == []
    assert problems({"prefill": "no"}, ProviderOverrides) != []  # negative control


def test_the_module_exports_the_three_bodies_and_their_union() -> None:
    assert set(get_args(wire_types.WireBody)) == {OpenAIChatBody, AnthropicBody, GeminiBody}
    assert typing.get_origin(wire_types.WireUsage) in (Union, types.UnionType)

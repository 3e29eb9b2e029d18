"""The wire models (zhin_cli.wire): one per API format, every profile points at one, the one prompt_tokens
definition computed by hand per format, the usage shape read back by its normaliser, and what the cache sees of
a body (heads break a prefix, cache markers do not)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zhin_cli.cache import CacheOutcome, plan, shared_tokens
from zhin_cli.cache.usage import normalize_usage
from zhin_cli.core.tokens import counter
from zhin_cli.pipeline.assemble import Assembler
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.providers import PROFILES
from zhin_cli.store import load_session
from zhin_cli.wire import WIRES, prompt_tokens, wire_for

ROOT = Path(__file__).resolve().parent.parent
COUNTER = counter("o200k_base")
COUNT = COUNTER.count


def test_every_profile_has_a_wire_model_and_an_unknown_wire_is_refused() -> None:
    assert {"openai-chat", "anthropic-messages", "gemini-generate"} <= set(WIRES)
    for profile in PROFILES.values():
        assert profile.wire_model is wire_for(profile.wire)
    with pytest.raises(KeyError, match="unknown wire format"):
        wire_for("openai-responses")


def test_openai_prompt_tokens_by_hand() -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "system", "content": "你好，世界"},
                                            {"role": "user", "content": "hello there", "name": "ann"},
                                            {"role": "assistant", "content": None,
                                             "tool_calls": [{"id": "c1", "type": "function",
                                                             "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                                            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
            "tools": [{"type": "function", "function": {"name": "weather"}}]}
    tool = COUNT('{"function":{"name":"weather"},"type":"function"}') + 1
    expected = (tool + COUNT("你好，世界") + 3 + COUNT("hello there") + 3 + 1 + COUNT("") + 3
                + COUNT('weather{"city":"Paris"}') + 1 + COUNT("sunny") + 3 + 3)
    assert prompt_tokens(body, "openai-chat", COUNTER) == expected
    assert plan(body, "openai-chat", COUNTER).prompt_tokens == expected  # the cache's token sequence: same length
    assert prompt_tokens(body, "openai-chat", COUNTER) != COUNT(str(body))  # negative control: not the JSON's tokens


def test_anthropic_prompt_tokens_by_hand_and_markers_are_not_part_of_the_prefix() -> None:
    marked = {"model": "claude-sonnet-5", "max_tokens": 8,
              "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
              "messages": [{"role": "user", "content": [{"type": "text", "text": "one"},
                                                        {"type": "text", "text": "two", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}
    expected = COUNT("be brief") + 3 + COUNT("one") + 3 + COUNT("two") + 1  # no reply priming on this wire
    assert prompt_tokens(marked, "anthropic-messages", COUNTER) == expected
    unmarked = {**marked, "system": [{"type": "text", "text": "be brief"}],
                "messages": [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]}
    a, b = plan(marked, "anthropic-messages", COUNTER), plan(unmarked, "anthropic-messages", COUNTER)
    assert a.tokens == b.tokens and a.digests == b.digests  # moving a breakpoint does not change the prefix
    assert a.breakpoints == [(0, "5m"), (2, "1h")] and b.breakpoints == []


def test_gemini_prompt_tokens_by_hand() -> None:
    body = {"systemInstruction": {"parts": [{"text": "be brief"}]},
            "contents": [{"role": "user", "parts": [{"text": "hi"}]},
                         {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
                         {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"t": 20}}}]}]}
    expected = (COUNT("be brief") + 3 + COUNT("hi") + 3 + COUNT('weather{"args":{"city":"Paris"}}') + 3
                + COUNT('weather{"response":{"t":20}}') + 3 + 3)
    assert prompt_tokens(body, "gemini-generate", COUNTER) == expected


def test_a_changed_role_breaks_the_prefix_at_that_message() -> None:
    system = "a long and stable system prompt " * 20
    base = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "hello"}]}
    downgraded = {"messages": [{"role": "user", "content": system}, {"role": "user", "content": "hello"}]}
    same = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "hello again"}]}
    a = plan(base, "openai-chat", COUNTER)
    assert shared_tokens(a, plan(downgraded, "openai-chat", COUNTER)) == 0  # the role is the first thing hashed
    shared = shared_tokens(a, plan(same, "openai-chat", COUNTER))  # negative control: same roles share the system text
    assert shared >= COUNT(system) + 3


@pytest.mark.parametrize("wire", ["openai-chat", "anthropic-messages", "gemini-generate"])
def test_usage_shape_reads_back_with_its_normaliser(wire: str) -> None:
    model = wire_for(wire)
    outcome = CacheOutcome(prompt_tokens=2000, read=1536, written=100 if wire == "anthropic-messages" else 0,
                           written_by_ttl={"5m": 100} if wire == "anthropic-messages" else {})
    usage = normalize_usage(model.usage_kind, model.usage(outcome, 7))
    assert usage.total_prompt == 2000 and usage.cache_read == 1536 and usage.output == 7
    assert usage.uncached == outcome.uncached
    cold = normalize_usage(model.usage_kind, model.usage(CacheOutcome(prompt_tokens=50), 1))
    assert cold.total_prompt == 50 and (cold.cache_read or 0) == 0


@pytest.mark.parametrize(("provider", "model"), [("openai", "gpt-4o"), ("anthropic", "claude-sonnet-5"),
                                                 ("gemini", "gemini-2.5-flash")])
def test_trace_prompt_tokens_is_the_wire_definition_on_every_fixture_turn(provider: str, model: str) -> None:
    registry, generations = Config().registry()
    try:
        for fixture in sorted((ROOT / "fixtures").glob("*.jsonl")):
            session = load_session(str(fixture), db=None, cwd=ROOT)
            for request in Assembler(registry, Config(), provider=provider, model=model).replay(session):
                encoded = counter(request.encoding)
                assert request.prompt_tokens == prompt_tokens(request.request, request.profile.wire, encoded)
                assert request.prompt_tokens == plan(request.request, request.profile.wire_model, encoded).prompt_tokens
                wire = request.profile.wire_model
                messages = wire.messages(request.request)
                assert messages and wire.role_problem(messages) is None
    finally:
        for generation in generations:
            generation.release()


def test_tool_call_and_result_recognition_per_format() -> None:
    openai, anthropic, gemini = wire_for("openai-chat"), wire_for("anthropic-messages"), wire_for("gemini-generate")
    assert openai.is_tool_call({"role": "assistant", "tool_calls": [{"id": "x"}]})
    assert not openai.is_tool_call({"role": "assistant", "content": "tool_calls"})
    assert openai.is_tool_result({"role": "tool", "content": "r"}) and not openai.is_tool_result({"role": "user"})
    assert anthropic.is_tool_call({"role": "assistant", "content": [{"type": "tool_use", "id": "x"}]})
    assert not anthropic.is_tool_call({"role": "assistant", "content": [{"type": "text", "text": "tool_use"}]})
    assert anthropic.is_tool_result({"role": "user", "content": [{"type": "tool_result"}]})
    assert gemini.is_tool_call({"role": "model", "parts": [{"functionCall": {}}]})
    assert gemini.is_tool_result({"role": "user", "parts": [{"functionResponse": {}}]})
    assert not gemini.is_tool_result({"role": "user", "parts": [{"text": "functionResponse"}]})

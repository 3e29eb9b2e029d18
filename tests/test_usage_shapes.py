"""Which usage kind a stored usage object is (``usage_kind_of``) comes from the registered kinds' keys, so a plugin's
``@usage_kind(…, keys=…)`` is chosen for its objects and released with the plugin (issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zhin_cli.cache.usage import USAGE_KINDS, USAGE_SHAPES, NormalizedUsage, usage_kind, usage_kind_of, usage_record
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.model import AssistantMessage
from zhin_cli.pipeline.plugins import run_plugin
from zhin_cli.pipeline.segments import Generation, PromptSegmentRegistry

# A plugin file that imports only the public API: a gateway reporting its own usage object, and one that refines
# OpenAI's (it also has prompt_tokens, as DeepSeek's does).
PLUGIN = '''
from zhin_cli.api import NormalizedUsage, usage_kind


def register(plugin):
    @usage_kind("acme-usage", keys=("acme_prompt",))
    def acme(usage):
        return NormalizedUsage(total_prompt=usage.get("acme_prompt"), cache_read=usage.get("acme_hit"))

    @usage_kind("acme-openai", keys=("acme_cached",))
    def acme_openai(usage):
        return NormalizedUsage(total_prompt=usage.get("prompt_tokens"), cache_read=usage.get("acme_cached"))
'''
ACME: JSONObject = {"acme_prompt": 100, "acme_hit": 40}
ACME_OPENAI: JSONObject = {"prompt_tokens": 100, "completion_tokens": 3, "acme_cached": 64}
NOBODYS: JSONObject = {"tokens": 100, "hits": 40}  # no registered kind has any of these keys


@pytest.fixture
def plugin(tmp_path: Path) -> Generation:
    (tmp_path / "acme_usage.py").write_text(PLUGIN, encoding="utf-8")
    generation = Generation(PromptSegmentRegistry(), "acme_usage.py")
    run_plugin(generation, "acme_usage.py:register", tmp_path / "zhin.yaml")
    return generation


def message(usage: JSONObject) -> AssistantMessage:
    return AssistantMessage(content=[], timestamp=0, row_id=1, provider="acme", model="acme-1", usage=usage)


def test_a_plugins_usage_kind_is_chosen_for_its_usage_objects(plugin: Generation) -> None:
    try:
        assert usage_kind_of(ACME) == "acme-usage"
        record = usage_record("s", message(ACME))
        assert record.kind == "acme-usage" and record.usage == NormalizedUsage(total_prompt=100, cache_read=40)
        assert usage_kind_of(NOBODYS) is None  # negative control: an object no kind recognises
        assert usage_record("s", message(NOBODYS)).usage is None
    finally:
        plugin.release()
    assert usage_kind_of(ACME) is None and "acme-usage" not in USAGE_SHAPES and "acme-usage" not in USAGE_KINDS


def test_a_plugin_kind_refining_a_builtin_shape_wins_only_where_its_keys_are(plugin: Generation) -> None:
    try:
        assert usage_kind_of(ACME_OPENAI) == "acme-openai"
        assert usage_kind_of({"prompt_tokens": 100, "completion_tokens": 3}) == "openai-chat"  # negative control
    finally:
        plugin.release()
    assert usage_kind_of(ACME_OPENAI) == "openai-chat"


@pytest.mark.parametrize(("usage", "kind"), [
    ({"input": 100, "output": 5, "cacheRead": 20, "totalTokens": 105}, "zhin-upstream"),
    ({"prompt_tokens": 100, "completion_tokens": 3, "prompt_cache_hit_tokens": 64}, "deepseek"),
    ({"prompt_tokens": 100, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 64}}, "openai-chat"),
    ({"input_tokens": 100, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 0}}, "openai-responses"),
    ({"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 90}, "anthropic-messages"),
    ({"promptTokenCount": 100, "candidatesTokenCount": 3}, "gemini-generate"),
    ({"usageMetadata": {"promptTokenCount": 100}}, "gemini-generate"),
    ({}, None),
    (NOBODYS, None),
])
def test_the_builtin_shapes_where_they_share_keys(usage: dict[str, object], kind: str | None) -> None:
    """DeepSeek's object also has prompt_tokens, the Responses API's also input_tokens: the specific kind wins."""
    assert usage_kind_of(usage) == kind


def test_a_kind_without_keys_is_used_only_by_name() -> None:
    name = "test-named-only"
    try:
        usage_kind(name)(lambda usage: NormalizedUsage(output=1))
        assert name in USAGE_KINDS and name not in USAGE_SHAPES
        assert usage_kind_of(NOBODYS) is None
    finally:
        USAGE_KINDS.pop(name, None)


def test_keys_given_as_one_string_are_refused() -> None:
    with pytest.raises(TypeError, match="tuple"):
        usage_kind("test-bad-keys", keys="acme_prompt")  # type: ignore[arg-type]
    assert "test-bad-keys" not in USAGE_KINDS

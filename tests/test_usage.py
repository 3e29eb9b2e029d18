"""Usage normalization across providers (docs/spec/providers.md §6): counts, "not reported" vs zero, hit rates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.cache.usage import USAGE_KINDS, NormalizedUsage, hit_rate, normalize_usage, usage_kind
from zhin_cli.core.errors import ConfigError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def stored_usages() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("usage"), dict):
                found.append(node["usage"])
            for value in node.values():
                walk(value)

    for path in sorted(FIXTURES.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            walk(json.loads(line))
    return found


# --- OpenAI Chat -------------------------------------------------------------------------------------------


def test_openai_chat_cached_tokens_are_part_of_prompt_tokens() -> None:
    usage = {"prompt_tokens": 2048, "completion_tokens": 30, "total_tokens": 2078,
             "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0}}
    assert normalize_usage("openai-chat", usage) == NormalizedUsage(
        uncached=128, cache_read=1920, cache_write=None, total_prompt=2048, output=30)
    assert hit_rate(normalize_usage("openai-chat", usage)) == pytest.approx(1920 / 2048)


def test_openai_chat_cache_write_tokens_gpt_5_6() -> None:
    usage = {"prompt_tokens": 3000, "completion_tokens": 5,
             "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 1536}}
    result = normalize_usage("openai-chat", usage)
    assert (result.cache_read, result.cache_write, result.uncached, result.total_prompt) == (1024, 1536, 440, 3000)


def test_openai_chat_zero_cached_is_zero_but_missing_details_is_not_reported() -> None:
    zero = normalize_usage("openai-chat", {"prompt_tokens": 900, "completion_tokens": 3,
                                           "prompt_tokens_details": {"cached_tokens": 0}})
    assert zero.cache_read == 0 and zero.uncached == 900 and hit_rate(zero) == 0.0
    missing = normalize_usage("openai-chat", {"prompt_tokens": 900, "completion_tokens": 3})
    assert missing.cache_read is None and missing.uncached is None and missing.cache_write is None
    assert missing.total_prompt == 900 and missing.output == 3
    assert hit_rate(missing) is None
    null = normalize_usage("openai-chat", {"prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": None}})
    assert null.cache_read is None and null.output is None


def test_openai_alias_is_the_same_normalizer() -> None:
    assert USAGE_KINDS["openai"] is USAGE_KINDS["openai-chat"]


# --- OpenAI Responses --------------------------------------------------------------------------------------


def test_openai_responses_input_tokens_details() -> None:
    usage = {"input_tokens": 1500, "output_tokens": 12, "total_tokens": 1512,
             "input_tokens_details": {"cached_tokens": 1152, "cache_write_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 4}}
    assert normalize_usage("openai-responses", usage) == NormalizedUsage(
        uncached=348, cache_read=1152, cache_write=0, total_prompt=1500, output=12)


def test_openai_responses_missing_details() -> None:
    result = normalize_usage("openai-responses", {"input_tokens": 1500})
    assert result == NormalizedUsage(uncached=None, cache_read=None, cache_write=None, total_prompt=1500, output=None)


# --- Anthropic ---------------------------------------------------------------------------------------------


def test_anthropic_three_disjoint_counts_add_up_to_the_prompt() -> None:
    usage = {"input_tokens": 50, "cache_creation_input_tokens": 248, "cache_read_input_tokens": 1800,
             "output_tokens": 20, "cache_creation": {"ephemeral_5m_input_tokens": 248, "ephemeral_1h_input_tokens": 0}}
    result = normalize_usage("anthropic-messages", usage)
    assert result == NormalizedUsage(uncached=50, cache_read=1800, cache_write=248, total_prompt=2098, output=20)
    assert hit_rate(result) == pytest.approx(1800 / 2098)
    assert normalize_usage("anthropic", usage) == result


def test_anthropic_missing_or_null_cache_fields_are_not_reported() -> None:
    missing = normalize_usage("anthropic-messages", {"input_tokens": 400, "output_tokens": 9})
    assert missing == NormalizedUsage(uncached=400, cache_read=None, cache_write=None, total_prompt=None, output=9)
    assert hit_rate(missing) is None
    null = normalize_usage("anthropic-messages", {"input_tokens": 400, "cache_creation_input_tokens": None,
                                                  "cache_read_input_tokens": 0, "output_tokens": 9})
    assert null.cache_write is None and null.cache_read == 0 and null.total_prompt is None


# --- DeepSeek ----------------------------------------------------------------------------------------------


def test_deepseek_hit_and_miss() -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 7, "prompt_cache_hit_tokens": 768, "prompt_cache_miss_tokens": 232}
    result = normalize_usage("deepseek", usage)
    assert result == NormalizedUsage(uncached=232, cache_read=768, cache_write=None, total_prompt=1000, output=7)
    assert hit_rate(result) == pytest.approx(0.768)


def test_deepseek_without_prompt_tokens_adds_hit_and_miss() -> None:
    result = normalize_usage("deepseek", {"prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36})
    assert (result.total_prompt, result.cache_read, result.uncached, result.output) == (100, 64, 36, None)


def test_deepseek_missing_cache_fields_are_not_reported() -> None:
    result = normalize_usage("deepseek", {"prompt_tokens": 1000, "completion_tokens": 7})
    assert result.cache_read is None and result.uncached is None and result.total_prompt == 1000
    assert hit_rate(result) is None


# --- Gemini ------------------------------------------------------------------------------------------------


def test_gemini_cached_content_is_inside_prompt_token_count() -> None:
    meta = {"promptTokenCount": 4096, "cachedContentTokenCount": 3072, "candidatesTokenCount": 40, "totalTokenCount": 4136}
    result = normalize_usage("gemini-generate", meta)
    assert result == NormalizedUsage(uncached=1024, cache_read=3072, cache_write=None, total_prompt=4096, output=40)
    assert normalize_usage("gemini", {"usageMetadata": meta}) == result  # a whole response works too


def test_gemini_thoughts_count_as_output() -> None:
    result = normalize_usage("gemini", {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 20})
    assert result.output == 25


def test_gemini_omitted_cached_count_is_not_reported_not_zero() -> None:
    result = normalize_usage("gemini", {"promptTokenCount": 2000, "candidatesTokenCount": 12})
    assert result.cache_read is None and result.uncached is None and result.total_prompt == 2000
    assert hit_rate(result) is None


# --- zhin's stored upstream shape -------------------------------------------------------------------------


def test_every_stored_fixture_row_reads_input_as_the_whole_prompt() -> None:
    usages = stored_usages()
    assert len(usages) >= 20
    for usage in usages:
        result = normalize_usage("zhin-upstream", usage)
        assert usage["totalTokens"] == usage["input"] + usage["output"]  # the evidence for the inclusive reading
        assert result.total_prompt == usage["input"]
        assert result.cache_read == usage["cacheRead"]
        assert result.uncached == usage["input"] - usage["cacheRead"] - usage["cacheWrite"]
        assert result.output == usage["output"]
        rate = hit_rate(result)
        assert rate is not None and 0 < rate < 1


def test_upstream_design_example() -> None:
    # DESIGN.md §3: {"input":1200,"output":30,"cacheRead":1024,"cacheWrite":0,"totalTokens":1230}
    result = normalize_usage("upstream", {"input": 1200, "output": 30, "cacheRead": 1024, "cacheWrite": 0, "totalTokens": 1230})
    assert result == NormalizedUsage(uncached=176, cache_read=1024, cache_write=0, total_prompt=1200, output=30)


def test_upstream_exclusive_rows_are_recognised_by_their_total() -> None:
    # pi-ai style: input is the uncached remainder and totalTokens adds every part.
    result = normalize_usage("zhin-upstream", {"input": 100, "output": 20, "cacheRead": 30, "cacheWrite": 10, "totalTokens": 160})
    assert result == NormalizedUsage(uncached=100, cache_read=30, cache_write=10, total_prompt=140, output=20)


def test_upstream_cache_larger_than_input_can_only_be_exclusive() -> None:
    result = normalize_usage("zhin-upstream", {"input": 176, "output": 30, "cacheRead": 1024, "cacheWrite": 0})
    assert (result.uncached, result.total_prompt) == (176, 1200)


def test_upstream_missing_fields_are_not_reported() -> None:
    result = normalize_usage("zhin-upstream", {"input": 500, "output": 4})
    assert result == NormalizedUsage(uncached=None, cache_read=None, cache_write=None, total_prompt=500, output=4)
    assert hit_rate(result) is None
    assert normalize_usage("zhin-upstream", {}) == NormalizedUsage()


# --- shared behaviour --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "12", True, -3, 1.5, [], {}])
def test_values_that_are_not_counts_are_not_reported(value: Any) -> None:
    result = normalize_usage("openai-chat", {"prompt_tokens": 100, "completion_tokens": value,
                                             "prompt_tokens_details": {"cached_tokens": value}})
    assert result.output is None and result.cache_read is None


def test_integral_floats_are_counts() -> None:
    assert normalize_usage("openai-chat", {"prompt_tokens": 100.0}).total_prompt == 100


def test_inconsistent_report_gives_no_uncached_count_rather_than_a_negative_one() -> None:
    result = normalize_usage("openai-chat", {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 128}})
    assert result.uncached is None and result.cache_read == 128


def test_hit_rate_of_an_empty_prompt_is_none() -> None:
    assert hit_rate(NormalizedUsage(cache_read=0, total_prompt=0)) is None
    assert hit_rate(NormalizedUsage(cache_read=None, total_prompt=10)) is None


def test_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown usage kind 'bedrock'.*anthropic-messages"):
        normalize_usage("bedrock", {})


def test_usage_that_is_not_an_object_is_an_error() -> None:
    with pytest.raises(ConfigError, match="JSON object"):
        normalize_usage("openai-chat", [1, 2])  # type: ignore[arg-type]


def test_kinds_are_a_registry() -> None:
    assert {"openai-chat", "openai-responses", "anthropic-messages", "deepseek", "gemini-generate", "zhin-upstream"} <= set(USAGE_KINDS)
    with pytest.raises(ValueError, match="duplicate"):
        usage_kind("deepseek")(lambda usage: NormalizedUsage())
    name = "test-only-kind"
    try:
        usage_kind(name)(lambda usage: NormalizedUsage(output=usage.get("n")))
        assert normalize_usage(name, {"n": 3}).output == 3
    finally:
        USAGE_KINDS.pop(name, None)


def test_as_dict() -> None:
    assert NormalizedUsage(uncached=1, output=2).as_dict() == {
        "uncached": 1, "cache_read": None, "cache_write": None, "total_prompt": None, "output": 2}

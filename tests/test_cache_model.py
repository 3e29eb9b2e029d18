"""The one cache simulator (zhin_cli.cache) on its own: each provider's rules (docs/spec/providers.md §2.5, §3,
§4.4, §6) with a negative control each, and the automatic store's prefix index against a brute-force search."""

from __future__ import annotations

import random

import pytest

from zhin_cli.cache import LOOKBACK_BLOCKS, Plan, PrefixCache, PrefixPlan, plan_blocks
from zhin_cli.core.tokens import counter
from zhin_cli.pipeline.providers import CacheRules, resolve_profile
from zhin_cli.wire import Block

COUNTER = counter("o200k_base")
ENCODING = "o200k_base"


def blocks(*texts: str, marks: dict[int, str] | None = None) -> Plan:
    marks = marks or {}
    return plan_blocks([Block("messages", i, "user", t, 3, marks.get(i)) for i, t in enumerate(texts)], ENCODING)


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_openai_reads_in_128_steps_above_1024() -> None:
    rules = resolve_profile("openai", "gpt-4o").cache
    cache = PrefixCache()
    long, short = words(700), words(300)
    cache.account("k", blocks(long, "a"), None, rules)
    hit = cache.account("k", blocks(long, "b"), None, rules)
    shared = COUNTER.count(long) + 3 + 3  # the shared block and the next block's framing (same head)
    assert hit.read == shared // 128 * 128 and hit.read % 128 == 0 and hit.read > 1024
    cache.account("k", blocks(short, "a"), None, rules)
    assert cache.account("k", blocks(short, "b"), None, rules).read == 0  # negative control: < 1,024 shared


def test_deepseek_reads_in_64_token_units() -> None:
    rules = resolve_profile("deepseek", "deepseek-chat").cache
    cache = PrefixCache()
    text = words(100)
    cache.account("k", blocks(text, "a"), None, rules)
    read = cache.account("k", blocks(text, "b"), None, rules).read
    shared = COUNTER.count(text) + 3 + 3
    assert shared % 64 and read == shared // 64 * 64  # down to whole 64-token units
    exact = CacheRules(mechanism="automatic", min_tokens=64, step_tokens=1)  # negative control: no unit
    cache = PrefixCache()
    cache.account("k", blocks(text, "a"), None, exact)
    assert cache.account("k", blocks(text, "b"), None, exact).read == shared


def test_gemini_minimum_depends_on_the_model() -> None:
    flash, pro = resolve_profile("gemini", "gemini-2.5-flash").cache, resolve_profile("gemini", "gemini-2.5-pro").cache
    text = words(1500)
    for rules, hits in ((flash, True), (pro, False)):
        cache = PrefixCache()
        cache.account("k", blocks(text, "a"), None, rules)
        read = cache.account("k", blocks(text, "b"), None, rules).read
        assert (read > 0) is hits, rules


def test_models_never_share_entries() -> None:
    rules = CacheRules(mechanism="automatic", min_tokens=1, step_tokens=1)
    cache = PrefixCache()
    cache.account(("openai", "gpt-4o"), blocks(words(50), "a"), None, rules)
    assert cache.account(("openai", "gpt-4.1"), blocks(words(50), "b"), None, rules).read == 0
    assert cache.account(("openai", "gpt-4o"), blocks(words(50), "b"), None, rules).read > 0


def test_anthropic_reads_only_at_breakpoints_within_the_look_back() -> None:
    rules = CacheRules(mechanism="explicit", min_tokens=1, step_tokens=1)
    history = [f"message {i}" for i in range(40)]
    first = blocks(*history[:5], marks={4: "5m"})
    cache = PrefixCache()
    written = cache.account("k", first, None, rules)
    assert written.read == 0 and written.written == first.ends[4]
    near = blocks(*history[: 5 + LOOKBACK_BLOCKS - 1], marks={5 + LOOKBACK_BLOCKS - 2: "5m"})  # 20 blocks: in reach
    assert cache.account("k", near, None, rules).read == first.ends[4]
    cache = PrefixCache()
    cache.account("k", first, None, rules)
    far = blocks(*history[: 5 + LOOKBACK_BLOCKS], marks={5 + LOOKBACK_BLOCKS - 1: "5m"})  # 21 blocks: out of reach
    assert cache.account("k", far, None, rules).read == 0


def test_anthropic_partial_block_match_is_no_hit_and_nothing_after_the_last_breakpoint_is_cached() -> None:
    rules = CacheRules(mechanism="explicit", min_tokens=1, step_tokens=1)
    cache = PrefixCache()
    cache.account("k", blocks("stable", "the same start, then one ending", marks={1: "5m"}), None, rules)
    changed = blocks("stable", "the same start, then another ending", marks={1: "5m"})
    outcome = cache.account("k", changed, None, rules)
    assert outcome.read == 0  # the entry ends mid-way through a block that changed
    tail = blocks("stable", "after the breakpoint", marks={0: "5m"})
    result = cache.account("k", tail, None, rules)
    assert result.read == 0 and result.written == tail.ends[0] and result.uncached == tail.prompt_tokens - tail.ends[0]


def test_anthropic_minimum_cacheable_length() -> None:
    cache = PrefixCache()
    small = blocks("short", marks={0: "5m"})
    rules = CacheRules(mechanism="explicit", min_tokens=1024, step_tokens=1)
    assert cache.account("k", small, None, rules).written == 0
    assert cache.account("k", small, None, rules).read == 0
    lowered = CacheRules(mechanism="explicit", min_tokens=1, step_tokens=1)  # negative control
    assert cache.account("k", small, None, lowered).written > 0 and cache.account("k", small, None, lowered).read > 0


def test_no_cache_never_hits() -> None:
    cache = PrefixCache()
    rules = CacheRules(mechanism="none", min_tokens=0, step_tokens=1)
    cache.account("k", blocks(words(2000)), None, rules)
    assert cache.account("k", blocks(words(2000)), None, rules).read == 0


def _brute_force(stored: list[Plan], request: Plan) -> int:
    """The longest common prefix with any stored plan, block by block and then token by token inside the first
    block that differs (a match never runs on past a block that differs)."""
    best = 0
    for other in stored:
        common = 0
        for i in range(min(len(request.ends), len(other.ends))):
            start_a = request.ends[i - 1] if i else 0
            start_b = other.ends[i - 1] if i else 0
            mine = request.tokens[start_a * 4 : request.ends[i] * 4]
            theirs = other.tokens[start_b * 4 : other.ends[i] * 4]
            if mine == theirs:
                common = request.ends[i]
                continue
            n = 0
            while (n + 1) * 4 <= min(len(mine), len(theirs)) and mine[n * 4 : n * 4 + 4] == theirs[n * 4 : n * 4 + 4]:
                n += 1
            common += n
            break
        best = max(best, common)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_the_prefix_index_finds_what_a_brute_force_search_finds(seed: int) -> None:
    rng = random.Random(seed)
    rules = CacheRules(mechanism="automatic", min_tokens=0, step_tokens=1)
    pool = [f"block {i} " + "x" * rng.randint(0, 30) for i in range(6)]
    cache = PrefixCache(size=8)
    stored: list[Plan] = []
    for _ in range(60):
        texts = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.3:
            texts[-1] = texts[-1] + " changed"
        request = blocks(*texts)
        expected = _brute_force(stored[-8:], request)
        assert cache.account("k", request, None, rules).read == expected
        stored.append(request)
    # negative control: the search is not trivially 0 — the requests did share prefixes
    assert sum(_brute_force(stored[i - 8 : i], stored[i]) for i in range(8, len(stored))) > 0


def test_raw_text_plans_still_work() -> None:
    cache = PrefixCache(size=2)
    rules = CacheRules(mechanism="automatic", min_tokens=16, step_tokens=8)
    shared = PrefixPlan([words(60)])
    assert cache.account("k", shared, COUNTER, rules).read == 0
    hit = cache.account("k", shared, COUNTER, rules)
    assert hit.read > 0 and hit.read % 8 == 0

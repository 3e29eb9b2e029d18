"""Hand-computed input costs (issue 18 "Done when"): OpenAI's cached tokens at the 50 % discount, nothing below
1,024 tokens, reads in 128-token steps; Anthropic's 5-minute writes at 1.25×, 1-hour writes at 2×, reads at
0.1×; ``report economy``'s cost object as the sum of its requests; upstream's sliding window against the ADR
window.

Two ways to the same figure: from first principles on a ``PrefixPlan`` whose token counts are known by
construction (``" the"`` is one o200k token, so ``" the" * n`` is n tokens; the cache tokenizes block by
block), and from a session replayed by ``report economy``, priced by hand from its per-request prompt and
cached tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from builders import SEC, T0, History

from zhin_cli.cache import PrefixCache, PrefixPlan, plan, shared_tokens
from zhin_cli.cache.cost import Cost
from zhin_cli.cache.serialize import serialize
from zhin_cli.core.tokens import counter
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.prices import PER_TOKENS, builtin_prices
from zhin_cli.pipeline.providers import resolve_profile
from zhin_cli.tools.report.economy import CASES, EconomyReport, HeaderTokens, SessionEconomy, simulate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ENCODING = "o200k_base"
OPENAI = builtin_prices().choose("openai", "gpt-4o").price  # type: ignore[union-attr]
ANTHROPIC = builtin_prices().choose("anthropic", "claude-sonnet-5").price  # type: ignore[union-attr]


def words(word: str, n: int) -> str:
    text = word * n
    assert counter(ENCODING).count(text) == n  # one token per word, by construction
    return text


def openai_usd(prompt: int, cached: int) -> float:
    """OpenAI by hand: uncached at the input price, cached at half of it (writes are free)."""
    assert OPENAI.cached_input == OPENAI.input / 2
    return ((prompt - cached) * OPENAI.input + cached * OPENAI.input / 2) / PER_TOKENS


# --- OpenAI, from first principles -------------------------------------------------------------------


def openai_second(shared: int) -> tuple[Any, Cost]:
    """Two requests sharing a ``shared``-token first block, each with its own 200/300-token second block."""
    rules = resolve_profile("openai", "gpt-4o").cache
    cache = PrefixCache()
    head = words(" the", shared)
    cache.account("k", PrefixPlan([head, words(" x", 200)]), None, rules)
    outcome = cache.account("k", PrefixPlan([head, words(" y", 300)]), None, rules)
    return outcome, Cost.of(outcome, OPENAI)


def test_openai_reads_whole_128_token_steps_at_half_price() -> None:
    outcome, cost = openai_second(1100)
    assert outcome.prompt_tokens == 1400 and outcome.read == 1024  # 1,100 shared → 8 × 128
    assert (cost.uncached_tokens, cost.cached_tokens, cost.cache_write_tokens) == (376, 1024, 0)
    assert cost.usd == pytest.approx((376 * 2.5 + 1024 * 1.25) / 1e6)  # $0.00222
    assert cost.usd == pytest.approx(openai_usd(1400, 1024))
    outcome, cost = openai_second(1300)  # 1,300 shared → 10 × 128 = 1,280
    assert outcome.read == 1280 and cost.usd == pytest.approx(openai_usd(1600, 1280))


def test_openai_caches_nothing_below_1024_tokens() -> None:
    outcome, cost = openai_second(1000)  # 1,000 shared < 1,024: no read, full price
    assert outcome.read == 0 and cost.usd == pytest.approx(1300 * 2.5 / 1e6)
    # control: just over the minimum reads (and 1,023 does not)
    assert openai_second(1024)[0].read == 1024
    assert openai_second(1023)[0].read == 0


# --- OpenAI, a session through report economy -------------------------------------------------------


def long_session() -> Any:
    """Three bot turns 20 s apart (one cache group), each user message ~300 tokens: past the 1,024 minimum."""
    h = History()
    for turn in range(3):
        for n in range(3):
            h.user(T0 + (turn * 60 + n) * SEC, "10002", f"第{turn}轮第{n}条：" + "今天天气很好，我们去公园散步吧。" * 25,
                   display_name="小明")
        h.assistant(T0 + (turn * 60 + 20) * SEC, f"好的{turn}", message_id=f"p-{turn}")
    return h.session()


def test_openai_session_costs_by_hand_from_its_prompt_and_cached_tokens() -> None:
    session = long_session()
    figures = simulate(session, Config(), CASES["openai"])
    rows = figures.requests
    assert len(rows) == 3 and rows[0].first and not rows[1].first and not rows[2].first
    assert rows[0].adr_cached == 0 and all(r.adr_cached > 0 and r.adr_cached % 128 == 0 for r in rows[1:])
    assert all(r.adr.written_by_ttl == {} for r in rows)  # OpenAI writes nothing billable
    # the cached tokens themselves, from the common prefix of consecutive requests, down to 128-token steps
    from zhin_cli.pipeline.facade import Pipeline

    with Pipeline.open(Config(), provider="openai", model="gpt-4o") as pipeline:
        requests = list(pipeline.replay(session))
    plans = [serialize(r).plan for r in requests]
    for previous, current, row in zip(plans, plans[1:], rows[1:], strict=False):
        shared = shared_tokens(previous, current)
        assert shared >= 1024 and row.adr_cached == shared // 128 * 128
    cost = figures.cost()
    assert cost is not None and cost["unit"] == "USD" and cost["model"] == "gpt-4o"
    by_hand = sum(openai_usd(r.adr_prompt, r.adr_cached) for r in rows)
    assert cost["adr"]["total"] == pytest.approx(by_hand, abs=1e-8)
    assert cost["adr"]["per_request"] == pytest.approx(by_hand / 3, abs=1e-8)
    assert cost["adr"]["cached_tokens"] == sum(r.adr_cached for r in rows)
    assert cost["adr"]["uncached_tokens"] == sum(r.adr_prompt - r.adr_cached for r in rows)
    assert cost["flat"]["total"] == pytest.approx(sum(openai_usd(r.flat_prompt, r.flat_cached) for r in rows), abs=1e-8)
    # control: the same requests with nothing cached cost the full price, more than the ADR figure
    assert by_hand < sum(openai_usd(r.adr_prompt, 0) for r in rows)


# --- Anthropic ----------------------------------------------------------------------------------------


def test_anthropic_writes_at_their_ttl_premium_and_reads_at_a_tenth() -> None:
    rules = resolve_profile("anthropic", "claude-sonnet-5").cache
    cache = PrefixCache()
    system, history, newer, tail = words(" the", 1200), words(" x", 300), words(" y", 200), words(" z", 50)
    first = cache.account("k", PrefixPlan([system, history, tail], [(0, "5m"), (1, "1h")]), None, rules)
    assert (first.prompt_tokens, first.read, first.written_by_ttl) == (1550, 0, {"5m": 1200, "1h": 300})
    cost = Cost.of(first, ANTHROPIC)
    assert ANTHROPIC.write_price("5m") == 1.25 * ANTHROPIC.input and ANTHROPIC.write_price("1h") == 2 * ANTHROPIC.input
    assert (cost.uncached_tokens, cost.cached_tokens, cost.cache_write_tokens) == (50, 0, 1500)
    assert cost.usd == pytest.approx((50 * 2.0 + 1200 * 2.0 * 1.25 + 300 * 2.0 * 2) / 1e6)
    second = cache.account("k", PrefixPlan([system, history, newer, tail], [(0, "5m"), (2, "5m")]), None, rules)
    assert (second.read, second.written_by_ttl) == (1500, {"5m": 200})  # reads the 1h entry, writes the new block
    cost = Cost.of(second, ANTHROPIC)
    assert cost.usd == pytest.approx((50 * 2.0 + 1500 * 2.0 * 0.1 + 200 * 2.0 * 1.25) / 1e6)
    # control: the same request with a cold cache writes all 1,700 tokens and reads none: it costs more
    cold = Cost.of(PrefixCache().account("k", PrefixPlan([system, history, newer, tail], [(0, "5m"), (2, "5m")]),
                                         None, rules), ANTHROPIC)
    assert cold.usd == pytest.approx((50 * 2.0 + 1700 * 2.5) / 1e6) and cold.usd > cost.usd


def test_a_one_hour_cache_control_in_a_body_is_billed_at_twice_the_input_price() -> None:
    rules = resolve_profile("anthropic", "claude-sonnet-5").cache
    system = words(" the", 1500)

    def body(ttl: str | None) -> dict[str, Any]:
        marker = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
        return {"model": "claude-sonnet-5", "max_tokens": 100,
                "system": [{"type": "text", "text": system, "cache_control": marker}],
                "messages": [{"role": "user", "content": "你好"}]}

    for ttl, factor in (("1h", 2.0), (None, 1.25)):  # no ttl: the 5-minute default
        request = plan(body(ttl), "anthropic-messages", ENCODING)
        outcome = PrefixCache().account("k", request, None, rules)
        written = outcome.written_by_ttl
        assert list(written) == [ttl or "5m"] and outcome.read == 0
        uncached = outcome.prompt_tokens - written[ttl or "5m"]
        assert uncached > 0 and written[ttl or "5m"] >= 1500
        assert Cost.of(outcome, ANTHROPIC).usd == pytest.approx(
            (uncached * 2.0 + written[ttl or "5m"] * 2.0 * factor) / 1e6)


def test_the_cost_object_is_the_sum_of_its_requests() -> None:
    figures = simulate(long_session(), Config(), CASES["anthropic"])
    cost = figures.cost()
    assert cost is not None and cost["price"]["model"] == "claude-sonnet-5"
    rows = [r.as_dict(ANTHROPIC) for r in figures.requests]
    for layout in ("adr", "flat", "sliding"):
        assert cost[layout]["total"] == pytest.approx(sum(r[layout]["usd"] for r in rows), abs=1e-7)
        outcomes = [r.outcome(layout) for r in figures.requests]
        by_hand = sum(((o.prompt_tokens - o.read - sum(o.written_by_ttl.values())) * 2.0 + o.read * 0.2
                       + o.written_by_ttl.get("5m", 0) * 2.5 + o.written_by_ttl.get("1h", 0) * 4.0) / 1e6
                      for o in outcomes if o is not None)
        assert cost[layout]["total"] == pytest.approx(by_hand, abs=1e-8)
        assert cost[layout]["cache_write_tokens"] == sum(sum(o.written_by_ttl.values()) for o in outcomes if o)
        assert cost[layout]["requests"] == 3
    assert cost["adr"]["cache_write_tokens"] > 0 and cost["adr"]["cached_tokens"] > 0  # the ADR layout writes and reads


# --- sliding against the ADR window ----------------------------------------------------------------


def test_sliding_costs_more_than_the_adr_window_past_the_window_limit() -> None:
    from zhin_cli.store.jsonl import read_session

    busy = read_session(FIXTURES / "group-busy.jsonl")  # 16 requests; the window is cut (tail limit) at turn 8
    for name in CASES:
        cost = simulate(busy, Config(), CASES[name]).cost()
        assert cost is not None
        assert cost["sliding"]["total"] > cost["adr"]["total"], name
        assert cost["sliding"]["requests"] == cost["adr"]["requests"] == 16


def test_sliding_equals_the_adr_window_under_the_window_limit() -> None:
    # control: a session that never reaches the window's message limit is the same request for request
    figures = simulate(long_session(), Config(), CASES["openai"])
    assert all(r.sliding == r.adr for r in figures.requests)
    cost = figures.cost()
    assert cost is not None and cost["sliding"] == cost["adr"]


def test_report_economy_json_has_the_cost_objects_and_notes(zhin: Any) -> None:
    data = json.loads(zhin("report", "economy", FIXTURES / "group-busy.jsonl", "--json").stdout)
    assert data["version"] == 1 and data["notes"] == []
    for name, figures in data["sessions"][0]["cache"].items():
        cost = figures["cost"]
        assert set(cost) == {"unit", "model", "price", "adr", "flat", "sliding"}, name
        assert cost["unit"] == "USD" and cost["model"] == CASES[name].model
        for layout in ("adr", "flat", "sliding"):
            assert set(cost[layout]) == {"total", "per_request", "requests", "uncached_tokens", "cached_tokens",
                                         "cache_write_tokens"}
            assert cost[layout]["per_request"] == pytest.approx(cost[layout]["total"] / cost[layout]["requests"], abs=1e-8)
    text = zhin("report", "economy", FIXTURES / "group-busy.jsonl", "-p", "openai")
    assert "cost per request" in text.stdout and "$" in text.stdout and "zhin: note:" not in text.stderr


def test_a_provider_without_rows_has_a_null_cost_and_a_note() -> None:
    from dataclasses import replace

    from zhin_cli.tools.report.economy import price_for

    table = builtin_prices()
    gemini = replace(CASES["openai"], provider="gemini", model="gemini-2.5-flash")
    choice, note = price_for(gemini, table)
    assert choice is None and note and "gemini" in note
    figures = simulate(long_session(), Config(), gemini, prices=table)
    assert figures.cost() is None and figures.as_dict()["cost"] is None and figures.price_note == note
    # a model without a row: the provider's default row and its note, listed once however many sessions use it
    unknown = replace(CASES["openai"], model="gpt-9-turbo")
    billed = simulate(long_session(), Config(), unknown, prices=table)
    assert billed.price is not None and billed.price.price.model == "gpt-4o" and billed.price_note
    assert billed.cost() is not None
    sessions = [SessionEconomy(str(n), 0, 0, HeaderTokens(), {"openai": billed, "gemini": figures}) for n in range(2)]
    report = EconomyReport("o200k_base", {}, sessions)
    assert report.notes == [billed.price_note, note] and report.as_dict()["notes"] == report.notes
    # control: a model with its own row has no note
    assert simulate(long_session(), Config(), CASES["openai"], prices=table).price_note is None

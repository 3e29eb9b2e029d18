"""A provider's price rows live in one place, its spec (issue 32 Build 1): ``ProviderSpec.prices`` is what
``load_prices`` reads; ``register_prices`` (kept for API version 1) only sets that field, and ``PRICE_ROWS`` is a
view of the specs. And ``report html``'s economy summary takes any registered provider (a plugin's too), through
economy's own provider case lookup, not the built-in cases only.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from zhin_cli.core.errors import ConfigError
from zhin_cli.core.registry import recording
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.prices import PRICE_ROWS, load_prices, register_prices
from zhin_cli.pipeline.providers import PROVIDERS, CacheRules, ProviderSpec, register_provider
from zhin_cli.store import load_session

ROWS = {"default": "zeta-1", "models": {"zeta-1": {"input": 0.5, "cached_input": 0.05, "source": "a test",
                                                   "read_on": "2026-12-03"}}}
ZETA = ProviderSpec(name="zeta", wire="openai-chat", mid_conversation_system="none", default_model="zeta-1",
                    model_prefixes=("zeta-",), cache=CacheRules(mechanism="automatic", min_tokens=128, step_tokens=64))


def _zeta_price() -> float | None:
    choice = load_prices().choose("zeta", "zeta-1")
    return choice.price.input if choice is not None else None


def test_register_prices_sets_the_specs_rows_and_the_plugin_release_takes_them_back() -> None:
    with recording("zeta-plugin") as ledger:
        register_provider(ZETA)
        assert _zeta_price() is None and "zeta" not in PRICE_ROWS  # negative control: no rows yet, none billed
        register_prices("zeta", ROWS)
    try:
        assert PROVIDERS["zeta"].prices == ROWS  # the one place: the spec
        assert PRICE_ROWS["zeta"] == ROWS  # the view reads the spec
        assert _zeta_price() == 0.5
    finally:
        ledger.undo()
    assert "zeta" not in PROVIDERS and "zeta" not in PRICE_ROWS and _zeta_price() is None


def test_a_spec_with_prices_is_billed_without_register_prices() -> None:
    with recording("zeta-plugin") as ledger:
        register_provider(ProviderSpec(**{**ZETA.__dict__, "prices": ROWS}))
    try:
        assert _zeta_price() == 0.5 and PRICE_ROWS["zeta"] == ROWS
        with pytest.raises(ConfigError, match="already given"):  # a second set of rows only with replace=True
            register_prices("zeta", ROWS)
    finally:
        ledger.undo()


def test_register_prices_refuses_an_unknown_provider_and_a_bad_row() -> None:
    with pytest.raises(ConfigError, match="unknown provider"):
        register_prices("no-such-provider", ROWS)
    with recording("zeta-plugin") as ledger:
        register_provider(ZETA)
        with pytest.raises(ConfigError, match="provider zeta: prices"):
            register_prices("zeta", {"default": "zeta-1", "models": {"zeta-1": {"input": "cheap"}}})
    ledger.undo()
    assert "zeta" not in PROVIDERS


def test_report_html_economy_takes_a_registered_non_builtin_provider() -> None:
    from zhin_cli.tools.report.economy import CASES
    from zhin_cli.tools.report.html import economy_summary

    session = load_session(str(FIXTURES / "private-chat.jsonl"))
    with recording("zeta-plugin") as ledger:
        register_provider(ProviderSpec(**{**ZETA.__dict__, "prices": ROWS}))
    try:
        assert "zeta" not in CASES  # what the page checked before: it would have said "no economy simulation"
        figures, note = economy_summary(session, Config(), "zeta")
        assert note == "" and figures is not None and list(figures["cache"]) == ["zeta"]
        assert figures["cache"]["zeta"]["cost"]["price"]["input"] == 0.5
    finally:
        ledger.undo()
    figures, note = economy_summary(session, Config(), "zeta")  # negative control: no longer registered
    assert figures is None and note.startswith("no economy simulation for zeta")

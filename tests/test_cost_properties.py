"""Property (issue 18 "Done when"): the same request, sent after an earlier request that shares a shorter prefix
with it, never costs less — through the one cache simulator (``PrefixCache``) and the one cost definition
(``Cost.of``), for the automatic (OpenAI, DeepSeek) and explicit (Anthropic) mechanisms, at any price row the
table's checks accept. That is what makes "keep the prefix stable" the right advice: a cheaper bill never
comes from caching less.

The shorter-prefix history is the longer one cut earlier: the same first ``j`` blocks instead of ``k ≥ j``,
then a block of its own, keeping only the breakpoints that fall in the shared part (a breakpoint the longer
history lacks could write an entry it never had). Negative control: a row whose cached price is above its
input price breaks the property, and the loader refuses that row.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zhin_cli.cache import PrefixCache, PrefixPlan
from zhin_cli.cache.cost import Cost
from zhin_cli.core.errors import ConfigError
from zhin_cli.pipeline.prices import Price, parse_providers

EXAMPLES = int(os.environ.get("ZHIN_FUZZ_EXAMPLES", "300"))
# derandomize: a fixed seed, so CI is reproducible; database=None: nothing written to the work tree
FAST = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                suppress_health_check=list(HealthCheck))


@dataclass(frozen=True)
class Rules:
    mechanism: Literal["automatic", "explicit", "none"]
    min_tokens: int
    step_tokens: int


@dataclass(frozen=True)
class Case:
    blocks: list[str]  # the request's blocks
    request_breakpoints: list[tuple[int, str]]
    longer: int  # k: blocks the longer history shares with the request
    shorter: int  # j ≤ k
    history_breakpoints: list[tuple[int, str]]  # of the longer history (positions ≤ k; k is its own block)
    rules: Rules


TTL = st.sampled_from(["5m", "1h"])


@st.composite
def cases(draw: st.DrawFn, mechanism: Literal["automatic", "explicit"]) -> Case:
    n = draw(st.integers(1, 10))
    # distinct texts per block (so a block's digest names its position), each 1–300 tokens
    blocks = [f" w{i}" * draw(st.integers(1, 300)) for i in range(n)]
    k = draw(st.integers(0, n))
    j = draw(st.integers(0, k))
    positions = draw(st.lists(st.integers(0, k), unique=True, max_size=4))
    history = sorted((p, draw(TTL)) for p in positions)
    marks = draw(st.lists(st.integers(0, n - 1), unique=True, min_size=1, max_size=4))
    request = sorted((p, draw(TTL)) for p in marks)
    rules = Rules(mechanism, draw(st.sampled_from([0, 64, 1024])), draw(st.sampled_from([1, 64, 128])))
    return Case(blocks, request, k, j, history, rules)


@st.composite
def prices(draw: st.DrawFn) -> Price:
    """A row the table's checks accept: cached ≤ input, every write ≥ cached (``prices._check_row``)."""
    money = st.floats(0, 50, allow_nan=False, allow_infinity=False)
    uncached = draw(money)
    cached = draw(st.floats(0, uncached)) if uncached else 0.0
    writes = {ttl: draw(st.floats(cached, cached + 100)) for ttl in draw(st.lists(TTL, unique=True))}
    return Price("p", "m", uncached, cached, writes, "test", "2026-12-01")


def history(case: Case, shared: int) -> PrefixPlan:
    """The earlier request sharing ``shared`` blocks with the request, then a block of its own."""
    own = " other" * 7
    marks = [(p, ttl) for p, ttl in case.history_breakpoints if p < shared or p == case.longer]
    marks = [(shared if p == case.longer else p, ttl) for p, ttl in marks]  # its own block keeps its breakpoint
    return PrefixPlan([*case.blocks[:shared], own], marks)


def cost_after(case: Case, shared: int, price: Price) -> Cost:
    cache = PrefixCache()
    cache.account("k", history(case, shared), None, case.rules)
    outcome = cache.account("k", PrefixPlan(case.blocks, case.request_breakpoints), None, case.rules)
    return Cost.of(outcome, price)


def accepted(price: Price) -> None:
    """The loader's own checks on ``price`` (raises ConfigError as for a zhin.yaml row)."""
    row = {"input": price.input, "cached_input": price.cached_input, "cache_write": dict(price.cache_write),
           "source": price.source, "read_on": price.read_on}
    parse_providers({"p": {"default": "m", "models": {"m": row}}}, lambda key: None, "prices")


@pytest.mark.parametrize("mechanism", ["automatic", "explicit"])
@FAST
@given(data=st.data())
def test_a_shorter_shared_prefix_never_costs_less(mechanism: Literal["automatic", "explicit"], data: st.DataObject) -> None:
    case, price = data.draw(cases(mechanism)), data.draw(prices())
    accepted(price)
    longer, shorter = cost_after(case, case.longer, price), cost_after(case, case.shorter, price)
    assert shorter.cached_tokens <= longer.cached_tokens
    assert shorter.usd >= longer.usd - 1e-12


def test_the_property_is_not_vacuous() -> None:
    """The cases above do make a longer prefix cheaper (else the property would hold for nothing)."""
    case = Case([" w0" * 300] * 1 + [" w1" * 300, " w2" * 10], [(1, "5m")], 2, 0, [(1, "5m")],
                Rules("explicit", 0, 1))
    price = Price("p", "m", 3.0, 0.3, {"5m": 3.75}, "test", "2026-12-01")
    longer, shorter = cost_after(case, 2, price), cost_after(case, 0, price)
    assert longer.cached_tokens > 0 and shorter.cached_tokens == 0 and shorter.usd > longer.usd
    automatic = Case(case.blocks, [], 2, 0, [], Rules("automatic", 0, 1))
    assert cost_after(automatic, 0, price).usd > cost_after(automatic, 2, price).usd


def test_a_cached_price_above_input_breaks_it_and_is_refused() -> None:
    """Negative control: with cached_input > input, caching more costs more — and the loader refuses that row."""
    case = Case([" w0" * 300, " w1" * 300, " w2" * 10], [], 2, 0, [], Rules("automatic", 0, 1))
    inverted = Price("p", "m", 1.0, 2.0, {}, "test", "2026-12-01")
    assert cost_after(case, case.shorter, inverted).usd < cost_after(case, case.longer, inverted).usd  # violated
    with pytest.raises(ConfigError, match="cached_input"):
        accepted(inverted)
    # and a write price below the cached price breaks the explicit case the same way, and is refused too
    explicit = Case(case.blocks, [(1, "5m")], 2, 0, [(1, "5m")], Rules("explicit", 0, 1))
    cheap_write = Price("p", "m", 3.0, 1.0, {"5m": 0.5}, "test", "2026-12-01")
    assert cost_after(explicit, 0, cheap_write).usd < cost_after(explicit, 2, cheap_write).usd
    with pytest.raises(ConfigError, match="cache_write"):
        accepted(cheap_write)

"""What a request's input costs: the price table and the one cost definition (docs/economy.md "Cost").

A request's bill splits the prompt tokens three ways, all from the one cache simulator's ``CacheOutcome``:

* ``uncached`` — billed at the model's input price (on OpenAI and DeepSeek this includes the tokens the cache
  stores: writes are free there);
* ``cached`` (read from the cache) — at the cached-input price;
* ``cache_write`` (Anthropic: the tokens a breakpoint stores, by TTL) — at the write price of that TTL
  (5-minute writes 1.25×, 1-hour writes 2× the input price on Anthropic's list); a TTL without a write price is
  billed at the input price.

``Cost.of(outcome, price)`` is that arithmetic, and the only place it is done: ``report economy``,
``report window``, ``prefix-diff`` and ``trace`` all call it, so the same cache outcome costs the same everywhere.
The outcome is the simulator's: ``report economy``/``report window`` let a prefix go cold after the provider's
cache lifetime (cache groups) and count with one tokenizer; ``prefix-diff``/``trace`` feed one warm cache in the
provider's tokenizer. Where those coincide (one cache group, OpenAI) every command bills every request alike
(tests/test_cost_agreement.py); elsewhere the gap is the cold starts, and docs/economy.md says which is which.
Output tokens are out of scope (the window does not change them). ``Pricing`` chooses each (provider, model)'s row
once for a replay and keeps its notes; ``cost_dict`` is a cost as ``--json`` shows it.

The price table (rows per provider and model, zhin.yaml ``prices:``, ``--prices FILE``) is
``zhin_cli.pipeline.prices``, beside the config that overrides it: the one place prices live.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypedDict

from zhin_cli.cache import CacheOutcome
from zhin_cli.cache.replay import Routed
from zhin_cli.pipeline.prices import PER_TOKENS, Price, PriceTable


@dataclass(frozen=True)
class Cost:
    """What one request's input costs (USD) and the three token counts it is made of."""

    uncached_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    usd: float

    @classmethod
    def of(cls, outcome: CacheOutcome, price: Price) -> Cost:
        """The one cost definition (module docstring)."""
        written = sum(outcome.written_by_ttl.values())
        uncached = outcome.prompt_tokens - outcome.read - written
        usd = (uncached * price.input + outcome.read * price.cached_input
               + sum(tokens * price.write_price(ttl) for ttl, tokens in outcome.written_by_ttl.items())) / PER_TOKENS
        return cls(uncached, outcome.read, written, usd)


class CostTotalsDoc(TypedDict):
    """``CostTotals`` as ``--json`` shows it (USD rounded to 8 decimals)."""

    total: float
    per_request: float | None
    requests: int
    uncached_tokens: int
    cached_tokens: int
    cache_write_tokens: int


class RequestCostDoc(TypedDict):
    """One request's cost as ``--json`` shows it (``cost_dict``)."""

    uncached_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    usd: float


@dataclass
class CostTotals:
    """Costs summed over requests (``report economy``'s cost objects, ``report window``'s policies)."""

    requests: int = 0
    uncached_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    usd: float = 0.0

    def add(self, cost: Cost) -> None:
        self.requests += 1
        self.uncached_tokens += cost.uncached_tokens
        self.cached_tokens += cost.cached_tokens
        self.cache_write_tokens += cost.cache_write_tokens
        self.usd += cost.usd

    @classmethod
    def of(cls, costs: Iterable[Cost]) -> CostTotals:
        totals = cls()
        for cost in costs:
            totals.add(cost)
        return totals

    @property
    def per_request(self) -> float | None:
        return self.usd / self.requests if self.requests else None

    def as_dict(self) -> CostTotalsDoc:
        per = self.per_request
        return {"total": round(self.usd, 8), "per_request": None if per is None else round(per, 8),
                "requests": self.requests, "uncached_tokens": self.uncached_tokens,
                "cached_tokens": self.cached_tokens, "cache_write_tokens": self.cache_write_tokens}


SHARE_DECIMALS = 1  # a share or a hit rate: "73.4%", the one way every text view writes it


def format_share(value: float | None) -> str:
    """A share (0..1) as a percentage to ``SHARE_DECIMALS`` decimal (``0.734`` → ``73.4%``): cached shares and hit
    rates the one way every text view prints them (issue 31); ``—`` for none."""
    return "—" if value is None else f"{value:.{SHARE_DECIMALS}%}"


COST_DIGITS = 4  # significant digits of a cost under a dollar: a request costs fractions of a cent


def format_usd(value: float | None) -> str:
    """A cost the one way every view prints it (issue 31 §3): under a dollar to ``COST_DIGITS`` significant
    digits, trailing zeros kept so costs line up and compare (``$0.002400``, ``$0.003121``, ``$0.01153``), never in
    exponent form; a dollar or more as dollars and cents with thousands separators (``$1,234.50``); ``$0`` for
    nothing, ``—`` for none."""
    if value is None:
        return "—"
    if value == 0:
        return "$0"
    sign, size = ("-" if value < 0 else ""), float(f"{abs(value):.{COST_DIGITS - 1}e}")  # rounded first: 0.0009999996 is $0.001000
    decimals = COST_DIGITS - 1 - math.floor(math.log10(size))
    if size >= 1:
        return f"{sign}${abs(value):,.2f}"
    return f"{sign}${size:.{decimals}f}"


def cost_dict(cost: Cost) -> RequestCostDoc:
    """A request's cost as ``--json`` shows it: the three token counts and ``usd``."""
    return {"uncached_tokens": cost.uncached_tokens, "cached_tokens": cost.cached_tokens,
            "cache_write_tokens": cost.cache_write_tokens, "usd": round(cost.usd, 8)}


@dataclass
class Pricing:
    """What a replay's requests cost: the row of each (provider, model) chosen once, each note kept once (a
    default row used). A provider without rows (local servers, Gemini) has no cost and no note: nothing is shown."""

    table: PriceTable | None
    notes: list[str] = field(default_factory=list)
    _rows: dict[tuple[str, str], Price | None] = field(default_factory=dict, repr=False)

    def price(self, request: Routed) -> Price | None:
        key = (request.provider, request.model)  # PriceTable.choose maps profiles to price lists
        if key not in self._rows:
            choice = self.table.choose(*key) if self.table is not None else None
            if choice is not None and choice.note and choice.note not in self.notes:
                self.notes.append(choice.note)
            self._rows[key] = choice.price if choice is not None else None
        return self._rows[key]

    def cost(self, request: Routed, outcome: CacheOutcome) -> Cost | None:
        """``Cost.of`` at the request's row (the one cost definition), None without one."""
        price = self.price(request)
        return Cost.of(outcome, price) if price is not None else None

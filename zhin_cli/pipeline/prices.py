"""The price table: what a provider charges per million input tokens of each model (docs/economy.md "Cost").

Prices are data: ``prices.json`` beside this module (one row per provider and model, each with its source and
the date it was read), then ``prices:`` in ``zhin.yaml``, then ``--prices FILE`` (same shape), each replacing
rows of the one before. A model without a row gets its provider's default row and a one-line note — never a
silent zero; a provider without rows has no cost (``choose`` returns None). The table lives beside the config
that can override it; what a request costs at a row is ``zhin_cli.cache.cost.Cost.of``.
"""


from __future__ import annotations

import dataclasses
import datetime
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zhin_cli.core.errors import ConfigError
from zhin_cli.pipeline.providers.spec import PROVIDERS, register_provider
from zhin_cli.pipeline.providers.spec import provider as provider_spec

PRICES_VERSION = 1
PER_TOKENS = 1_000_000  # prices are USD per million tokens
MAX_PRICE = 1_000_000.0  # USD per million tokens: no model costs a dollar a token
# A price table is a few hundred rows at most (every model of every provider); reading one is linear, but
# jsonschema's checks cost ~40 µs a row: the bounds keep a hostile or generated file to about a second and
# ~100 MB (issue 27: 100,000 rows took 32 s and 900 MB). The size is checked before the file is parsed.
MAX_PRICE_ROWS = 5_000
MAX_PRICES_BYTES = 2 * 1024 * 1024
TTLS = ("5m", "1h")


def price_key(provider: str) -> str:
    """The provider whose rows bill ``provider`` (``ProviderSpec.price_key``: openai-reasoning → openai); a name no
    spec has bills under itself."""
    spec = PROVIDERS.get(provider)
    return spec.prices_under if spec is not None else provider


class _PriceKeys(Mapping[str, str]):
    """The providers billed at another provider's rows, read from the provider registry when asked (the old
    ``PRICE_PROVIDERS`` table, kept for its readers)."""

    def _table(self) -> dict[str, str]:
        return {name: spec.prices_under for name, spec in PROVIDERS.items() if spec.prices_under != name}

    def __getitem__(self, name: str) -> str:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


PRICE_PROVIDERS: Mapping[str, str] = _PriceKeys()
BUILTIN = Path(__file__).with_name("prices.json")


@dataclass(frozen=True)
class Price:
    """One row: USD per million tokens of one provider's model."""

    provider: str
    model: str
    input: float
    cached_input: float
    cache_write: Mapping[str, float] = field(default_factory=dict)  # TTL → price; a TTL not listed: input price
    source: str = ""
    read_on: str = ""  # YYYY-MM-DD

    def write_price(self, ttl: str) -> float:
        return self.cache_write.get(ttl, self.input)

    def as_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "input": self.input, "cached_input": self.cached_input,
                "cache_write": dict(self.cache_write), "source": self.source, "read_on": self.read_on}


@dataclass(frozen=True)
class PriceChoice:
    """The row a (provider, model) is billed at; ``note`` says so when it is the provider's default row."""

    price: Price
    note: str | None = None


@dataclass(frozen=True)
class ProviderPrices:
    default: str
    models: Mapping[str, Price]


@dataclass(frozen=True)
class PriceTable:
    providers: Mapping[str, ProviderPrices]

    def choose(self, provider: str, model: str) -> PriceChoice | None:
        """The row for ``model``: its own (exact, else the longest row name it extends with ``-``, so
        ``gpt-4o-2024-08-06`` is billed as ``gpt-4o``), else the provider's default row with a note; None when
        the table has no rows for ``provider``."""
        provider = price_key(provider)
        rows = self.providers.get(provider)
        if rows is None:
            return None
        if model in rows.models:
            return PriceChoice(rows.models[model])
        extended = [name for name in rows.models if model.startswith(name + "-")]
        if extended:
            return PriceChoice(rows.models[max(extended, key=len)])
        default = rows.models[rows.default]
        return PriceChoice(default, f"no price for {provider} model {model!r}: billed at {provider}'s default row "
                                    f"({rows.default}; add a row under prices: in zhin.yaml or --prices FILE)")

    def replaced_by(self, other: PriceTable) -> PriceTable:
        """This table with ``other``'s rows (and defaults) in place of its own."""
        merged: dict[str, ProviderPrices] = dict(self.providers)
        for name, rows in other.providers.items():
            mine = merged.get(name)
            models = dict(mine.models) if mine else {}
            for model, row in rows.models.items():
                # a row that names no write prices keeps the write premium of the row it replaces (Anthropic's
                # 1.25×/2× of the input price, scaled to the new input price): an override of the input price
                # must not drop writes to the plain input price unnoticed
                old = models.get(model)
                if old is not None and old.cache_write and not row.cache_write and old.input > 0:
                    row = dataclasses.replace(row, cache_write={ttl: round(row.input * value / old.input, 6)
                                                                for ttl, value in old.cache_write.items()})
                models[model] = row
            merged[name] = ProviderPrices(rows.default if rows.default else (mine.default if mine else ""), models)
        return PriceTable(merged)


# --- reading tables ----------------------------------------------------------------------------------


def _row_schema() -> dict[str, Any]:
    # finite and below a million dollars per million tokens: NaN passes "minimum" and a huge price overflows a sum
    price = {"type": "number", "minimum": 0, "maximum": MAX_PRICE}
    return {
        "type": "object", "additionalProperties": False, "required": ["input", "cached_input", "source", "read_on"],
        "properties": {
            "input": {**price, "description": "USD per million uncached input tokens"},
            "cached_input": {**price, "description": "USD per million tokens read from the prompt cache"},
            "cache_write": {"type": "object", "propertyNames": {"enum": list(TTLS)}, "additionalProperties": price,
                            "description": "TTL → USD per million tokens written to the cache (not listed: input price)"},
            "source": {"type": "string", "minLength": 1, "description": "where the price was read"},
            "read_on": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "the date it was read (YYYY-MM-DD)"},
        },
    }


def providers_schema() -> dict[str, Any]:
    """``prices:`` in zhin.yaml, and ``providers`` of a prices file: provider → {default, models}."""
    return {
        "type": "object", "description": "provider → its price rows (USD per million tokens; docs/economy.md)",
        "additionalProperties": {
            "type": "object", "additionalProperties": False,
            "properties": {"default": {"type": "string", "minLength": 1, "description": "the row an unknown model is billed at"},
                           "models": {"type": "object", "additionalProperties": _row_schema()}},
        },
    }


def file_schema() -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": ["version", "providers"],
            "properties": {"version": {"const": PRICES_VERSION}, "unit": {"type": "string"}, "note": {"type": "string"},
                           "providers": providers_schema()}}


@functools.cache
def _validator(kind: str) -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(file_schema() if kind == "file" else providers_schema())


def dates_as_text(data: Any) -> Any:
    """YAML reads ``read_on: 2026-12-01`` as a date; the table keeps the text."""
    if isinstance(data, dict):
        return {key: dates_as_text(value) for key, value in data.items()}
    if isinstance(data, datetime.date):
        return data.isoformat()
    return data


def parse_providers(data: Any, where: Callable[[str], str | None], prefix: str = "") -> PriceTable:
    """A ``provider → {default, models}`` mapping as a table; ``where(key)``: ``file:line`` of a key (keys are
    relative to ``prefix``, e.g. ``prices``); every problem is one ``ConfigError`` at its line."""
    from zhin_cli.core.readers import key_path
    from zhin_cli.pipeline.schema_errors import describe

    data = dates_as_text(data)
    _check_row_count(data, where, prefix)
    for error in _validator("providers").iter_errors(data):
        key, message = describe(error)
        full = ".".join(p for p in (prefix, key) if p)
        message = message.replace(key or "the config", full, 1) if key else f"{prefix or 'prices'}: {message}"
        raise ConfigError(message[:300], where=where(full))
    providers: dict[str, ProviderPrices] = {}
    for provider, entry in data.items():
        models: dict[str, Price] = {}
        for model, row in (entry.get("models") or {}).items():
            key = ".".join(p for p in (prefix, key_path([provider, "models", model])) if p)
            price = Price(provider, model, float(row["input"]), float(row["cached_input"]),
                          {ttl: float(v) for ttl, v in (row.get("cache_write") or {}).items()}, row["source"], row["read_on"])
            _check_row(price, key, where)
            models[model] = price
        default = entry.get("default") or ""
        providers[provider] = ProviderPrices(default, models)
    return PriceTable(providers)


def _check_row_count(data: Any, where: Callable[[str], str | None], prefix: str) -> None:
    """At most ``MAX_PRICE_ROWS`` rows, counted before jsonschema walks them."""
    if not isinstance(data, dict):
        return  # the schema says what is wrong
    count = sum(len(entry["models"]) for entry in data.values()
                if isinstance(entry, dict) and isinstance(entry.get("models"), dict))
    if count > MAX_PRICE_ROWS:
        raise ConfigError(f"{prefix or 'prices'}: {count:,} price rows; a table has at most {MAX_PRICE_ROWS:,}",
                          where=where(prefix))


def _check_row(price: Price, key: str, where: Callable[[str], str | None]) -> None:
    """What a cost model needs to be monotone: a cached token never costs more than an uncached one, and a
    written token never less than a read one (so a smaller cached prefix never makes a request cheaper)."""
    for name, value in (("input", price.input), ("cached_input", price.cached_input), *price.cache_write.items()):
        if not math.isfinite(value):  # YAML's .nan/.inf: jsonschema's minimum/maximum let NaN through
            field_key = f"{key}.{name}" if name in ("input", "cached_input") else f"{key}.cache_write"
            raise ConfigError(f"{key}: {name} must be a finite number, got {value}", where=where(field_key))
    try:
        datetime.date.fromisoformat(price.read_on)
    except ValueError:
        raise ConfigError(f"{key}.read_on: not a date: {price.read_on!r}", where=where(f"{key}.read_on")) from None
    if price.cached_input > price.input:
        raise ConfigError(f"{key}: cached_input ({price.cached_input:g}) is above input ({price.input:g})",
                          where=where(f"{key}.cached_input"))
    for ttl, value in price.cache_write.items():
        if value < price.cached_input:
            raise ConfigError(f"{key}: cache_write.{ttl} ({value:g}) is below cached_input ({price.cached_input:g})",
                              where=where(f"{key}.cache_write"))


def _check_derived(merged: PriceTable, rows: PriceTable, where: Callable[[str], str | None], prefix: str) -> None:
    """The checks of a row again on what :meth:`PriceTable.replaced_by` derived from it: a row that names no write
    prices takes the premium of the row it replaces (Anthropic's 2× of a $1M input is $2M, past ``MAX_PRICE``;
    a small premium under a raised cached price would make a write cheaper than a read)."""
    from zhin_cli.core.readers import key_path

    for provider, entry in rows.providers.items():
        for model, row in entry.models.items():
            derived = merged.providers[provider].models[model]
            if derived is row:
                continue
            key = ".".join(p for p in (prefix, key_path([provider, "models", model])) if p)
            for ttl, value in derived.cache_write.items():
                if value > MAX_PRICE:
                    raise ConfigError(f"{key}: cache_write.{ttl} would be {value:,.2f} USD per million tokens (the "
                                      f"premium of the row it replaces), above the cap of {MAX_PRICE:,.0f}: give "
                                      "cache_write in this row", where=where(key))
            try:
                _check_row(derived, key, where)
            except ConfigError as error:
                raise ConfigError(f"{error.message} (cache_write derived from the premium of the row it replaces: "
                                  "give cache_write in this row)", where=error.where) from None


def _check_defaults(table: PriceTable, where: Callable[[str], str | None], prefix: str) -> None:
    for provider, rows in table.providers.items():
        if not rows.default:
            raise ConfigError(f"{prefix}{provider}: no default row (default: MODEL)", where=where(f"{prefix}{provider}"))
        if rows.default not in rows.models:
            raise ConfigError(f"{prefix}{provider}.default names {rows.default!r}, which has no row "
                              f"(rows: {', '.join(rows.models) or 'none'})", where=where(f"{prefix}{provider}.default"))


def read_prices(path: Path, base: PriceTable | None = None) -> PriceTable:
    """A prices file (JSON or YAML, the shape of the shipped ``prices.json``); its rows go over ``base``'s
    (each provider then needs a default row, from the file or from ``base``: refused at its line otherwise)."""
    from zhin_cli.core.readers import enclosing_key, read_json_keyed, read_yaml_file
    from zhin_cli.pipeline.schema_errors import describe

    _check_size(path)
    if path.suffix.lower() == ".json":  # JSON's parser: a tab-indented file (jq --tab) is no YAML
        data, lines_of = read_json_keyed(path, what="prices file")
    else:
        data, lines = read_yaml_file(path, what="prices file")  # the line of every key (and duplicate keys refused)
        lines_of = lambda: lines  # noqa: E731 - one shape for both readers

    def where(key: str) -> str:
        lines = lines_of()  # a JSON file's lines are found only now, when an error needs one
        found = enclosing_key(lines, key)
        return f"{path}:{lines[found]}" if found is not None else str(path)

    if not isinstance(data, dict):
        raise ConfigError("a prices file is a mapping: {version: 1, providers: {…}}", where=where(""))
    # the rows are checked by parse_providers (with their own key names); the envelope here, providers: included
    # (dates as text here and in parse_providers: the rows are copied once, not twice)
    envelope = dates_as_text({**data, "providers": {}} if isinstance(data.get("providers"), dict) else data)
    for error in _validator("file").iter_errors(envelope):
        key, message = describe(error)
        raise ConfigError(message.replace("the config", "the prices file")[:300], where=where(key))
    table = parse_providers(data["providers"], where, "providers")
    merged = base.replaced_by(table) if base is not None else table
    _check_defaults(merged, where, "providers.")
    _check_derived(merged, table, where, "providers")
    return table


def _check_size(path: Path) -> None:
    try:
        size = path.stat().st_size
    except OSError:
        return  # missing or unreadable: the reader says so, in its words
    if size > MAX_PRICES_BYTES:
        raise ConfigError(f"prices file is {size:,} bytes; a prices file has at most {MAX_PRICES_BYTES:,} "
                          f"({MAX_PRICE_ROWS:,} rows)", where=str(path))


@functools.cache
def builtin_prices() -> PriceTable:
    """The table shipped with zhin (``prices.json``; each row names its source and the date it was read)."""
    return read_prices(BUILTIN)


def load_prices(config_prices: Mapping[str, Any] | None = None, prices_file: Path | None = None, *,
                config_where: Callable[[str], str | None] | None = None) -> PriceTable:
    """The built-in table, then the rows registered providers bring (``ProviderSpec.prices``), then ``prices:`` of
    zhin.yaml (``config_where``: ``Config.where``), then ``--prices FILE``."""
    table = with_provider_rows(builtin_prices())
    if config_prices:
        where = config_where or (lambda key: None)
        rows = parse_providers(config_prices, where, "prices")
        table = table.replaced_by(rows)
        _check_defaults(table, where, "prices.")
        _check_derived(table, rows, where, "prices")
    if prices_file is not None:
        table = table.replaced_by(read_prices(prices_file, table))
    return table


def with_provider_rows(table: PriceTable) -> PriceTable:
    """``table`` with the rows of every registered provider that brings its own (a plugin's ``ProviderSpec.prices``),
    each checked as a zhin.yaml ``prices:`` entry is (a bad row is one ``ConfigError`` naming the provider)."""
    for name, spec in PROVIDERS.items():
        if spec.prices is None:
            continue
        prefix = f"provider {name}: prices"
        rows = parse_providers({spec.prices_under: spec.prices}, lambda key: None, prefix)
        merged = table.replaced_by(rows)
        _check_defaults(merged, lambda key: None, f"{prefix}.")
        _check_derived(merged, rows, lambda key: None, prefix)
        table = merged
    return table


# --- a provider's own rows: its spec's ``prices`` (API version 1's names, kept) ---------------------------------

def register_prices(name: str, rows: Mapping[str, Any], *, replace: bool = False) -> Mapping[str, Any]:
    """Give the registered provider ``name`` its price rows (one provider entry of prices.json): the spec's
    ``prices`` field, set here. A thin alias kept for API version 1 — one place holds a provider's rows, its spec;
    a plugin may as well pass ``prices=`` to its ``ProviderSpec``. Rows already on the spec need ``replace``."""
    spec = provider_spec(name)  # an unknown provider is the registering plugin's one-line error
    if spec.prices is not None and not replace:
        raise ConfigError(f"provider {name}: its price rows are already given (replace=True overrides them)")
    parse_providers({spec.prices_under: dict(rows)}, lambda key: None, f"provider {name}: prices")
    register_provider(dataclasses.replace(spec, prices=dict(rows)), replace=True)  # the plugin's ledger restores the old spec
    return rows


class _SpecPrices(Mapping[str, Mapping[str, Any]]):
    """``PRICE_ROWS``: the price rows registered providers bring, by provider — read from their specs (a live view,
    kept for API version 1; nothing is stored here)."""

    def _rows(self) -> dict[str, Mapping[str, Any]]:
        return {name: spec.prices for name, spec in PROVIDERS.items() if spec.prices is not None}

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        return self._rows()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows())

    def __len__(self) -> int:
        return len(self._rows())


PRICE_ROWS: Mapping[str, Mapping[str, Any]] = _SpecPrices()

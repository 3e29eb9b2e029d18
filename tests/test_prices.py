"""The price table (zhin_cli/pipeline/prices.py): the shipped rows, how a model finds its row, the three layers
(built-in → zhin.yaml ``prices:`` → ``--prices FILE``) and the one-line errors of a bad row, in the library and
through the commands that take ``--prices``."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import EXIT_CANNOT_RUN, ConfigError
from zhin_cli.pipeline.config import load_config
from zhin_cli.pipeline.prices import BUILTIN, builtin_prices, load_prices, read_prices

EXIT_DIFF_TROUBLE = 2  # prefix-diff's exit status for trouble (like diff)
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PRIVATE = FIXTURES / "private-chat.jsonl"

# A prices file whose lines the error tests name (line numbers in the comments).
BASE = """\
version: 1
providers:
  openai:
    default: gpt-4o
    models:
      gpt-4o:
        input: 2.5
        cached_input: 1.25
        cache_write: {"5m": 3.0}
        source: test
        read_on: "2026-01-01"
"""  # lines 7 input, 8 cached_input, 9 cache_write, 10 source, 11 read_on


def prices_file(tmp_path: Path, old: str = "", new: str = "", name: str = "prices.yaml") -> Path:
    assert old in BASE
    path = tmp_path / name
    path.write_text(BASE.replace(old, new) if old else BASE, encoding="utf-8")
    return path


# --- the shipped table ------------------------------------------------------------------------------


def test_the_built_in_table_loads_and_every_row_names_its_source_and_date() -> None:
    table = builtin_prices()
    assert {"openai", "anthropic", "deepseek"} <= set(table.providers)
    rows = [row for provider in table.providers.values() for row in provider.models.values()]
    assert len(rows) >= 10
    for row in rows:
        assert row.source.strip(), row
        assert datetime.date.fromisoformat(row.read_on).isoformat() == row.read_on  # ISO YYYY-MM-DD
        assert 0 <= row.cached_input <= row.input
        assert all(value >= row.cached_input for value in row.cache_write.values())
    for provider in table.providers.values():
        assert provider.default in provider.models
    # the file itself is the one shipped: JSON with the same rows
    shipped = json.loads(BUILTIN.read_text(encoding="utf-8"))
    assert sum(len(p["models"]) for p in shipped["providers"].values()) == len(rows)


def test_anthropic_writes_cost_more_than_input_and_reads_less() -> None:
    row = builtin_prices().choose("anthropic", "claude-sonnet-5")
    assert row is not None and row.note is None
    price = row.price
    assert price.write_price("5m") == pytest.approx(1.25 * price.input)
    assert price.write_price("1h") == pytest.approx(2 * price.input)
    assert price.cached_input == pytest.approx(0.1 * price.input)


# --- choose ---------------------------------------------------------------------------------------


def test_choose_exact_dated_suffix_default_and_unknown_provider() -> None:
    table = builtin_prices()
    exact = table.choose("openai", "gpt-4o")
    assert exact is not None and exact.price.model == "gpt-4o" and exact.note is None
    dated = table.choose("openai", "gpt-4o-2024-08-06")
    assert dated is not None and dated.price.model == "gpt-4o" and dated.note is None
    # control: gpt-4o-mini extends gpt-4o's name but is its own row, and its dated name finds it (the longest)
    mini = table.choose("openai", "gpt-4o-mini")
    assert mini is not None and mini.price.model == "gpt-4o-mini" and mini.price.input < exact.price.input
    mini_dated = table.choose("openai", "gpt-4o-mini-2024-07-18")
    assert mini_dated is not None and mini_dated.price.model == "gpt-4o-mini"
    unknown = table.choose("openai", "gpt-9-turbo")
    assert unknown is not None and unknown.price.model == "gpt-4o"  # the provider's default row …
    assert unknown.note and "gpt-9-turbo" in unknown.note and "default" in unknown.note  # … never silently
    assert "\n" not in unknown.note
    assert table.choose("llama-cpp", "gpt-4o") is None  # no rows for the provider: no cost
    assert table.choose("gemini", "gemini-2.5-flash") is None


# --- layers ---------------------------------------------------------------------------------------


def test_zhin_yaml_prices_override_a_row_and_add_one(tmp_path: Path) -> None:
    config_file = tmp_path / "zhin.yaml"
    config_file.write_text("""\
prices:
  openai:
    models:
      gpt-4o:
        input: 10.0
        cached_input: 1.0
        source: our contract
        read_on: 2026-11-30
      my-model:
        input: 0.5
        cached_input: 0.25
        source: ours
        read_on: 2026-11-30
""", encoding="utf-8")
    table = load_config(config_file).price_table()
    gpt = table.choose("openai", "gpt-4o")
    assert gpt is not None and (gpt.price.input, gpt.price.cached_input, gpt.price.source) == (10.0, 1.0, "our contract")
    assert gpt.price.read_on == "2026-11-30"  # an unquoted YAML date kept as text
    added = table.choose("openai", "my-model")
    assert added is not None and added.note is None and added.price.input == 0.5
    # control: rows zhin.yaml does not name are the built-in ones
    mini = table.choose("openai", "gpt-4o-mini")
    assert mini is not None and mini.price == builtin_prices().choose("openai", "gpt-4o-mini").price  # type: ignore[union-attr]


def test_a_prices_file_wins_over_zhin_yaml(tmp_path: Path) -> None:
    config_file = tmp_path / "zhin.yaml"
    config_file.write_text("prices:\n  openai:\n    models:\n      gpt-4o: {input: 10.0, cached_input: 1.0, "
                           "source: yaml, read_on: 2026-11-30}\n", encoding="utf-8")
    config = load_config(config_file)
    table = config.price_table(prices_file(tmp_path))
    gpt = table.choose("openai", "gpt-4o")
    assert gpt is not None and (gpt.price.input, gpt.price.source) == (2.5, "test")
    assert gpt.price.write_price("5m") == 3.0 and gpt.price.write_price("1h") == 2.5  # a TTL not listed: input price
    assert config.price_table().choose("openai", "gpt-4o").price.source == "yaml"  # type: ignore[union-attr]


# --- bad input: one line, at its line ------------------------------------------------------------------


BAD = [
    ("input: 2.5", "input: abc", 7, "must be a number"),
    ("cached_input: 1.25", "cached_input: 3.0", 8, "cached_input (3) is above input (2.5)"),
    ('{"5m": 3.0}', '{"5m": 1.0}', 9, "cache_write.5m (1) is below cached_input (1.25)"),
    ('{"5m": 3.0}', '{"2h": 3.0}', 9, "2h"),
    ("source: test", "source: test\n        output: 10.0", 11, "output"),
    ('read_on: "2026-01-01"', 'read_on: "2026-13-01"', 11, "not a date"),
    ('read_on: "2026-01-01"', 'read_on: "1 Jan 2026"', 11, "read_on"),
]


@pytest.mark.parametrize(("old", "new", "line", "message"), BAD, ids=[b[1].split(":")[0].strip() + str(b[2]) for b in BAD])
def test_a_bad_row_is_one_error_at_its_line(tmp_path: Path, old: str, new: str, line: int, message: str) -> None:
    path = prices_file(tmp_path, old, new)
    with pytest.raises(ConfigError) as raised:
        read_prices(path)
    text = str(raised.value)
    assert text.startswith(f"{path}:{line}: ") and message in text and "\n" not in text


def test_the_good_file_is_read(tmp_path: Path) -> None:
    # negative control of the bad rows: the same file unchanged is accepted
    table = read_prices(prices_file(tmp_path))
    assert table.choose("openai", "gpt-4o").price.cache_write == {"5m": 3.0}  # type: ignore[union-attr]


def test_a_default_naming_no_row_in_zhin_yaml_is_one_error_at_its_line(tmp_path: Path) -> None:
    config_file = tmp_path / "zhin.yaml"
    config_file.write_text("prices:\n  openai:\n    default: gpt-9\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(config_file).price_table()
    assert str(raised.value).startswith(f"{config_file}:3: ") and "gpt-9" in str(raised.value)


def test_a_default_naming_no_row_in_a_prices_file_names_its_line(tmp_path: Path) -> None:
    path = prices_file(tmp_path, "default: gpt-4o", "default: gpt-9")
    with pytest.raises(ConfigError) as raised:
        load_prices(None, path)
    assert str(raised.value).startswith(f"{path}:4: ")


def test_an_unquoted_impossible_date_is_one_error(tmp_path: Path) -> None:
    path = prices_file(tmp_path, 'read_on: "2026-01-01"', "read_on: 2026-13-01")
    with pytest.raises(ConfigError):
        read_prices(path)


# --- through the commands -----------------------------------------------------------------------------


def _json(result: Any) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize(("command", "code"), [(["report", "economy", "-p", "openai"], EXIT_CANNOT_RUN),
                                             (["prefix-diff", "-p", "openai"], EXIT_DIFF_TROUBLE),
                                             (["trace", "-p", "openai"], EXIT_CANNOT_RUN)])
def test_a_bad_prices_file_is_one_line_and_its_exit_code(zhin: Any, tmp_path: Path, command: list[str], code: int) -> None:
    """A bad row cannot run (3); prefix-diff exits like diff, 2 for trouble."""
    bad = prices_file(tmp_path, "cached_input: 1.25", "cached_input: 3.0", name="bad.yaml")
    result = zhin(*command, PRIVATE, "--prices", bad)
    assert result.returncode == code
    assert result.stderr.strip().splitlines() == [f"zhin: error: {bad}:8: providers.openai.models.gpt-4o: cached_input (3) "
                                                  "is above input (2.5)"]
    assert "Traceback" not in result.stderr and result.stdout == ""
    # control: the good file is accepted
    assert zhin(*command, PRIVATE, "--prices", prices_file(tmp_path), "--json").returncode == 0


def test_prices_file_changes_the_costs_of_every_command(zhin: Any, tmp_path: Path) -> None:
    """Double gpt-4o's input and cached prices: every cost doubles (writes are free on OpenAI)."""
    double = tmp_path / "double.json"
    row = builtin_prices().choose("openai", "gpt-4o").price  # type: ignore[union-attr]
    double.write_text(json.dumps({"version": 1, "providers": {"openai": {"default": "gpt-4o", "models": {"gpt-4o": {
        "input": row.input * 2, "cached_input": row.cached_input * 2, "source": "test", "read_on": "2026-12-01"}}}}}))
    busy = FIXTURES / "group-busy.jsonl"

    def economy(*extra: object) -> float:
        data = _json(zhin("report", "economy", busy, "-p", "openai", "--json", *extra))
        return float(data["sessions"][0]["cache"]["openai"]["cost"]["adr"]["total"])

    def prefix_diff(*extra: object) -> float:
        return float(_json(zhin("prefix-diff", busy, "-p", "openai", "--json", *extra))["sessions"][0]["summary"]["cost"]["total"])

    def trace(*extra: object) -> float:
        data = _json(zhin("trace", busy, "-p", "openai", "--all", "--json", *extra))
        return sum(r["cost"]["usd"] for r in data["requests"])

    for figure in (economy, prefix_diff, trace):
        base = figure()
        assert base > 0
        assert figure("--prices", double) == pytest.approx(2 * base, rel=1e-6)
    assert prefix_diff() == pytest.approx(trace(), rel=1e-6)  # one cost definition: the same requests cost the same


def test_a_provider_without_rows_shows_no_cost_and_no_error(zhin: Any) -> None:
    busy = FIXTURES / "group-busy.jsonl"
    local = _json(zhin("prefix-diff", busy, "-p", "llama-cpp", "--json"))
    assert "cost" not in local["sessions"][0]["summary"] and all("cost" not in p for p in local["sessions"][0]["pairs"])
    assert local["notes"] == []
    traced = _json(zhin("trace", busy, "-p", "llama-cpp", "--all", "--json"))
    assert all("cost" not in r for r in traced["requests"]) and traced["notes"] == []
    text = zhin("trace", busy, "-p", "llama-cpp", "--all")
    assert text.returncode == 0 and "$" not in text.stdout and "note:" not in text.stderr
    # control: the same session on openai has costs everywhere
    priced = _json(zhin("prefix-diff", busy, "-p", "openai", "--json"))
    assert all("cost" in p for p in priced["sessions"][0]["pairs"])
    assert "$" in zhin("trace", busy, "-p", "openai", "--all").stdout
    # prefix-diff's text: a cost column and the session's total for openai, neither for a local server
    priced_text = zhin("prefix-diff", busy, "-p", "openai").stdout
    local_text = zhin("prefix-diff", busy, "-p", "llama-cpp").stdout
    assert re.search(r"^\s+req\s+common\s+cached\s+new\s+warm cost\s", priced_text, re.M) and "input cost $" in priced_text
    assert " cost " not in local_text.splitlines()[1] and "$" not in local_text and "input cost" not in local_text


def test_a_model_without_a_row_is_billed_at_the_default_with_one_note(zhin: Any) -> None:
    busy = FIXTURES / "group-busy.jsonl"
    text = zhin("prefix-diff", busy, "-p", "openai", "-m", "gpt-9-turbo")
    notes = [line for line in text.stderr.splitlines() if line.startswith("zhin: note: ")]
    assert len(notes) == 1 and "gpt-9-turbo" in notes[0]  # once, though 16 requests use it
    data = _json(zhin("prefix-diff", busy, "-p", "openai", "-m", "gpt-9-turbo", "--json"))
    assert len(data["notes"]) == 1 and "gpt-9-turbo" in data["notes"][0]
    traced = _json(zhin("trace", busy, "-p", "openai", "-m", "gpt-9-turbo", "--json"))
    assert len(traced["notes"]) == 1 and "cost" in traced["requests"][0]
    # control: a model with its own row has no note
    assert "zhin: note:" not in zhin("prefix-diff", busy, "-p", "openai", "-m", "gpt-4o").stderr


# --- review findings: what a price must be, and what an override keeps ------------------------------------


def test_a_prices_file_without_providers_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text("version: 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        read_prices(path)
    assert str(raised.value) == f"{path}:1: the prices file needs providers"


@pytest.mark.parametrize("value", [".nan", ".inf", "1.0e+308"])
def test_a_price_that_is_not_a_finite_dollar_amount_is_refused(tmp_path: Path, value: str) -> None:
    """NaN passes jsonschema's minimum; 1e308 overflows a session's sum to infinity: both would print NaN/Infinity
    (not JSON) and make report window compare nothing."""
    path = prices_file(tmp_path, "input: 2.5", f"input: {value}")
    with pytest.raises(ConfigError) as raised:
        read_prices(path)
    assert str(raised.value).startswith(f"{path}:7: ")
    assert read_prices(prices_file(tmp_path, "input: 2.5", "input: 1.0e+3")).choose("openai", "gpt-4o") is not None


def test_an_override_without_write_prices_keeps_the_write_premium_it_replaces(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("version: 1\nproviders:\n  anthropic:\n    models:\n      claude-sonnet-5: {input: 3.0, cached_input: 0.3, "
                    "source: contract, read_on: 2026-11-20}\n", encoding="utf-8")
    row = load_prices(None, path).choose("anthropic", "claude-sonnet-5")
    assert row is not None and dict(row.price.cache_write) == {"5m": 3.75, "1h": 6.0}  # 1.25× and 2× of the new input
    own = tmp_path / "b.yaml"  # control: a row that names its write prices keeps them
    own.write_text(path.read_text(encoding="utf-8").replace("source:", "cache_write: {5m: 3.0}, source:"), encoding="utf-8")
    row = load_prices(None, own).choose("anthropic", "claude-sonnet-5")
    assert row is not None and dict(row.price.cache_write) == {"5m": 3.0}


def test_a_json_prices_file_reads_json_numbers(tmp_path: Path) -> None:
    """`1e-1` is a JSON number (Python's json.dump writes small floats so); YAML 1.1 read it as text (YAML inputs
    now read YAML 1.2's numbers too: tests/test_prices_input.py)."""
    row = {"input": 2.5, "cached_input": 1.25, "source": "test", "read_on": "2026-01-01"}
    document = {"version": 1, "providers": {"openai": {"models": {"gpt-4o": row}}}}
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(document).replace("1.25", "1.25e0").replace("2.5,", "25e-1,"), encoding="utf-8")
    choice = load_prices(None, path).choose("openai", "gpt-4o")
    assert choice is not None and (choice.price.input, choice.price.cached_input) == (2.5, 1.25)
    quoted = tmp_path / "quoted.json"  # control: the check sees a number given as text
    quoted.write_text(path.read_text(encoding="utf-8").replace("25e-1,", '"25e-1",'), encoding="utf-8")
    with pytest.raises(ConfigError, match="must be a number"):
        load_prices(None, quoted)

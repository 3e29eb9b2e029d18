"""Reading prices files and YAML numbers (issue 27 items 9 and 11): a ``.json`` prices file is read by JSON's parser
(``jq --tab`` output was refused as invalid YAML) with its errors at their ``file:line``; prices read in linear time
within documented bounds (100,000 rows took 32 s and 900 MB); YAML inputs read YAML 1.2's numbers (``2:30`` was
150 and ``010`` was 8, silently); write prices derived from a replaced row's premium are checked against the cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from zhin_cli.core import readers
from zhin_cli.core.errors import EXIT_CANNOT_RUN, ConfigError
from zhin_cli.core.readers import json_key_lines, read_json_keyed, read_yaml_file
from zhin_cli.pipeline import prices
from zhin_cli.pipeline.config import load_config
from zhin_cli.pipeline.prices import BUILTIN, MAX_PRICE, builtin_prices, load_prices, read_prices

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PRIVATE = FIXTURES / "private-chat.jsonl"


def row(**fields: Any) -> dict[str, Any]:
    return {"input": 2.5, "cached_input": 1.25, "source": "test", "read_on": "2026-01-01", **fields}


def tabbed(tmp_path: Path, document: Any, name: str = "prices.json") -> Path:
    """What ``jq --tab .`` writes: one tab per level of indentation."""
    path = tmp_path / name
    path.write_text(json.dumps(document, indent="\t") + "\n", encoding="utf-8")
    return path


def line_of(path: Path, needle: str) -> int:
    return next(n for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if needle in text)


# --- item 9: a .json prices file is JSON --------------------------------------------------------------


def test_a_tab_indented_json_prices_file_is_read_and_the_same_text_as_yaml_is_not(tmp_path: Path) -> None:
    path = tabbed(tmp_path, json.loads(BUILTIN.read_text(encoding="utf-8")))
    assert "\t" in path.read_text(encoding="utf-8")
    assert read_prices(path) == builtin_prices()  # every row, as the shipped file
    # negative control: the text is the one PyYAML refused (libyaml, used first now, takes tabs in flow context)
    with pytest.raises(yaml.scanner.ScannerError, match="found character '\\\\t' that cannot start any token"):
        yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)


def test_a_json_prices_file_goes_through_no_yaml_parser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tabbed(tmp_path, {"version": 1, "providers": {"openai": {"default": "m", "models": {"m": row()}}}})

    def no_yaml(text: str) -> Any:
        raise AssertionError("a .json file went to the YAML parser")

    monkeypatch.setattr(readers, "_compose", no_yaml)
    assert read_prices(path).choose("openai", "m") is not None
    as_yaml = path.with_suffix(".yaml")
    as_yaml.write_text(json.dumps(table_of(1)), encoding="utf-8")
    with pytest.raises(AssertionError, match="YAML parser"):  # control: a .yaml file does
        read_prices(as_yaml)


def test_the_commands_take_a_tab_indented_prices_file(zhin: Any, tmp_path: Path) -> None:
    path = tabbed(tmp_path, {"version": 1, "providers": {"openai": {"models": {"gpt-4o": row(input=7.0)}}}})
    result = zhin("report", "economy", PRIVATE, "-p", "openai", "--prices", path, "--json")
    assert result.returncode == 0, result.stderr
    assert '"input": 7.0' in result.stdout
    shipped = zhin("report", "economy", PRIVATE, "-p", "openai", "--json")
    assert '"input": 7.0' not in shipped.stdout and '"input": 2.5' in shipped.stdout  # control: the file's row shows


@pytest.mark.parametrize(("change", "needle", "message"), [
    ({"cached_input": 3.0}, '"cached_input": 3.0', "cached_input (3) is above input (2.5)"),
    ({"read_on": "2026-02-30"}, '"read_on": "2026-02-30"', "read_on: not a date"),
    ({"input": "cheap"}, '"input": "cheap"', "must be a number"),
    ({"cache_write": {"5m": 1.0}}, '"cache_write"', "cache_write.5m (1) is below cached_input"),
])
def test_a_bad_row_of_a_json_file_is_one_error_at_its_line(tmp_path: Path, change: dict[str, Any], needle: str,
                                                           message: str) -> None:
    rows = {"a": row(), "b": row(), "c": row(**change)}
    path = tabbed(tmp_path, {"version": 1, "providers": {"openai": {"default": "a", "models": rows}}})
    with pytest.raises(ConfigError) as raised:
        read_prices(path)
    assert raised.value.where == f"{path}:{line_of(path, needle)}" and message in raised.value.message
    good = tabbed(tmp_path, {"version": 1, "providers": {"openai": {"default": "a", "models": {"a": row()}}}}, "good.json")
    assert read_prices(good).choose("openai", "a") is not None  # control


def test_a_duplicate_key_in_a_json_file_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    text = '{\n\t"version": 1,\n\t"providers": {\n\t\t"openai": {"default": "m", "models": {"m": ROW}},\n\t\t"openai": {}\n\t}\n}\n'
    path.write_text(text.replace("ROW", json.dumps(row())), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"prices.json:5: duplicate key 'openai'$"):
        read_prices(path)
    path.write_text(text.replace("ROW", json.dumps(row())).replace('"openai": {}', '"deepseek": {"default": "m", '
                                                                   '"models": {"m": ' + json.dumps(row()) + "}}"))
    assert set(read_prices(path).providers) == {"openai", "deepseek"}  # control: two providers


# The generated documents are JSON that YAML reads alike: the key-line scan of JSON must name every key and item at
# the line PyYAML's composer gives it.
_keys = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs", "Cc")), max_size=6)  # written \uXXXX
_documents = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
                          max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(document=_documents, indent=st.sampled_from([None, 1, 2, "\t"]))
def test_json_key_lines_name_every_key_at_the_line_yaml_gives(tmp_path_factory: Any, document: Any,
                                                              indent: int | str | None) -> None:
    text = json.dumps(document, indent=indent)
    path = tmp_path_factory.mktemp("k") / "doc.yaml"
    path.write_text(text.replace("\t", " "), encoding="utf-8")  # tabs are JSON whitespace; YAML wants spaces
    _, yaml_lines = read_yaml_file(path)
    assert json_key_lines(text, path) == yaml_lines


def test_negative_control_the_key_line_comparison_sees_a_shifted_line(tmp_path: Path) -> None:
    text = json.dumps({"a": {"b": [1, {"c": 2}]}}, indent=2)
    path = tmp_path / "doc.yaml"
    path.write_text(text, encoding="utf-8")
    assert json_key_lines(text, path) == read_yaml_file(path)[1]
    assert json_key_lines(text.replace('"c"', '\n"c"'), path) != read_yaml_file(path)[1]


def test_a_valid_json_file_pays_for_no_key_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lines are found only when an error needs one: a valid file is read by ``json`` alone."""
    calls: list[int] = []
    real = readers.json_key_lines

    def counted(*args: Any) -> dict[str, int]:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(readers, "json_key_lines", counted)
    path = tabbed(tmp_path, {"version": 1, "providers": {"openai": {"default": "m", "models": {"m": row()}}}})
    read_prices(path)
    assert calls == []
    bad = tabbed(tmp_path, {"version": 1, "providers": {"openai": {"default": "x", "models": {"m": row()}}}}, "b.json")
    with pytest.raises(ConfigError, match=r"b.json:5: providers.openai.default names 'x'"):
        read_prices(bad)
    assert calls == [1]  # control: an error finds its line, once


def test_read_json_keyed_lines_are_computed_once(tmp_path: Path) -> None:
    path = tabbed(tmp_path, {"a": [1, 2]}, "d.json")
    data, lines_of = read_json_keyed(path)
    assert data == {"a": [1, 2]} and lines_of() == {"": 1, "a": 2, "a[0]": 3, "a[1]": 4}
    assert lines_of() is lines_of()


# --- item 11: linear, bounded -------------------------------------------------------------------------


def table_of(count: int) -> dict[str, Any]:
    return {"version": 1, "providers": {"openai": {"default": "m0", "models": {f"m{i}": row() for i in range(count)}}}}


@pytest.mark.parametrize("name", ["prices.json", "prices.yaml"])
def test_more_rows_than_the_maximum_are_one_error_and_the_maximum_is_read(tmp_path: Path, name: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prices, "MAX_PRICE_ROWS", 3)
    path = tabbed(tmp_path, table_of(4), name) if name.endswith(".json") else tmp_path / name
    if name.endswith(".yaml"):
        path.write_text(json.dumps(table_of(4), indent=2), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"prices\.\w+:3: providers: 4 price rows; a table has at most 3$"):
        read_prices(path)
    path.write_text(json.dumps(table_of(3), indent=2), encoding="utf-8")
    assert len(read_prices(path).providers["openai"].models) == 3  # control: the maximum itself is read


def test_zhin_yaml_prices_have_the_same_row_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prices, "MAX_PRICE_ROWS", 1)
    config = tmp_path / "zhin.yaml"
    config.write_text("prices:\n  openai:\n    models:\n      a: " + json.dumps(row()) + "\n      b: " + json.dumps(row())
                      + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"zhin.yaml:1: prices: 2 price rows; a table has at most 1$"):
        load_config(config).price_table()
    config.write_text("prices:\n  openai:\n    models:\n      a: " + json.dumps(row()) + "\n", encoding="utf-8")
    assert load_config(config).price_table().choose("openai", "a") is not None  # control: one row


def test_a_file_past_the_size_bound_is_refused_before_it_is_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tabbed(tmp_path, table_of(2))
    monkeypatch.setattr(prices, "MAX_PRICES_BYTES", path.stat().st_size - 1)
    monkeypatch.setattr(readers, "read_text_file", lambda *a, **k: pytest.fail("parsed a file past the bound"))
    with pytest.raises(ConfigError, match=r"prices.json: prices file is [\d,]+ bytes; a prices file has at most"):
        read_prices(path)
    monkeypatch.undo()
    monkeypatch.setattr(prices, "MAX_PRICES_BYTES", path.stat().st_size)
    assert read_prices(path).choose("openai", "m1") is not None  # control: a file of exactly the bound


def test_the_documented_bounds_are_the_code_s(tmp_path: Path) -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "economy.md").read_text(encoding="utf-8")
    assert f"{prices.MAX_PRICE_ROWS:,} rows" in docs and f"{prices.MAX_PRICES_BYTES // 2**20} MiB" in docs


def test_key_line_scan_is_one_regex_pass_over_the_text(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Linear by counting: the scan asks the tokenizer once, and counts newlines over each gap between tokens once
    (the characters it counts over sum to the text's length)."""
    counted: list[int] = []

    class Text(str):
        def count(self, sub: str, start: Any = None, end: Any = None) -> int:
            counted.append((end if end is not None else len(self)) - (start or 0))
            return str.count(self, sub, start, end)

    text = Text(json.dumps(table_of(500), indent="\t"))
    json_key_lines(text, tmp_path / "x.json")
    assert 0 < sum(counted) <= len(text)
    quadratic = Text(json.dumps(table_of(50), indent="\t"))  # negative control: counting from the start each time
    counted.clear()
    for match in readers._JSON_TOKEN.finditer(quadratic):
        quadratic.count("\n", 0, match.start())
    assert sum(counted) > 10 * len(quadratic)


# --- item 11: YAML 1.2 numbers ------------------------------------------------------------------------

BASE = """\
version: 1
providers:
  openai:
    default: gpt-4o
    models:
      gpt-4o:
        input: 2.5
        cached_input: 1.25
        source: test
        read_on: "2026-01-01"
"""  # line 7 input


@pytest.mark.parametrize("value", ["010", "-010", "+010", "00"])
def test_a_leading_zero_integer_is_refused_at_its_line(tmp_path: Path, value: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(BASE.replace("input: 2.5", f"input: {value}", 1), encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"prices.yaml:7: invalid YAML: [-+]?{value.lstrip('+-')} has a leading zero"):
        read_prices(path)


@pytest.mark.parametrize(("value", "read"), [("10", 10.0), ("0o10", 8.0), ("0x10", 16.0), ("1e1", 10.0),
                                             ("1.0e1", 10.0), ("2.5", 2.5), ("0", 0.0)])
def test_yaml_1_2_numbers_are_read(tmp_path: Path, value: str, read: float) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(BASE.replace("input: 2.5", f"input: {value}", 1).replace("cached_input: 1.25", "cached_input: 0"),
                    encoding="utf-8")
    chosen = read_prices(path).choose("openai", "gpt-4o")
    assert chosen is not None and chosen.price.input == read


@pytest.mark.parametrize("value", ["2:30", "1_000", "0b11", "1:30.5"])
def test_yaml_1_1_only_numbers_are_text_so_a_price_is_refused_at_its_line(tmp_path: Path, value: str) -> None:
    """2:30 was 150, 1_000 was 1000, 0b11 was 3: each silently a price."""
    path = tmp_path / "prices.yaml"
    path.write_text(BASE.replace("input: 2.5", f"input: {value}", 1), encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        read_prices(path)
    assert raised.value.where == f"{path}:7" and "must be a number" in raised.value.message


def test_every_yaml_input_reads_the_same_numbers(tmp_path: Path) -> None:
    """zhin.yaml (and cases, budget files: one reader) — a time stays text, an octal-looking count is refused."""
    config = tmp_path / "zhin.yaml"
    config.write_text("segments:\n  texts:\n    core.rules: 12:30\n", encoding="utf-8")
    assert load_config(config).texts["core.rules"] == "12:30"  # YAML 1.1: the integer 750
    config.write_text("window:\n  max_messages: 080\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"zhin.yaml:2: invalid YAML: 080 has a leading zero"):
        load_config(config)
    config.write_text("window:\n  max_messages: 80\n", encoding="utf-8")
    assert load_config(config).window.max_messages == 80  # control


def test_an_int_tag_that_is_no_integer_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("a: 1\nb: !!int nope\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"x.yaml:2: invalid YAML: not an integer: 'nope'$"):
        read_yaml_file(path)
    path.write_text("a: 1\nb: !!int '12'\n", encoding="utf-8")
    assert read_yaml_file(path)[0] == {"a": 1, "b": 12}  # control


def test_a_surrogate_pair_escape_reads_the_same_as_before(tmp_path: Path) -> None:
    """libyaml refuses ``\\ud83d``; such a text is composed by PyYAML, which joins the pair."""
    path = tmp_path / "x.yaml"
    path.write_text('a: "\\ud83d\\ude00"\n', encoding="utf-8")
    assert read_yaml_file(path)[0] == {"a": "\U0001f600"}


# --- item 11: the cap after every derivation ----------------------------------------------------------


def anthropic_override(tmp_path: Path, price: float) -> Path:
    path = tmp_path / "over.yaml"
    path.write_text("version: 1\nproviders:\n  anthropic:\n    models:\n      claude-sonnet-5:\n"
                    f"        input: {price}\n        cached_input: 1.0\n        source: x\n        read_on: '2026-01-01'\n",
                    encoding="utf-8")
    return path


def test_a_write_price_derived_past_the_cap_is_one_error_at_the_row(tmp_path: Path) -> None:
    path = anthropic_override(tmp_path, MAX_PRICE)
    with pytest.raises(ConfigError) as raised:
        load_prices(None, path)
    assert raised.value.where == f"{path}:5"
    assert raised.value.message.startswith("providers.anthropic.models.claude-sonnet-5: cache_write.5m would be "
                                           "1,250,000.00 USD per million tokens")
    half = load_prices(None, anthropic_override(tmp_path, MAX_PRICE / 2)).choose("anthropic", "claude-sonnet-5")
    assert half is not None and half.price.write_price("1h") == MAX_PRICE  # control: 2× of half the cap is the cap


def test_the_cap_after_derivation_holds_for_zhin_yaml_and_on_the_command_line(zhin: Any, tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()  # not in the commands' folder: they would find it
    config = tmp_path / "project" / "zhin.yaml"
    config.write_text("prices:\n  anthropic:\n    models:\n      claude-sonnet-5: {input: 1000000, cached_input: 1, "
                      "source: x, read_on: '2026-01-01'}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"zhin.yaml:4: prices.anthropic.models.claude-sonnet-5: cache_write.5m"):
        load_config(config).price_table()
    result = zhin("report", "economy", PRIVATE, "-p", "anthropic", "--prices", anthropic_override(tmp_path, MAX_PRICE))
    assert result.returncode == EXIT_CANNOT_RUN and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "above the cap of 1,000,000" in result.stderr
    ok = zhin("report", "economy", PRIVATE, "-p", "anthropic", "--prices", anthropic_override(tmp_path, 3.0), "--json")
    assert ok.returncode == 0, ok.stderr  # control


def test_a_derived_write_price_below_the_cached_price_is_refused(tmp_path: Path) -> None:
    base_file = tmp_path / "base.yaml"
    base_file.write_text("version: 1\nproviders:\n  x:\n    default: m\n    models:\n      m: {input: 10, cached_input: 1, "
                         "cache_write: {5m: 2}, source: s, read_on: '2026-01-01'}\n", encoding="utf-8")
    base = read_prices(base_file)
    over = tmp_path / "over.yaml"
    over.write_text("version: 1\nproviders:\n  x:\n    models:\n      m: {input: 10, cached_input: 9, source: s, "
                    "read_on: '2026-01-01'}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"over.yaml:5: .*cache_write.5m \(2\) is below cached_input \(9\) "
                                          r"\(cache_write derived from the premium"):
        read_prices(over, base)
    over.write_text(over.read_text(encoding="utf-8").replace("cached_input: 9", "cached_input: 1"), encoding="utf-8")
    assert read_prices(over, base).choose("x", "m") is not None  # control


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml: every document is PyYAML's")
def test_libyaml_composes_a_valid_document_and_pyyaml_words_every_error(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    composed: list[str] = []
    for kind in (readers._PyLoader, readers._CLoader):
        assert kind is not None

        def spy(self: Any, kind: Any = kind) -> Any:
            composed.append(kind.__name__)
            return super(kind, self).get_single_node()

        monkeypatch.setattr(kind, "get_single_node", spy, raising=False)
    path = tmp_path / "x.yaml"
    path.write_text("a: [1, 2]\n", encoding="utf-8")
    assert read_yaml_file(path)[0] == {"a": [1, 2]} and composed == ["_LibyamlLoader"]
    composed.clear()
    path.write_text("a: [1, 2\n", encoding="utf-8")  # control: an error is composed again by PyYAML, in its words
    with pytest.raises(ConfigError, match=r"x.yaml:2: invalid YAML: expected ',' or '\]', but got '<stream end>'$"):
        read_yaml_file(path)
    assert composed == ["_LibyamlLoader", "_PyLoader"]


def test_an_unquoted_date_in_the_note_stays_text_and_a_number_there_is_refused(tmp_path: Path) -> None:
    """The envelope is checked with dates as text (rows are copied once: in parse_providers)."""
    path = tmp_path / "prices.yaml"
    path.write_text("note: 2026-01-01\n" + BASE, encoding="utf-8")
    assert read_prices(path).choose("openai", "gpt-4o") is not None
    path.write_text("note: 5\n" + BASE, encoding="utf-8")  # control: the envelope is checked
    with pytest.raises(ConfigError, match=r"prices.yaml:1: "):
        read_prices(path)

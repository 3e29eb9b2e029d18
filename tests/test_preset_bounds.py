"""A hostile preset (or a chat message a preset's regex script rewrites) cannot make zhin raise or hang
(issue 14 §3): macros nested thousands deep, rolls and newlines past their bounds, output that doubles,
regex scripts that backtrack catastrophically or grow a message without end, patterns the compiler would
unroll, presets with tens of thousands of prompts. Each test also runs the ordinary case next to it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, run_zhin

from zhin_cli.pipeline.headers import Projected
from zhin_cli.pipeline.preset import regex as preset_regex
from zhin_cli.pipeline.preset.importer import parse_preset
from zhin_cli.pipeline.preset.macros import (
    MAX_NESTING,
    NESTING_PROBLEM,
    OUTPUT_PROBLEM,
    MacroContext,
    MacroEngine,
    macro_depth,
    macro_names,
)
from zhin_cli.pipeline.preset.model import RegexScript
from zhin_cli.pipeline.preset.regex import nested_quantifier, shape
from zhin_cli.pipeline.preset.skeleton import Facts, arrange
from zhin_cli.tools.preset.lint import lint_preset


def expand(text: str, **context: Any) -> tuple[str, MacroContext]:
    ctx = MacroContext(seed="s", **context)
    return MacroEngine(ctx).expand(text), ctx


def nested(open_: str, depth: int, inner: str = "x") -> str:
    return open_ * depth + inner + "}}" * depth


# -- macros ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("open_", ["{{//", "{{setvar::a::", "{{unknownThing::", "{{random::"])
def test_macros_nested_thousands_deep_are_bounded_not_a_recursion_error(open_: str) -> None:
    text = nested(open_, 5000)
    started = time.perf_counter()
    _out, ctx = expand(text)  # the old engine recursed once per level: RecursionError
    assert time.perf_counter() - started < 5
    assert ctx.problems == {NESTING_PROBLEM: 1}
    assert macro_depth(text) == 5000
    assert len(macro_names(text)) == (1 if open_ == "{{//" else 5000)  # lint's scan does not recurse either


def test_nesting_up_to_the_bound_expands_fully() -> None:
    out, ctx = expand(nested("{{//", MAX_NESTING) + "{{user}}", user="阿丽")  # the negative control: no bound hit
    assert out == "阿丽" and ctx.problems == {}
    out, ctx = expand("{{setvar::a::" * (MAX_NESTING - 1) + "v" + "}}" * (MAX_NESTING - 1) + "{{getvar::a}}")
    assert out == "" and ctx.problems == {}
    # The macro on level 100 runs; one on level 101 does not (it stays verbatim inside the comments, which vanish).
    out, ctx = expand(nested("{{//", MAX_NESTING - 1, "{{setvar::z::1}}") + "[{{getvar::z}}]")
    assert out == "[1]" and ctx.problems == {}
    out, ctx = expand(nested("{{//", MAX_NESTING, "{{setvar::z::1}}") + "[{{getvar::z}}]")
    assert out == "[]" and ctx.problems == {NESTING_PROBLEM: 1}


def test_each_argument_is_expanded_once() -> None:
    """An unknown macro's arguments were expanded, then its whole body again: side effects ran twice, and the
    work doubled at every level (40 levels never finished)."""
    out, ctx = expand("{{unknownThing::{{incvar::k}}}}|{{getvar::k}}")
    assert out == "{{unknownThing::1}}|1"
    out, ctx = expand(nested("{{unknownThing::", 12, "{{incvar::k}}") + "|{{getvar::k}}")
    assert out.endswith("|1") and ctx.unknown == {"unknownThing": 12}
    out, _ = expand("{{getvar::{{incvar::j}}}}{{getvar::j}}")  # bad arguments (two): rebuilt from the expanded ones
    assert out == "1"
    started = time.perf_counter()
    expand(nested("{{unknownThing::", 20))  # 2^20 expansions before; 40 levels never finished
    assert time.perf_counter() - started < 1


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("{{roll:1d" + "9" * 5000 + "}}", "roll (bad arguments)"),  # int() refuses 4,300 digits: was a ValueError
        ("{{roll:1d6+" + "9" * 5000 + "}}", "roll (bad arguments)"),
        ("{{roll:" + "9" * 5000 + "}}", "roll (bad arguments)"),
        ("{{roll:999999999d6}}", "roll (bad arguments)"),  # was silently 1000 dice
        ("{{roll:1d1000000000000000}}", "roll (bad arguments)"),
        ("{{newline::999999999999}}", "newline (bad arguments)"),  # was a 1 TB string (MemoryError)
        ("{{newline::20000}}", "newline (bad arguments)"),
        ("{{newline::²}}", "newline (bad arguments)"),  # "²".isdigit() is True, int("²") a ValueError
    ],
)
def test_roll_and_newline_past_their_bounds_stay_verbatim_and_are_reported(text: str, bad: str) -> None:
    out, ctx = expand(text)
    assert out == text
    assert ctx.unknown == {bad: 1}


def test_roll_and_newline_within_bounds() -> None:
    out, ctx = expand("{{roll:1000d6}}|{{roll:2d6-3}}|{{roll:1d999999999999999}}|{{newline::3}}|{{roll:0d6}}|{{roll:1d0}}")
    values = out.split("|")
    assert 1000 <= int(values[0]) <= 6000 and -1 <= int(values[1]) <= 9 and 1 <= int(values[2]) < 10**15
    assert values[3:] == ["\n\n\n", "0", ""] and ctx.unknown == {}


def test_roll_formula_with_many_blanks_is_linear() -> None:
    started = time.perf_counter()
    out, ctx = expand("{{roll:1d1" + " " * 30_000 + "x}}")  # two adjacent \s* backtracked quadratically (~10 s)
    assert time.perf_counter() - started < 1
    assert out == ""  # an invalid formula gives "", as in ST


def test_numbers_past_a_float_are_infinity_not_an_overflow_error() -> None:
    out, _ = expand("{{setvar::a::1e999}}{{incvar::a}}|{{setvar::b::-1e999}}{{decvar::b}}|{{setvar::c::2}}{{addvar::c::nan}}{{getvar::c}}")
    assert out == "Infinity|-Infinity|2nan"  # JS: Number("nan") is NaN, so addvar concatenates
    out, _ = expand("{{setvar::n::2}}{{addvar::n::3}}{{getvar::n}}")
    assert out == "5"


def test_output_that_doubles_is_bounded() -> None:
    text = "{{setvar::a::abcdefghij}}" + "{{addvar::a::{{getvar::a}}}}" * 40 + "{{getvar::a}}"  # 10 × 2^40 characters
    started = time.perf_counter()
    out, ctx = expand(text)
    assert time.perf_counter() - started < 5
    assert ctx.problems.get(OUTPUT_PROBLEM, 0) > 0
    assert len(out) < 25_000_000 and all(len(v) <= 10_000_000 for v in ctx.variables.values())
    out, ctx = expand("{{setvar::a::ab}}" + "{{addvar::a::{{getvar::a}}}}" * 10 + "{{getvar::a}}")
    assert out == "ab" * 1024 and ctx.problems == {}


def test_trim_is_linear_on_many_newlines() -> None:
    started = time.perf_counter()
    out, _ = expand("\n" * 100_000 + "{{user}}" + "a{{trim}}\n\nb", user="u")  # \n*MARK\n* backtracked per newline
    assert time.perf_counter() - started < 2
    assert out == "\n" * 100_000 + "uab"
    assert expand("x\n\n{{trim}}\n\n{{trim}}\n\ny")[0] == "xy"


# -- regex scripts --------------------------------------------------------------------------------------------


def message(role: str, body: str, row: int) -> Projected:
    return Projected(role=role, segment_id=f"history.{role}", body=body, rows=[row])  # type: ignore[arg-type]


def script(name: str, find: str, replace: str, **extra: Any) -> dict[str, Any]:
    return {"scriptName": name, "findRegex": find, "replaceString": replace, "placement": [1, 2], "promptOnly": True, **extra}


def preset_with(*scripts: dict[str, Any], content: str = "sys") -> Any:
    data = {
        "prompts": [{"identifier": "main", "content": content, "system_prompt": True}],
        "prompt_order": [{"character_id": 100001, "order": [{"identifier": "main"}, {"identifier": "chatHistory"}]}],
        "extensions": {"regex_scripts": list(scripts)},
    }
    return parse_preset(data)


def bodies(arrangement: Any) -> list[str]:
    return [m.body for m in arrangement.layout.messages if isinstance(m, Projected)]


CATASTROPHIC = "/(a|a)*$/"  # slow for the regex package too: 20 characters take ~0.5 s, 24 far longer


def test_a_catastrophic_script_is_skipped_with_a_warning_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preset_regex, "BUDGET_SECONDS", 0.05)
    preset = preset_with(script("fine", "/cat/g", "dog"), script("evil", CATASTROPHIC, "{{setvar::v::1}}"),
                         script("also fine", "/dog/g", "wolf"))
    messages = [message("user", "b", 1), message("assistant", "a cat", 2), message("user", "a" * 24 + "!", 3)]
    started = time.perf_counter()
    arrangement = arrange(preset, "S", messages, None, Facts())
    assert time.perf_counter() - started < 3  # the old `re` engine took minutes on 24 characters
    assert "preset regex script 'evil' was skipped: it took longer than its time budget (50 ms for one request)" in arrangement.warnings
    # The request is as if "evil" were disabled: it had matched the first message (and run its macros) before
    # it ran out of time on the last one; all of that is undone.
    assert bodies(arrangement) == ["b", "a wolf", "a" * 24 + "!"]
    assert "v" not in arrangement.variables
    assert preset.skipped_scripts == {1: "it took longer than its time budget (50 ms for one request)"}
    started = time.perf_counter()
    again = arrange(preset, "S", messages, None, Facts())  # a later request of the run: skipped at once
    assert time.perf_counter() - started < 1
    assert again.warnings == arrangement.warnings and bodies(again) == bodies(arrangement)


def test_the_same_scripts_without_the_slow_input_all_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preset_regex, "BUDGET_SECONDS", 0.05)
    preset = preset_with(script("fine", "/cat/g", "dog"), script("evil", CATASTROPHIC, "{{setvar::v::1}}"),
                         script("also fine", "/dog/g", "wolf"))
    arrangement = arrange(preset, "S", [message("user", "b", 1), message("assistant", "a cat", 2), message("user", "hi", 3)], None, Facts())
    assert arrangement.warnings == [] and preset.skipped_scripts == {}
    assert bodies(arrangement) == ["b", "a wolf", "hi"]
    assert arrangement.variables.get("v") == "1"  # "evil" ran: it matches the empty string at the end of each message


def test_a_script_that_grows_a_message_without_end_is_skipped() -> None:
    preset = preset_with(script("grow", "/a/g", "x" * 1000))
    arrangement = arrange(preset, "S", [message("user", "a" * 5000, 1)], None, Facts())  # 5 MB
    assert any("'grow' was skipped: its replacements grew a message by more than 1,000,000 characters" in w for w in arrangement.warnings)
    assert bodies(arrangement) == ["a" * 5000]
    small = preset_with(script("grow", "/a/g", "x" * 1000))
    assert bodies(arrangement := arrange(small, "S", [message("user", "a" * 50, 1)], None, Facts())) == ["x" * 50_000]
    assert arrangement.warnings == []


@pytest.mark.parametrize("find", ["/a{1000000}/", "/(?:a{1000}){1000}/", "/x{99999999999}/", "/(?:(?:a{100}){100}){100}/"])
def test_patterns_the_compiler_would_unroll_are_refused_at_import(find: str) -> None:
    started = time.perf_counter()
    preset = preset_with(script("huge", find, "y"))  # `regex` unrolls fixed counts: a{1000000000} never compiles
    assert time.perf_counter() - started < 1
    assert preset.regex_scripts == []
    assert [d.message for d in preset.diagnostics if d.code == "bad-regex"] == [
        f"regex script 'huge': {find!r} repeats fixed counts over 100,000 characters in all (compiling it would take too long); skipped"]
    assert len(preset_with(script("fine", "/a{1000}/", "y")).regex_scripts) == 1


# -- lint ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [
        (r"(a+)+$", "(a+)+"),
        (r"^(\w+\s?)*$", r"(\w+\s?)*"),
        (r"(?:x*y?){2,}", "(?:x*y?){2,}"),
        (r"((ab)*c)+", "((ab)*c)+"),
        (r"(?<name>[a-z]+,?)+?$", "(?<name>[a-z]+,?)+?"),
        (r"((a+))*", "((a+))*"),
    ],
)
def test_nested_quantifiers_are_found(pattern: str, fragment: str) -> None:
    assert shape(pattern).nested == fragment


@pytest.mark.parametrize(
    "pattern",
    [r"(a+)", r"a+b+", r"(ab)+", r"(a++)+", r"(?>a+)+", r"[a+]+", r"\(a+\)+", r"(a{2})+", r"(a+)?", r"(?:a|b)*", r"x{2,}(y)+",
     r"(?#(a+)+)", r"(a)+b*"],
)
def test_patterns_without_nested_quantifiers_are_not_flagged(pattern: str) -> None:
    assert shape(pattern).nested is None


def test_lint_warns_about_nested_quantifiers_and_deep_macros() -> None:
    evil = script("evil", r"/^(\w+\s?)*$/", "x")
    shown_only = {**script("display", "/(a+)+$/", "x"), "promptOnly": False}
    preset = preset_with(evil, shown_only, script("fine", "/cat/g", "dog"), content=nested("{{setvar::a::", 3000))
    result = lint_preset(preset)  # the old lint recursed once per macro level: RecursionError
    codes = [(d.severity, d.code) for d in result.diagnostics]
    assert ("warning", "nested-quantifier") in codes and ("info", "nested-quantifier") in codes
    assert ("warning", "deep-macros") in codes and result.failed
    messages = [d.message for d in result.diagnostics if d.code == "nested-quantifier"]
    assert messages[0].startswith(r"regex script 'evil': '(\\w+\\s?)*' is a quantified group that holds a quantifier")
    assert "zhin does not run this script" in messages[1]
    clean = lint_preset(preset_with(script("fine", "/cat/g", "dog"), content=nested("{{setvar::a::", 5)))
    assert [d.code for d in clean.diagnostics if d.severity != "info" and d.code != "system-appended"] == []


def test_nested_quantifier_helper_reads_the_script() -> None:
    assert nested_quantifier(RegexScript("s", r"(a+)+$", "", "")) == "(a+)+"
    assert nested_quantifier(RegexScript("s", r"a+$", "", "")) is None


# -- the importer ---------------------------------------------------------------------------------------------


def test_a_preset_with_many_prompts_is_read_in_linear_time() -> None:
    count = 8000
    data = {"prompts": [{"identifier": f"p{i}", "name": "x", "content": "hi {{user}}", "system_prompt": True} for i in range(count)],
            "prompt_order": [{"character_id": 100001, "order": [{"identifier": "chatHistory"}] + [{"identifier": f"p{i}"} for i in range(count)]}]}
    text = json.dumps(data, indent=2)
    started = time.perf_counter()
    preset = parse_preset(data, text=text)  # every line looked up by searching the text: quadratic (8,000: ~25 s)
    result = lint_preset(preset)
    assert time.perf_counter() - started < 6
    assert preset.prompts["p7999"].line == text[: text.index('"identifier": "p7999"')].count("\n") + 1
    assert len([d for d in result.diagnostics if d.code == "never-sent"]) == count


def test_diagnostics_quote_huge_values_briefly() -> None:
    data = {"prompts": [{"identifier": "a", "role": "r" * 1_000_000, "injection_position": 1, "injection_depth": [[1]] * 100_000}]}
    preset = parse_preset(data)
    messages = [d.message for d in preset.diagnostics if d.code in ("bad-role", "bad-depth")]
    assert len(messages) == 2 and all(len(m) < 400 for m in messages)  # was the whole megabyte
    assert "role 'rrrr" in messages[0]


# -- addvar on a value nested too deep for the JSON reader (issue 14 §3: never a traceback) --------------------


DEEP = 200_000  # far past the interpreter's recursion limit


@pytest.mark.parametrize("deep", ["[" * DEEP, "[" * DEEP + "]" * DEEP])
def test_addvar_on_a_value_nested_too_deep_concatenates_not_a_recursion_error(deep: str) -> None:
    # an unclosed one is not JSON; a closed one is, but too deep to read: both are plain text, as any non-array
    out, ctx = expand("{{setvar::a::" + deep + "}}{{addvar::a::1}}")  # json.loads raised RecursionError
    assert out == "" and ctx.variables["a"] == deep + "1"


def test_addvar_still_appends_to_a_json_array_and_adds_numbers() -> None:  # the negative control
    _out, ctx = expand("{{setvar::a::[[1], \"x\"]}}{{addvar::a::y}}{{setvar::n::2}}{{addvar::n::3}}{{setvar::s::[x}}{{addvar::s::1}}")
    assert json.loads(ctx.variables["a"]) == [[1], "x", "y"]
    assert ctx.variables["n"] == "5" and ctx.variables["s"] == "[x1"


def test_a_preset_whose_addvar_reads_a_deep_value_runs_in_every_command(tmp_path: Path) -> None:
    content = "{{setvar::a::" + "[" * DEEP + "}}{{addvar::a::1}}ok"
    deep = tmp_path / "deep.json"
    fine = tmp_path / "fine.json"
    for path, text in ((deep, content), (fine, "{{setvar::a::[]}}{{addvar::a::1}}ok")):
        path.write_text(json.dumps({
            "prompts": [{"identifier": "main", "content": text, "system_prompt": True}],
            "prompt_order": [{"character_id": 100001, "order": [{"identifier": "main"}, {"identifier": "chatHistory"}]}],
        }), encoding="utf-8")
    session = FIXTURES / "private-chat.jsonl"
    for argv in (["preset", "lint"], ["preset", "probe"], ["trace", str(session), "--preset"]):
        # in this process (run_zhin): pytest's frames under the command leave it less stack than a fresh process
        results = {path.name: run_zhin(*argv, path, cwd=tmp_path) for path in (deep, fine)}
        for name, result in results.items():  # the old code: a RecursionError traceback, exit 1, for deep.json only
            assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr, (argv, name, result.stderr[-500:])
        assert results["deep.json"].returncode == results["fine.json"].returncode, (argv, results["deep.json"].stderr[-500:])

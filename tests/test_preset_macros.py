"""Macros at assembly time (docs/spec/sillytavern.md §4): exact outputs, not just "something changed"."""

from __future__ import annotations

import pytest

from zhin_cli.pipeline.preset.macros import MacroContext, MacroEngine, js_trim, macro_names, prepare_card_fields

T0 = 1761699600000  # 2025-10-29 09:00 Asia/Shanghai (a Wednesday)


def engine(**facts: object) -> MacroEngine:
    defaults: dict[str, object] = {"user": "阿丽", "char": "小知", "persona": "旅人", "last_user_message": "我抬头",
                                   "now_ms": T0, "timezone": "Asia/Shanghai", "seed": "s1"}
    defaults.update(facts)
    return MacroEngine(MacroContext(**defaults))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{user}} 和 {{char}}", "阿丽 和 小知"),
        ("{{USER}}", "阿丽"),  # names are case-insensitive
        ("人设：{{persona}}", "人设：旅人"),
        ("回复：{{lastUserMessage}}", "回复：我抬头"),
        ("a{{newline}}b", "a\nb"),
        ("a{{noop}}b", "ab"),
        ("a{{// 注释 {{user}} 还有 {{unknownThing::x}} }}b", "ab"),  # balanced: the comment ends at its own }}
        # (ST's lexer opens a macro only at an ASCII letter: "{{未知::x}}" is text, so its "}}" would end the comment)
        ("a{{// 注释 {{user}} 尾巴}}b", "ab"),  # a first-}} (non-greedy regex) scan would leave " 尾巴}}"
        ("a{{//}}block\n{{user}}{{///}}b", "ab"),
        ("line1\n\n{{trim}}\n\nline2", "line1line2"),
        ("{{isodate}} {{isotime}} {{weekday}}", "2025-10-29 09:00 Wednesday"),
        ("{{date}} {{time}}", "October 29, 2025 9:00 AM"),
        ("{{unknownThing::x}}", "{{unknownThing::x}}"),
        ("{{unknownThing::{{newline}}}}", "{{unknownThing::\n}}"),  # unknown: verbatim, nested expanded
        ("{{getvar}}", "{{getvar}}"),  # known macro, wrong arguments: verbatim
        ("open {{user", "open {{user"),  # unclosed: text
    ],
)
def test_expansion(text: str, expected: str) -> None:
    assert engine().expand(text) == expected


def test_unknown_macros_are_reported() -> None:
    e = engine()
    e.expand("{{loomStyle}} {{loomStyle}} {{getvar}} {{user}}")
    assert e.context.unknown == {"loomStyle": 2, "getvar (bad arguments)": 1}


def test_variables_setvar_getvar_addvar_in_order() -> None:
    e = engine()
    assert e.expand("A {{setvar::t::4}}{{getvar::t}} B {{setvar::t::2}}{{getvar::t}} C") == "A 4 B 2 C"  # ST engine test
    assert e.expand("{{addvar::n::2}}{{addvar::n::3}}{{getvar::n}}") == "5"
    assert e.expand("{{addvar::s::甲}}{{addvar::s::乙}}{{getvar::s}}") == "甲乙"
    # ST's addLocalVariable writes the array back with JSON.stringify: no spaces (this test said '["a", "b"]')
    assert e.expand("{{setvar::list::[\"a\", 1]}}{{addvar::list::b}}{{getvar::list}}") == '["a",1,"b"]'
    assert e.expand("{{incvar::k}}{{incvar::k}}{{decvar::k}}") == "121"
    assert e.expand("{{getvar::missing}}") == ""


def test_comment_runs_nested_setvar_then_vanishes() -> None:
    e = engine()
    assert e.expand("{{// {{setvar::a::1}} }}x{{getvar::a}}") == "x1"


def test_roll_and_random_are_seeded() -> None:
    first = [engine(seed="s1").expand("{{roll:1d6}}|{{roll 20}}|{{roll::3d6+4}}|{{random::a::b::c}}|{{random:x,y\\,z}}")
             for _ in range(3)]
    assert len(set(first)) == 1  # same seed, same request: same values
    values = first[0].split("|")
    assert 1 <= int(values[0]) <= 6 and 1 <= int(values[1]) <= 20 and 7 <= int(values[2]) <= 22
    assert values[3] in "abc" and values[4] in ("x", "y,z")
    others = {engine(seed=f"s{i}").expand("{{roll:1d1000}}") for i in range(20)}
    assert len(others) > 1  # the seed matters (negative control for a constant)
    e = engine()
    e.expand("{{random::a::b}}")
    assert e.context.random_used == ["random"]
    assert engine().expand("{{roll:banana}}") == ""  # ST: invalid formula → ""


def test_pick_is_stable_for_the_session_and_text() -> None:
    a = MacroEngine(MacroContext(seed="1", session_seed="chat-1")).expand("{{pick::甲::乙::丙::丁}}")
    b = MacroEngine(MacroContext(seed="2", session_seed="chat-1")).expand("{{pick::甲::乙::丙::丁}}")
    assert a == b and a in "甲乙丙丁"


def test_macro_names_for_lint() -> None:
    assert macro_names("{{// c}}{{user}} {{random::a::{{char}}}} {{roll:1d6}}") == ["//", "user", "random", "char", "roll"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<USER> / <user> / <User> / <uSeR>", "阿丽 / 阿丽 / 阿丽 / 阿丽"),  # any case (ST /<USER>/gi)
        ("<BOT> <bot> <CHAR> <char>", "小知 小知 小知 小知"),
        ("<GROUP> <CHARIFNOTGROUP> <charIfNotGroup>", "小知 小知 小知"),  # solo: the character's name
        ("`<user>` in backticks", "`阿丽` in backticks"),  # ST rewrites inside code spans too
        ("{{setvar::g::<user>}}[{{getvar::g}}]", "[阿丽]"),  # a rewritten marker is a macro like any other
        ("{{// <user> }}x", "x"),
        ("<users> </user> <user/> <user > < user> <use r>", "<users> </user> <user/> <user > < user> <use r>"),
        ("<uſer> <ᴜser>", "<uſer> <ᴜser>"),  # JS /i folds no non-ASCII letter onto ASCII (Python's would: ſ → s)
        ("<USER", "<USER"),
    ],
)
def test_legacy_angle_bracket_markers(text: str, expected: str) -> None:
    assert engine().expand(text) == expected


def test_legacy_markers_in_a_group_and_in_macro_results() -> None:
    assert engine(group="阿丽, 小知").expand("<GROUP>|<CHARIFNOTGROUP>|<char>") == "阿丽, 小知|阿丽, 小知|小知"
    # a macro's result is never rewritten or expanded again: only the template's own markers are
    assert engine(last_user_message="<user> {{char}}").expand("{{lastUserMessage}}") == "<user> {{char}}"


def test_summary_macro() -> None:
    e = engine(summary="They met at the door.")
    assert e.expand("[{{summary}}] [{{SUMMARY}}]") == "[They met at the door.] [They met at the door.]"
    e = engine()
    assert e.expand("[{{summary}}]") == "[]"  # no compaction summary: "" (ST's Summarize with no summary)
    assert e.context.unknown == {}
    assert engine(summary="{{user}} <bot>").expand("{{summary}}") == "{{user}} <bot>"  # the summary is data
    assert engine().expand("{{summary::x}}") == "{{summary::x}}"  # wrong arguments: verbatim (negative control)


def test_js_trim_is_javascripts_not_pythons() -> None:
    assert js_trim("\ufeff\u00a0\u3000 \t\n a  b \r\n\u2029") == "a  b"
    assert js_trim("\x1c\x85 a \x1f") == "\x1c\x85 a \x1f"  # str.strip() would remove these; JS keeps them
    assert "\x1c a".strip() == "a"  # (what makes the line above a real check)


def test_prepare_card_fields() -> None:
    e = engine(description="raw")  # persona 旅人: what a field must not see of the card macros
    prepare_card_fields(e, {"description": "  {{newline}}{{char}}{{description}}{{persona}}\r\n{{x}} \n",
                            "personality": "\t{{setvar::m::1}}calm ", "persona": "{{getvar::m}}<USER>", "scenario": ""})
    context = e.context
    # trimmed before expanding (the macro's own newline stays), card macros empty inside a field, \r removed
    assert context.description == "\n小知\n{{x}}"
    assert (context.personality, context.persona, context.scenario) == ("calm", "1阿丽", "")  # fields in ST's order
    assert e.expand("{{description}}|{{charPersonality}}|{{persona}}") == "\n小知\n{{x}}|calm|1阿丽"
    assert context.unknown == {"x": 1}

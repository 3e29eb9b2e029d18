"""SillyTavern 1.18 card-field, World Info, legacy-marker and ``{{summary}}`` semantics in the preset skeleton
(issue 15 B1, B2, B4, B6): exact texts of the messages ``arrange`` produces, each with a case where the rule must
not apply."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from builders import MIN, T0, History, assembler

from zhin_cli.pipeline.headers import SUMMARY_PREFIX, Projected
from zhin_cli.pipeline.preset.importer import parse_preset
from zhin_cli.pipeline.preset.layout import PresetMessage
from zhin_cli.pipeline.preset.model import Preset
from zhin_cli.pipeline.preset.skeleton import Arrangement, Facts, arrange
from zhin_cli.tools.preset.lint import lint_preset

GOLDEN = Path(__file__).resolve().parent / "st_golden"


def preset(entries: list[dict[str, Any]], options: dict[str, Any] | None = None, **settings: Any) -> Preset:
    """A preset whose order is ``entries`` as given (markers by identifier), then worldInfoBefore and chatHistory."""
    prompts = [e if "content" in e or e.get("marker") else {**e, "marker": True} for e in entries]
    prompts += [{"identifier": "worldInfoBefore", "marker": True}, {"identifier": "chatHistory", "marker": True}]
    order = [{"identifier": p["identifier"], "enabled": True} for p in prompts]
    return parse_preset({"prompts": prompts, "prompt_order": [{"character_id": 100001, "order": order}], **settings},
                        options=options)


def entry(identifier: str, content: str, role: str = "system") -> dict[str, Any]:
    return {"identifier": identifier, "role": role, "content": content, "system_prompt": False}


def marker(identifier: str) -> dict[str, Any]:
    return {"identifier": identifier, "marker": True}


CHAT = [Projected("assistant", "history.assistant", body="hello"), Projected("user", "history.user", body="hi", rows=[2])]
NAMES = {"user": "Sol Reyes", "char": "Juniper"}


def build(p: Preset, messages: list[Projected] | None = None, system: str = "SYS") -> Arrangement:
    return arrange(p, system, messages if messages is not None else CHAT, None, Facts(is_group=False))


def texts(arrangement: Arrangement) -> dict[str, str]:
    """Each preset entry's sent text, by identifier (the markers' too; zhin's system prompt is ``system``; the
    new-chat separator is left out)."""
    out: dict[str, str] = {}
    for item in [*arrangement.layout.system_blocks, *arrangement.layout.messages]:
        if isinstance(item, PresetMessage):
            for segment, text in item.pieces:
                key = segment.removeprefix("preset:")
                if key != "newMainChat":
                    out[key] = out.get(key, "") + text
    return out


# -- B1 / B6: card fields ---------------------------------------------------------------------------------


def test_card_fields_are_expanded_and_trimmed_through_markers() -> None:
    options = {**NAMES,
               "description": "\n  {{char}} keeps the dome.\n\n  Inner  gap  stays.\n\n   ",
               "personality": " dry, suspicious of {{user}} ",
               "scenario": "\t{{user}} stays the night with {{char}}.\n",
               "persona": "  <USER> carries lenses.  "}
    p = preset([marker("personaDescription"), marker("charDescription"), marker("charPersonality"), marker("scenario")],
               options, personality_format="[{{char}}'s manner: {{personality}}]", scenario_format="[Setting: {{scenario}}]")
    sent = texts(build(p))
    assert sent["personaDescription"] == "Sol Reyes carries lenses."
    assert sent["charDescription"] == "Juniper keeps the dome.\n\n  Inner  gap  stays."  # inner whitespace kept
    assert sent["charPersonality"] == "[Juniper's manner: dry, suspicious of Sol Reyes]"
    assert sent["scenario"] == "[Setting: Sol Reyes stays the night with Juniper.]"


def test_card_macros_give_the_same_prepared_text() -> None:
    options = {**NAMES, "description": "{{char}} is here.  \n", "personality": " calm ", "scenario": "night\n",
               "persona": "\n{{user}} is a student."}
    p = preset([entry("recap", "[{{description}}|{{personality}}|{{scenario}}|{{persona}}|{{charDescription}}]")], options)
    assert texts(build(p))["recap"] == "[Juniper is here.|calm|night|Sol Reyes is a student.|Juniper is here.]"


def test_card_field_rules_and_their_limits() -> None:
    """Trim happens before expansion (a macro's own newline stays), card macros are empty inside a card field,
    ``\\r`` goes, an unknown macro stays verbatim; JavaScript's trim, not Python's strip."""
    options = {**NAMES, "description": "  {{newline}}A{{description}}B\r\n{{myCardMacro}}  ",
               "personality": "\ufeff calm\x1c", "scenario": "   ", "persona": "{{noop}}"}
    p = preset([marker("charDescription"), marker("charPersonality"), marker("scenario"), marker("personaDescription")],
               options)
    arrangement = build(p)
    sent = texts(arrangement)
    assert sent["charDescription"] == "\nAB\n{{myCardMacro}}"
    assert sent["charPersonality"] == "calm\x1c"  # U+FEFF is JS whitespace, U+001C is not
    assert "scenario" not in sent and "personaDescription" not in sent  # blank / empty after expansion: nothing sent
    assert arrangement.unknown_macros == {"myCardMacro": 1}


def test_formats_follow_st_for_empty_fields_and_blank_formats() -> None:
    base = {**NAMES, "personality": "calm", "scenario": "night at {{char}}'s"}
    p = preset([marker("charPersonality"), marker("scenario")], base, personality_format="", scenario_format="[{{scenario}}]")
    assert texts(build(p)) == {"charPersonality": "calm", "scenario": "[night at Juniper's]", "system": "SYS"}
    empty = preset([marker("charPersonality")], {**NAMES, "personality": " {{noop}} "}, personality_format="[{{char}}]")
    assert "charPersonality" not in texts(build(empty))  # an empty field sends nothing, whatever the format


def test_card_fields_are_expanded_before_the_entries() -> None:
    """ST expands the card fields first (sillytavern.md §4.6): a {{setvar}} in one is seen by the first entry."""
    options = {**NAMES, "description": "{{setvar::mood::calm}}Desc", "persona": "{{getvar::seen}}P"}
    p = preset([entry("main", "mood={{getvar::mood}}{{setvar::seen::yes}}"), marker("charDescription"),
                marker("personaDescription")], options)
    sent = texts(build(p))
    assert sent["main"] == "mood=calm"
    assert sent["personaDescription"] == "P"  # a field never sees what an entry sets later (negative control)


def test_example_dialogue_is_prepared_like_a_card_field() -> None:
    """mes_example is a card field in ST: trimmed, expanded once before the entries (card macros empty inside),
    ``\\r`` removed — so a CRLF file gives the same messages as an LF one."""
    options = {**NAMES, "description": "D",
               "examples": "\r\n <START>\r\n{{user}}: Cold?{{setvar::ex::1}}\r\n{{char}}: Colder{{description}}.\r\nStill.\r\n"}
    p = preset([entry("main", "ex={{getvar::ex}}"), marker("dialogueExamples")], options)
    arrangement = build(p)
    examples = [(m.name, m.text) for m in [*arrangement.layout.system_blocks, *arrangement.layout.messages]
                if isinstance(m, PresetMessage) and m.name]
    assert examples == [("example_user", "Cold?"), ("example_assistant", "Colder.\nStill.")]
    assert texts(arrangement)["main"] == "ex=1"  # expanded before the entries, as ST does
    assert texts(build(preset([entry("recap", "[{{description}}]")], options)))["recap"] == "[D]"  # outside: the card's


# -- B6: World Info ----------------------------------------------------------------------------------------


def test_world_info_entry_is_expanded_and_wrapped() -> None:
    options = {**NAMES, "world_book_after": "The key is behind the chart. Only {{char}} knows. <BOT>."}
    p = preset([entry("main", "m"), marker("worldInfoAfter")], options, wi_format="[Notes]\n{0}\n[End for {{user}}]")
    assert texts(build(p))["worldInfoAfter"] == "[Notes]\nThe key is behind the chart. Only Juniper knows. Juniper.\n[End for Sol Reyes]"


def test_world_info_is_expanded_before_the_entries() -> None:
    options = {**NAMES, "world_book_after": "{{setvar::key::hook}}Key on the {{getvar::key}}."}
    p = preset([entry("main", "key={{getvar::key}}"), marker("worldInfoAfter")], options)
    sent = texts(build(p))
    assert sent == {"main": "key=hook", "worldInfoAfter": "Key on the hook.", "system": "SYS"}


def test_wi_format_every_placeholder_and_none() -> None:
    options = {**NAMES, "world_book_after": "W"}
    both = preset([marker("worldInfoAfter")], options, wi_format="<{0}|{0}|{1}>")
    sent = texts(build(both))
    assert sent["worldInfoAfter"] == "<W|W|{1}>"  # every {0} (ST stringFormat); any other {n} stays
    assert sent["system"] == "<SYS|SYS|{1}>"  # the same wrapper around zhin's system prompt
    none = preset([marker("worldInfoAfter")], options, wi_format="[notes {{char}}]")
    sent = texts(build(none))
    assert sent["worldInfoAfter"] == "[notes Juniper]"  # ST drops the text when the format has no {0} …
    assert sent["system"] == "[notes Juniper]SYS"  # … but zhin's own system prompt is never dropped
    assert any(d.code == "wi-format-without-text" for d in lint_preset(none).diagnostics)
    assert not any(d.code == "wi-format-without-text" for d in lint_preset(both).diagnostics)


# -- B2: legacy markers --------------------------------------------------------------------------------------


def test_legacy_markers_in_entries_but_not_in_member_text() -> None:
    p = preset([entry("legacy", "For <BOT>: <User> is a guest; <CHAR> answers, `<user>` asks; <GROUP>/<charIfNotGroup>. "
                      "</user> <users> <user/> < user> <uſer> stay.", role="user")], NAMES)
    messages = [Projected("user", "history.user", body="I am <user> and you are <BOT>", rows=[1])]
    arrangement = build(p, messages)
    assert texts(arrangement)["legacy"] == ("For Juniper: Sol Reyes is a guest; Juniper answers, `Sol Reyes` asks; "
                                            "Juniper/Juniper. </user> <users> <user/> < user> <uſer> stay.")
    assert messages[0] in arrangement.layout.messages and messages[0].body == "I am <user> and you are <BOT>"


def test_lint_notes_lower_case_tags_only() -> None:
    p = preset([entry("xml", "<user>{{lastUserMessage}}</user> then <char>"), entry("upper", "<USER> and <User> and <BOT>")],
               {"description": "about <bot>"}, new_chat_prompt="[<group> begins]")
    notes = [d for d in lint_preset(p).diagnostics if d.code == "legacy-marker"]
    assert [d.severity for d in notes] == ["info", "info", "info"]
    assert "prompt 'xml': <user> becomes the user's name (its closing </user> stays); <char> becomes the character's name" \
        in notes[0].message
    assert notes[1].message.startswith("preset option description: <bot> becomes the character's name")
    assert notes[2].message.startswith("new_chat_prompt: <group> becomes the group's names")
    clean = preset([entry("upper", "<USER> <Char> <user_input> </user>")])
    assert not [d for d in lint_preset(clean).diagnostics if d.code == "legacy-marker"]


# -- B4: {{summary}} ----------------------------------------------------------------------------------------


def test_summary_macro_is_the_compaction_summary_or_empty() -> None:
    p = preset([entry("recap", "Summary: [{{summary}}]"), entry("only", "{{summary}}")], NAMES)
    summary = Projected("summary", "history.summary", body=SUMMARY_PREFIX + "They met at the door. {{user}} <user>")
    with_summary = texts(build(p, [summary, *CHAT]))
    assert with_summary["recap"] == "Summary: [They met at the door. {{user}} <user>]"  # the text is data: not expanded
    without = build(p)
    assert texts(without)["recap"] == "Summary: []"
    assert "only" not in texts(without)  # expands to "": not sent
    assert without.unknown_macros == {}


def test_summary_macro_through_the_assembler_after_compaction() -> None:
    h = History()
    for i in range(4):
        h.user(T0 + 2 * i * MIN, "10002", f"m{i}", display_name="阿丽")
        h.assistant(T0 + (2 * i + 1) * MIN, f"r{i}")
    h.summary(T0 + 7 * MIN + 1, 4, "阿丽 asked about the rain")
    h.user(T0 + 8 * MIN, "10002", "m4", display_name="阿丽")
    h.assistant(T0 + 9 * MIN, "r4")
    data = {"prompts": [entry("main", "Earlier: {{summary}}"), marker("worldInfoBefore"), marker("chatHistory")],
            "prompt_order": [{"character_id": 100001, "order": [{"identifier": i, "enabled": True}
                                                                for i in ("main", "worldInfoBefore", "chatHistory")]}]}
    requests = list(assembler(preset=parse_preset(data)).replay(h.session()))
    first = [m["content"] for m in requests[0].request["messages"] if m["role"] == "system"]
    last = [m["content"] for m in requests[-1].request["messages"] if m["role"] == "system"]
    assert "Earlier: " in first  # no summary yet: {{summary}} is ""
    assert "Earlier: 阿丽 asked about the rain" in last


def test_lint_summary_is_known_and_unknown_message_is_accurate() -> None:
    p = preset([entry("main", "{{summary}} {{loomStyle}}")])
    result = lint_preset(p)
    by_code = {d.code: d for d in result.diagnostics}
    assert {m["name"]: m["known"] for m in result.macros} == {"summary": True, "loomStyle": False}
    assert by_code["unknown-macro"].message.endswith(
        "zhin leaves it verbatim, as stock ST does (an ST extension that defines it would expand it there)")
    assert by_code["summary-macro"].severity == "info" and "compaction summary" in by_code["summary-macro"].message


# -- the golden content as realistic input ----------------------------------------------------------------


@pytest.mark.skipif(not (GOLDEN / "content").is_dir(), reason="golden content not in this checkout")
def test_golden_card_markers_match_st_request() -> None:
    content = GOLDEN / "content"
    card = json.loads((content / "golden-card.json").read_text(encoding="utf-8"))["data"]
    persona = json.loads((content / "golden-persona.json").read_text(encoding="utf-8"))
    lore = json.loads((content / "golden-lore.json").read_text(encoding="utf-8"))
    data = json.loads((content / "golden-preset.json").read_text(encoding="utf-8"))
    options = {"user": persona["name"], "char": card["name"], "persona": persona["description"],
               "description": card["description"], "personality": card["personality"], "scenario": card["scenario"],
               "world_book_after": lore["entries"]["0"]["content"]}
    sent = texts(build(parse_preset(data, options=options)))
    request = json.loads((GOLDEN / "runs" / "plain" / "request-01.json").read_text(encoding="utf-8"))
    st = [m["content"] for m in request["messages"]]
    # messages 1–4 and 7–10 of ST's first request: persona, description, personality, scenario, World Info after,
    # the card recap, the assistant and the legacy-tag user entry
    for identifier, index in [("personaDescription", 1), ("charDescription", 2), ("charPersonality", 3), ("scenario", 4),
                              ("worldInfoAfter", 7), ("golden-card-recap", 8), ("golden-emoji", 9), ("golden-legacy", 10)]:
        assert sent[identifier] == st[index], identifier

"""tools/preset/check: one captured SillyTavern body against zhin's request for its turn.

The golden set (tests/st_golden) gives real ST bodies for every run × turn: each must check with no departure,
with exactly the by-design differences the set documents (the preset's two ``{{getvar::n}}`` places; names on
every history message under names_behavior 1/2). Negative controls edit a real body (move, role, one byte,
another turn's body) and each edit must be found where it was made.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import InputError
from zhin_cli.pipeline.assemble import TAIL_SEGMENT, Assembler
from zhin_cli.pipeline.preset.layout import SYSTEM_SEGMENT
from zhin_cli.store.sillytavern import ChatTurn, read_card, read_chat, read_lore
from zhin_cli.tools.preset.check import CheckSetup, TurnCheck, check_turn, prepare, zhin_request

GOLDEN = Path(__file__).resolve().parent / "st_golden"
RUNS: list[dict[str, Any]] = json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8"))
PERSONA = json.loads((GOLDEN / "content" / "golden-persona.json").read_text(encoding="utf-8"))
CARD = read_card(GOLDEN / "content" / "golden-card.json")
LORE = read_lore(GOLDEN / "content" / "golden-lore.json")


def _run(label: str) -> dict[str, Any]:
    return next(r for r in RUNS if r["label"] == label)


@cache
def _setup(label: str, folder: Path) -> CheckSetup:
    """The run's preset with its squash / names settings written in (as the golden test does); post-processing,
    a connection setting in ST, given to ``prepare``."""
    run = _run(label)
    data = json.loads((GOLDEN / run["preset"]).read_text(encoding="utf-8"))
    effective = dict(run["st_effective"])
    post_processing = effective.pop("custom_prompt_post_processing")
    data.update(effective)
    data["custom_prompt_post_processing"] = "strict" if post_processing != "strict" else ""  # prepare must win
    path = folder / f"golden-{label}.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    chat = read_chat(GOLDEN / "runs" / label / "chat.jsonl")
    return prepare(path, chat, card=CARD, lore=LORE, persona_description=PERSONA["description"],
                   post_processing=post_processing)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stcheck")


def _body(label: str, turn: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / "runs" / label / f"request-{turn:02d}.json").read_text(encoding="utf-8"))
    return data


def _turn(setup: CheckSetup, number: int) -> ChatTurn:
    return next(t for t in setup.chat.turns if t.number == number)


def _check(folder: Path, label: str, turn: int, body: dict[str, Any] | None = None) -> TurnCheck:
    setup = _setup(label, folder)
    return check_turn(setup, _turn(setup, turn), body if body is not None else _body(label, turn))


CASES = [pytest.param(run["label"], turn, id=f"{run['label']}-{turn:02d}")
         for run in RUNS for turn in range(1, run["turns"] + 1)]


@pytest.mark.parametrize(("label", "turn"), CASES)
def test_every_golden_turn_checks_clean(label: str, turn: int, folder: Path) -> None:
    check = _check(folder, label, turn)
    assert check.departures == []
    st_n = json.loads((GOLDEN / "runs" / label / "st-turns.json").read_text(encoding="utf-8"))[turn]["variables_at_send"][0]["n"]
    variables = [b for b in check.by_design if b.kind == "chat-variable"]
    assert [b.detail for b in variables] == [f"n: ST {st_n}, zhin 1"] * 2  # the preset's two {{getvar::n}} places
    body = _body(label, turn)
    for b in variables:
        assert b.st_index is not None and f"{st_n}" in body["messages"][b.st_index]["content"]
    names = [b for b in check.by_design if b.kind == "names"]
    history = 2 * turn  # greeting + k user turns + k-1 replies
    assert len(names) == (history if _run(label)["st_effective"]["names_behavior"] in (1, 2) else 0)
    assert {b.kind for b in check.by_design} <= {"chat-variable", "names"}
    request = zhin_request(_setup(label, folder), _turn(_setup(label, folder), turn))
    assert check.removed == {"headers": sum(1 for m in request.projected if m.header),
                             "system_parts": sum(1 for p in request.parts if p.segment_id == SYSTEM_SEGMENT),
                             "tail": sum(1 for p in request.parts if p.segment_id == TAIL_SEGMENT)}
    assert check.removed["headers"] == history
    assert check.ignored_keys == sorted(k for k in set(body) | set(request.request) if k != "messages")
    assert check.notes == []  # the golden captures were made for gpt-4o, the profile zhin uses
    json.dumps(check.as_dict())  # JSON-ready


def test_another_model_is_checked_with_the_same_profile_and_said(folder: Path) -> None:
    body = _body("plain", 3)
    body["model"] = "deepseek-chat"
    check = _check(folder, "plain", 3, body)
    assert check.departures == []
    assert check.notes == ["the capture's model is 'deepseek-chat'; zhin's request was built with the openai gpt-4o profile"]


def _zhin_index(folder: Path, label: str, turn: int, content: str) -> int:
    request = zhin_request(_setup(label, folder), _turn(_setup(label, folder), turn))
    (index,) = [i for i, m in enumerate(request.request["messages"]) if m.get("content") == content]
    return index


def test_a_moved_message_is_one_move_with_both_indices(folder: Path) -> None:
    body = _body("plain", 3)
    moved = body["messages"].pop(30)  # an in-chat entry (golden-d1-sys)
    body["messages"].append(moved)
    (departure,) = _check(folder, "plain", 3, body).departures
    assert (departure.kind, departure.st_index) == ("moved", len(body["messages"]) - 1)
    assert departure.zhin_index == _zhin_index(folder, "plain", 3, moved["content"])
    assert departure.category == "injection"
    control = _body("plain", 3)  # a relative (not in-chat) entry moved: no category
    moved = control["messages"].pop(5)
    control["messages"].append(moved)
    (departure,) = _check(folder, "plain", 3, control).departures
    assert (departure.kind, departure.category) == ("moved", None)


def test_a_changed_role_is_found_at_its_index(folder: Path) -> None:
    body = _body("plain", 3)
    assert body["messages"][10]["role"] == "user"
    body["messages"][10]["role"] = "system"
    (departure,) = _check(folder, "plain", 3, body).departures
    assert (departure.kind, departure.st_index, departure.role, departure.zhin_role) == ("role", 10, "system", "user")


def test_one_changed_character_gives_its_utf8_byte_offset(folder: Path) -> None:
    body = _body("plain", 3)
    text = body["messages"][35]["content"]
    at = text.index("催")
    body["messages"][35]["content"] = text[:at] + "逼" + text[at + 1:]
    (departure,) = _check(folder, "plain", 3, body).departures
    assert (departure.kind, departure.st_index) == ("changed", 35)
    assert departure.byte == len(text[:at].encode("utf-8")) and departure.byte != at  # bytes, not characters
    assert "逼" in departure.st_excerpt and "催" in departure.zhin_excerpt


def test_a_chat_variable_difference_is_by_design_only_alone(folder: Path) -> None:
    body = _body("plain", 3)
    text = body["messages"][6]["content"]
    assert "n = 7" in text
    body["messages"][6]["content"] = text.replace("n = 7", "n = 123")
    check = _check(folder, "plain", 3, body)
    assert check.departures == [] and "n: ST 123, zhin 1" in [b.detail for b in check.by_design]
    body["messages"][6]["content"] = text.replace("n = 7", "n = 123").replace("first", "frist")
    (departure,) = _check(folder, "plain", 3, body).departures  # the n value AND one more character
    assert (departure.kind, departure.st_index) == ("changed", 6)


def test_another_turns_body_departs(folder: Path) -> None:
    check = _check(folder, "plain", 3, _body("plain", 4))
    assert {d.kind for d in check.departures} >= {"extra"}
    assert _check(folder, "plain", 4, _body("plain", 3)).departures


def test_missing_and_extra(folder: Path) -> None:
    body = _body("plain", 3)
    gone = body["messages"].pop(30)  # in-chat entry
    (departure,) = _check(folder, "plain", 3, body).departures
    assert (departure.kind, departure.st_index, departure.category) == ("missing", None, "injection")
    assert departure.zhin_index == _zhin_index(folder, "plain", 3, gone["content"])
    body = _body("plain", 3)
    body["messages"].pop(5)  # a relative entry: no category
    (departure,) = _check(folder, "plain", 3, body).departures
    assert (departure.kind, departure.category) == ("missing", None)
    body = _body("plain", 3)
    body["messages"].insert(3, {"role": "system", "content": "something ST added"})
    (departure,) = _check(folder, "plain", 3, body).departures
    assert (departure.kind, departure.st_index, departure.zhin_index) == ("extra", 3, None)


def _changed(folder: Path, index: int, old: str, new: str, label: str = "plain") -> str | None:
    body = _body(label, 3)
    text = body["messages"][index]["content"]
    assert old in text
    body["messages"][index]["content"] = text.replace(old, new, 1)
    (departure,) = _check(folder, label, 3, body).departures
    assert (departure.kind, departure.st_index) == ("changed", index)
    return departure.category


def test_categories_from_zhins_attribution(folder: Path) -> None:
    assert _changed(folder, 13, "writing", "wrting") == "example-dialogue"
    assert _changed(folder, 2, "precise", "precize") == "card-field"
    assert _changed(folder, 7, "spare key", "spare kee") == "world-info"  # a lorebook entry (worldInfoAfter): its own category
    assert _changed(folder, 0, "Write Juniper", "Write Jupiter") == "macro"  # inside {{char}}'s output
    assert _changed(folder, 0, "slow, quiet", "slow, loud") is None  # the entry's literal text: no category
    assert _changed(folder, 35, "最后提醒", "最后提示") is None  # a plain entry without macros


def test_in_a_merged_message_the_part_at_the_byte_decides(folder: Path) -> None:
    """merge puts main, the card fields and more in one message: the category is that of the part holding the
    first differing byte, not of any part of the message."""
    assert _changed(folder, 0, "precise", "precize", "merge") == "card-field"
    assert _changed(folder, 0, "slow, quiet", "slow, loud", "merge") is None
    assert _changed(folder, 0, "Write Juniper", "Write Jupiter", "merge") == "macro"


def _joined(label: str, turn: int, folder: Path) -> str | None:
    body = _body(label, turn)
    messages = body["messages"]
    # the last adjacent pair without the chat variable's value (its pattern is per zhin message, not per join)
    at = max(i for i in range(len(messages) - 1)
             if not any("eneration counter" in m["content"] for m in messages[i:i + 2]))
    messages[at:at + 2] = [{"role": messages[at]["role"],
                            "content": messages[at]["content"] + "\n\n" + messages[at + 1]["content"]}]
    departures = _check(folder, label, turn, body).departures
    assert departures and departures[0].st_index == at
    return departures[0].category


def test_joined_messages_are_squash_or_post_processing(folder: Path) -> None:
    assert _joined("merge", 3, folder) == "post-processing"
    assert _joined("squash", 3, folder) == "squash"
    assert _joined("plain", 3, folder) is None  # neither squash nor post-processing in the preset: no category


def test_a_split_message_is_post_processing_the_other_way(folder: Path) -> None:
    """The reverse of a join: ST sent as two messages what zhin sent as one."""
    body = _body("merge", 3)
    messages = body["messages"]
    at = next(i for i, m in enumerate(messages) if "\n\n" in m["content"] and "eneration counter" not in m["content"])
    first, rest = messages[at]["content"].split("\n\n", 1)
    messages[at:at + 1] = [{"role": messages[at]["role"], "content": first}, {"role": messages[at]["role"], "content": rest}]
    departures = _check(folder, "merge", 3, body).departures
    assert departures and (departures[0].st_index, departures[0].category) == (at, "post-processing")


def test_a_turn_without_a_reply_is_made_after_its_user_message(folder: Path) -> None:
    setup = _setup("plain", folder)
    turn = replace(_turn(setup, 3), reply_position=None, reply_text=None)
    assert check_turn(setup, turn, _body("plain", 3)).departures == []
    assert check_turn(setup, turn, _body("plain", 2)).departures  # control: another turn's body


def test_names_only_on_history_messages(folder: Path) -> None:
    body = _body("names-content", 3)
    examples = [i for i, m in enumerate(body["messages"]) if m["content"] == "What are you writing?"]
    (at,) = examples
    body["messages"][at]["content"] = "Sol Reyes: " + body["messages"][at]["content"]  # not a history message
    (departure,) = _check(folder, "names-content", 3, body).departures
    assert (departure.kind, departure.st_index, departure.category) == ("changed", at, "example-dialogue")
    body = copy.deepcopy(_body("names-completion", 3))
    body["messages"][0]["name"] = "Juniper"  # a preset message with a name: a departure
    (departure,) = _check(folder, "names-completion", 3, body).departures
    assert (departure.kind, departure.st_index, departure.byte) == ("changed", 0, None)


def test_without_the_removal_zhins_wire_is_not_sts(folder: Path) -> None:
    """The removal is needed: zhin's raw wire differs from ST's body."""
    setup = _setup("plain", folder)
    request = zhin_request(setup, _turn(setup, 3))
    raw = [{"role": m["role"], "content": m.get("content") or ""} for m in request.request["messages"]]
    assert raw != _body("plain", 3)["messages"]
    assert len(raw) == len(_body("plain", 3)["messages"]) + 1  # zhin's own system message


def test_card_variables_are_the_chat_variables_at_the_start_of_the_request(folder: Path) -> None:
    """CardOptions.variables (ST's chat_metadata.variables) seed the macros' variable map: golden-vars'
    {{addvar::n::1}} then counts on from them."""
    setup = _setup("plain", folder)
    base = setup.assembler
    assert base.preset is not None
    preset = replace(base.preset, card=replace(base.preset.card, variables=(("n", "41"),)))
    seeded = Assembler(base.registry, base.config, provider=base.provider, model=base.model, preset=preset)
    turn = _turn(setup, 3)
    session = setup.chat.session
    assert turn.reply_position is not None
    texts = [m.get("content") or "" for m in seeded.assemble(
        session, turn.reply_position, session.messages[turn.reply_position].timestamp).request["messages"]]
    assert any("generation counter n = 42" in t for t in texts)
    plain = [m.get("content") or "" for m in zhin_request(setup, turn).request["messages"]]
    assert any("generation counter n = 1." in t for t in plain) and not any("n = 42" in t for t in plain)


def test_a_history_text_a_preset_regex_rewrote_is_regex(folder: Path) -> None:
    """A promptOnly script rewrites a user message on zhin's side (ST's capture was made without it): the departure
    is at that history message, category regex; the same edit made on ST's side with no script has no category."""
    data = json.loads((GOLDEN / _run("plain")["preset"]).read_text(encoding="utf-8"))
    data.update({k: v for k, v in _run("plain")["st_effective"].items() if k != "custom_prompt_post_processing"})
    data["extensions"] = {"regex_scripts": [{"scriptName": "scope", "findRegex": "/big telescope/g",
                                             "replaceString": "big scope", "placement": [1], "promptOnly": True,
                                             "disabled": False}]}
    path = folder / "golden-regex.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    chat = read_chat(GOLDEN / "runs" / "plain" / "chat.jsonl")
    setup = prepare(path, chat, card=CARD, lore=LORE, persona_description=PERSONA["description"], post_processing="")
    body = _body("plain", 3)
    (at,) = [i for i, m in enumerate(body["messages"]) if m["content"] == _turn(setup, 3).user_text]
    assert "big telescope" in body["messages"][at]["content"]
    (departure,) = check_turn(setup, _turn(setup, 3), body).departures
    assert (departure.kind, departure.st_index, departure.source, departure.category) == ("changed", at, "history", "regex")
    control = _body("plain", 3)
    control["messages"][at]["content"] = control["messages"][at]["content"].replace("big telescope", "big scope")
    (departure,) = _check(folder, "plain", 3, control).departures
    assert (departure.kind, departure.st_index, departure.category) == ("changed", at, None)


@pytest.mark.parametrize("body", [{}, {"messages": "text"}, {"messages": ["text"]}])
def test_a_body_without_messages_is_an_input_error(folder: Path, body: dict[str, Any]) -> None:
    with pytest.raises(InputError, match="messages"):
        _check(folder, "plain", 3, body)


@pytest.mark.parametrize("st_text", ["n = 7abc", "n = ", "n = 7 and more"])
def test_a_value_with_text_glued_to_it_is_a_departure(folder: Path, st_text: str) -> None:
    """Only a number is excused where zhin prints a number: letters glued to ST's value are ST's text."""
    body = _body("plain", 3)
    body["messages"][6]["content"] = body["messages"][6]["content"].replace("n = 7", st_text)
    assert [d.st_index for d in _check(folder, "plain", 3, body).departures] == [6]


def test_text_around_a_value_is_never_excused_with_it(folder: Path, tmp_path: Path) -> None:
    """A preset printing a counter between CJK characters: the value is by design, the characters are not."""
    data = json.loads((GOLDEN / "content" / "golden-preset.json").read_text(encoding="utf-8"))
    entry = next(p for p in data["prompts"] if p.get("identifier") == "golden-macros")
    assert "generation counter n = {{getvar::n}}" in entry["content"]
    entry["content"] = entry["content"].replace("generation counter n = {{getvar::n}}", "计数{{getvar::n}}次生成")
    path = tmp_path / "cjk.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    setup = prepare(path, read_chat(GOLDEN / "runs" / "plain" / "chat.jsonl"), card=CARD, lore=LORE,
                    persona_description=PERSONA["description"])
    body = _body("plain", 3)
    original = body["messages"][6]["content"]
    body["messages"][6]["content"] = original.replace("generation counter n = 7", "计数7次生成")
    clean = check_turn(setup, _turn(setup, 3), body)
    assert clean.departures == [] and "n: ST 7, zhin 1" in [b.detail for b in clean.by_design]
    body["messages"][6]["content"] = original.replace("generation counter n = 7", "计数7次失败了")
    assert [d.st_index for d in check_turn(setup, _turn(setup, 3), body).departures] == [6]


def test_a_name_that_is_not_a_string_is_a_departure_not_a_crash(folder: Path) -> None:
    body = _body("plain", 3)
    body["messages"][6]["name"] = ["x"]
    (departure,) = _check(folder, "plain", 3, body).departures
    assert (departure.kind, departure.st_index) == ("changed", 6)

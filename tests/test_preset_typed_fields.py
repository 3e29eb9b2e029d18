"""The preset importer reads a preset as JSON (``core/jsontext.JSON``), never assuming a field's type (issue 32 §4).

Typing the importer found a traceback: a regex script whose ``placement`` or ``trimStrings`` is a number, not a list,
crashed ``parse_preset`` (``TypeError: 'int' object is not iterable``). A list field that is not a list now reads as
no items, as any other malformed field of a script does.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from zhin_cli.pipeline.preset.importer import card_options, parse_preset
from zhin_cli.pipeline.preset.model import CardOptions, Preset

ORDER = [{"character_id": 100001, "order": [{"identifier": "main", "enabled": True}, {"identifier": "chatHistory", "enabled": True}]}]


def preset_with_script(**fields: object) -> Preset:
    script = {"scriptName": "s", "findRegex": "a", "replaceString": "b", "promptOnly": True, **fields}
    data = {"prompts": [{"identifier": "main", "content": "hi"}], "prompt_order": ORDER, "extensions": {"regex_scripts": [script]}}
    return parse_preset(data)


@pytest.mark.parametrize("key", ["placement", "trimStrings"])
@pytest.mark.parametrize("value", [5, 2.5, True])
def test_a_list_field_that_is_a_scalar_reads_as_no_items(key: str, value: object) -> None:
    (script,) = preset_with_script(**{key: value}).regex_scripts
    assert (script.placement, script.trim_strings) == ((), ())


def test_list_fields_keep_the_items_of_their_type() -> None:
    # negative control: the same fields as lists are read (so the test above would see items if they were kept)
    (script,) = preset_with_script(placement=[1, "x", 2], trimStrings=["<b>", 3, "</b>"]).regex_scripts
    assert script.placement == (1, 2) and script.trim_strings == ("<b>", "</b>")


@pytest.mark.parametrize(("raw", "in_chat"), [(1, True), (1.0, True), (0, False), (True, False), ("1", False), (None, False)])
def test_injection_position_1_is_in_chat_and_anything_else_relative(raw: object, in_chat: bool) -> None:
    data = {"prompts": [{"identifier": "main", "content": "hi", "injection_position": raw, "injection_depth": 2}], "prompt_order": ORDER}
    assert parse_preset(data).prompts["main"].in_chat is in_chat


@pytest.mark.parametrize(("values", "expected"), [
    ({"user": "Ann", "seed": 7, "persona": "p"}, CardOptions(user="Ann", seed=7, persona="p")),
    ({"user": None, "seed": None, "greeting": None}, CardOptions()),  # None: not set (zhin.yaml can unset a preset's value)
    ({}, CardOptions()),
])
def test_card_options_from_checked_values(values: Mapping[str, str | int | None], expected: CardOptions) -> None:
    assert CardOptions.from_values(values) == expected


def test_preset_card_options_merge_with_zhin_yaml_the_latter_winning() -> None:
    data = {"prompts": [], "prompt_order": ORDER, "extensions": {"zhin": {"user": "FromPreset", "char": "Bot", "seed": 3}}}
    card = parse_preset(data, options=card_options({"user": "FromYaml", "char": None}, "zhin.yaml")).card
    assert (card.user, card.char, card.seed) == ("FromYaml", None, 3)
    # negative control: without options the preset's own values are used
    assert parse_preset(data).card == CardOptions(user="FromPreset", char="Bot", seed=3)

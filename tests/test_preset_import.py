"""Importing SillyTavern chat-completion presets as they are found in the wild (docs/spec/sillytavern.md §1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import ConfigError
from zhin_cli.pipeline.preset.importer import load_preset, parse_preset
from zhin_cli.tools.preset.lint import lint_preset

PRESETS = Path(__file__).resolve().parent.parent / "fixtures" / "presets"
ST_DEFAULT = PRESETS / "st-default.json"
COMMUNITY = PRESETS / "community-zh.json"


def codes(preset: Any) -> list[str]:
    return [d.code for d in preset.diagnostics]


def test_st_default_uses_the_100001_order_and_keeps_every_prompt() -> None:
    preset = load_preset(ST_DEFAULT)
    assert preset.order_source == "100001"
    assert len(preset.prompts) == 12
    assert [e.identifier for e in preset.order][:3] == ["main", "worldInfoBefore", "personaDescription"]
    assert [e.identifier for e in preset.order if not e.enabled] == ["enhanceDefinitions"]
    assert "legacy-order" in codes(preset)
    assert preset.settings["stream_openai"] is True  # every top-level key is kept
    assert preset.unknown_keys == []  # ST's own Default.json has no key we do not know


def test_legacy_order_is_used_when_there_is_no_100001_order() -> None:
    data = json.loads(ST_DEFAULT.read_text(encoding="utf-8"))
    data["prompt_order"] = [o for o in data["prompt_order"] if o["character_id"] == 100000]
    preset = parse_preset(data)
    assert preset.order_source == "100000"
    assert "personaDescription" not in [e.identifier for e in preset.order]  # the legacy list lacks it
    assert "legacy-order-used" in codes(preset)


def test_no_order_at_all_falls_back_to_st_builtin_order() -> None:
    preset = parse_preset({"prompts": [{"identifier": "main", "content": "hi"}]})
    assert preset.order_source == "default"
    assert [e.identifier for e in preset.order][:2] == ["main", "worldInfoBefore"]
    assert ("enhanceDefinitions", False) not in [(e.identifier, e.enabled) for e in preset.order]  # undefined: removed


def test_community_preset_string_character_id_unknown_keys_and_fields_kept() -> None:
    preset = load_preset(COMMUNITY)
    assert preset.order_source == "100001"  # the order is stored under the *string* "100001"
    assert "string-character-id" in codes(preset)
    assert preset.unknown_keys == ["some_fork_key"]
    assert preset.settings["some_fork_key"] == {"kept": True}
    assert preset.unknown_extensions == ["SPreset", "tavern_helper"]
    assert preset.prompts["jailbreak"].extra == {"x_custom_flag": 7}
    assert preset.prompts["main"].forbid_overrides is True
    assert preset.prompts["disabledOne"].enabled is True  # prompts[].enabled is kept but never used
    assert [e.enabled for e in preset.order if e.identifier == "disabledOne"] == [False]
    assert len(preset.regex_scripts) == 3
    assert preset.card.personality == "冷静、话少"


def test_bad_depths_are_reported_with_their_line() -> None:
    preset = load_preset(COMMUNITY)
    bad = {d.message.split("'")[1]: d for d in preset.diagnostics if d.code == "bad-depth"}
    assert set(bad) == {"noDepth", "stringDepth"}
    assert preset.prompts["stringDepth"].injection_depth is None  # ST compares with ===: "4" never matches
    line = COMMUNITY.read_text(encoding="utf-8").splitlines()[int(bad["stringDepth"].where.rsplit(":", 1)[1]) - 1]
    assert "stringDepth" in line


def test_prompts_outside_the_order_are_reported() -> None:
    preset = load_preset(COMMUNITY)
    assert any(d.code == "not-in-order" and "'never'" in d.message for d in preset.diagnostics)


def test_lint_reports_unknown_macros_never_sent_entries_and_cache_breakers() -> None:
    data = json.loads(COMMUNITY.read_text(encoding="utf-8"))
    data["prompts"][3]["content"] = "骰子 {{roll:1d6}} {{random::a::b}}"
    data["prompt_order"][1]["order"].insert(0, {"identifier": "dice", "enabled": True})  # now in the prefix
    result = lint_preset(parse_preset(data))
    by_code = {d.code for d in result.diagnostics}
    assert {"unknown-macro", "never-sent", "random-in-prefix", "bad-depth"} <= by_code
    loom = next(m for m in result.macros if m["name"] == "loomStyle")
    assert loom == {"name": "loomStyle", "known": False, "entries": ["loom"]}
    assert next(m for m in result.macros if m["name"] == "setvar")["known"] is True
    assert result.failed
    # negative control: the shipped default preset is clean
    assert not lint_preset(load_preset(ST_DEFAULT)).failed


def test_lint_flags_a_preset_without_chat_history() -> None:
    data = {"prompts": [{"identifier": "main", "content": "x"}],
            "prompt_order": [{"character_id": 100001, "order": [{"identifier": "main", "enabled": True}]}]}
    codes_found = {d.code for d in lint_preset(parse_preset(data)).diagnostics}
    assert {"no-history", "system-appended"} <= codes_found


def test_a_squash_setting_that_is_not_a_boolean_is_reported_and_means_off() -> None:
    preset = parse_preset({"squash_system_messages": "yes", "prompts": []})
    assert "bad-squash" in codes(preset) and preset.squash is False
    assert "bad-squash" not in codes(parse_preset({"squash_system_messages": True, "prompts": []}))


def test_bad_regex_is_skipped_and_reported() -> None:
    data = {"prompts": [], "extensions": {"regex_scripts": [{"scriptName": "broken", "findRegex": "/([a-/g", "promptOnly": True}]}}
    preset = parse_preset(data)
    assert preset.regex_scripts == []
    assert "bad-regex" in codes(preset)


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ('{\n  "prompts": [\n    {"identifier": "main",\n  ]\n}\n', "not valid JSON", 4),
        ('[1, 2]', "must be a JSON object", None),
        ('{\n "prompts": {"main": 1}\n}', "prompts must be a list", 2),
        ('{\n "prompts": [\n  {"name": "无名", "content": "x"}\n ]\n}', "has no identifier", 3),
        ('{"prompts": [], "prompt_order": {"100001": []}}', "prompt_order must be a list", 1),
    ],
)
def test_unusable_files_are_one_line_config_errors_naming_file_and_line(tmp_path: Path, text: str, message: str, line: int | None) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_preset(path)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(str(path))
    if line is not None:
        assert caught.value.where == f"{path}:{line}"


def test_missing_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such preset file"):
        load_preset(tmp_path / "absent.json")
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{\n"x": "\xe9"}')
    with pytest.raises(ConfigError, match="not UTF-8") as caught:
        load_preset(path)
    assert caught.value.where == f"{path}:2"


def test_single_post_processing_is_supported_and_only_noted() -> None:
    """'single' is ST's one-user-message mode, done as ST does it (tests/st_golden single run): an info note that
    says what happens, not the old 'treated as strict' warning."""
    single = parse_preset({"prompts": [], "custom_prompt_post_processing": "single"})
    (note,) = [d for d in single.diagnostics if "single" in d.message]
    assert (note.severity, note.code) == ("info", "single-user-message") and "one user message" in note.message
    assert single.post_processing == "single"
    strict = parse_preset({"prompts": [], "custom_prompt_post_processing": "strict"})
    assert not [d for d in strict.diagnostics if "single" in d.code]  # negative control


def test_an_in_chat_depth_past_st_maximum_is_never_injected() -> None:
    """ST injects in-chat entries for depths 0…10000 only (MAX_INJECTION_DEPTH); deeper ones are never sent."""
    from zhin_cli.pipeline.headers import Projected
    from zhin_cli.pipeline.preset.skeleton import arrange

    def in_chat(identifier: str, depth: int) -> dict[str, Any]:
        return {"identifier": identifier, "role": "system", "content": identifier, "system_prompt": False,
                "injection_position": 1, "injection_depth": depth}

    preset = parse_preset({"prompts": [in_chat("deepest", 10000), in_chat("too-deep", 10001), {"identifier": "chatHistory", "marker": True}],
                           "prompt_order": [{"character_id": 100001, "order": [{"identifier": i, "enabled": True}
                                                                              for i in ("deepest", "too-deep", "chatHistory")]}]})
    (bad,) = [d for d in preset.diagnostics if d.code == "bad-depth"]
    assert "too-deep" in bad.message and "10000" in bad.message
    history = [Projected("user", "history.user", body="你好", rows=[1])]
    layout = arrange(preset, "", history, None).layout
    texts = [m.text for m in [*layout.leading, *layout.messages]]
    assert texts == ["[Start a new Chat]", "deepest", "你好"]  # 10000 is still injected (negative control)

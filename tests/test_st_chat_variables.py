"""The chat-variable hook of ``check-capture``: the variables ST saved with a chat (``chat_metadata.variables``,
the end state only) and the states tried where a message departs (each used variable unset or at its saved
value, fewest set first). The real-ST run is in ``test_st_golden2_macros.py``; these pin the rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zhin_cli.pipeline.preset.macros import variable_names
from zhin_cli.store.sillytavern import read_chat
from zhin_cli.tools.preset.check import MAX_SAVED_STATES, variable_states


def _chat(tmp_path: Path, metadata: dict[str, Any]) -> Path:
    path = tmp_path / "chat.jsonl"
    lines = [{"user_name": "unused", "character_name": "unused", "chat_metadata": metadata},
             {"name": "Ada", "is_user": True, "mes": "hi", "send_date": "2026-03-01T10:00:00.000Z"}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def test_saved_variables_are_read_as_text(tmp_path: Path) -> None:
    saved = {"visitor": "Bastian Crewe", "count": 3, "ratio": 0.5, "flag": True, "list": [1], "empty": ""}
    chat = read_chat(_chat(tmp_path, {"variables": saved}))
    assert chat.variables == {"visitor": "Bastian Crewe", "count": "3", "ratio": "0.5", "empty": ""}


def test_no_saved_variables(tmp_path: Path) -> None:
    """Negative control: no ``variables`` (or not an object) is no state at all."""
    assert read_chat(_chat(tmp_path, {})).variables == {}
    assert read_chat(_chat(tmp_path, {"variables": ["x"]})).variables == {}


def test_the_used_variables_include_shorthands_and_conditions() -> None:
    """``{{.x}}`` and ``{{if .x}}`` decide text as ``{{getvar::x}}`` does: all are used variables."""
    text = "{{getvar::a}} {{.b}} {{if .c}}yes{{else}}no{{/if}} {{if !.d}}x{{/if}} {{setvar::e::1}}"
    assert variable_names(text) == ["a", "b", "c", "d", "e"]
    assert variable_names("{{if user}}x{{/if}} {{char}}") == []  # negative control: no variable in it


def test_states_fewest_set_first_and_only_saved_names() -> None:
    states = variable_states(("hives", "tide", "visitor", "unsaved"), {"tide": "spring", "visitor": "B", "other": "x"})
    assert states == [(("tide", "spring"),), (("visitor", "B"),), (("tide", "spring"), ("visitor", "B"))]
    assert variable_states(("unsaved",), {"tide": "spring"}) == []  # negative control: nothing saved is used


def test_states_are_bounded() -> None:
    """Past ``MAX_SAVED_STATES`` (2^6) the states are not tried at all, never 2^k renders for a large k."""
    six = {f"v{i}": "x" for i in range(6)}
    assert len(variable_states(tuple(six), six)) == MAX_SAVED_STATES - 1
    seven = {f"v{i}": "x" for i in range(7)}
    assert variable_states(tuple(seven), seven) == []

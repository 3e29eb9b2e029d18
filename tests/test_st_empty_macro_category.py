"""The ``macro`` category where a macro's output is empty (issue 30 review, finding 5), on the golden run ``macros``
of ``tests/st_golden2``.

The preset's ``{{getvar::hives}}`` changed to ``{{getvar::hivez}}`` (a variable nobody set) renders nothing: ST's
captures hold ``forty`` there, and the first differing byte is where the macro's (empty) output ends — the first
byte of the literal after it. That byte is the macro's: every turn departs as ``macro``.

Negative controls (one changed byte of ST's body, the preset unchanged): inside a literal stretch of the entry
(``Causeway:`` → ``Causeway;``) and at the entry's first byte (no macro before it) the category is not ``macro``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.store.sillytavern import read_card, read_chat
from zhin_cli.tools.preset.check import CheckSetup, TurnCheck, check_turn, prepare

GOLDEN = Path(__file__).resolve().parent / "st_golden2"
RUN = next(run for run in json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8")) if run["label"] == "macros")
FOLDER = GOLDEN / "runs" / "macros"


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _setup(preset: Path) -> CheckSetup:
    persona = _json(GOLDEN / RUN["persona"])
    (record,) = persona["persona_descriptions"].values()
    chat = read_chat(FOLDER / "chat.jsonl", persona=persona["name"])
    return prepare(preset, chat, card=read_card(GOLDEN / RUN["cards"][0]), persona_description=record["description"],
                   post_processing="none")


def _check(setup: CheckSetup, turn: int, body: dict[str, Any] | None = None) -> TurnCheck:
    return check_turn(setup, setup.chat.turns[turn - 1], body or _json(FOLDER / f"request-{turn:02d}.json"))


def test_an_empty_macro_output_departs_as_macro(tmp_path: Path) -> None:
    text = (GOLDEN / RUN["preset"]).read_text(encoding="utf-8")
    assert text.count("{{getvar::hives}}") == 1
    preset = tmp_path / "preset.json"
    preset.write_text(text.replace("{{getvar::hives}}", "{{getvar::hivez}}"), encoding="utf-8")
    setup = _setup(preset)
    for turn in range(1, RUN["requests"] + 1):
        (departure,) = _check(setup, turn).departures
        assert departure.category == "macro", turn
        assert departure.mark is not None and departure.st_excerpt[departure.mark:].startswith("forty.")


@pytest.mark.parametrize(("old", "new"), [("Causeway:", "Causeway;"), ("[Island ledger]", "(Island ledger]")])
def test_a_literal_byte_is_not_a_macro(old: str, new: str) -> None:
    body = copy.deepcopy(_json(FOLDER / "request-01.json"))
    (index,) = [i for i, m in enumerate(body["messages"]) if old in str(m["content"])]
    body["messages"][index]["content"] = body["messages"][index]["content"].replace(old, new, 1)
    (departure,) = _check(_setup(GOLDEN / RUN["preset"]), 1, body).departures
    assert departure.kind == "changed" and departure.category is None

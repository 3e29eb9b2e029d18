"""Where a departing message that uses chat variables is reported (issue 30 review, finding 3), on the golden run
``macros`` of ``tests/st_golden2`` with one byte of the preset changed in a temporary copy.

ST keeps chat variables across generations and its chat file keeps only the end state, so ``check-capture`` tries
the states the saved variables allow. A message that matches in none departs; it is reported against the closest
state — the one whose first difference comes latest — with that state's category and a note naming the state, not
at the first byte of zhin's plain render (there, only the branch the variables decide differs, with no category).

The preset's ``{{reverse::holly blossom}}`` is changed to ``{{reverse::holly blossoN}}``: ST's captures (taken with
the original) depart at the reversed word on every turn. On turns 2–4 ST held ``visitor`` (the user typed
``{{setvar::visitor::…}}``), on 5–7 ``tide`` too. Negative control: with the original preset no turn departs
(every state difference is by design); the plain render's first difference is earlier (the visitor line).
"""

from __future__ import annotations

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


def _preset_with(tmp_path: Path, old: str, new: str) -> Path:
    text = (GOLDEN / RUN["preset"]).read_text(encoding="utf-8")
    assert text.count(old) == 1
    path = tmp_path / "preset.json"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def _check(setup: CheckSetup, turn: int) -> TurnCheck:
    return check_turn(setup, setup.chat.turns[turn - 1], _json(FOLDER / f"request-{turn:02d}.json"))


@pytest.mark.parametrize(("turn", "state"), [(2, "tide unset; visitor=Bastian Crewe"),
                                              (5, "tide=spring; visitor=Bastian Crewe")])
def test_a_departure_is_reported_against_the_closest_state(tmp_path: Path, turn: int, state: str) -> None:
    setup = _setup(_preset_with(tmp_path, "holly blossom", "holly blossoN"))
    (departure,) = _check(setup, turn).departures
    assert departure.category == "macro"
    at = departure.mark
    assert at is not None  # the first difference is the reversed word itself
    assert departure.st_excerpt[at:].startswith("mossolb") and departure.zhin_excerpt[at:].startswith("Nossolb")
    assert departure.zhin_excerpt.startswith("tian Crewe.")  # zhin rendered with the visitor set, as ST
    (note,) = [n for n in _check(setup, turn).notes if "closest chat-variable state" in n]
    assert state in note


def test_turn_one_is_reported_from_the_plain_render(tmp_path: Path) -> None:
    """ST held no typed variable yet: the plain render is the closest, and no state note is added."""
    check = _check(_setup(_preset_with(tmp_path, "holly blossom", "holly blossoN")), 1)
    assert [d.category for d in check.departures] == ["macro"]
    assert not any("closest chat-variable state" in n for n in check.notes)


def test_the_original_preset_departs_nowhere() -> None:
    """Negative control: the saved states explain turns 2–7 as by design; the plain render alone would not."""
    setup = _setup(GOLDEN / RUN["preset"])
    checks = [_check(setup, turn) for turn in range(1, RUN["requests"] + 1)]
    assert [c.departures for c in checks] == [[]] * RUN["requests"]
    assert {b.kind for c in checks[1:] for b in c.by_design} == {"chat-variable"}

"""Forced names in a group chat's history (issue 30 review, finding 4), on the golden run ``group-swap`` of
``tests/st_golden2`` with one ST body changed in memory.

ST (names behaviour Default, in a group) starts each character's history message with ``Name: ``; zhin names the
sender in its header, so that prefix is by design — but only the message's own sender's name. Request 5 (turn 2,
Tobias Quill) holds Tobias's turn-1 reply as ``Tobias Quill: ok …``: given as ``Pell: ok …`` (another member's
name) or ``Tobias Quilt: ok …`` (misspelt) it is a departure with category ``group`` at the prefix.

Negative control: the unchanged body has 0 departures (the right prefix is by design).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.store.sillytavern import read_card, read_chat, read_group
from zhin_cli.tools.preset.capture import TurnMatcher
from zhin_cli.tools.preset.check import CheckSetup, TurnCheck, check_turn, prepare

GOLDEN = Path(__file__).resolve().parent / "st_golden2"
RUN = next(run for run in json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8")) if run["label"] == "group-swap")
REQUEST = GOLDEN / "runs" / "group-swap" / "request-05.json"


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@cache
def _setup() -> CheckSetup:
    persona = _json(GOLDEN / RUN["persona"])
    (record,) = persona["persona_descriptions"].values()
    chat = read_chat(GOLDEN / "runs" / "group-swap" / "chat.jsonl", persona=persona["name"],
                     group=read_group(GOLDEN / RUN["group"]))
    cards = [read_card(GOLDEN / path) for path in RUN["cards"]]
    return prepare(GOLDEN / RUN["preset"], chat, card=cards[0], members=cards[1:],
                   persona_description=record["description"], post_processing="none")


def _check(body: dict[str, Any]) -> TurnCheck:
    turn = TurnMatcher(_setup().chat).turn_of(body)
    assert turn is not None
    return check_turn(_setup(), turn, body)


def _renamed(old: str, new: str) -> tuple[dict[str, Any], int]:
    body = copy.deepcopy(_json(REQUEST))
    (index,) = [i for i, m in enumerate(body["messages"]) if str(m["content"]).startswith(old + ": ok ")]
    body["messages"][index]["content"] = new + body["messages"][index]["content"][len(old):]
    return body, index


def test_the_speaker_s_own_name_is_by_design() -> None:
    check = _check(_json(REQUEST))
    assert check.speaker == "Tobias Quill" and check.departures == []
    assert any(b.kind == "names" and "'Tobias Quill: '" in b.detail for b in check.by_design)


@pytest.mark.parametrize(("name", "byte"), [("Pell", 0), ("Tobias Quilt", 11), ("Marguerite Osei", 0)])
def test_another_or_a_misspelt_name_departs_as_group(name: str, byte: int) -> None:
    body, index = _renamed("Tobias Quill", name)
    (departure,) = _check(body).departures
    assert (departure.st_index, departure.kind, departure.category, departure.byte) == (index, "changed", "group", byte)
    assert departure.source == "history"
    assert departure.st_excerpt.startswith(f"{name}: ok ") and departure.zhin_excerpt.startswith("Tobias Quill: ok ")


def test_a_text_zhin_sent_as_is_is_never_misnamed() -> None:
    """A history text holding ``X: `` whose rest is another history text is that text, not a renamed prefix; a
    prefix on no history text as is (negative control) is judged."""
    from zhin_cli.tools.preset.check import Departure, ZhinMessage, _st_messages

    zhin = [ZhinMessage(0, "user", "Note: ok 1", ("history.user",), sender="Ren"),
            ZhinMessage(1, "user", "ok 1", ("history.user",), sender="Ren")]
    forced: list[Departure] = []
    _st_messages({"messages": [{"role": "user", "content": "Note: ok 1"}]}, zhin, {}, {"user": ("Ren",)}, 1, forced)
    assert forced == []
    _st_messages({"messages": [{"role": "user", "content": "Pell: ok 1"}]}, zhin, {}, {"user": ("Ren",)}, 1, forced)
    assert [(d.category, d.byte, d.zhin_index) for d in forced] == [("group", 0, 1)]

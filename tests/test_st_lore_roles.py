"""Which World Info books ST scans for a request (issue 30 review, findings 1 and 2), on the golden runs of
``tests/st_golden2`` with one card changed in a temporary folder.

1. A group chat: ST reads the character book of the member who is speaking (ST 1.18 scans the book of the
   character it generates for). A book linked to Tobias (``extensions.world``) is in Tobias's requests only, never
   in Marguerite's or Pell's.
2. One ``--lore`` file named as no book stands for the one book the card names (docs/sillytavern.md: "with one
   ``--lore`` file, that file is taken to be it"): the card's embedded ``character_book`` is not added beside it.

Negative controls: Tobias's own requests do hold the book (ST's captures, taken without it, depart there with
category ``world-info``); with no ``--lore`` the embedded book is read (its entry departs); with two files named as
no book, neither stands for the card's book and the embedded one is read again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.pipeline.preset import worldinfo
from zhin_cli.store.sillytavern import read_card, read_chat, read_group, read_lore
from zhin_cli.tools.preset.capture import TurnMatcher, read_world_settings
from zhin_cli.tools.preset.check import CheckSetup, check_turn, prepare, world_info, zhin_request

GOLDEN = Path(__file__).resolve().parent / "st_golden2"
RUNS = {run["label"]: run for run in json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8"))}
BOOK = GOLDEN / "content" / "lore-Greyreach_Almanac.json"  # named "lore-Greyreach_Almanac": as no card's book
EMBEDDED = "Mirela keeps a spare oar under the third bench."  # the embedded book's one entry (written for this test)


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _persona(label: str) -> tuple[str, str]:
    persona = _json(GOLDEN / RUNS[label]["persona"])
    (record,) = persona["persona_descriptions"].values()
    return persona["name"], record["description"]


def _card_with(tmp_path: Path, source: str, **data: Any) -> Path:
    card = _json(GOLDEN / source)
    for key, value in data.items():
        if key == "world":
            card["data"]["extensions"]["world"] = value
        else:
            card["data"][key] = value
    path = tmp_path / Path(source).name
    path.write_text(json.dumps(card), encoding="utf-8")
    return path


def _body(label: str, request: int) -> dict[str, Any]:
    body: dict[str, Any] = _json(GOLDEN / "runs" / label / f"request-{request:02d}.json")
    return body


# --- 1. a group reads the speaking member's book ----------------------------------------------------------------


def _group_setup(tmp_path: Path) -> CheckSetup:
    run = RUNS["group-swap"]
    cards = [GOLDEN / path for path in run["cards"]]
    tobias = next(i for i, path in enumerate(cards) if "Tobias" in path.name)
    cards[tobias] = _card_with(tmp_path, run["cards"][tobias], world="Greyreach Almanac")
    name, description = _persona("group-swap")
    chat = read_chat(GOLDEN / "runs" / "group-swap" / "chat.jsonl", persona=name, group=read_group(GOLDEN / run["group"]))
    read = [read_card(path) for path in cards]
    return prepare(GOLDEN / run["preset"], chat, card=read[0], members=read[1:], lore=[read_lore(BOOK)],
                   persona_description=description, post_processing="none")


def test_a_group_member_s_book_is_in_that_member_s_requests_only(tmp_path: Path) -> None:
    setup = _group_setup(tmp_path)
    departing: dict[str, set[str | None]] = {}
    for request in range(1, RUNS["group-swap"]["requests"] + 1):
        body = _body("group-swap", request)
        turn = TurnMatcher(setup.chat).turn_of(body)
        assert turn is not None
        check = check_turn(setup, turn, body)
        departing.setdefault(str(check.speaker), set()).update(d.category for d in check.departures)
    # ST's captures were taken with no book linked to anyone: Marguerite's and Pell's requests still match them
    assert departing["Marguerite Osei"] == set() and departing["Pell"] == set()
    # negative control: Tobias's own requests hold his book (which ST's captures lack), as world-info
    assert departing["Tobias Quill"] == {"world-info"}


def test_the_book_is_rendered_for_its_member_and_not_the_others(tmp_path: Path) -> None:
    setup = _group_setup(tmp_path)
    text = "Greyreach is a tidal estuary"  # the book's constant entry
    seen = {}
    for request in (1, 2, 3):  # turn 1: Marguerite, Tobias, Pell
        turn = TurnMatcher(setup.chat).turn_of(_body("group-swap", request))
        assert turn is not None
        member = setup.for_turn(turn)
        seen[member.member] = any(text in str(m.get("content")) for m in zhin_request(member, turn).request["messages"])
    assert seen == {"Marguerite Osei": False, "Tobias Quill": True, "Pell": False}


# --- 2. one --lore file stands for the card's book ---------------------------------------------------------------


def _embedded_book() -> dict[str, Any]:
    return {"entries": [{"id": 0, "keys": [], "content": EMBEDDED, "constant": True, "enabled": True,
                         "insertion_order": 100, "position": "before_char", "extensions": {}}]}


def _wi_setup(tmp_path: Path, lores: list[Path]) -> CheckSetup:
    run = RUNS["wi"]  # Mirela's card links "Greyreach Almanac"
    card = _card_with(tmp_path, run["cards"][0], character_book=_embedded_book())
    name, description = _persona("wi")
    chat = read_chat(GOLDEN / "runs" / "wi" / "chat.jsonl", persona=name)
    return prepare(GOLDEN / run["preset"], chat, card=read_card(card), lore=[read_lore(p) for p in lores],
                   persona_description=description,
                   world_settings=read_world_settings(GOLDEN / "runs" / "wi" / "st-settings.json"))


def _departures(setup: CheckSetup) -> list[tuple[int, str | None]]:
    out = []
    for turn in range(1, RUNS["wi"]["requests"] + 1):
        check = check_turn(setup, setup.chat.turns[turn - 1], _body("wi", turn))
        out += [(turn, d.category) for d in check.departures]
    return out


def test_one_lore_file_is_the_card_s_book_not_beside_its_embedded_one(tmp_path: Path) -> None:
    assert _departures(_wi_setup(tmp_path, [BOOK])) == []


@pytest.mark.parametrize("copies", [0, 2])
def test_the_embedded_book_is_read_when_no_single_file_stands_for_it(tmp_path: Path, copies: int) -> None:
    """Negative controls: no --lore, or two files named as no book: the embedded entry is in every request."""
    lores = [shutil.copy(BOOK, tmp_path / f"book{i}.json") for i in range(copies)]
    departures = _departures(_wi_setup(tmp_path, [Path(p) for p in lores]))
    assert {turn for turn, _ in departures} == set(range(1, RUNS["wi"]["requests"] + 1))
    assert {category for _, category in departures} >= {"world-info"}


def test_one_file_stands_for_the_one_named_book_only(tmp_path: Path) -> None:
    """The rule's edges: with the chat and the card naming two books, one file is ambiguous (global, two notes)."""
    chat = read_chat(GOLDEN / "runs" / "an" / "chat.jsonl")  # bound to "Kessel Workshop Notes"
    card = read_card(GOLDEN / RUNS["wi"]["cards"][0])  # linked to "Greyreach Almanac"
    world, notes = world_info(chat, card, [read_lore(BOOK)], worldinfo.Settings())
    assert [b.source for b in world.books] == ["global"]
    assert sum("give it with --lore" in note for note in notes) == 2
    world, notes = world_info(read_chat(GOLDEN / "runs" / "wi" / "chat.jsonl"), card, [read_lore(BOOK)],
                              worldinfo.Settings())
    assert [b.source for b in world.books] == ["character"] and not any("--lore" in note for note in notes)

"""World Info and the Author's Note against real SillyTavern 1.18.0 (``tests/st_golden2``, runs ``wi``,
``wi-global-scan``, ``an``, ``an-interval``; its README says what ST fired on each turn).

Each request ST sent is checked against zhin's request for the same turn (tools/preset/check, as ``zhin preset
check-capture`` does): 0 departures, nothing excused by design. The entries zhin's engine fires are compared with
what ST reported firing (``st-turns.json`` ``wi_activated``, in ST's activation order). Negative controls: one
changed byte of the book, of the note, of the chat, and a changed setting (scan depth, interval, note depth) each
give a departure with its category (``world-info``, ``authors-note``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from zhin_cli.pipeline.preset import worldinfo
from zhin_cli.pipeline.preset.macros import MacroContext, MacroEngine
from zhin_cli.store.sillytavern import read_card, read_chat, read_lore
from zhin_cli.tools.preset.capture import TurnMatcher, read_world_settings
from zhin_cli.tools.preset.check import CheckSetup, TurnCheck, check_turn, prepare

GOLDEN = Path(__file__).resolve().parent / "st_golden2"
RUNS = {run["label"]: run for run in json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8"))}
LABELS = ("wi", "wi-global-scan", "an", "an-interval")


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _persona(label: str) -> tuple[str, str]:
    persona = _json(GOLDEN / RUNS[label]["persona"])
    (record,) = persona["persona_descriptions"].values()
    return persona["name"], record["description"]


def _setup_from(label: str, *, chat: Path | None = None, lores: list[Path] | None = None,
                settings: worldinfo.Settings | None = None) -> CheckSetup:
    run = RUNS[label]
    name, description = _persona(label)
    st_chat = read_chat(chat or GOLDEN / "runs" / label / "chat.jsonl", persona=name)
    books = [read_lore(path) for path in (lores if lores is not None else [GOLDEN / b["file"] for b in run["lorebooks"]])]
    return prepare(GOLDEN / run["preset"], st_chat, card=read_card(GOLDEN / run["cards"][0]), lore=books,
                   persona_description=description,
                   world_settings=settings or read_world_settings(GOLDEN / "runs" / label / "st-settings.json"))


@cache
def _setup(label: str) -> CheckSetup:
    return _setup_from(label)


def _body(label: str, turn: int) -> dict[str, Any]:
    body: dict[str, Any] = _json(GOLDEN / "runs" / label / f"request-{turn:02d}.json")
    return body


def _check(setup: CheckSetup, label: str, turn: int, body: dict[str, Any] | None = None) -> TurnCheck:
    return check_turn(setup, setup.chat.turns[turn - 1], body or _body(label, turn))


CASES = [pytest.param(label, turn, id=f"{label}-{turn:02d}")
         for label in LABELS for turn in range(1, RUNS[label]["requests"] + 1)]


@pytest.mark.parametrize(("label", "turn"), CASES)
def test_every_request_is_what_st_sent(label: str, turn: int) -> None:
    setup = _setup(label)
    body = _body(label, turn)
    found = TurnMatcher(setup.chat).turn_of(body)
    assert found is not None and found.number == turn  # the capture is found for its own turn
    check = _check(setup, label, turn, body)
    assert [d.as_dict() for d in check.departures] == []
    assert check.by_design == [] and check.messages == len(body["messages"])


def _scan_texts(label: str, turn: int) -> list[str]:
    """What ST scans for request ``turn``: chat.jsonl lines 2 … 2k+1 newest first, ``"Name: text"``."""
    lines = (GOLDEN / "runs" / label / "chat.jsonl").read_text(encoding="utf-8").splitlines()[1:2 * turn + 1]
    return [f"{m['name']}: {m['mes']}" for m in map(json.loads, reversed(lines))]


@pytest.mark.parametrize(("label", "turn"), [c for c in CASES if c.values[0] in ("wi", "wi-global-scan", "an")])
def test_the_entries_fired_are_the_ones_st_fired(label: str, turn: int) -> None:
    """zhin's engine fires the entries ST reported, in ST's activation order (the README's tables)."""
    setup = _setup(label)
    world = setup.assembler.preset.card.world_info  # type: ignore[union-attr]
    assert world is not None
    name, _description = _persona(label)
    engine = MacroEngine(MacroContext(user=name, char=setup.character))
    fired = worldinfo.activate(world, _scan_texts(label, turn), expand=engine.expand, count_tokens=len,
                               max_context=4095, seed="0").fired
    generation, = next(t for t in _json(GOLDEN / "runs" / label / "st-turns.json") if t["turn"] == turn)["generations"]
    assert [int(e.uid) for e in fired] == [e["uid"] for e in generation["wi_activated"]]


def test_the_fired_entries_are_compared_for_real() -> None:
    """Negative control of the test above: the same scan on another turn's chat fires other entries."""
    setup = _setup("wi")
    world = setup.assembler.preset.card.world_info  # type: ignore[union-attr]
    assert world is not None
    engine = MacroEngine(MacroContext(user="Hal Brennick", char="Mirela Stoyan"))
    uids = [[e.uid for e in worldinfo.activate(world, _scan_texts("wi", turn), expand=engine.expand, count_tokens=len,
                                               max_context=4095, seed="0").fired] for turn in (1, 2, 4)]
    assert uids == [["0", "1"], ["0", "1", "2", "3"], ["0", "1", "4"]]


# --- negative controls: one changed byte, with its category ---------------------------------------------------


def _categories(check: TurnCheck) -> list[str | None]:
    return [d.category for d in check.departures]


def _edited_lore(tmp_path: Path, source: str, uid: str, old: str, new: str) -> Path:
    book = _json(GOLDEN / source)
    assert old in book["entries"][uid]["content"]
    book["entries"][uid]["content"] = book["entries"][uid]["content"].replace(old, new, 1)
    path = tmp_path / Path(source).name
    path.write_text(json.dumps(book, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(("label", "turn", "uid", "old", "new", "kind"), [
    ("wi", 2, "3", "painted", "paintek", "changed"),  # reached by recursion, after char defs
    ("wi", 4, "4", "eleven", "elevem", "changed"),  # AND ANY, before char defs
    ("wi", 5, "6", "listens", "listenz", "changed"),  # @depth 1 system
    ("wi", 7, "7", "gunwale", "gunwalf", "changed"),  # @depth 3 assistant
])
def test_a_changed_byte_of_the_book_is_a_world_info_departure(label: str, turn: int, uid: str, old: str, new: str,
                                                               kind: str, tmp_path: Path) -> None:
    source = RUNS[label]["lorebooks"][0]["file"]
    setup = _setup_from(label, lores=[_edited_lore(tmp_path, source, uid, old, new)])
    check = _check(setup, label, turn)
    assert [(d.kind, d.category) for d in check.departures] == [(kind, "world-info")]
    assert _check(_setup(label), label, turn).departures == []  # the control: the book as ST had it


def _edited_chat(tmp_path: Path, label: str, edit: Any) -> Path:
    lines = (GOLDEN / "runs" / label / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    messages = [json.loads(line) for line in lines[1:]]
    edit(header, messages)
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(o, ensure_ascii=False) for o in [header, *messages]) + "\n", encoding="utf-8")
    return path


def test_a_changed_byte_of_the_note_is_an_authors_note_departure(tmp_path: Path) -> None:
    def edit(header: dict[str, Any], _messages: list[Any]) -> None:
        header["chat_metadata"]["note_prompt"] = header["chat_metadata"]["note_prompt"].replace("slowly", "slowlY")

    check = _check(_setup_from("an", chat=_edited_chat(tmp_path, "an", edit)), "an", 3)
    assert [(d.kind, d.category) for d in check.departures] == [("changed", "authors-note")]


@pytest.mark.parametrize(("key", "value", "turn"), [("note_depth", 2, 3), ("note_interval", 2, 3), ("note_role", 0, 3)])
def test_a_changed_note_setting_is_an_authors_note_departure(key: str, value: int, turn: int, tmp_path: Path) -> None:
    def edit(header: dict[str, Any], _messages: list[Any]) -> None:
        assert header["chat_metadata"][key] != value
        header["chat_metadata"][key] = value

    check = _check(_setup_from("an-interval", chat=_edited_chat(tmp_path, "an-interval", edit)), "an-interval", turn)
    assert check.departures and set(_categories(check)) == {"authors-note"}


def test_a_changed_top_of_note_entry_is_a_world_info_departure(tmp_path: Path) -> None:
    source = RUNS["an"]["lorebooks"][0]["file"]
    setup = _setup_from("an", lores=[_edited_lore(tmp_path, source, "2", "chimes", "chimed")])
    check = _check(setup, "an", 3)  # turn 3 types "chime": entry 2 at the top of the note
    assert [(d.kind, d.category) for d in check.departures] == [("changed", "world-info")]


def test_a_changed_byte_of_the_chat_changes_what_fires(tmp_path: Path) -> None:
    """Turn 2 typed "sandbar": without it entries 2 and 3 do not fire — the after block departs (world-info),
    besides the history message itself."""
    def edit(_header: dict[str, Any], messages: list[Any]) -> None:
        assert "sandbar" in messages[3]["mes"]
        messages[3]["mes"] = messages[3]["mes"].replace("sandbar", "sandbat")

    check = _check(_setup_from("wi", chat=_edited_chat(tmp_path, "wi", edit)), "wi", 2)
    assert "world-info" in _categories(check)


def test_the_scan_depth_setting_is_needed() -> None:
    """wi-global-scan ran at scan depth 4: checked at ST's default 2, the turns whose keys came a turn earlier
    depart (world-info), and no other turn does."""
    setup = _setup_from("wi-global-scan", settings=worldinfo.Settings())
    departing = {turn for turn in range(1, 9) if _check(setup, "wi-global-scan", turn).departures}
    assert departing == {3, 5, 6, 7, 8}  # turn 4's keys are all in turn 4 itself
    assert all(set(_categories(_check(setup, "wi-global-scan", turn))) == {"world-info"} for turn in departing)


def test_without_the_book_nothing_fires_and_a_note_says_why() -> None:
    setup = _setup_from("wi", lores=[])
    assert {(d.kind, d.role) for d in _check(setup, "wi", 5).departures} == {("extra", "system")}
    assert "the card links World Info book 'Greyreach Almanac' (extensions.world): give it with --lore" in setup.notes
    assert not any("World Info book" in note for note in _setup("wi").notes)  # the control: given, no note


def test_check_capture_on_the_command_line(tmp_path: Path) -> None:
    """`zhin preset check-capture` with --lore and --st-settings: exit 0 on run wi-global-scan; with
    --scan-depth 2 (the settings it did not run with), exit 1 and world-info departures."""
    from zhin_cli._cli import app

    folder = tmp_path / "captured"
    folder.mkdir()
    for turn in range(1, 9):
        shutil.copy(GOLDEN / "runs" / "wi-global-scan" / f"request-{turn:02d}.json",
                    folder / f"{turn:05d}-chat-completions.json")
    name, description = _persona("wi-global-scan")
    run = RUNS["wi-global-scan"]
    args = ["preset", "check-capture", str(folder), "--preset", str(GOLDEN / run["preset"]),
            "--chat", str(GOLDEN / "runs" / "wi-global-scan" / "chat.jsonl"), "--card", str(GOLDEN / run["cards"][0]),
            "--lore", str(GOLDEN / run["lorebooks"][0]["file"]), "--persona-description", description,
            "--st-settings", str(GOLDEN / "runs" / "wi-global-scan" / "st-settings.json")]
    clean = CliRunner().invoke(app, args)
    assert clean.exit_code == 0, clean.output
    assert "8 turns checked · 0 departures" in clean.output
    mismatch = CliRunner().invoke(app, [*args, "--scan-depth", "2"])
    assert mismatch.exit_code == 1 and "· world-info" in mismatch.output
    assert "8 turns checked · 0 departures" not in mismatch.output


def test_settings_replace_keeps_the_rest() -> None:
    """--scan-depth replaces only the depth of the settings read from ST's file."""
    settings = read_world_settings(GOLDEN / "runs" / "wi-global-scan" / "st-settings.json")
    assert settings.depth == 4 and replace(settings, depth=2) == worldinfo.Settings()


def _character_book(lore: dict[str, Any], *, selective: bool = True) -> dict[str, Any]:
    """The book in the card spec's ``character_book`` form, as ST exports a card with its book embedded."""
    entries = []
    for uid, e in lore["entries"].items():
        entry = {"id": int(uid), "keys": e["key"], "secondary_keys": e["keysecondary"], "comment": e["comment"],
                 "content": e["content"], "constant": e["constant"], "insertion_order": e["order"],
                 "enabled": not e["disable"], "position": "before_char" if e["position"] == 0 else "after_char",
                 "extensions": {"position": e["position"], "depth": e["depth"], "role": e["role"],
                                "selectiveLogic": e["selectiveLogic"], "case_sensitive": e["caseSensitive"],
                                "match_whole_words": e["matchWholeWords"], "probability": e["probability"],
                                "useProbability": e["useProbability"]}}
        if selective:
            entry["selective"] = e["selective"]
        entries.append(entry)
    return {"name": "Greyreach Almanac", "entries": entries}


@pytest.mark.parametrize("selective", [True, False])
def test_the_cards_embedded_book(selective: bool, tmp_path: Path) -> None:
    """Run wi with the book embedded in the card (``character_book``) and no --lore: every request as ST sent it.
    The control: without ``selective`` (ST then ignores the secondary keys) entries 4 and 5 fire wrongly."""
    card = _json(GOLDEN / RUNS["wi"]["cards"][0])
    card["data"]["character_book"] = _character_book(_json(GOLDEN / RUNS["wi"]["lorebooks"][0]["file"]),
                                                     selective=selective)
    path = tmp_path / "card.json"
    path.write_text(json.dumps(card, ensure_ascii=False), encoding="utf-8")
    name, description = _persona("wi")
    setup = prepare(GOLDEN / RUNS["wi"]["preset"], read_chat(GOLDEN / "runs" / "wi" / "chat.jsonl", persona=name),
                    card=read_card(path), persona_description=description)
    world = setup.assembler.preset.card.world_info  # type: ignore[union-attr]
    assert world is not None and [(b.name, b.source) for b in world.books] == [("Greyreach Almanac", "character")]
    departing = {turn for turn in range(1, 9) if _check(setup, "wi", turn).departures}
    assert departing == (set() if selective else {1, 4})


def test_books_take_their_role_from_their_names(tmp_path: Path) -> None:
    """A --lore file named as the chat's book is the chat's, as the card's book the character's, any other global
    (the names as ST's file names: "_" and spaces alike, any case)."""
    from zhin_cli.tools.preset.check import world_info

    chat = read_chat(GOLDEN / "runs" / "an" / "chat.jsonl")  # bound to "Kessel Workshop Notes"
    card = read_card(GOLDEN / RUNS["wi"]["cards"][0])  # linked to "Greyreach Almanac"
    paths = {}
    for name, source in (("kessel_workshop_notes", "an"), ("Greyreach Almanac", "wi"), ("Other", "wi")):
        paths[name] = tmp_path / f"{name}.json"
        shutil.copy(GOLDEN / RUNS[source]["lorebooks"][0]["file"], paths[name])
    world, notes = world_info(chat, card, [read_lore(p) for p in paths.values()], worldinfo.Settings())
    assert [(b.name, b.source) for b in world.books] == [("kessel_workshop_notes", "chat"),
                                                        ("Greyreach Almanac", "character"), ("Other", "global")]
    assert notes == ["the chat has an Author's Note (chat_metadata), simulated: in chat at depth 1, every request, "
                     "role system"] and world.note is not None and world.note.depth == 1
    world, notes = world_info(chat, card, [read_lore(paths["Other"]), read_lore(paths["Other"])], worldinfo.Settings())
    assert {b.source for b in world.books} == {"global"} and len(notes) == 3  # neither named book given: two notes


def test_a_bad_character_book_is_one_line(tmp_path: Path) -> None:
    from zhin_cli.core.errors import InputError

    card = _json(GOLDEN / RUNS["wi"]["cards"][0])
    card["data"]["character_book"] = {"entries": {"0": {}}}
    path = tmp_path / "card.json"
    path.write_text(json.dumps(card), encoding="utf-8")
    with pytest.raises(InputError, match="'character_book' must be an object with an 'entries' list"):
        read_card(path)
    card["data"]["character_book"] = {"entries": []}
    path.write_text(json.dumps(card), encoding="utf-8")
    assert read_card(path).character_book == {"entries": []}  # the control


@pytest.mark.parametrize("option", ["--lore", "--st-settings"])
def test_a_name_past_the_file_system_limit_is_one_line(option: str, tmp_path: Path) -> None:
    """Issue 30 item 6 for check-capture's new options: a 300-character file name is one error line, exit 3."""
    from zhin_cli._cli import app

    folder = tmp_path / "captured"
    folder.mkdir()
    shutil.copy(GOLDEN / "runs" / "wi" / "request-01.json", folder / "00001-chat-completions.json")
    args = ["preset", "check-capture", str(folder), "--preset", str(GOLDEN / RUNS["wi"]["preset"]),
            "--chat", str(GOLDEN / "runs" / "wi" / "chat.jsonl")]
    result = CliRunner().invoke(app, [*args, option, str(tmp_path / ("x" * 300 + ".json"))])
    assert result.exit_code == 3
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zhin: error: ") and "Traceback" not in result.output
    assert CliRunner().invoke(app, args).exit_code == 1  # the control: without the option, it runs (a departure
    # on turn 1: the card is not given, so its fields are missing)


@pytest.mark.parametrize(("label", "uid", "field", "value", "turns"), [
    ("wi", "9", "caseSensitive", False, {3}),  # "patience" on turn 3 then fires the ferry entry
    # "oar" inside "oars" of the constant entry 1 (recursion), so on every turn (turn 7 typed "oar" anyway)
    ("wi", "10", "matchWholeWords", False, {1, 2, 3, 4, 5, 6, 8}),
    ("wi", "4", "selectiveLogic", 3, {4}),  # AND ALL: turn 4 has "keeper" but not "lamp"
    ("wi", "5", "selectiveLogic", 0, {3, 4}),  # AND ANY: turn 3 lacks "paid", turn 4 has it
    ("wi", "2", "order", 49, {2}),  # no more a tie with entry 3: the after block's order changes
    ("wi", "3", "excludeRecursion", True, {2}),  # reached only by recursion
    ("wi", "2", "preventRecursion", True, {2}),  # its text no longer reaches entry 3
    ("wi", "2", "scanDepth", 4, {3}),  # turn 2's "sandbar" still in its scan on turn 3
    ("wi", "6", "role", 1, {5, 8}),  # the fog entry as a user message
    ("wi", "7", "depth", 2, {7, 8}),  # the eel entry one message lower
    ("wi", "8", "position", 0, {6}),  # the egret entry before the character definitions
    ("wi", "1", "disable", True, set(range(1, 9))),  # a constant entry switched off
    ("wi-global-scan", "11", "probability", 0, {4, 5}),  # the quay entry's roll now always fails
    ("wi-global-scan", "12", "disable", False, {7, 8}),  # the hull entry switched on: "hull" on turn 7, in scan on 8
    ("an", "2", "position", 3, {3}),  # the chime entry at the bottom of the note, not the top
])
def test_each_rule_has_its_negative_control(label: str, uid: str, field: str, value: Any, turns: set[int],
                                            tmp_path: Path) -> None:
    """One field of one entry changed: exactly the turns whose activation it decides depart, as world-info."""
    source = RUNS[label]["lorebooks"][0]["file"]
    book = _json(GOLDEN / source)
    assert book["entries"][uid][field] != value
    book["entries"][uid][field] = value
    path = tmp_path / Path(source).name
    path.write_text(json.dumps(book, ensure_ascii=False), encoding="utf-8")
    setup = _setup_from(label, lores=[path])
    checks = {turn: _check(setup, label, turn) for turn in range(1, RUNS[label]["requests"] + 1)}
    assert {turn for turn, check in checks.items() if check.departures} == turns
    assert {category for check in checks.values() for category in _categories(check)} == {"world-info"}

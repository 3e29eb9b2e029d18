"""The 1.18 macro engine against real SillyTavern 1.18.0 (``tests/st_golden2``, run ``macros``; its README says
what each line of the preset's ``golden2-island-ledger`` entry exercises).

The entry uses ``{{//}}``, ``{{setvar}}``/``{{getvar}}``, ``{{if .tide}}…{{else}}…{{/if}}``, ``{{if !.visitor}}``,
``{{reverse::}}``, ``{{roll:1d1}}``/``{{roll::2d1+3}}``, ``{{lastUserMessage}}`` and ``{{trim}}`` plain and scoped.
Each request ST sent is checked against zhin's request for the same turn with ``stcheck.check_turn`` — the
comparison ``zhin preset check-capture`` makes — with the chat variables ST held when it built that request
(``st-turns.json``): 0 departures, nothing excused by design.

Why the variables are given: the user typed ``{{setvar::visitor::…}}`` (turn 2) and ``{{setvar::tide::…}}``
(turn 5) into ST's send box; ST stored the messages without the macros, so the chat file keeps only the end
state (``chat_metadata.variables``). ``check-capture`` on the chat file alone tries each used variable unset or at
its saved value (fewest set first) where a message departs, and reports a match as a by-design ``chat-variable``
difference naming the state: 0 departures on the CLI run, the state ST held named on turns 2–7.

Negative controls: one changed byte of ST's body is a ``macro`` departure at its turn; the variables of another
turn are not clean; one changed byte in a line the variables decide is still a departure on the CLI's own check
(no saved state gives it).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import run_zhin

from zhin_cli.pipeline.assemble import Assembler
from zhin_cli.store.sillytavern import read_card, read_chat
from zhin_cli.tools.preset.capture import TurnMatcher
from zhin_cli.tools.preset.check import CheckSetup, TurnCheck, check_turn, prepare

GOLDEN = Path(__file__).resolve().parent / "st_golden2"
RUN = next(run for run in json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8")) if run["label"] == "macros")
FOLDER = GOLDEN / "runs" / "macros"
ENTRY = "preset:golden2-island-ledger"
TURNS = range(1, RUN["requests"] + 1)


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _persona() -> tuple[str, str]:
    persona = _json(GOLDEN / RUN["persona"])
    (record,) = persona["persona_descriptions"].values()
    return persona["name"], record["description"]


@cache
def _setup() -> CheckSetup:
    name, description = _persona()
    chat = read_chat(FOLDER / "chat.jsonl", persona=name)
    return prepare(GOLDEN / RUN["preset"], chat, card=read_card(GOLDEN / RUN["cards"][0]),
                   persona_description=description, post_processing="none")


def _st_variables(turn: int) -> dict[str, str]:
    """The chat variables ST held when it built the request of ``turn`` (st-turns.json, read from ST's front-end)."""
    record = next(r for r in _json(FOLDER / "st-turns.json") if r.get("turn") == turn)
    (generation,) = record["generations"]
    return {name: str(value) for name, value in generation["variables"].items()}


def _with_variables(setup: CheckSetup, variables: dict[str, str]) -> CheckSetup:
    """``setup`` with the chat variables pre-set as ST held them (the preset card's ``variables``), and no state
    probe: every byte is compared, none excused as chat-variable state."""
    base = setup.assembler
    assert base.preset is not None
    preset = replace(base.preset, card=replace(base.preset.card, variables=tuple(variables.items())))
    assembler = Assembler(base.registry, base.config, provider=base.provider, model=base.model,
                          timezone=base.timezone, preset=preset, facts=base.facts)
    return replace(setup, assembler=assembler, variables=(), probe=None)


def _body(turn: int) -> dict[str, Any]:
    body: dict[str, Any] = _json(FOLDER / f"request-{turn:02d}.json")
    return body


def _check(turn: int, *, variables: dict[str, str] | None = None, body: dict[str, Any] | None = None) -> TurnCheck:
    setup = _with_variables(_setup(), _st_variables(turn) if variables is None else variables)
    return check_turn(setup, setup.chat.turns[turn - 1], body or _body(turn))


def _ledger(body: dict[str, Any]) -> str:
    (text,) = [m["content"] for m in body["messages"] if m["content"].startswith("[Island ledger]")]
    return str(text)


@pytest.mark.parametrize("turn", TURNS, ids=[f"macros-{t:02d}" for t in TURNS])
def test_every_request_is_what_st_sent(turn: int) -> None:
    setup = _setup()
    body = _body(turn)
    found = TurnMatcher(setup.chat).turn_of(body)
    assert found is not None and found.number == turn  # the capture is found for its own turn
    check = _check(turn)
    assert [d.as_dict() for d in check.departures] == []
    assert check.by_design == []  # nothing excused: the variables are ST's, every byte compared


def test_the_ledger_is_what_the_readme_says() -> None:
    """The expected text, read off the README (not off zhin): the checks above compare against this."""
    first, fifth = _ledger(_body(1)), _ledger(_body(5))
    assert first.startswith("[Island ledger]\n\nHives on the island: forty.\nCauseway: open, dry stones.\n"
                            "Nobody has signed the visitors' book yet.\n")
    assert "Word of the day, backwards: mossolb ylloh.\nDice that cannot vary: 1 and 5.\n" in first
    assert first.endswith("Line before the trim.Line after the trim.\n"
                          "Only this scoped sentence stays, without its spaces.")
    assert "Causeway: under water (spring tide).\nSigned the book: Bastian Crewe.\n" in fifth


def test_one_changed_byte_is_a_macro_departure() -> None:
    """Negative control: ST's body with one byte of {{reverse}}'s output changed departs at that byte, categorised
    ``macro`` (the byte is a macro's output in the entry that rendered it)."""
    body = _body(3)
    index = next(i for i, m in enumerate(body["messages"]) if "mossolb" in m["content"])
    content = body["messages"][index]["content"]
    at = content.index("mossolb") + 6
    body["messages"][index] = {**body["messages"][index], "content": content[:at] + "c" + content[at + 1:]}
    (departure,) = _check(3, body=body).departures
    assert (departure.turn, departure.st_index, departure.kind, departure.category) == (3, index, "changed", "macro")
    assert departure.byte == len(content[:at].encode("utf-8")) and departure.source == ENTRY


def test_another_turns_variables_are_not_clean() -> None:
    """Negative control: turn 5 checked with turn 4's variables (no ``tide`` yet) departs in the ledger entry; turn
    2 with turn 1's (no ``visitor``) likewise — the variables decide branches, and the check sees it."""
    for turn, earlier in ((5, 4), (2, 1)):
        (departure,) = _check(turn, variables=_st_variables(earlier)).departures
        assert departure.source == ENTRY and departure.kind == "changed"


def _cli_arguments(tmp_path: Path) -> list[str]:
    captured = tmp_path / "captured"
    captured.mkdir()
    for turn in TURNS:  # what zhin serve --capture writes: NNNNN-chat-completions.json, the body as received
        shutil.copyfile(FOLDER / f"request-{turn:02d}.json", captured / f"{turn:05d}-chat-completions.json")
    persona = tmp_path / "persona.txt"
    persona.write_text(_persona()[1], encoding="utf-8")
    return ["preset", "check-capture", str(captured), "--preset", str(GOLDEN / RUN["preset"]),
            "--chat", str(FOLDER / "chat.jsonl"), "--card", str(GOLDEN / RUN["cards"][0]),
            "--persona-description", f"@{persona}", "--post-processing", "none", "--json"]


def _cli_departures(tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = run_zhin(*_cli_arguments(tmp_path), cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    assert document["checked"] == RUN["requests"]
    return document, [d for c in document["captures"] if c["check"] for d in c["check"]["departures"]]


def test_check_capture_on_the_macros_run_has_no_departure(tmp_path: Path) -> None:
    """The CLI as a user runs it, on the chat file alone: 0 departures; turns 2–7 each carry one by-design
    ``chat-variable`` difference in the ledger message, naming the state that gives ST's text — and that state
    holds ST's own visitor and tide of that turn (st-turns.json, read from ST's front-end, not from zhin)."""
    document, departures = _cli_departures(tmp_path)
    assert departures == [] and document["departures"] == 0
    excused = {c["check"]["turn"]: c["check"]["by_design"] for c in document["captures"] if c["check"]}
    assert excused[1] == []
    for turn in TURNS[1:]:
        (item,) = excused[turn]
        st = _st_variables(turn)
        assert item["kind"] == "chat-variable" and _ledger(_body(turn)) == _body(turn)["messages"][item["st_index"]]["content"]
        for name in ("visitor", "tide"):
            assert (f"{name}={st[name]}" if name in st else f"{name} unset") in item["detail"]


def test_a_changed_byte_in_a_variable_decided_line_still_departs() -> None:
    """Negative control of the hook: ST's turn-5 body with one byte changed inside the tide branch's output
    ("under water" → "under wator") departs — no saved state renders it — in the ledger entry."""
    setup = _setup()  # as the CLI prepares it: no per-turn variables, the saved end state only
    body = _body(5)
    index = next(i for i, m in enumerate(body["messages"]) if "under water" in m["content"])
    content = body["messages"][index]["content"]
    at = content.index("under water") + len("under wat")
    body["messages"][index] = {**body["messages"][index], "content": content[:at] + "o" + content[at + 1:]}
    check = check_turn(setup, setup.chat.turns[4], body)
    (departure,) = check.departures
    assert (departure.st_index, departure.kind, departure.source) == (index, "changed", ENTRY)
    assert check.by_design == []
    clean = check_turn(setup, setup.chat.turns[4], _body(5))  # the same turn unchanged: excused, not departing
    assert clean.departures == [] and [b.kind for b in clean.by_design] == ["chat-variable"]

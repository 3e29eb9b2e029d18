"""Group chats against real SillyTavern 1.18.0 (``tests/st_golden2``, runs ``group-swap``, ``group-join`` and
``group-join-muted``; the README's "group" section says what ST sent).

Members Marguerite Osei, Tobias Quill and Pell; reply order List: every user message is answered by each member
who is not muted, in member order — request NN of a three-member run is turn ceil(NN/3), member (NN−1) mod 3; of
``group-join-muted`` (Pell muted) turn ceil(NN/2), Marguerite then Tobias (README, "Files"; the tests below take
the speaker from there, never from zhin). Every request of every member is checked with ``stcheck.check_turn`` —
the comparison ``zhin preset check-capture --group`` makes — and must show 0 departures; by design only ST's
forced ``Name: `` prefixes on the history's character messages (zhin names the sender in its header).

Negative controls, each one changed byte (or one changed setting) caught with category ``group``: the group start
line, the group nudge, an example message's forced name, a joined card field; the muted member's fields (mode 1
would drop them), the join prefix; a request checked as another member's; a group chat checked as a private one.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import run_zhin

from zhin_cli.core.errors import InputError
from zhin_cli.store.sillytavern import Group, read_card, read_chat, read_group
from zhin_cli.tools.preset.capture import TurnMatcher
from zhin_cli.tools.preset.check import CheckSetup, TurnCheck, check_turn, prepare

GOLDEN = Path(__file__).resolve().parent / "st_golden2"
RUNS = {run["label"]: run for run in json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8"))}
GROUP_RUNS = ("group-swap", "group-join", "group-join-muted")
MEMBERS = ("Marguerite Osei", "Tobias Quill", "Pell")


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _persona(run: str) -> tuple[str, str]:
    persona = _json(GOLDEN / RUNS[run]["persona"])
    (record,) = persona["persona_descriptions"].values()
    return persona["name"], record["description"]


def _expected(run: str, request: int) -> tuple[int, str]:
    """(turn, speaker) of request NN, by the README's rule."""
    speakers = MEMBERS[:2] if run == "group-join-muted" else MEMBERS
    return math.ceil(request / len(speakers)), speakers[(request - 1) % len(speakers)]


def _setup_with(run: str, group: Group) -> CheckSetup:
    name, description = _persona(run)
    chat = read_chat(GOLDEN / "runs" / run / "chat.jsonl", persona=name, group=group)
    cards = [read_card(GOLDEN / path) for path in RUNS[run]["cards"]]
    return prepare(GOLDEN / RUNS[run]["preset"], chat, card=cards[0], members=cards[1:],
                   persona_description=description, post_processing="none")


@cache
def _setup(run: str) -> CheckSetup:
    return _setup_with(run, read_group(GOLDEN / RUNS[run]["group"]))


def _body(run: str, request: int) -> dict[str, Any]:
    body: dict[str, Any] = _json(GOLDEN / "runs" / run / f"request-{request:02d}.json")
    return body


def _check(run: str, request: int, body: dict[str, Any] | None = None, setup: CheckSetup | None = None) -> TurnCheck:
    setup = setup or _setup(run)
    turn = TurnMatcher(setup.chat).turn_of(_body(run, request))
    assert turn is not None
    return check_turn(setup, turn, body or _body(run, request))


CASES = [(run, n) for run in GROUP_RUNS for n in range(1, RUNS[run]["requests"] + 1)]


@pytest.mark.parametrize(("run", "number"), CASES, ids=[f"{run}-{n:02d}" for run, n in CASES])
def test_every_members_request_is_what_st_sent(run: str, number: int) -> None:
    turn = TurnMatcher(_setup(run).chat).turn_of(_body(run, number))
    assert turn is not None and (turn.number, turn.speaker) == _expected(run, number)
    check = _check(run, number)
    assert [d.as_dict() for d in check.departures] == []
    assert check.speaker == turn.speaker
    assert {b.kind for b in check.by_design} == {"names"}  # ST's "Name: " on the characters' history messages


def _changed(body: dict[str, Any], needle: str, offset: int = 0) -> tuple[dict[str, Any], int]:
    """``body`` with one character of the first message holding ``needle`` changed, at ``offset`` in it."""
    body = json.loads(json.dumps(body))
    index = next(i for i, m in enumerate(body["messages"]) if needle in m["content"])
    content = body["messages"][index]["content"]
    at = content.index(needle) + offset
    body["messages"][index]["content"] = content[:at] + ("X" if content[at] != "X" else "Y") + content[at + 1:]
    return body, index


@pytest.mark.parametrize(("needle", "offset", "source"), [
    ("[Start a new group chat. Group members:", 35, "preset:newGroupChat"),
    ("[Write the next reply only as", 10, "preset:groupNudge"),
])
def test_a_changed_byte_in_the_groups_own_lines_is_a_group_departure(needle: str, offset: int, source: str) -> None:
    body, index = _changed(_body("group-swap", 5), needle, offset)
    (departure,) = _check("group-swap", 5, body).departures
    assert (departure.st_index, departure.kind, departure.category, departure.source) == (index, "changed", "group", source)


def test_a_changed_byte_in_an_example_speakers_name_is_a_group_departure() -> None:
    """ST names the speaker in a group's example messages: "Tobias Quill: A tragedy…" — one byte of the name."""
    body, index = _changed(_body("group-swap", 5), "Tobias Quill: A tragedy", 3)
    (departure,) = _check("group-swap", 5, body).departures
    assert (departure.st_index, departure.kind, departure.category, departure.byte) == (index, "changed", "group", 3)


def test_a_changed_byte_in_a_joined_card_field_is_a_group_departure() -> None:
    """Join mode: Pell's description is in Tobias's request; one byte of it departs as ``group``. In Swap mode
    the same kind of change (in the speaker's own description) stays ``card-field``."""
    body, index = _changed(_body("group-join", 5), "Pell is the troupe's", 2)
    (departure,) = _check("group-join", 5, body).departures
    assert (departure.st_index, departure.category, departure.source) == (index, "group", "preset:charDescription")
    body, index = _changed(_body("group-swap", 5), "Tobias Quill is the troupe's", 2)
    (departure,) = _check("group-swap", 5, body).departures
    assert (departure.st_index, departure.category) == (index, "card-field")


def test_join_keeps_the_muted_members_fields_and_mode_one_would_not() -> None:
    """``group-join-muted`` is mode 2: Pell (muted) is still in every joined field. Checked as mode 1 (muted left
    out), the description, personality, scenario and examples depart, as ``group``."""
    group = read_group(GOLDEN / RUNS["group-join-muted"]["group"])
    assert group.disabled == ("Pell.png",) and group.speaking == MEMBERS[:2]
    setup = _setup_with("group-join-muted", replace(group, generation_mode=1))
    departures = _check("group-join-muted", 2, setup=setup).departures
    assert {d.source for d in departures} >= {"preset:charDescription", "preset:charPersonality", "preset:scenario"}
    assert {d.category for d in departures if d.kind == "changed"} == {"group"}  # Pell's example chat: extra


def test_the_join_prefix_is_what_st_sent_and_without_it_departs() -> None:
    group = read_group(GOLDEN / RUNS["group-join-muted"]["group"])
    assert group.join_prefix == "[{{char}}'s <FIELDNAME>]\n" and group.join_suffix == "\n[end of {{char}}]"
    setup = _setup_with("group-join-muted", replace(group, join_prefix=""))
    departures = _check("group-join-muted", 1, setup=setup).departures
    assert {d.source for d in departures} >= {"preset:charDescription", "preset:charPersonality", "preset:scenario"}
    assert {d.category for d in departures if d.kind == "changed"} == {"group"}


def test_a_request_checked_as_another_members_departs() -> None:
    """Every member is checked as itself: Tobias's request checked as Marguerite's (the same turn) departs in the
    main prompt and the nudge, which name the speaker."""
    setup = _setup("group-swap")
    marguerite = next(t for t in setup.chat.turns if t.number == 1 and t.speaker == "Marguerite Osei")
    check = check_turn(setup, marguerite, _body("group-swap", 2))
    assert {d.source for d in check.departures} >= {"preset:main", "preset:groupNudge"}


def test_a_reply_by_a_member_not_in_the_group_file_is_an_input_error() -> None:
    group = read_group(GOLDEN / RUNS["group-swap"]["group"])
    setup = _setup_with("group-swap", replace(group, disabled=("Tobias Quill.png",)))
    tobias = next(t for t in setup.chat.turns if t.speaker == "Tobias Quill")
    with pytest.raises(InputError, match="Tobias Quill"):
        check_turn(setup, tobias, _body("group-swap", 2))


# --- the CLI ---------------------------------------------------------------------------------------------------


def _cli(tmp_path: Path, run: str, *, group: bool = True) -> tuple[int, dict[str, Any]]:
    captured = tmp_path / "captured"
    captured.mkdir()
    for n in range(1, RUNS[run]["requests"] + 1):
        shutil.copyfile(GOLDEN / "runs" / run / f"request-{n:02d}.json", captured / f"{n:05d}-chat-completions.json")
    persona = tmp_path / "persona.txt"
    persona.write_text(_persona(run)[1], encoding="utf-8")
    cards = [a for path in RUNS[run]["cards"] for a in ("--card", str(GOLDEN / path))]
    if not group:
        cards = cards[:2]
    result = run_zhin("preset", "check-capture", str(captured), "--preset", str(GOLDEN / RUNS[run]["preset"]),
                      "--chat", str(GOLDEN / "runs" / run / "chat.jsonl"), *cards,
                      *(["--group", str(GOLDEN / RUNS[run]["group"])] if group else []),
                      "--persona-description", f"@{persona}", "--post-processing", "none", "--json", cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.mark.parametrize("run", GROUP_RUNS)
def test_check_capture_checks_every_members_request(tmp_path: Path, run: str) -> None:
    code, document = _cli(tmp_path, run)
    assert (code, document["departures"], document["checked"]) == (0, 0, RUNS[run]["requests"])
    seen = [(c["check"]["turn"], c["check"]["speaker"]) for c in document["captures"]]
    assert seen == [_expected(run, n) for n in range(1, RUNS[run]["requests"] + 1)]


def test_a_group_chat_checked_as_a_private_one_departs_and_says_so(tmp_path: Path) -> None:
    """Negative control: without --group (one card), the requests of the other members and the group's own lines
    depart, and a note names the characters and asks for the group file."""
    code, document = _cli(tmp_path, "group-swap", group=False)
    assert code == 1 and document["departures"] > 0
    assert any("a group chat" in note and "group file" in note for note in document["notes"])


def _cli_error(tmp_path: Path, *options: str) -> Any:
    run = "group-swap"
    captured = tmp_path / "captured"
    captured.mkdir(exist_ok=True)
    shutil.copyfile(GOLDEN / "runs" / run / "request-01.json", captured / "00001-chat-completions.json")
    return run_zhin("preset", "check-capture", str(captured), "--preset", str(GOLDEN / RUNS[run]["preset"]),
                    "--chat", str(GOLDEN / "runs" / run / "chat.jsonl"), *options, cwd=tmp_path)


def test_a_member_without_a_card_is_one_line(tmp_path: Path) -> None:
    group = str(GOLDEN / RUNS["group-swap"]["group"])
    result = _cli_error(tmp_path, "--group", group, "--card", str(GOLDEN / RUNS["group-swap"]["cards"][0]))
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr == (f"zhin: error: {group}: no --card for group member(s) Tobias Quill, Pell: give every "
                             "member's card (cards given: Marguerite Osei)\n")


def test_several_cards_without_the_group_file_is_one_line(tmp_path: Path) -> None:
    cards = [a for path in RUNS["group-swap"]["cards"][:2] for a in ("--card", str(GOLDEN / path))]
    result = _cli_error(tmp_path, *cards)
    assert result.returncode == 3 and result.stderr.count("\n") == 1 and "--group" in result.stderr

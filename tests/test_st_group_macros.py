"""``{{groupNotMuted}}`` and ``{{notChar}}`` as ST 1.18 defines them (issue 30 review, finding 8). ST 1.18's macro
environment (read for behaviour only): in a group chat ``groupNotMuted`` is the names of the members who are not
muted, in member order, joined with ``", "`` (as ``{{group}}``); ``notChar`` is the same list without the
speaking character (the user is not in it). Outside a group ``groupNotMuted`` is the character's name and
``notChar`` the user's.

Checked on the golden run ``group-join-muted`` of ``tests/st_golden2`` (members Marguerite Osei, Tobias Quill,
Pell; Pell muted) with the macros added to the preset's main prompt in a temporary copy; and on a private chat.
Negative controls: ``{{group}}`` still names the muted member; the speaker changes what ``{{notChar}}`` leaves out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.pipeline.preset.macros import MacroContext, MacroEngine
from zhin_cli.pipeline.preset.model import GroupOptions
from zhin_cli.store.sillytavern import read_card, read_chat, read_group
from zhin_cli.tools.preset.capture import TurnMatcher
from zhin_cli.tools.preset.check import prepare, zhin_request

GOLDEN = Path(__file__).resolve().parent / "st_golden2"
RUN = next(r for r in json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8")) if r["label"] == "group-join-muted")
PROBE = "[probe] group={{group}} | notMuted={{groupNotMuted}} | notChar={{notChar}} [/probe]"


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _rendered(tmp_path: Path, request: int) -> str:
    preset = _json(GOLDEN / RUN["preset"])
    main = next(p for p in preset["prompts"] if p["identifier"] == "main")
    main["content"] = PROBE + "\n" + main["content"]
    path = tmp_path / "preset.json"
    path.write_text(json.dumps(preset), encoding="utf-8")
    persona = _json(GOLDEN / RUN["persona"])
    (record,) = persona["persona_descriptions"].values()
    chat = read_chat(GOLDEN / "runs" / "group-join-muted" / "chat.jsonl", persona=persona["name"],
                     group=read_group(GOLDEN / RUN["group"]))
    cards = [read_card(GOLDEN / c) for c in RUN["cards"]]
    setup = prepare(path, chat, card=cards[0], members=cards[1:], persona_description=record["description"],
                    post_processing="none")
    turn = TurnMatcher(chat).turn_of(_json(GOLDEN / "runs" / "group-join-muted" / f"request-{request:02d}.json"))
    assert turn is not None
    member = setup.for_turn(turn)
    text = "\n".join(str(m.get("content")) for m in zhin_request(member, turn).request["messages"])
    return text[text.index("[probe]"):text.index("[/probe]")]


@pytest.mark.parametrize(("request_number", "not_char"), [(1, "Tobias Quill"), (2, "Marguerite Osei")])
def test_in_a_group_with_a_muted_member(tmp_path: Path, request_number: int, not_char: str) -> None:
    """Requests 1 and 2 are Marguerite's and Tobias's (Pell is muted, never speaks)."""
    assert _rendered(tmp_path, request_number) == (
        "[probe] group=Marguerite Osei, Tobias Quill, Pell | notMuted=Marguerite Osei, Tobias Quill | "
        f"notChar={not_char} ")


def test_outside_a_group() -> None:
    engine = MacroEngine(MacroContext(user="Ren", char="Signe"))
    assert engine.expand("{{groupNotMuted}}|{{notChar}}|{{group}}") == "Signe|Ren|Signe"


def test_the_lists_as_group_options_give_them() -> None:
    group = GroupOptions(("A", "B", "C", "D"), muted=("C",))
    assert (group.names, group.not_muted, group.others("B"), group.others("C")) == ("A, B, C, D", "A, B, D", "A, D",
                                                                                     "A, B, D")
    engine = MacroEngine(MacroContext(user="U", char="B", group=group.names, group_not_muted=group.not_muted,
                                      not_char=group.others("B")))
    assert engine.expand("{{GROUPNOTMUTED}} / {{notchar}}") == "A, B, D / A, D"  # names in any case, as ST's

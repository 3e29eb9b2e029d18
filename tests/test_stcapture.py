"""``stcapture.turn_of`` and ``read_captures`` on the golden set: every captured body maps to the turn it was sent for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zhin_cli.core.errors import InputError
from zhin_cli.store.sillytavern import read_chat
from zhin_cli.tools.stcapture import read_captures, turn_of

GOLDEN = Path(__file__).parent / "st_golden"
LABELS = [run["label"] for run in json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8"))]


@pytest.mark.parametrize("label", LABELS)
def test_every_body_maps_to_its_turn(label: str) -> None:
    chat = read_chat(GOLDEN / "runs" / label / "chat.jsonl")
    for path in sorted((GOLDEN / "runs" / label).glob("request-*.json")):
        body = json.loads(path.read_text(encoding="utf-8"))
        turn = turn_of(body, chat)
        assert turn is not None and turn.number == int(path.stem.split("-")[1]), path


def test_a_body_without_the_turns_user_text_maps_elsewhere() -> None:
    chat = read_chat(GOLDEN / "runs" / "plain" / "chat.jsonl")
    body = json.loads((GOLDEN / "runs" / "plain" / "request-01.json").read_text(encoding="utf-8"))
    first = chat.turns[0].user_text
    for message in body["messages"]:
        message["content"] = message["content"].replace(first, "")
    assert turn_of(body, chat) is None


def test_read_captures_orders_by_number_and_skips_temporaries(tmp_path: Path) -> None:
    for name in ("00010-chat-completions.json", "00002-models.json", ".capture-x.tmp", "notes.txt"):
        (tmp_path / name).write_text("{}", encoding="utf-8")
    captures, notes = read_captures(tmp_path)
    assert [(c.number, c.route) for c in captures] == [(2, "models"), (10, "chat-completions")]
    assert len(notes) == 1 and "notes.txt" in notes[0] and ".capture-x.tmp" not in notes[0]
    with pytest.raises(InputError):
        read_captures(tmp_path / "nowhere")
    with pytest.raises(InputError):
        read_captures(tmp_path / "notes.txt")

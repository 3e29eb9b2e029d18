"""``stcapture.turn_of`` and ``read_captures`` on the golden set: every captured body maps to the turn it was sent for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zhin_cli.core.errors import InputError
from zhin_cli.store.sillytavern import read_chat
from zhin_cli.tools.preset.capture import read_captures, turn_of

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


def _retyped(tmp_path: Path, changes: dict[int, str]) -> tuple[Path, dict[int, dict[str, object]]]:
    """The plain run's chat and bodies with the user texts of some turns replaced (turn → new text), in both."""
    chat = read_chat(GOLDEN / "runs" / "plain" / "chat.jsonl")
    old = {turn.number: turn.user_text for turn in chat.turns}
    lines = (GOLDEN / "runs" / "plain" / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        obj = json.loads(line)
        if obj.get("is_user"):
            number = next(n for n, text in old.items() if text == obj["mes"])
            obj["mes"] = changes.get(number, obj["mes"])
        out.append(json.dumps(obj, ensure_ascii=False))
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    bodies: dict[int, dict[str, object]] = {}
    for number in range(1, 9):
        body = json.loads((GOLDEN / "runs" / "plain" / f"request-{number:02d}.json").read_text(encoding="utf-8"))
        for message in body["messages"]:
            for turn, text in changes.items():
                message["content"] = message["content"].replace(old[turn], text)
        bodies[number] = body
    return path, bodies


def test_a_short_user_text_inside_longer_ones_does_not_take_other_turns(tmp_path: Path) -> None:
    """Turn 8 typed "ok": every earlier body has "ok" inside words and in every reply ("ok 4beed990")."""
    path, bodies = _retyped(tmp_path, {8: "ok"})
    chat = read_chat(path)
    assert [getattr(turn_of(body, chat), "number", None) for _n, body in sorted(bodies.items())] == list(range(1, 9))


def test_a_text_typed_twice_needs_both_occurrences(tmp_path: Path) -> None:
    """Turn 7 repeats turn 6's text: turn 6's body holds it once, so it is turn 6's, not turn 7's."""
    chat = read_chat(GOLDEN / "runs" / "plain" / "chat.jsonl")
    path, bodies = _retyped(tmp_path, {7: chat.turns[5].user_text})
    chat = read_chat(path)
    assert [getattr(turn_of(body, chat), "number", None) for _n, body in sorted(bodies.items())] == list(range(1, 9))

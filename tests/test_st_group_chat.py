"""SillyTavern group chats as zhin input (``store/sillytavern.py``): the group file, a group chat's messages (each
character its own assistant actor) and turns (one per member reply), and ``import --from sillytavern`` of one.
The check of every member's requests against real ST is in ``test_st_golden2_groups.py``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import InputError
from zhin_cli.core.model import AssistantMessage
from zhin_cli.store.sillytavern import character_id, read_chat, read_group

GOLDEN = Path(__file__).resolve().parent / "st_golden2" / "runs"
SWAP = GOLDEN / "group-swap"
PRIVATE = Path(__file__).resolve().parent / "st_golden" / "runs" / "plain" / "chat.jsonl"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_the_group_file() -> None:
    group = read_group(SWAP / "group.json")
    assert (group.name, group.names, group.generation_mode, group.activation_strategy) == (
        "Thistledown Players", ("Marguerite Osei", "Tobias Quill", "Pell"), 0, 1)
    muted = read_group(GOLDEN / "group-join-muted" / "group.json")
    assert muted.speaking == ("Marguerite Osei", "Tobias Quill") and muted.generation_mode == 2


@pytest.mark.parametrize(("text", "line", "message"), [
    ('{\n  "name": "g",\n  "members": []\n}', 3, "'members' must be a non-empty list"),
    ('{\n  "members": ["A.png"],\n  "generation_mode": 7\n}', 3, "'generation_mode' must be one of 0, 1, 2"),
    ('{\n  "members": ["A.png"],\n  "disabled_members": "A.png"\n}', 3, "'disabled_members' must be a list"),
    ('[1]', 1, "must be a JSON object"),
])
def test_a_bad_group_file_is_one_located_error(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = _write(tmp_path / "group.json", text)
    with pytest.raises(InputError, match=message) as caught:
        read_group(path)
    assert caught.value.where == f"{path}:{line}"


def test_each_character_is_its_own_assistant_actor() -> None:
    chat = read_chat(SWAP / "chat.jsonl")
    senders = [m.assistant_actor.display_name if m.assistant_actor else None
               for m in chat.session.messages if isinstance(m, AssistantMessage)]
    assert senders[:6] == ["Marguerite Osei", "Tobias Quill", "Pell", "Marguerite Osei", "Tobias Quill", "Pell"]
    assert chat.characters == ("Marguerite Osei", "Tobias Quill", "Pell")
    assert any("a group chat" in note and "group file" in note for note in chat.notes)  # asked for, not silent
    assert chat.session.bot.user_id == character_id("Marguerite Osei")


def test_a_private_chat_keeps_one_bot_without_actors() -> None:
    """Negative control: a one-character chat is read as before (no actor on the bot's messages, no note)."""
    chat = read_chat(PRIVATE)
    assert all(m.assistant_actor is None for m in chat.session.messages if isinstance(m, AssistantMessage))
    assert len(chat.characters) == 1 and not any("group" in note for note in chat.notes)


def test_with_the_group_file_one_turn_per_member_reply() -> None:
    chat = read_chat(SWAP / "chat.jsonl", group=read_group(SWAP / "group.json"))
    assert len(chat.turns) == 15
    first = chat.turns[:3]
    assert [t.speaker for t in first] == ["Marguerite Osei", "Tobias Quill", "Pell"]
    assert {t.number for t in first} == {1} and first[2].earlier == (first[0].reply_text, first[1].reply_text)
    assert read_chat(SWAP / "chat.jsonl").turns[0].speaker is None  # without it: one turn per user message


def test_import_keeps_every_character_apart(zhin: Callable[..., Any], tmp_path: Path) -> None:
    db = tmp_path / "st.sqlite"
    result = zhin("import", "--from", "sillytavern", SWAP / "chat.jsonl", "--db", db)
    assert result.returncode == 0, result.stderr
    assert "a group chat of Marguerite Osei, Tobias Quill, Pell: each character is its own assistant actor" in result.stderr
    session_id = read_chat(SWAP / "chat.jsonl").session.session_id
    exported = zhin("export", session_id, "--db", db)
    rows = [json.loads(line) for line in exported.stdout.splitlines()[1:]]
    actors = [row["assistantActor"]["displayName"] for row in rows if row["role"] == "assistant"]
    assert actors[:4] == ["Marguerite Osei", "Tobias Quill", "Pell", "Marguerite Osei"]
    assert len(set(actors)) == 3

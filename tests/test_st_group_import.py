"""``import --from sillytavern`` of a group chat (issue 30 review, findings 6 and 9), on the golden run
``group-swap`` of ``tests/st_golden2`` (members Marguerite Osei, Tobias Quill, Pell).

6. ``--card`` names which member is the session's bot: a character who is not in the group is refused (one
   located line, exit 3, nothing written) — such a bot never speaks in that chat.
9. Each character stays its own assistant actor (the issue). In zhin's history (ADR 0041 §1) a message of another
   bot has ``origin: peer_bot`` in its full header and the bot's own and a human's none: the characters who are not
   the session's bot carry ``origin: peer_bot``, the bot's messages and the user's no origin.

Negative controls: a member's card is accepted; with ``--card`` Pell the origins swap round (Pell's have none,
Marguerite's have it); a private chat has no origin anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import InputError
from zhin_cli.core.model import AssistantMessage, UserMessage
from zhin_cli.store.sillytavern import read_chat, read_group

GOLDEN = Path(__file__).resolve().parent / "st_golden2"
CHAT = GOLDEN / "runs" / "group-swap" / "chat.jsonl"
PRIVATE = Path(__file__).resolve().parent / "st_golden" / "runs" / "plain" / "chat.jsonl"


def _origins(chat_path: Path, character: str | None = None) -> dict[str, set[str | None]]:
    chat = read_chat(chat_path, character=character)
    out: dict[str, set[str | None]] = {}
    for message in chat.session.messages:
        if isinstance(message, AssistantMessage) and message.assistant_actor is not None:
            out.setdefault(str(message.assistant_actor.display_name), set()).add(message.assistant_actor.origin)
    return out


def test_a_card_outside_the_group_is_refused() -> None:
    with pytest.raises(InputError, match=r"'Signe Aalto' is not a character of this group chat \(its characters: "
                                         r"Marguerite Osei, Tobias Quill, Pell\)"):
        read_chat(CHAT, character="Signe Aalto")
    with pytest.raises(InputError, match="not a character of this group chat"):  # with the group file as well
        read_chat(CHAT, character="Signe Aalto", group=read_group(GOLDEN / "runs" / "group-swap" / "group.json"))
    assert read_chat(CHAT, character="Pell").character_name == "Pell"  # control: a member is the bot


def test_the_import_refuses_it_in_one_line(zhin: Callable[..., Any], tmp_path: Path) -> None:
    db = tmp_path / "st.sqlite"
    result = zhin("import", "--from", "sillytavern", CHAT, "--card", GOLDEN / "content" / "card-Signe_Aalto.json",
                  "--db", db)
    assert result.returncode == 3 and not db.exists()
    assert result.stderr.startswith("zhin: error: ") and "not a character of this group chat" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    ok = zhin("import", "--from", "sillytavern", CHAT, "--card", GOLDEN / "content" / "card-Pell.json", "--db", db)
    assert ok.returncode == 0, ok.stderr  # control: a member's card


def test_the_other_characters_are_peer_bots() -> None:
    assert _origins(CHAT) == {"Marguerite Osei": {None}, "Tobias Quill": {"peer_bot"}, "Pell": {"peer_bot"}}
    assert _origins(CHAT, "Pell") == {"Marguerite Osei": {"peer_bot"}, "Tobias Quill": {"peer_bot"}, "Pell": {None}}
    chat = read_chat(CHAT)
    users = [m for m in chat.session.messages if isinstance(m, UserMessage)]
    assert users and all(m.actor is None or m.actor.origin is None for m in users)  # the user: a human


def test_a_private_chat_has_no_origin() -> None:
    chat = read_chat(PRIVATE)
    assert all(m.assistant_actor is None for m in chat.session.messages if isinstance(m, AssistantMessage))


def test_the_import_keeps_the_origin_and_the_header_shows_it(zhin: Callable[..., Any], tmp_path: Path) -> None:
    db = tmp_path / "st.sqlite"
    assert zhin("import", "--from", "sillytavern", CHAT, "--db", db).returncode == 0
    exported = zhin("export", read_chat(CHAT).session.session_id, "--db", db)
    rows = [json.loads(line) for line in exported.stdout.splitlines()[1:]]
    origins = {(row["assistantActor"]["displayName"], row["assistantActor"].get("origin"))
               for row in rows if row["role"] == "assistant"}
    assert origins == {("Marguerite Osei", None), ("Tobias Quill", "peer_bot"), ("Pell", "peer_bot")}
    trace = zhin("trace", read_chat(CHAT).session.session_id, "--db", db, "--turn", "4", "--show-request")
    assert trace.returncode == 0, trace.stderr
    assert "name:Tobias Quill;origin:peer_bot;" in trace.stdout
    assert "name:Marguerite Osei;origin" not in trace.stdout and "name:Marguerite Osei;" in trace.stdout

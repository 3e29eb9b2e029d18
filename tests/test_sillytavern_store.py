"""SillyTavern's own files read as zhin input (zhin_cli/store/sillytavern.py): the golden chats, a chat written
here with everything ST's files can hold (swipes, hidden messages, old dates), character cards in every format,
a World Info book, and the session source that makes ``zhin trace CHAT.jsonl`` read an ST chat."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from zhin_cli.core.errors import InputError
from zhin_cli.core.model import AssistantMessage, UserMessage
from zhin_cli.store import SillyTavernSource, load_session
from zhin_cli.store.sillytavern import (
    is_sillytavern_chat,
    parse_send_date,
    read_card,
    read_chat,
    read_lore,
)

GOLDEN = Path(__file__).resolve().parent / "st_golden"
RUNS = sorted(p.name for p in (GOLDEN / "runs").iterdir() if (p / "chat.jsonl").is_file())
HEADER = {"chat_metadata": {"integrity": "0b7f-our-own"}, "user_name": "unused", "character_name": "unused"}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _message(name: str, is_user: bool, text: str, date: Any = "2026-03-01T10:00:00.000Z", **more: Any) -> dict[str, Any]:
    return {"name": name, "is_user": is_user, "is_system": False, "send_date": date, "mes": text, "extra": {}, **more}


def _texts(messages: Any) -> list[str]:
    return [m.text for m in messages if isinstance(m, (UserMessage, AssistantMessage))]


def _write(path: Path, *objects: Any) -> Path:
    path.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objects), encoding="utf-8")
    return path


# --- the golden chats -------------------------------------------------------------------------------------------

def test_there_are_golden_runs() -> None:
    assert len(RUNS) == 8


@pytest.mark.parametrize("run", RUNS)
def test_every_golden_chat_reads(run: str) -> None:
    path = GOLDEN / "runs" / run / "chat.jsonl"
    saved = _lines(path)[1:]  # what ST saved, the header dropped
    chat = read_chat(path)
    assert (chat.persona_name, chat.character_name) == ("Sol Reyes", "Juniper")
    assert len(chat.turns) == 8
    messages = chat.session.messages
    assert isinstance(messages[0], AssistantMessage) and messages[0].text == saved[0]["mes"]  # the greeting first
    assert _texts(messages) == [m["mes"] for m in saved]
    users = [m for m in saved if m["is_user"]]
    replies = [m for m in saved[1:] if not m["is_user"]]
    assert [t.user_text for t in chat.turns] == [m["mes"] for m in users]
    assert [t.reply_text for t in chat.turns] == [m["mes"] for m in replies]
    assert all(_texts([messages[t.user_position]]) == [t.user_text] for t in chat.turns)
    assert all(t.reply_position == t.user_position + 1 for t in chat.turns)
    assert chat.session.scene.scene_type == "private" and not chat.session.is_group
    assert chat.session.bot.name == "Juniper"
    assert all(m.actor is not None and m.actor.display_name == "Sol Reyes" for m in messages if isinstance(m, UserMessage))
    assert chat.session.session_id == f"st-{_lines(path)[0]['chat_metadata']['integrity']}"
    assert chat.notes == []


def test_the_session_id_is_stable_and_falls_back_to_the_file_name(tmp_path: Path) -> None:
    path = GOLDEN / "runs" / "plain" / "chat.jsonl"
    assert read_chat(path).session.session_id == read_chat(path).session.session_id
    plain = _write(tmp_path / "Juniper - 2026-03-01@10h00m00s.jsonl", {"chat_metadata": {}, "user_name": "You",
                                                                        "character_name": "Juniper"})
    assert read_chat(plain).session.session_id == "st-Juniper - 2026-03-01@10h00m00s"


# --- a chat written here ----------------------------------------------------------------------------------------

def _synthetic(tmp_path: Path) -> Path:
    return _write(
        tmp_path / "chat.jsonl",
        HEADER,
        _message("Moth", False, "The lamp is lit.", "March 1, 2026 9:58am"),  # 2: the greeting, in the old date form
        _message("Moth", False, "Mind the step.", 1772359140000),  # 3: a second greeting line, epoch ms
        _message("Wren", True, "Hello, is the ferry late?"),  # 4
        _message("Moth", False, "An hour, at least.", swipes=["Ten minutes.", "An hour, at least."], swipe_id=1),  # 5
        {**_message("Wren", True, "(an aside nobody sends)"), "is_system": True},  # 6: hidden
        _message("Wren", True, "Then I'll wait inside."),  # 7
        _message("Moth", False, "The stove is warm.", swipes=["Sit anywhere."], swipe_id=0),  # 8: mes ≠ its swipe
        _message("Wren", True, "Thanks.", "2026-3-1 @10h 5m 7s 250ms"),  # 9: the humanized date form
    )


def test_a_synthetic_chat(tmp_path: Path) -> None:
    chat = read_chat(_synthetic(tmp_path))
    assert (chat.persona_name, chat.character_name) == ("Wren", "Moth")
    texts = _texts(chat.session.messages)
    assert "(an aside nobody sends)" not in texts and len(texts) == 7
    assert texts[:2] == ["The lamp is lit.", "Mind the step."]  # the greeting stays first
    assert [(t.number, t.user_text, t.reply_text) for t in chat.turns] == [
        (1, "Hello, is the ferry late?", "An hour, at least."),
        (2, "Then I'll wait inside.", "The stove is warm."),  # mes, not swipes[0]
        (3, "Thanks.", None),  # the chat ends on a user message
    ]
    assert chat.turns[2].reply_position is None
    assert [m.row_id for m in chat.session.messages] == [2, 3, 4, 5, 7, 8, 9]  # row id = line number
    assert chat.notes == [
        "line 8: 'mes' differs from swipes[0]; 'mes' is what ST sends, so it is used",
        "1 hidden message (is_system) is not part of the prompt: line 6",
    ]
    times = [m.timestamp for m in chat.session.messages]
    assert times[0] == parse_send_date("2026-03-01T09:58:00Z", "x")
    assert times[1] == 1772359140000
    assert times[-1] == parse_send_date("2026-03-01T10:05:07.250Z", "x")


def test_names_given_win(tmp_path: Path) -> None:
    chat = read_chat(_synthetic(tmp_path), persona="Ada", character="Lighthouse")
    assert (chat.persona_name, chat.character_name, chat.session.bot.name) == ("Ada", "Lighthouse", "Lighthouse")


def test_a_greeting_only_chat_and_a_header_only_chat(tmp_path: Path) -> None:
    greeting = read_chat(_write(tmp_path / "g.jsonl", HEADER, _message("Moth", False, "The lamp is lit.")))
    assert greeting.turns == [] and [m.role for m in greeting.session.messages] == ["assistant"]
    assert greeting.persona_name == "User"  # no user message, and the header says "unused"
    empty = read_chat(_write(tmp_path / "h.jsonl", {**HEADER, "character_name": "Moth"}))
    assert (empty.turns, empty.character_name, list(empty.session.messages)) == ([], "Moth", [])


@pytest.mark.parametrize(("text", "ms"), [
    ("2026-12-01T08:54:59.405Z", 1796115299405),
    ("December 1, 2026 8:54am", 1796115240000),
    ("December 1, 2026 12:05am", 1796083500000),
    ("2026-12-1 @8h 54m 59s 405ms", 1796115299405),
    (1796115299405, 1796115299405),
])
def test_send_date_forms(text: Any, ms: int) -> None:
    assert parse_send_date(text, "f:2") == ms


@pytest.mark.parametrize("value", ["yesterday", "Smarch 1, 2026 8:54am", "2026-13-01T00:00:00Z", True, None, [1],
                                   -5, 1e300, float("nan")])
def test_bad_send_dates(value: Any) -> None:
    with pytest.raises(InputError) as caught:
        parse_send_date(value, "f:2")
    assert caught.value.where == "f:2"


# --- errors at the right line -----------------------------------------------------------------------------------

ERRORS: list[tuple[str, Callable[[Path], object], int, str]] = [
    ("not-json", lambda p: p.write_text(json.dumps(HEADER) + "\n{oops\n"), 2, "invalid JSON"),
    ("array", lambda p: p.write_text(json.dumps(HEADER) + "\n[1, 2]\n"), 2, "expected a JSON object"),
    ("zhin-session", lambda p: _write(p, {"type": "session", "session_id": "s"}), 1, "a zhin session file"),
    ("message-first", lambda p: _write(p, _message("Moth", False, "hi")), 1, "line 1 is a message"),
    ("other-object", lambda p: _write(p, {"hello": 1}), 1, "not SillyTavern's chat header"),
    ("mes-number", lambda p: _write(p, HEADER, _message("Wren", True, "a"), {**_message("Moth", False, ""), "mes": 7}),
     3, "a string 'mes'"),
    ("is-user-string", lambda p: _write(p, HEADER, {**_message("Wren", True, "a"), "is_user": "yes"}), 2,
     "a boolean 'is_user'"),
    ("bad-date", lambda p: _write(p, HEADER, _message("Wren", True, "a", "soon")), 2, "not a date SillyTavern writes"),
    ("name-junk", lambda p: _write(p, HEADER, {**_message("Wren", True, "a"), "name": {"a": [[{}]]}}), 2,
     "'name' must be a string"),
    ("surrogate", lambda p: p.write_text(json.dumps(HEADER) + '\n{"name":"W","is_user":true,"mes":"\\ud800",'
                                         '"send_date":0}\n'), 2, "surrogate"),
    ("empty", lambda p: p.write_text(""), 1, "empty file"),
    ("blank-lines", lambda p: p.write_text("\n\n"), 1, "empty file"),
]


@pytest.mark.parametrize(("label", "write", "line", "fragment"), ERRORS, ids=[e[0] for e in ERRORS])
def test_chat_errors_name_the_line(label: str, write: Callable[[Path], object], line: int, fragment: str,
                                   tmp_path: Path) -> None:
    path = tmp_path / f"{label}.jsonl"
    write(path)
    with pytest.raises(InputError) as caught:
        read_chat(path)
    assert caught.value.where == f"{path}:{line}"
    assert fragment in caught.value.message


def test_too_many_lines_is_the_jsonl_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZHIN_MAX_MESSAGES", "2")
    path = _write(tmp_path / "long.jsonl", HEADER, *[_message("Wren", True, str(i)) for i in range(4)])
    with pytest.raises(InputError, match="session too large"):
        read_chat(path)
    monkeypatch.setenv("ZHIN_MAX_MESSAGES", "4")  # the negative control: within the limit it reads
    assert len(read_chat(path).turns) == 4


# --- cards -------------------------------------------------------------------------------------------------------

FIELDS = {"name": "Moth", "description": "A ferry keeper.", "personality": "patient", "scenario": "A night crossing.",
          "first_mes": "The lamp is lit.", "mes_example": "<START>\n{{char}}: Mind the step."}


def test_card_v1_v2_v3(tmp_path: Path) -> None:
    v1 = _write(tmp_path / "v1.json", FIELDS)
    v2 = _write(tmp_path / "v2.json", {"spec": "chara_card_v2", "spec_version": "2.0", "data": FIELDS})
    v3 = _write(tmp_path / "v3.json", {"spec": "chara_card_v3", "spec_version": "3.0", "name": "Top-level",
                                       "data": {**FIELDS, "name": "Moth"}})
    for path, spec in ((v1, "v1"), (v2, "chara_card_v2"), (v3, "chara_card_v3")):
        card = read_card(path)
        assert card.spec == spec
        assert card.card_options() == {"char": "Moth", "description": FIELDS["description"],
                                       "personality": "patient", "scenario": FIELDS["scenario"],
                                       "examples": FIELDS["mes_example"], "greeting": FIELDS["first_mes"]}
    golden = read_card(GOLDEN / "content" / "golden-card.json")
    assert (golden.name, golden.spec) == ("Juniper", "chara_card_v2")


def _png(path: Path, **chunks: dict[str, Any]) -> Path:
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    for key, card in chunks.items():
        info.add_text(key, base64.b64encode(json.dumps(card).encode()).decode())
    Image.new("RGB", (2, 2)).save(path, pnginfo=info)
    return path


def test_png_cards_prefer_ccv3(tmp_path: Path) -> None:
    v2 = {"spec": "chara_card_v2", "data": {**FIELDS, "name": "Old Moth"}}
    v3 = {"spec": "chara_card_v3", "data": {**FIELDS, "name": "New Moth"}}
    both = read_card(_png(tmp_path / "both.png", chara=v2, ccv3=v3))
    assert (both.name, both.spec) == ("New Moth", "chara_card_v3")
    only_v2 = read_card(_png(tmp_path / "v2.png", chara=v2))  # the negative control: no ccv3, chara is read
    assert (only_v2.name, only_v2.spec) == ("Old Moth", "chara_card_v2")


def test_a_png_without_a_card(tmp_path: Path) -> None:
    path = _png(tmp_path / "plain.png", Comment={"x": 1})
    with pytest.raises(InputError, match="no 'ccv3' or 'chara' text chunk") as caught:
        read_card(path)
    assert caught.value.where == str(path)


def test_a_png_chunk_that_is_not_json(tmp_path: Path) -> None:
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text("chara", base64.b64encode(b"{not json").decode())
    path = tmp_path / "bad.png"
    Image.new("RGB", (2, 2)).save(path, pnginfo=info)
    with pytest.raises(InputError, match="'chara' chunk: invalid JSON") as caught:
        read_card(path)
    assert caught.value.where == str(path)


def test_a_compressed_card_chunk_is_refused_never_inflated(tmp_path: Path) -> None:
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text("chara", "A" * (8 * 2**20), zip=True)  # a zTXt chunk of a few KB that inflates to 8 MiB
    path = tmp_path / "bomb.png"
    Image.new("RGB", (2, 2)).save(path, pnginfo=info)
    assert path.stat().st_size < 100_000
    with pytest.raises(InputError, match=r"chara \(zTXt\): SillyTavern reads a card only from a tEXt chunk"):
        read_card(path)


def test_a_png_card_needs_no_pillow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    path = _png(tmp_path / "card.png", chara={"spec": "chara_card_v2", "data": FIELDS})
    monkeypatch.setitem(sys.modules, "PIL", None)  # the chunks are read with struct and zlib: no image library
    assert read_card(path).name == "Moth"


@pytest.mark.parametrize(("text", "where_line", "fragment"), [
    ('{\n  "name": "Moth",\n  oops\n}', 3, "invalid JSON"),
    ("[1]", 1, "must be a JSON object"),
    ('{"name": 5}', None, "card field 'name' must be a string"),
    ('{"spec": "chara_card_v2"}', None, "needs a 'data' object"),
    ('{"spec": "chara_card_v9", "data": {}}', None, "unknown card spec"),
    ('{"description": "no name"}', None, "the card has no 'name'"),
])
def test_card_errors(text: str, where_line: int | None, fragment: str, tmp_path: Path) -> None:
    path = tmp_path / "card.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_card(path)
    assert caught.value.where == (f"{path}:{where_line}" if where_line else str(path))
    assert fragment in caught.value.message


# --- lore --------------------------------------------------------------------------------------------------------

def _entry(content: str, order: int, *, constant: bool = True, position: int = 1, disable: bool = False) -> dict[str, Any]:
    return {"content": content, "order": order, "constant": constant, "position": position, "disable": disable,
            "comment": content}


def test_lore_orders_and_joins_as_st_does(tmp_path: Path) -> None:
    book = {"entries": {"0": _entry("tide tables", 300), "1": _entry("the ferry bell", 10),
                        "2": _entry("the lamp oil", 100), "3": _entry("a keyword thing", 50, constant=False),
                        "4": _entry("at depth", 5, position=4), "5": _entry("switched off", 1, disable=True),
                        "6": _entry("", 2)}}
    lore = read_lore(_write(tmp_path / "lore.json", book))
    assert lore.after == "the ferry bell\nthe lamp oil\ntide tables"  # ascending order, "\n", empty skipped
    # every entry is kept for the World Info engine (keyword entries and other positions are simulated there)
    assert [key for key, _entry in lore.entries] == ["0", "1", "2", "3", "4", "5", "6"] and lore.notes == []
    golden = read_lore(GOLDEN / "content" / "golden-lore.json")
    assert golden.after.startswith("The observatory's spare key") and golden.notes == []


def test_lore_ties_put_the_later_entry_first(tmp_path: Path) -> None:
    book = {"entries": {"0": _entry("first in the file", 100), "1": _entry("second in the file", 100)}}
    assert read_lore(_write(tmp_path / "lore.json", book)).after == "second in the file\nfirst in the file"


@pytest.mark.parametrize(("book", "fragment"), [
    ({"entries": []}, "needs an 'entries' object"),
    ({"entries": {"0": "text"}}, "must be an object"),
    ({"entries": {"0": {"content": 3, "constant": True, "position": 1}}}, "'content' must be a string"),
    ({"entries": {"0": {"content": "x", "order": "high"}}}, "'order' must be a number"),
    ({"entries": {"0": {"content": "x", "order": float("nan")}}}, "'order' must be a number"),  # NaN in the file
    ({"entries": {"0": {"content": "x", "order": float("inf")}}}, "'order' must be a number"),  # 1e400 reads as inf
])
def test_lore_errors(book: Any, fragment: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=fragment):
        read_lore(_write(tmp_path / "lore.json", book))


# --- the session source ------------------------------------------------------------------------------------------

def test_what_the_source_claims(tmp_path: Path) -> None:
    source = SillyTavernSource()
    st_chat = GOLDEN / "runs" / "plain" / "chat.jsonl"
    zhin_session = FIXTURES / "private-chat.jsonl"
    assert is_sillytavern_chat(st_chat) and source.claims(str(st_chat))
    assert source.claims(f"st:{tmp_path / 'anything.txt'}")
    assert not is_sillytavern_chat(zhin_session) and not source.claims(str(zhin_session))  # the negative control
    assert not source.claims(str(tmp_path / "missing.jsonl"))
    mixed = _write(tmp_path / "mixed.jsonl", {"type": "session", "session_id": "s", "chat_metadata": {}})
    assert not is_sillytavern_chat(mixed)  # a zhin session line is never an ST header
    assert not is_sillytavern_chat(_write(tmp_path / "bad.jsonl", "{"))


def test_load_session_reads_both_kinds() -> None:
    st_chat = GOLDEN / "runs" / "plain" / "chat.jsonl"
    assert load_session(str(st_chat)).session_id.startswith("st-")
    assert load_session(f"st:{st_chat}").session_id == load_session(str(st_chat)).session_id
    zhin_session = load_session(str(FIXTURES / "private-chat.jsonl"))
    assert not zhin_session.session_id.startswith("st-")


def test_trace_an_st_chat(zhin: Callable[..., Any]) -> None:
    st_chat = GOLDEN / "runs" / "plain" / "chat.jsonl"
    for ref in (f"st:{st_chat}", str(st_chat)):
        result = zhin("trace", ref)
        assert result.returncode == 0, result.stderr
        assert "ok d67cb53d" in result.stdout or "validator: accepted" in result.stdout
    zhin_trace = zhin("trace", FIXTURES / "private-chat.jsonl")  # a zhin session traces as before
    assert zhin_trace.returncode == 0, zhin_trace.stderr


def test_trace_a_bad_st_chat_is_one_line(zhin: Callable[..., Any], tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", HEADER, _message("Wren", True, "a", "soon"))
    result = zhin("trace", path)
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr.startswith(f"zhin: error: {path}:2: send_date") and result.stderr.count("\n") == 1


# --- import --from sillytavern -----------------------------------------------------------------------------------

def test_import_from_sillytavern(zhin: Callable[..., Any], tmp_path: Path) -> None:
    chats = [GOLDEN / "runs" / run / "chat.jsonl" for run in ("plain", "merge")]
    card = _write(tmp_path / "card.json", {"spec": "chara_card_v2", "data": {**FIELDS, "name": "Juno"}})
    db = tmp_path / "st.sqlite"
    result = zhin("import", "--from", "sillytavern", *chats, "--card", card, "--db", db)
    assert result.returncode == 0, result.stderr
    imported = [line for line in result.stderr.splitlines() if line.startswith("imported ")]
    assert len(imported) == 2 and all("(17 messages)" in line for line in imported)
    from zhin_cli.store.db import SessionDatabase, parse_db

    with SessionDatabase(parse_db(str(db))) as database:
        session = database.load(read_chat(chats[0]).session.session_id, lazy=False)
    assert _texts(session.messages) == _texts(read_chat(chats[0]).session.messages)


def test_import_from_sillytavern_is_all_or_nothing(zhin: Callable[..., Any], tmp_path: Path) -> None:
    bad = _write(tmp_path / "bad.jsonl", HEADER, {"name": "W", "is_user": 1, "mes": "a"})
    db = tmp_path / "st.sqlite"
    result = zhin("import", "--from", "sillytavern", GOLDEN / "runs" / "plain" / "chat.jsonl", bad, "--db", db)
    assert result.returncode == 3 and f"{bad}:2:" in result.stderr
    assert not db.exists()


def test_import_options_are_checked(zhin: Callable[..., Any], tmp_path: Path) -> None:
    chat = GOLDEN / "runs" / "plain" / "chat.jsonl"
    card = _write(tmp_path / "card.json", FIELDS)
    no_from = zhin("import", chat, "--card", card, "--db", tmp_path / "a.sqlite")
    assert no_from.returncode == 2 and "--card is for --from sillytavern" in no_from.stderr
    other = zhin("import", "--from", "tavernai", chat, "--db", tmp_path / "b.sqlite")
    assert other.returncode == 2 and "--from must be zhin or sillytavern" in other.stderr
    as_zhin = zhin("import", chat, "--db", tmp_path / "c.sqlite")  # default --from zhin: an ST chat is not a session
    assert as_zhin.returncode == 3 and f"{chat}:1:" in as_zhin.stderr and "--from sillytavern" in as_zhin.stderr
    assert not (tmp_path / "c.sqlite").exists()


def test_a_narrator_message_is_not_a_reply(tmp_path: Path) -> None:
    """ST sends /sys narrator messages as system messages: not the bot's reply, not in zhin's history, named."""
    lines = (GOLDEN / "runs" / "plain" / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    narrator = {"name": "System", "is_user": False, "is_system": False, "send_date": "2026-12-01T09:00:00.000Z",
                "mes": "A storm rolls in.", "extra": {"type": "narrator"}}
    lines.insert(3, json.dumps(narrator))  # after turn 1's user line (header, greeting, user 1)
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    chat = read_chat(path)
    plain = read_chat(GOLDEN / "runs" / "plain" / "chat.jsonl")
    assert [t.reply_text for t in chat.turns] == [t.reply_text for t in plain.turns]  # the bot's replies, as before
    assert all("A storm rolls in." not in m.text for m in chat.session.messages)
    assert any("narrator" in note and "line(s) 4" in note for note in chat.notes)
    assert not any("narrator" in note for note in plain.notes)  # control: no note without one


def test_card_fields_zhin_does_not_simulate_are_named(tmp_path: Path) -> None:
    card = json.loads((GOLDEN / "content" / "golden-card.json").read_text(encoding="utf-8"))
    assert read_card(GOLDEN / "content" / "golden-card.json").notes == ()  # control: the golden card sets none
    card["data"].update(system_prompt="Be brief.", post_history_instructions="  ",
                        extensions={"depth_prompt": {"prompt": "Stay calm.", "depth": 4}})
    notes = read_card(_write(tmp_path / "card.json", card)).notes
    assert len(notes) == 2 and "system_prompt" in notes[0] and "depth_prompt" in notes[1]

"""SillyTavern's own files as zhin input: a chat file (``.jsonl``), a character card (V1/V2/V3 JSON or PNG) and a
World Info book. A user moving a preset from SillyTavern to a zhin bot has these, not a zhin session: reading them
directly is what lets ``zhin preset check-capture`` compare ST's captured requests with zhin's for the same turns.

What is read, and why that way (each rule confirmed in SillyTavern's source, 1.12–1.18):

* A chat file is JSONL: line 1 the header (``chat_metadata``, ``user_name``, ``character_name``; ST 1.18 writes
  "unused" for both names), then one message per line. ``mes`` is what ST sends (the selected swipe). Messages with
  ``is_system`` true are hidden: Generate's chat filter leaves them out of the prompt, so they are not in the session.
* ``send_date`` has had several forms (``timestampToMoment`` in ST's utils.js still reads them all): ISO 8601
  (``getMessageTimeStamp`` now), a number (epoch milliseconds, the oldest chats), the "humanized" form
  ``2023-6-19 @14h 20m 5s 120ms``, and ``June 19, 2023 2:20pm``. The last two carry no zone: read as UTC.
* The session id is ``st-`` + the header's ``chat_metadata.integrity`` (a UUID ST gives every chat), else ``st-`` +
  the file name without ``.jsonl``: the same file always gives the same id (two chats without an integrity and with
  the same file name get the same id: rename one before importing both). The persona is member ``st-user``, the
  character the bot ``st-char``; a message's row id is its line number in the file (an import numbers rows anew,
  as it does for every session).
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from zhin_cli.core.errors import InputError, SessionNotFound, at_line
from zhin_cli.core.inputfiles import lone_surrogate_in_json, open_regular
from zhin_cli.core.jsnumbers import js_number_problems
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.model import AssistantMessage, BotFacts, Message, SceneFacts, Session, UserMessage
from zhin_cli.core.readers import enclosing_key, json_key_lines
from zhin_cli.store.payload import message_from_payload, short

PERSONA_ID = "st-user"
CHARACTER_ID = "st-char"
UNUSED_NAME = "unused"  # what ST 1.18 writes as the header's user_name / character_name
# zhin's session line (store/jsonl.py): a file starting with one is a zhin session, never an ST chat
ZHIN_LINE_KEYS = ("type", "session_id", "session_key")


@dataclass(frozen=True)
class ChatTurn:
    """One user message that is sent to the model, and the bot reply after it."""

    number: int  # 1-based: the k-th user message of the chat
    user_position: int  # index of that user message in ``session.messages``
    reply_position: int | None  # index of the bot reply right after it (None: none follows)
    user_text: str  # ``mes`` as ST stored it (the selected swipe)
    reply_text: str | None
    # a group chat: the member whose reply this request made (None in a private chat), and the replies of the
    # members before it in the same round (they are in its request; its own reply is not)
    speaker: str | None = None
    earlier: tuple[str, ...] = ()


@dataclass(frozen=True)
class SillyTavernChat:
    path: Path
    session: Session  # a private chat: the persona is the member, the character the bot; the greeting kept
    persona_name: str
    character_name: str
    turns: list[ChatTurn]
    metadata: JSONObject = field(default_factory=dict)  # line 1's ``chat_metadata`` as found
    notes: list[str] = field(default_factory=list)
    group: Group | None = None  # a group chat read with its group file: one turn per member reply
    characters: tuple[str, ...] = ()  # the names on the characters' messages, in order of first message

    @property
    def variables(self) -> dict[str, str]:
        """The chat variables ST saved with the chat (``chat_metadata.variables``): the state after the last
        generation, not per turn. Text values as they are, numbers as ST prints them; any other value is skipped."""
        saved = self.metadata.get("variables")
        if not isinstance(saved, dict):
            return {}
        return {str(name): text for name, value in saved.items() if (text := _variable_text(value)) is not None}


def _variable_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


@dataclass(frozen=True)
class Card:
    path: Path
    name: str
    description: str
    personality: str
    scenario: str
    first_mes: str
    mes_example: str
    spec: str  # "chara_card_v3", "chara_card_v2", "v1"
    # fields the card sets that zhin does not simulate (ST's character overrides, Character's Note), one line each
    notes: tuple[str, ...] = ()
    world: str | None = None  # extensions.world: the name of the World Info book linked to the character
    # the embedded lorebook (the card spec's character_book object), as found; None without one
    character_book: JSONObject | None = field(default=None, compare=False, hash=False)

    def card_options(self) -> dict[str, str]:
        """The card as zhin's preset card options (``pipeline.preset.model.CardOptions``)."""
        return {"char": self.name, "description": self.description, "personality": self.personality,
                "scenario": self.scenario, "examples": self.mes_example, "greeting": self.first_mes}


@dataclass(frozen=True)
class Lore:
    path: Path
    after: str  # constant, enabled entries at "after character definitions", joined as ST joins them
    notes: list[str] = field(default_factory=list)  # what is not simulated, one line each
    # every entry as found (its key in ``entries`` and the object), its types checked: the World Info engine
    # (pipeline/preset/worldinfo.py) reads them
    entries: tuple[tuple[str, JSONObject], ...] = ()

    @property
    def name(self) -> str:
        """The book's name as ST knows it: its file name in ``worlds/`` without ``.json`` (an export keeps it)."""
        return self.path.name.removesuffix(".json")


@dataclass(frozen=True)
class Group:
    """ST's group definition (``groups/<id>.json``): the members (their avatar files, in member order — the reply
    order of strategy List), the card mode and the muted members."""

    path: Path
    name: str
    members: tuple[str, ...]  # avatar file names ("Tobias Quill.png"), in member order
    generation_mode: int  # 0 swap the speaker's card in, 1 join the cards (muted left out), 2 join (muted kept)
    activation_strategy: int  # 0 natural, 1 list, 2 manual, 3 pooled
    disabled: tuple[str, ...] = ()  # muted members' avatar files: they never reply
    join_prefix: str = ""
    join_suffix: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        """The members' names as ST names their avatars (the card's name, file extension dropped)."""
        return tuple(member_name(avatar) for avatar in self.members)

    @property
    def speaking(self) -> tuple[str, ...]:
        """The names of the members who reply, in member order (the muted never do)."""
        return tuple(member_name(avatar) for avatar in self.members if avatar not in self.disabled)


GENERATION_MODES = {0: "swap", 1: "join", 2: "join (include muted)"}


def member_name(avatar: str) -> str:
    return re.sub(r"\.(png|webp|jpe?g|gif)$", "", avatar, flags=re.IGNORECASE)


def read_group(path: Path) -> Group:
    """ST's group file; bad input is an ``InputError`` naming ``file:line`` (or the key)."""
    from zhin_cli.core.readers import read_json_file

    data, text = read_json_file(path, InputError, "SillyTavern group file")
    lines = json_key_lines(text, path, InputError)

    def where(key: str) -> str:
        return at_line(path, lines[key]) if key in lines else str(path)

    if not isinstance(data, dict):
        raise InputError("a SillyTavern group file must be a JSON object", where=at_line(path, 1))
    members = data.get("members")
    if not isinstance(members, list) or not members or not all(isinstance(m, str) and m for m in members):
        raise InputError("'members' must be a non-empty list of avatar file names (not a SillyTavern group file?)",
                         where=where("members"))
    disabled = data.get("disabled_members", [])
    if not isinstance(disabled, list) or not all(isinstance(m, str) for m in disabled):
        raise InputError("'disabled_members' must be a list of avatar file names", where=where("disabled_members"))
    numbers: dict[str, int] = {}
    for key, default, allowed in (("generation_mode", 0, GENERATION_MODES), ("activation_strategy", 0, range(4))):
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
            raise InputError(f"{key!r} must be one of {', '.join(map(str, allowed))}, got {short(value)}",
                             where=where(key))
        numbers[key] = value
    texts: dict[str, str] = {}
    for key in ("name", "generation_mode_join_prefix", "generation_mode_join_suffix"):
        value = data.get(key, "")
        if not isinstance(value, str):
            raise InputError(f"{key!r} must be a string, got {short(value)}", where=where(key))
        texts[key] = value
    return Group(path, texts["name"], tuple(members), numbers["generation_mode"], numbers["activation_strategy"],
                 tuple(disabled), texts["generation_mode_join_prefix"], texts["generation_mode_join_suffix"])


# --- the chat file ---------------------------------------------------------------------------------------------

_HUMANIZED = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2}) ?@(\d{1,2})h ?(\d{1,2})m ?(\d{1,2})s(?: ?(\d{1,3})ms)?")
_LEGACY = re.compile(r"([A-Za-z]+) (\d{1,2}), (\d{4}) (\d{1,2}):(\d{2}) ?([AaPp][Mm])")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MAX_EPOCH_MS = 253402300799999  # 9999-12-31: beyond it no date is real


def parse_send_date(value: object, where: str) -> int:
    """``send_date`` in epoch milliseconds, from any form ST has written (the module docstring lists them)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != value or not 0 <= value <= _MAX_EPOCH_MS:  # NaN or out of range
            raise InputError(f"send_date out of range: {short(value)}", where=where)
        return int(value)
    if not isinstance(value, str):
        raise InputError(f"send_date must be a date string or a number, got {short(value)}", where=where)
    text = value.strip()
    try:
        if match := _HUMANIZED.fullmatch(text):
            year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
            moment = datetime(year, month, day, hour, minute, second, int(match[7] or 0) * 1000, tzinfo=UTC)
        elif match := _LEGACY.fullmatch(text):
            month_name, day_text, year_text, hour_text, minute_text, half = match.groups()
            if month_name.lower() not in _MONTHS or not 1 <= int(hour_text) <= 12:
                raise ValueError(text)
            hour24 = int(hour_text) % 12 + (12 if half.lower() == "pm" else 0)
            moment = datetime(int(year_text), _MONTHS.index(month_name.lower()) + 1, int(day_text), hour24,
                              int(minute_text), tzinfo=UTC)
        else:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    except (ValueError, OverflowError):
        raise InputError(f"send_date {short(value)} is not a date SillyTavern writes (ISO 8601, epoch milliseconds, "
                         "\"2023-6-19 @14h 20m 5s 120ms\" or \"June 19, 2023 2:20pm\")", where=where) from None


def is_header(obj: JSONObject) -> bool:
    """An ST chat header: ``chat_metadata``, or both names; never a line carrying zhin's session keys."""
    if any(key in obj for key in ZHIN_LINE_KEYS):
        return False
    return "chat_metadata" in obj or ("user_name" in obj and "character_name" in obj)


def is_sillytavern_chat(path: Path) -> bool:
    """Cheap: reads the first line only (at most 1 MiB of it); any trouble is False (the caller reads it otherwise)."""
    from zhin_cli.core import jsontext

    try:
        with open_regular(path, InputError, "chat file") as handle:
            first = handle.readline(2**20)
        obj = jsontext.loads(first.decode("utf-8"), first)
    except (OSError, ValueError, RecursionError, UnicodeDecodeError, InputError):
        return False
    return isinstance(obj, dict) and is_header(obj)


def _header_problem(obj: JSONObject) -> str:
    if obj.get("type") == "session" or "session_id" in obj:
        return "this is a zhin session file (line 1 is a {\"type\":\"session\"} line), not a SillyTavern chat"
    if "mes" in obj or "is_user" in obj:
        return "line 1 is a message, not SillyTavern's chat header (chat_metadata, user_name, character_name)"
    keys = ", ".join(sorted(str(k) for k in obj)[:5]) or "none"
    return f"line 1 is not SillyTavern's chat header (chat_metadata, user_name, character_name); its keys: {keys}"


@dataclass
class _Line:
    """One message line, checked."""

    number: int
    obj: JSONObject
    is_user: bool
    hidden: bool
    name: str | None
    text: str
    timestamp: int


def _message_line(obj: JSONObject, number: int, where: str, notes: list[str]) -> _Line:
    for key, problem in js_number_problems(obj, skip=("send_date",)):  # send_date: a date range of its own
        raise InputError(f"'{key}' must be a number SillyTavern holds: {problem}", where=where)
    text = obj.get("mes")
    if not isinstance(text, str):
        raise InputError(f"a message needs a string 'mes', got {short(text)}", where=where)
    is_user = obj.get("is_user")
    if not isinstance(is_user, bool):
        raise InputError(f"a message needs a boolean 'is_user', got {short(is_user)}", where=where)
    hidden = obj.get("is_system", False)
    if not isinstance(hidden, bool):
        raise InputError(f"'is_system' must be a boolean, got {short(hidden)}", where=where)
    name = obj.get("name")
    if name is not None and not isinstance(name, str):
        raise InputError(f"'name' must be a string, got {short(name)}", where=where)
    swipes, swipe_id = obj.get("swipes"), obj.get("swipe_id")
    if (isinstance(swipes, list) and isinstance(swipe_id, int) and not isinstance(swipe_id, bool)
            and 0 <= swipe_id < len(swipes) and isinstance(swipes[swipe_id], str) and swipes[swipe_id] != text):
        notes.append(f"line {number}: 'mes' differs from swipes[{swipe_id}]; 'mes' is what ST sends, so it is used")
    return _Line(number, obj, is_user, hidden, name or None, text, parse_send_date(obj.get("send_date"), where))


def _read_lines(path: Path) -> tuple[JSONObject, list[_Line], list[str]]:
    from zhin_cli.store.jsonl import _parse_line
    from zhin_cli.store.limits import check_jsonl_limits

    check_jsonl_limits(path)
    header: JSONObject | None = None
    lines: list[_Line] = []
    notes: list[str] = []
    try:
        handle = open_regular(path, InputError, "chat file")
    except FileNotFoundError:
        raise SessionNotFound(f"no such file: {path}") from None
    with handle:
        for number, raw_line in enumerate(handle, start=1):
            where = at_line(path, number)
            obj = _parse_line(raw_line, where)
            if obj is None:
                continue
            if header is None:
                if not is_header(obj):
                    raise InputError(_header_problem(obj), where=where)
                header = obj
                continue
            lines.append(_message_line(obj, number, where, notes))
    if header is None:
        raise InputError("empty file: no SillyTavern chat header", where=at_line(path, 1))
    return header, lines, notes


def _session_id(path: Path, metadata: JSONObject) -> str:
    integrity = metadata.get("integrity")
    if isinstance(integrity, str) and integrity.strip():
        return f"st-{integrity.strip()}"
    return f"st-{path.name.removesuffix('.jsonl')}"


def character_id(name: str) -> str:
    """A group member's subject id: each character its own assistant actor (``st-char:<name>``)."""
    return f"{CHARACTER_ID}:{name}"


PEER_BOT = "peer_bot"  # the actor origin of another bot (ADR 0041 §1; the header renderer shows it as is)


def _message(line: _Line, persona_name: str, path: Path, *, group: bool = False, bot: str | None = None) -> Message:
    """The message in zhin's stored form (the payload is what ``import`` and ``export`` write), built by the one
    rule every store uses (``message_from_payload``). In a group chat every character's message carries its own
    assistant actor (the sender's name), so no member's message is labelled as another's; a character who is not
    the session's ``bot`` is another bot in the chat, so its actor has ``origin: peer_bot`` (ADR 0041 §1: another
    bot's full header carries ``origin:peer_bot``, the bot itself and humans none)."""
    payload: JSONObject = {"role": "user" if line.is_user else "assistant",
                               "content": [{"type": "text", "text": line.text}], "timestamp": line.timestamp}
    if line.is_user:
        payload["actor"] = {"subjectId": PERSONA_ID, "displayName": persona_name}
    else:
        if group and line.name:
            assistant_actor: JSONObject = {"subjectId": character_id(line.name), "displayName": line.name}
            if line.name != bot:
                assistant_actor["origin"] = PEER_BOT
            payload["assistantActor"] = assistant_actor
        extra = line.obj.get("extra")
        model = extra.get("model") if isinstance(extra, dict) else None
        if isinstance(model, str) and model:
            payload["model"] = model
    message = message_from_payload(payload, row_id=line.number, where=at_line(path, line.number))
    message.raw = payload
    return message


def _group_turns(messages: list[Message]) -> list[ChatTurn]:
    """One turn per member reply: ST makes one request for each member that answers a user message, and each
    holds the replies of the members before it in that round. A user message nobody answered is one turn."""
    turns: list[ChatTurn] = []
    number = 0
    for position, message in enumerate(messages):
        if not isinstance(message, UserMessage):
            continue
        number += 1
        earlier: list[str] = []
        at = position + 1
        while at < len(messages) and isinstance(messages[at], AssistantMessage):
            reply = messages[at]
            assert isinstance(reply, AssistantMessage)
            speaker = reply.assistant_actor.display_name if reply.assistant_actor is not None else None
            turns.append(ChatTurn(number, position, at, message.text, reply.text, speaker, tuple(earlier)))
            earlier.append(reply.text)
            at += 1
        if at == position + 1:
            turns.append(ChatTurn(number, position, None, message.text, None))
    return turns


def _turns(messages: list[Message]) -> list[ChatTurn]:
    turns: list[ChatTurn] = []
    for position, message in enumerate(messages):
        if not isinstance(message, UserMessage):
            continue
        after = messages[position + 1] if position + 1 < len(messages) else None
        reply = after if isinstance(after, AssistantMessage) else None
        turns.append(ChatTurn(len(turns) + 1, position, position + 1 if reply is not None else None, message.text,
                              reply.text if reply is not None else None))
    return turns


def _header_name(header: JSONObject, key: str) -> str | None:
    value = header.get(key)
    return value if isinstance(value, str) and value and value != UNUSED_NAME else None


def _is_narrator(obj: JSONObject) -> bool:
    extra = obj.get("extra")
    return isinstance(extra, dict) and extra.get("type") == "narrator"


def read_chat(path: Path, *, persona: str | None = None, character: str | None = None,
              group: Group | None = None) -> SillyTavernChat:
    """ST's chat file as a private-chat session (the module docstring gives the rules); bad input is an
    ``InputError`` naming ``file:line``. A chat with messages of more than one character (or read with its
    ``group`` file) is a group chat: each character is its own assistant actor; with the group file, one turn
    per member reply (``ChatTurn.speaker``)."""
    header, lines, notes = _read_lines(path)
    metadata = header.get("chat_metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    hidden = [line.number for line in lines if line.hidden]
    # ST sends a narrator message (/sys: extra.type "narrator") as a system message in the history; zhin's
    # history has no such message, so it is left out and named (check-capture then shows it as an extra message)
    narrators = [line.number for line in lines if not line.hidden and _is_narrator(line.obj)]
    shown = [line for line in lines if not line.hidden and line.number not in narrators]
    if narrators:
        notes.append(f"{len(narrators)} narrator message(s) (extra.type narrator), which ST sends as system "
                     f"messages, are not in zhin's history: line(s) {', '.join(map(str, narrators))}")
    if hidden:
        notes.append(f"{len(hidden)} hidden message{'s' if len(hidden) != 1 else ''} (is_system) "
                     f"{'are' if len(hidden) != 1 else 'is'} not part of the prompt: "
                     f"line{'s' if len(hidden) != 1 else ''} {', '.join(map(str, hidden))}")
    persona_name = (persona or next((line.name for line in shown if line.is_user and line.name), None)
                    or _header_name(header, "user_name") or "User")
    character_name = (character or next((line.name for line in shown if not line.is_user and line.name), None)
                      or _header_name(header, "character_name") or "Character")
    characters = list(dict.fromkeys(line.name for line in shown if not line.is_user and line.name))
    is_group = group is not None or len(characters) > 1
    members = tuple(dict.fromkeys([*characters, *(group.names if group is not None else ())]))
    if character and is_group and character not in members:  # a bot who is not in the group never speaks there
        raise InputError(f"{character!r} is not a character of this group chat (its characters: "
                         f"{', '.join(members)}): give a member's card", where=str(path))
    if is_group and group is None:
        notes.append(f"messages of {len(characters)} characters ({', '.join(characters[:5])}): a group chat — "
                     "give its group file (ST's groups/<id>.json) to check every member's requests")
    if group is not None and not character:
        character_name = group.speaking[0] if group.speaking else group.names[0]
    messages = [_message(line, persona_name, path, group=is_group, bot=character_name) for line in shown]
    session_id = _session_id(path, metadata)
    session = Session(session_id=session_id, session_key=session_id, timezone=None,
                      bot=BotFacts(user_id=character_id(character_name) if is_group else CHARACTER_ID,
                                   name=character_name),
                      scene=SceneFacts(scene_id=PERSONA_ID, scene_type="private"),
                      messages=messages, source=str(path), raw=header)
    turns = _group_turns(messages) if group is not None else _turns(messages)
    return SillyTavernChat(path=path, session=session, persona_name=persona_name, character_name=character_name,
                           turns=turns, metadata=metadata, notes=notes, group=group, characters=tuple(characters))


# --- the character card ----------------------------------------------------------------------------------------

CARD_FIELDS = ("name", "description", "personality", "scenario", "first_mes", "mes_example")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_ST_FILE_BYTES = 64 * 2**20  # a card with an embedded lorebook is a few MB; more is not a card or a book


def _read_limited(path: Path, what: str) -> bytes:
    """The bytes of a card or World Info file, refused past ``MAX_ST_FILE_BYTES`` (read no further than that)."""
    try:
        with open_regular(path, InputError, what) as handle:
            raw = handle.read(MAX_ST_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InputError("no such file", where=str(path)) from None
    if len(raw) > MAX_ST_FILE_BYTES:
        raise InputError(f"larger than {MAX_ST_FILE_BYTES // 2**20} MiB: not a {what}", where=str(path))
    return raw


def read_card(path: Path) -> Card:
    """A character card: V1 (flat keys), V2 (``chara_card_v2``) or V3 (``chara_card_v3``) JSON, or a PNG carrying
    it. ST's character-card-parser reads the PNG's ``ccv3`` text chunk (base64 V3 JSON) before ``chara`` (base64
    V2); V2 and V3 keep the fields in ``data`` alike, V1 at the top. Bad input: an ``InputError`` naming the file."""
    raw = _read_limited(path, "character card")
    if raw.startswith(PNG_SIGNATURE):
        return _card_from(path, _png_card_json(raw, path), where=str(path))
    return _card_from(path, _json_object(raw, path, "character card"), where=str(path))


def _json_object(raw: bytes, path: Path, what: str, *, chunk: str | None = None) -> JSONObject:
    """A JSON object from a file (errors at ``file:line``) or a PNG's text chunk (errors at the file, naming it)."""
    import json

    from zhin_cli.core import jsontext

    inside = f"its '{chunk}' chunk: " if chunk else ""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{inside}not UTF-8 (byte {exc.start}): not a {what} (JSON or PNG)", where=str(path)) from None
    try:
        obj = jsontext.loads(text, raw)
    except json.JSONDecodeError as exc:
        if chunk:
            raise InputError(f"{inside}invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                             where=str(path)) from None
        raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})", where=at_line(path, exc.lineno)) from None
    except (RecursionError, ValueError):
        raise InputError(f"{inside}invalid JSON: nested too deeply or a number too long", where=str(path)) from None
    if lone_surrogate_in_json(text) is not None:
        raise InputError(f"{inside}a lone surrogate escape (\\ud800–\\udfff): not text", where=str(path))
    if not isinstance(obj, dict):
        raise InputError(f"{inside}a {what} must be a JSON object, got {type(obj).__name__}",
                         where=str(path) if chunk else at_line(path, 1))
    return obj


# A PNG chunk: length (4 bytes, big-endian, at most 2^31 − 1), type (4), data, CRC-32 of type and data (4)
_PNG_CHUNK_HEAD = struct.Struct(">I4s")
_PNG_MAX_CHUNK = 2**31 - 1
CARD_KEYWORDS = ("ccv3", "chara")  # ST's character-card-parser: the first ccv3 tEXt chunk, else the first chara


def _png_chunks(raw: bytes, path: Path) -> Iterator[tuple[bytes, int, int]]:
    """(type, start, end) of every chunk of the PNG ``raw`` (whole, at most ``MAX_ST_FILE_BYTES``), up to IEND.
    Nothing is copied or decompressed: the pixels (IDAT) are skipped unread, so an image of 12,000 × 12,000 in a
    few hundred KB (a decompression bomb) costs what its file does. A chunk running past the end is an error."""
    at = len(PNG_SIGNATURE)
    while at < len(raw):
        if at + _PNG_CHUNK_HEAD.size + 4 > len(raw):
            raise InputError(f"cannot read the PNG: cut short at byte {at} (a chunk header)", where=str(path))
        length, kind = _PNG_CHUNK_HEAD.unpack_from(raw, at)
        start = at + _PNG_CHUNK_HEAD.size
        if length > _PNG_MAX_CHUNK or start + length + 4 > len(raw):
            raise InputError(f"cannot read the PNG: chunk {short(kind)} at byte {at} claims {length:,} bytes, "
                             "past the end of the file", where=str(path))
        yield kind, start, start + length
        if kind == b"IEND":
            return
        at = start + length + 4


def _png_card_text(raw: bytes, path: Path) -> tuple[str, str]:
    """(keyword, base64 text) of the card in a PNG, chosen as ST's character-card-parser chooses it: among the
    ``tEXt`` chunks (Latin-1 ``keyword\\0text``), the first whose keyword is ``ccv3`` in any case, else the first
    ``chara``. ST reads no compressed chunk (``zTXt``, ``iTXt``): a card only there is refused, never inflated."""
    found: dict[str, str] = {}
    compressed: list[str] = []
    for kind, start, end in _png_chunks(raw, path):
        if kind not in (b"tEXt", b"zTXt", b"iTXt"):
            continue
        separator = raw.find(b"\0", start, min(end, start + 80))  # a PNG keyword is 1–79 bytes
        keyword = raw[start:separator].decode("latin-1").lower() if separator > start else ""
        if keyword not in CARD_KEYWORDS or keyword in found:
            continue
        if kind != b"tEXt":
            compressed.append(f"{keyword} ({kind.decode('latin-1')})")
            continue
        if zlib.crc32(raw[start - 4 : end]) != int.from_bytes(raw[end : end + 4], "big"):
            raise InputError(f"the PNG's '{keyword}' chunk is damaged (its CRC does not match)", where=str(path))
        found[keyword] = raw[separator + 1 : end].decode("latin-1")
    for keyword in CARD_KEYWORDS:
        if keyword in found:
            return keyword, found[keyword]
    if compressed:
        raise InputError(f"the card is in a compressed chunk, {', '.join(compressed)}: SillyTavern reads a card only "
                         "from a tEXt chunk (export the card from SillyTavern again)", where=str(path))
    raise InputError("a PNG without a character card: no 'ccv3' or 'chara' text chunk", where=str(path))


def _png_card_json(raw: bytes, path: Path) -> JSONObject:
    keyword, text = _png_card_text(raw, path)
    try:
        decoded = base64.b64decode(text.strip(), validate=False)
    except (binascii.Error, ValueError):
        raise InputError(f"the PNG's '{keyword}' chunk is not base64", where=str(path)) from None
    return _json_object(decoded, path, "character card", chunk=keyword)


def _card_from(path: Path, obj: JSONObject, *, where: str) -> Card:
    spec = obj.get("spec")
    if spec in ("chara_card_v2", "chara_card_v3"):
        data = obj.get("data")
        if not isinstance(data, dict):
            raise InputError(f"a {spec} card needs a 'data' object", where=where)
        fields, spec_name = data, str(spec)
    elif spec is not None:
        raise InputError(f"unknown card spec {short(spec)} (expected chara_card_v2 or chara_card_v3)", where=where)
    else:
        fields, spec_name = obj, "v1"
    for name, problem in js_number_problems(fields):  # V3's creation_date, …: the same rule as every ST number
        raise InputError(f"card field '{name}' must be a number SillyTavern holds: {problem}", where=where)
    values: dict[str, str] = {}
    for key in CARD_FIELDS:
        value = fields.get(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise InputError(f"card field '{key}' must be a string, got {short(value)}", where=where)
        values[key] = value
    if not values["name"]:
        raise InputError("the card has no 'name'", where=where)
    extensions = fields.get("extensions")
    world = extensions.get("world") if isinstance(extensions, dict) else None
    book = fields.get("character_book")
    if book is not None and not (isinstance(book, dict) and isinstance(book.get("entries", []), list)):
        raise InputError(f"card field 'character_book' must be an object with an 'entries' list, got {short(book)}",
                         where=where)
    return Card(path=path, spec=spec_name, notes=_unsimulated(fields, path),
                world=world if isinstance(world, str) and world else None, character_book=book, **values)


# Card fields ST uses that zhin's preset stage does not: ST's main / post-history overrides and Character's Note
_UNSIMULATED = (("system_prompt", "the character's main prompt override"),
                ("post_history_instructions", "the character's post-history instructions override"))


def _set_text(value: JSON) -> bool:
    """A card field that holds text beyond white space."""
    return isinstance(value, str) and bool(value.strip())


def _unsimulated(fields: JSONObject, path: Path) -> tuple[str, ...]:
    notes = [f"{path}: card field {key} ({what}) is set; zhin does not simulate it"
             for key, what in _UNSIMULATED if _set_text(fields.get(key))]
    extensions = fields.get("extensions")
    depth = extensions.get("depth_prompt") if isinstance(extensions, dict) else None
    if isinstance(depth, dict) and _set_text(depth.get("prompt")):
        notes.append(f"{path}: the card's Character's Note (extensions.depth_prompt) is set; zhin does not simulate it")
    return tuple(notes)


# --- the World Info book -----------------------------------------------------------------------------------------

WI_POSITION_AFTER = 1  # world_info_position.after: "after character definitions"


def _key_where(raw: bytes, path: Path) -> Callable[[str], str]:
    """``file:line`` of a key path (``entries.0.order``) of a JSON file read whole, else of the nearest key around
    it, else the file. The lines are found by one scan, on the first call: only an error pays for it."""

    @functools.cache
    def lines() -> dict[str, int]:
        return json_key_lines(raw.decode("utf-8-sig"), path, InputError)

    def where(key: str) -> str:
        found = enclosing_key(lines(), key)
        return at_line(path, lines()[found]) if found is not None else str(path)

    return where


def read_lore(path: Path) -> Lore:
    """ST's World Info export (``{"entries": {"0": {...}}}``): every entry, its types checked (``entries``, for the
    World Info engine), and — for a caller without the engine — ``after``, the constant, enabled entries at
    position 1 as ST's world-info.js joins them: it walks the activated entries by ``order`` descending and
    ``unshift``s each content, so the text is in ascending ``order`` (ties: the later entry first), joined with
    "\\n", empty contents skipped."""
    raw = _read_limited(path, "World Info file")
    book = _json_object(raw, path, "World Info file")
    where = _key_where(raw, path)
    entries = book.get("entries")
    if not isinstance(entries, dict):
        raise InputError("a World Info file needs an 'entries' object ({\"entries\": {\"0\": {...}}})",
                         where=where("entries"))
    chosen: list[tuple[int, str]] = []
    notes: list[str] = []
    for key, entry in entries.items():
        if not isinstance(entry, dict):
            raise InputError(f"entry {short(key)} must be an object, got {short(entry)}", where=where(f"entries.{key}"))
        placed = _lore_entry(str(key), entry, notes, where)
        if placed is not None:
            chosen.append(placed)
    # ST: sort by order descending (stable), then unshift each: the same as a stable ascending sort of the
    # reversed list
    ordered = sorted(reversed(chosen), key=lambda item: item[0])
    return Lore(path=path, after="\n".join(content for _, content in ordered if content), notes=notes,
                entries=tuple((str(key), entry) for key, entry in entries.items() if isinstance(entry, dict)))


def _lore_entry(key: str, entry: JSONObject, notes: list[str], where: Callable[[str], str]) -> tuple[int, str] | None:
    """(order, content) when the entry is simulated; else None, with a note when ST might send it. ``where``:
    the ``file:line`` of a key path (``entries.0.order``)."""
    for name, problem in js_number_problems(entry):
        raise InputError(f"entry {short(key)}: '{name}' must be a number SillyTavern holds: {problem}",
                         where=where(f"entries.{key}.{name}"))
    if entry.get("disable") is True:
        return None
    content = entry.get("content", "")
    if not isinstance(content, str):
        raise InputError(f"entry {short(key)}: 'content' must be a string, got {short(content)}",
                         where=where(f"entries.{key}.content"))
    order = entry.get("order", 100)
    if not isinstance(order, int | float) or isinstance(order, bool):
        raise InputError(f"entry {short(key)}: 'order' must be a number, got {short(order)}", where=where(f"entries.{key}.order"))
    for name in ("key", "keysecondary"):  # anything but a list is no keys, as ST reads it
        keys = entry.get(name)
        if isinstance(keys, list) and not all(isinstance(k, str) for k in keys):
            raise InputError(f"entry {short(key)}: '{name}' must be a list of strings, got {short(keys)}",
                             where=where(f"entries.{key}.{name}"))
    if entry.get("constant") is not True or entry.get("position", 0) != WI_POSITION_AFTER:
        return None
    return int(order), content

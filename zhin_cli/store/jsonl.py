"""Session JSONL (DESIGN.md §3): the interchange and fixture format.

One JSON object per line, each with ``"type"``; the first line is the session. Line kinds are a registry
(``LINE_TYPES``): supporting a new kind of line means adding one parser, not a branch.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from zhin_cli.core import jsontext
from zhin_cli.core.errors import InputError, SessionNotFound, at_line
from zhin_cli.core.inputfiles import DIGIT_LIMIT_MESSAGE, is_digit_limit, lone_surrogate_in_json, open_regular, surrogate_message
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.model import (
    BotFacts,
    LazyMessages,
    MemberSnapshot,
    Message,
    OutlineBuilder,
    SceneChange,
    SceneFacts,
    Session,
    Summary,
)
from zhin_cli.core.outputfiles import write_json_line
from zhin_cli.core.registry import Registry
from zhin_cli.core.timezones import valid_timezone
from zhin_cli.store.payload import (
    MAX_ROW_ID,
    ToolPairing,
    check_member_facts,
    check_scene_facts,
    check_str,
    check_timestamp,
    check_tool_pairing,
    facts_from_key,
    message_from_payload,
    settle_bot_header,
    settle_bot_headers,
    short,
)


@dataclass
class _Builder:
    path: str
    session: Session | None = None
    messages: list[Message] = field(default_factory=list)
    # lazy reading (``open_session``): the outline and each message line's place instead of the messages
    lazy: bool = False
    outline: OutlineBuilder = field(default_factory=OutlineBuilder)
    offsets: array[int] = field(default_factory=lambda: array("q"))  # byte offset of each message's line
    numbers: array[int] = field(default_factory=lambda: array("q"))  # its line number
    line_offset: int = 0  # of the line being read
    line_number: int = 0
    next_row_id: int = 1
    seen_row_ids: set[int] = field(default_factory=set)
    tools: ToolPairing = field(default_factory=ToolPairing)
    summary_places: list[str] = field(default_factory=list)  # each summary line's file:line, in order

    def require_session(self, where: str) -> Session:
        if self.session is None:
            raise InputError("the first line must be the session line ({\"type\":\"session\",…})", where=where)
        return self.session


LineParser = Callable[[_Builder, JSONObject, str], None]
LINE_TYPES: Registry[LineParser] = Registry("JSONL line type")


def line_type(name: str, *, replace: bool = False) -> Callable[[LineParser], LineParser]:
    return LINE_TYPES.adding(name, replace=replace)


@line_type("session")
def _session_line(builder: _Builder, obj: JSONObject, where: str) -> None:
    if builder.session is not None:
        raise InputError("a second session line (one session per file)", where=where)
    builder.session = session_from_line(obj, where, messages=builder.messages, source=builder.path)


def session_from_line(obj: JSONObject, where: str, *, messages: list[Message], source: str) -> Session:
    """A session line as a session (its facts, ``raw`` the line itself): read here for a file, and by the
    database reader for the session line ``zhin import`` stored of an epoch (``zhin_lines``) — one parser, so
    a file and its import read the same facts."""
    session_id = obj.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        raise InputError("the session line needs a non-empty string 'session_id'", where=where)
    for key in ("bot", "scene"):
        if obj.get(key) is not None and not isinstance(obj.get(key), dict):
            raise InputError(f"'{key}' must be an object", where=where)
    bot_facts, scene_facts = _object_or_empty(obj.get("bot")), _object_or_empty(obj.get("scene"))
    session_key = obj.get("session_key")
    if session_key is not None and (not isinstance(session_key, str) or not session_key):
        raise InputError(f"'session_key' must be a non-empty string, got {short(session_key)}", where=where)
    timezone = obj.get("timezone")
    if timezone is not None and not isinstance(timezone, str):
        raise InputError("'timezone' must be a string such as \"Asia/Shanghai\"", where=where)
    if timezone and not valid_timezone(timezone):  # "" = not known, as before
        raise InputError(f"unknown time zone {short(timezone)} (expected an IANA name such as \"Asia/Shanghai\")", where=where)
    check_str(bot_facts, ("user_id", "name", "group_nickname", "platform_role"), where, "bot.")
    check_scene_facts(scene_facts, where, "scene.")
    try:
        scene = SceneFacts.from_mapping(scene_facts)
    except (TypeError, ValueError) as exc:
        raise InputError(f"bad scene facts: {exc}", where=where) from None
    key = session_key if session_key is not None else session_id.split("#")[0]
    bot, scene = facts_from_key(key, BotFacts.from_mapping(bot_facts), scene)
    return Session(session_id=session_id, session_key=key, timezone=timezone, bot=bot, scene=scene,
                   messages=messages, source=source, raw=obj)


@line_type("message")
def _message_line(builder: _Builder, obj: JSONObject, where: str) -> None:
    builder.require_session(where)
    row_id = obj.get("id", builder.next_row_id)
    if not isinstance(row_id, int) or isinstance(row_id, bool) or not 1 <= row_id <= MAX_ROW_ID:
        raise InputError(f"'id' must be a positive integer (at most {MAX_ROW_ID}), got {short(row_id)}", where=where)
    if row_id in builder.seen_row_ids:
        raise InputError(f"duplicate message id {row_id}", where=where)
    builder.seen_row_ids.add(row_id)
    builder.next_row_id = max(builder.next_row_id, row_id + 1)
    payload = {k: v for k, v in obj.items() if k not in ("type", "id", "extra")}
    extra = obj.get("extra")
    if extra is not None and not isinstance(extra, dict):
        raise InputError("'extra' must be an object", where=where)
    message: Message = message_from_payload(payload, row_id=row_id, where=where, extra=extra)
    message.raw = obj
    check_tool_pairing(message, builder.tools, where)
    if builder.lazy:  # every line is checked as it is read; only the window's messages are kept (parsed again)
        builder.outline.add(message)
        builder.offsets.append(builder.line_offset)
        builder.numbers.append(builder.line_number)
    else:
        builder.messages.append(message)


def _message_at(obj: JSONObject, row_id: int, where: str) -> Message:
    """A message line that the first pass checked, parsed again (``open_session``'s loader)."""
    payload = {k: v for k, v in obj.items() if k not in ("type", "id", "extra")}
    extra = obj.get("extra")
    message = message_from_payload(payload, row_id=row_id, where=where, extra=extra if isinstance(extra, dict) else None)
    message.raw = obj
    return message


@line_type("scene")
def _scene_line(builder: _Builder, obj: JSONObject, where: str) -> None:
    session = builder.require_session(where)
    timestamp = _timestamp(obj, where)
    changes = {k: v for k, v in obj.items() if k not in ("type", "timestamp")}
    check_scene_facts(changes, where)
    try:
        session.scene.updated(changes)
    except (TypeError, ValueError) as exc:
        raise InputError(f"bad scene facts: {exc}", where=where) from None
    session.scene_changes.append(SceneChange(timestamp=timestamp, changes=changes, raw=obj))


@line_type("summary")
def _summary_line(builder: _Builder, obj: JSONObject, where: str) -> None:
    builder.require_session(where).summaries.append(summary_from_line(obj, where))
    builder.summary_places.append(where)


def _object_or_empty(value: JSON) -> JSONObject:
    """A JSON object as given; anything else (null: not given — other values were refused before) as none."""
    return value if isinstance(value, dict) else {}


def summary_from_line(obj: JSONObject, where: str) -> Summary:
    """A summary line (``raw`` the line itself): a file's, or one ``zhin import`` stored (``zhin_lines``)."""
    anchor = obj.get("anchor_message_id")
    if not isinstance(anchor, int) or isinstance(anchor, bool) or not -MAX_ROW_ID <= anchor <= MAX_ROW_ID:
        raise InputError("'anchor_message_id' must be the integer id of the last message summarised", where=where)
    text = obj.get("summary")
    if not isinstance(text, str):
        raise InputError("'summary' must be a string", where=where)
    return Summary(timestamp=_timestamp(obj, where), summary=text, anchor_row_id=anchor, raw=obj)


@line_type("member")
def _member_line(builder: _Builder, obj: JSONObject, where: str) -> None:
    builder.require_session(where).members.append(member_from_line(obj, where))


def member_from_line(obj: JSONObject, where: str) -> MemberSnapshot:
    """A member line (``raw`` the line itself, so an integer ``user_id`` stays one when written back)."""
    user_id = obj.get("user_id")
    if not isinstance(user_id, (str, int)) or isinstance(user_id, bool):
        raise InputError("a member line needs 'user_id'", where=where)
    facts = {k: v for k, v in obj.items() if k not in ("type", "timestamp", "user_id")}
    check_member_facts(facts, where)
    return MemberSnapshot(timestamp=_timestamp(obj, where), user_id=str(user_id), facts=facts, raw=obj)


def check_summary_anchors(session: Session, places: Sequence[str], row_ids: set[int]) -> None:
    """A summary stands in for the messages up to its anchor: an anchor that names no message of the session
    would be ignored by a trace of the file and, once imported, kept as a number that names some other row.
    So it is refused where it is written (``places``: each summary's ``file:line``)."""
    for summary, where in zip(session.summaries, places, strict=True):
        if summary.anchor_row_id not in row_ids:
            raise InputError(f"'anchor_message_id' {summary.anchor_row_id} names no message of this session", where=where)


def _timestamp(obj: JSONObject, where: str) -> int:
    return check_timestamp(obj.get("timestamp"), "timestamp", where)


def read_session(path: Path) -> Session:
    """Parse a session file; any malformed line is an ``InputError`` naming ``file:line``."""
    return _read(path, lazy=False)


def open_session(path: Path) -> Session:
    """A session file read in one streaming pass that checks every line (the same errors, naming ``file:line``,
    as ``read_session``) and keeps the outline and each message line's byte offset instead of the messages: a
    message is parsed again when it is first read (``LazyMessages``), so memory follows what a request reads.

    Why check every line although most are not read again: a file is one document, and an error in it must not
    depend on which turn is traced (and tool pairing is a property of the whole file). Only building the
    ``Message`` objects is deferred; checking needs each line's values, not the objects kept."""
    return _read(path, lazy=True)


def _read(path: Path, *, lazy: bool) -> Session:
    try:
        handle = open_regular(path, InputError, "session file")
    except FileNotFoundError:
        raise SessionNotFound(f"no such file: {path}") from None
    builder = _Builder(path=str(path), lazy=lazy)
    with handle:
        identity = _identity(os.fstat(handle.fileno()))
        offset = 0
        for number, raw_line in enumerate(handle, start=1):
            builder.line_offset, builder.line_number = offset, number
            offset += len(raw_line)
            obj = _parse_line(raw_line, at_line(path, number))
            if obj is None:
                continue
            kind = obj.get("type")
            parser = LINE_TYPES.get(kind) if isinstance(kind, str) else None
            if parser is None:
                raise InputError(
                    f"unknown line type {short(kind)} (expected one of {', '.join(sorted(LINE_TYPES))})",
                    where=at_line(path, number),
                )
            parser(builder, obj, at_line(path, number))
    if builder.session is None:
        # nothing but blank lines: line 1 is where the session line should have been
        raise InputError("empty file: no session line", where=at_line(path, 1))
    session = builder.session
    check_summary_anchors(session, builder.summary_places, builder.seen_row_ids)
    if lazy:
        session.messages = LazyMessages(builder.outline.outline(),
                                        _LineLoader(path, identity, builder.offsets, builder.numbers,
                                                    builder.outline.row_ids, session.bot.user_id))
    return settle_bot_headers(session)


def _parse_line(raw_line: bytes, where: str) -> JSONObject | None:
    """One line's JSON object (None: a blank line); any fault is an ``InputError`` at ``where``."""
    try:
        text = raw_line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 (byte {exc.start})", where=where) from None
    if not text.strip():
        return None
    try:
        obj = jsontext.loads(text, raw_line)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})", where=where) from None
    except RecursionError:
        raise InputError("invalid JSON: nested too deeply", where=where) from None
    except ValueError as exc:
        if not is_digit_limit(exc):
            raise
        raise InputError(f"invalid JSON: {DIGIT_LIMIT_MESSAGE}", where=where) from None
    offset = lone_surrogate_in_json(text)
    if offset is not None:
        raise InputError(surrogate_message(text[offset : offset + 6]), where=where)
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", where=where)
    return obj


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class _LineLoader:
    """Parses the message lines of positions ``[start, stop)`` again, from the file the first pass read. The
    file must be the one that was read (same inode, size and modification time): a file rewritten in between
    is an error, never a mix of two versions."""

    path: Path
    identity: tuple[int, int, int, int]
    offsets: Sequence[int]
    numbers: Sequence[int]
    row_ids: Sequence[int]
    bot_id: str | None

    def __call__(self, positions: Sequence[int]) -> list[Message]:
        messages: list[Message] = []
        with open_regular(self.path, InputError, "session file") as handle:
            if _identity(os.fstat(handle.fileno())) != self.identity:
                raise InputError("the session file changed while zhin was reading it; run again", where=str(self.path))
            for position in positions:
                offset, number = self.offsets[position], self.numbers[position]
                handle.seek(offset)
                where = at_line(self.path, number)
                obj = _parse_line(handle.readline(), where)
                assert obj is not None  # the first pass read a message here
                messages.append(settle_bot_header(_message_at(obj, self.row_ids[position], where), self.bot_id))
        return messages


def session_lines(session: Session) -> Iterator[JSONObject]:
    """The session as JSONL objects: session line, then messages in storage order, with scene, member and
    summary lines placed where they happened (before the first message later than them; a summary after
    the message it is anchored on).

    Every message is parsed before the first line is given: a lazy source checks some fields of a row only when
    it parses it (``payload.outline_facts``), and a bad row must be one error before any output, not after half
    a file."""
    messages = list(session.messages)
    yield session_header(session)
    side: list[tuple[int, int, JSONObject]] = []
    for change in session.scene_changes:
        side.append((change.timestamp, -1, change.raw or {"type": "scene", "timestamp": change.timestamp, **change.changes}))
    for member in session.members:
        side.append((member.timestamp, -1, member_line(member)))
    for summary in session.summaries:
        side.append((summary.timestamp, summary.anchor_row_id, summary_line(summary)))
    side.sort(key=lambda item: (item[0], item[1]))
    pending = list(side)
    for message in messages:
        while pending and pending[0][0] < message.timestamp and pending[0][1] < message.row_id:
            yield pending.pop(0)[2]
        yield message_line(message)
    for item in pending:
        yield item[2]


def member_line(member: MemberSnapshot) -> JSONObject:
    return member.raw or {"type": "member", "timestamp": member.timestamp, "user_id": member.user_id, **member.facts}


def summary_line(summary: Summary) -> JSONObject:
    return summary.raw or {"type": "summary", "timestamp": summary.timestamp, "summary": summary.summary,
                           "anchor_message_id": summary.anchor_row_id}


def session_header(session: Session) -> JSONObject:
    if session.raw.get("type") == "session":
        return session.raw
    header: JSONObject = {"type": "session", "session_id": session.session_id}
    if session.session_key:
        header["session_key"] = session.session_key
    if session.timezone:
        header["timezone"] = session.timezone
    bot = {k: v for k, v in session.bot.__dict__.items() if v is not None}
    if bot:
        header["bot"] = bot
    scene = {k: (list(v) if isinstance(v, tuple) else v) for k, v in session.scene.__dict__.items() if v is not None}
    if scene:
        header["scene"] = scene
    return header


def message_line(message: Message) -> JSONObject:
    raw = message.raw
    if raw.get("type") == "message":
        return raw
    line: JSONObject = {"type": "message", **raw, "id": message.row_id}
    return line


def write_session(session: Session, out: IO[str]) -> int:
    return write_lines(session_lines(session), out)


def write_lines(lines: Iterable[JSONObject], out: IO[str]) -> int:
    """JSONL objects written one a line, each as it comes (compact, UTF-8 as is); lines written."""
    count = 0
    for obj in lines:
        write_json_line(obj, out, compact=True)  # a lone surrogate that came another way is written as its escape
        count += 1
    return count

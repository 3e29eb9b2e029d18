"""``zhin preset check-capture``: a folder of SillyTavern requests (what ``zhin serve --capture`` wrote while ST
ran a chat) checked turn by turn against zhin's request for the same turn (``tools/preset/check``).

The preset note's ``tools/st-request-diff`` as a job rather than a diff of two files: the user has a capture
folder and ST's own exports (chat, card, lorebook), not zhin sessions, and wants the departures that matter —
what zhin adds by design is taken out by ``stcheck`` using zhin's own attribution.

* **Captures** are ``NNNNN-<route>.json`` (``serve.Capture``: numbered in arrival order, written atomically —
  the ``.capture-*.tmp`` temporaries are never read). Only ``chat-completions`` bodies are checked; any other
  route or file gets a note.
* **Turns.** A body belongs to the last user message of the chat it contains whose reply it does not contain
  (``turn_of``): ST sends the history up to the message being answered. A capture that matches no turn (another
  chat, ST's *Test Message*, an extension's quiet prompt) gets a note; several captures of one turn (regenerate,
  swipes) are each checked.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zhin_cli.core.errors import InputError, ZhinError
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.readers import read_json_file
from zhin_cli.core.textdiff import marked, readable
from zhin_cli.pipeline.preset import worldinfo
from zhin_cli.store.sillytavern import ChatTurn, SillyTavernChat, read_card, read_chat, read_group, read_lore
from zhin_cli.tools.preset.check import ByDesign, Departure, TurnCheck, check_turn, prepare

_CAPTURE_FILE = re.compile(r"(\d{5,})-([A-Za-z0-9-]+)\.json")
_EXCHANGE_FILE = re.compile(r"(\d{5,})-([A-Za-z0-9-]+)\.exchange\.json")  # zhin serve's record of the answer: not a body
CHAT_ROUTE = "chat-completions"
# ST's Prompt Post-Processing values (a connection setting; "none" is ST's "")
POST_PROCESSING = {"none": "", "merge": "merge", "semi": "semi", "strict": "strict", "single": "single"}


@dataclass(frozen=True)
class CaptureFile:
    path: Path
    number: int
    route: str


@dataclass
class CaptureResult:
    capture: CaptureFile
    check: TurnCheck | None  # None: not checked (the note says why)
    note: str | None = None

    def as_dict(self) -> JSONObject:
        return {"file": self.capture.path.name, "number": self.capture.number, "route": self.capture.route,
                "turn": self.check.turn if self.check else None, "note": self.note,
                "check": self.check.as_dict() if self.check else None}


@dataclass
class CheckResult:
    folder: Path
    captures: list[CaptureResult]
    ignored_keys: list[str]
    notes: list[str] = field(default_factory=list)
    # a group chat (messages of several characters) checked without its group file: checked as a private chat
    group_unread: bool = False

    @property
    def checks(self) -> list[TurnCheck]:
        return [c.check for c in self.captures if c.check is not None]

    @property
    def departures(self) -> int:
        return sum(len(c.departures) for c in self.checks)

    def as_dict(self) -> JSONObject:
        return {"version": 1, "folder": str(self.folder), "captures": [c.as_dict() for c in self.captures],
                "checked": len(self.checks), "departures": self.departures,
                "ignored_keys": list(self.ignored_keys), "notes": list(self.notes)}


def read_captures(folder: Path) -> tuple[list[CaptureFile], list[str]]:
    """The capture files in number order, and a note for every other entry of the folder."""
    if not folder.exists():
        raise InputError("no such capture folder", where=str(folder))
    if not folder.is_dir():
        raise InputError("not a folder (give the folder zhin serve --capture wrote)", where=str(folder))
    captures: list[CaptureFile] = []
    others: list[str] = []
    for entry in sorted(folder.iterdir()):
        match = _CAPTURE_FILE.fullmatch(entry.name)
        if match and entry.is_file():
            captures.append(CaptureFile(entry, int(match.group(1)), match.group(2)))
        elif not (entry.name.startswith(".capture-") and entry.name.endswith(".tmp")) and not _EXCHANGE_FILE.fullmatch(entry.name):
            others.append(entry.name)
    notes = [f"{len(others)} other file(s) in {folder} ignored: {', '.join(others[:5])}"
             + (" …" if len(others) > 5 else "")] if others else []
    return sorted(captures, key=lambda c: c.number), notes


def _texts_by_role(body: JSONObject) -> tuple[list[str], list[str]]:
    """The text contents of a body's messages: the user messages', and the others'."""
    messages = body.get("messages")
    users: list[str] = []
    others: list[str] = []
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(message, dict) and isinstance(content, str):
            (users if message.get("role") == "user" else others).append(content)
    return users, others


# A part's key: its length to the end of its line and that line's last characters (at most this many) up to there
_KEY_TAIL = 64


def _part_key(first_line: str) -> tuple[int, str]:
    return len(first_line), first_line[-_KEY_TAIL:]


class _Parts:
    """How often a text stands as a whole message part in some texts: starting a text, a line, or after ST's
    ``"Name: "`` prefix, and ending the text or a line (merge and squash join parts with newlines) — so a short
    text ("ok") inside a longer one ("look", "ok 4beed990") does not count.

    Indexed once per body, so that looking a text up costs no scan of the body. A text of one line without ": "
    (most messages) is a part only as a whole: those are counted by value (``whole``). In the others, a part's
    first line runs from one of those starts to the end of its line, so every start is filed under the key of
    that stretch (:func:`_part_key`), and only the starts filed under the key of a text's first line are compared
    with it. Scanning every text of the body for every turn of the chat made matching quadratic (a 40,000-turn
    chat: 64 s)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.whole = Counter(text for text in texts if "\n" not in text and ": " not in text)
        self.starts: dict[tuple[int, str], list[tuple[int, int]]] = {}
        self.counted: dict[str, int] = {}
        for number, text in enumerate(texts):
            if "\n" in text or ": " in text:
                self._file_starts(number, text)

    def _file_starts(self, number: int, text: str) -> None:
        line_start = 0
        for line in text.split("\n"):
            tail = line[-_KEY_TAIL:]
            at = 0
            while at >= 0:
                rest = len(line) - at
                key = (rest, tail if rest >= _KEY_TAIL else line[at:])
                self.starts.setdefault(key, []).append((number, line_start + at))
                at = line.find(": ", at)
                at = at + 2 if at >= 0 else -1
            line_start += len(line) + 1

    def bound(self, needle: str) -> int:
        """At least :meth:`count` (look-ups: the whole texts equal to it, the starts filed under its key)."""
        return self.whole[needle] + len(self.starts.get(_part_key(needle.partition("\n")[0]), ()))

    def count(self, needle: str) -> int:
        """How often ``needle`` stands as a whole part: each start filed under its key, compared once."""
        if needle not in self.counted:
            size, found = len(needle), self.whole[needle]
            for number, at in self.starts.get(_part_key(needle.partition("\n")[0]), ()):
                text = self.texts[number]
                end = at + size
                if text.startswith(needle, at) and (end == len(text) or text[end] == "\n"):
                    found += 1
            self.counted[needle] = found
        return self.counted[needle]

    def has(self, needle: str) -> bool:
        return self.bound(needle) > 0 and self.count(needle) > 0


class TurnMatcher:
    """``turn_of`` for the bodies of one chat. Per turn k, how many of turns 1…k typed its text is counted once
    here (it was recounted over the earlier turns for every turn tried: quadratic in the chat's length)."""

    def __init__(self, chat: SillyTavernChat) -> None:
        self.turns = chat.turns
        seen: Counter[str] = Counter()
        self.typed: list[int] = []
        counted: set[int] = set()
        for turn in chat.turns:
            if turn.user_position not in counted:  # a group's round: one user message, one turn per member reply
                counted.add(turn.user_position)
                seen[turn.user_text] += 1
            self.typed.append(seen[turn.user_text])

    def turn_of(self, body: JSONObject) -> ChatTurn | None:
        """The turn a body was sent for: the last turn k whose user text stands in the body's user messages as
        often as turns 1…k typed it (a text typed twice needs both), and whose reply stands in none of its
        messages. Under ``single`` post-processing every part is one user message: the user texts are then
        looked for there. Linear: the body is indexed once (:class:`_Parts`), each turn is a look-up."""
        user_texts, other_texts = _texts_by_role(body)
        users, others = _Parts(user_texts), _Parts(other_texts)
        for turn, typed in zip(reversed(self.turns), reversed(self.typed), strict=True):
            if not turn.user_text or users.bound(turn.user_text) < typed or users.count(turn.user_text) < typed:
                continue
            if turn.reply_text and (users.has(turn.reply_text) or others.has(turn.reply_text)):
                continue
            # a group's member: the replies before its own in the same round are in its request
            if not all(users.has(text) or others.has(text) for text in turn.earlier if text):
                continue
            return turn
        return None


def turn_of(body: JSONObject, chat: SillyTavernChat) -> ChatTurn | None:
    """:meth:`TurnMatcher.turn_of` for one body (for many bodies of one chat, make the matcher once)."""
    return TurnMatcher(chat).turn_of(body)


def read_world_settings(path: Path) -> worldinfo.Settings:
    """ST's World Info settings from its ``settings.json`` (the ``world_info_settings`` object; a file holding only
    that object's keys is read too)."""
    data, _text = read_json_file(path, InputError, "SillyTavern settings file")
    if not isinstance(data, dict):
        raise InputError("a SillyTavern settings file must be a JSON object", where=f"{path}:1")
    inner = data.get("world_info_settings", data)
    if not isinstance(inner, dict):
        raise InputError("'world_info_settings' must be an object", where=str(path))
    return worldinfo.settings_from_st(inner)


def check_capture(folder: Path, *, preset: Path, chat: Path, card: Path | Sequence[Path] | None = None,
                  lore: Path | Sequence[Path] | None = None, persona: str | None = None, persona_description: str = "",
                  post_processing: str | None = None, world_settings: worldinfo.Settings | None = None,
                  group: Path | None = None) -> CheckResult:
    """Check every chat-completions capture in ``folder`` against zhin's request for its turn of ``chat``.
    ``lore``: World Info books (ST's exports); ``world_settings``: ST's World Info settings (default: ST's).
    ``group``: ST's group file of a group chat (then ``card`` gives every member's card): each member's requests
    are checked against zhin's request for that member."""
    captures, notes = read_captures(folder)
    card_paths = [] if card is None else [card] if isinstance(card, Path) else list(card)
    st_cards = [read_card(path) for path in card_paths]
    st_card = st_cards[0] if st_cards else None
    st_group = read_group(group) if group is not None else None
    if st_group is None and len(st_cards) > 1:
        raise InputError("more than one --card is for a group chat: give its group file with --group",
                         where=str(card_paths[1]))
    st_chat = read_chat(chat, persona=persona, character=st_card.name if st_card and st_group is None else None,
                        group=st_group)
    lore_paths = [] if lore is None else [lore] if isinstance(lore, Path) else list(lore)
    st_lores = [read_lore(path) for path in lore_paths]
    notes = [*st_chat.notes, *(n for c in st_cards for n in c.notes), *(n for book in st_lores for n in book.notes),
             *notes]
    if st_card is None:
        notes.append("no --card: the preset's card fields are empty (as the preset file says)")
    if not captures:
        raise ZhinError("no captures here (NNNNN-chat-completions.json files, as zhin serve --capture writes)",
                        where=str(folder))
    setup = prepare(preset, st_chat, card=st_card, members=st_cards[1:], lore=st_lores, persona_description=persona_description,
                    post_processing=post_processing, world_settings=world_settings)
    notes += setup.notes
    matcher = TurnMatcher(st_chat)
    results: list[CaptureResult] = []
    ignored: set[str] = set()
    for capture in captures:
        if capture.route != CHAT_ROUTE:
            results.append(CaptureResult(capture, None, f"route {capture.route}: not a chat completion"))
            continue
        body, _text = read_json_file(capture.path, InputError, "capture")
        if not isinstance(body, dict):
            raise InputError("not a request body (a JSON object)", where=f"{capture.path}:1")
        turn = matcher.turn_of(body)
        if turn is None:
            results.append(CaptureResult(capture, None, f"matches no turn of {chat}"))
            continue
        try:
            check = check_turn(setup, turn, body)
        except InputError as error:
            raise InputError(error.message, where=error.where or str(capture.path)) from None
        ignored.update(check.ignored_keys)
        results.append(CaptureResult(capture, check))
    if not any(r.check for r in results):
        raise ZhinError(f"no capture matches a turn of {chat}: is it the chat ST ran while capturing?",
                        where=str(folder))
    return CheckResult(folder, results, sorted(ignored), notes, st_group is None and len(st_chat.characters) > 1)


# --- text --------------------------------------------------------------------------------------------------


def _index(value: int | None) -> str:
    return "–" if value is None else str(value)


def departure_lines(departure: Departure, speaker: str | None = None) -> list[str]:
    """One departure as a block: where and what on its first line (a group's turn names the member whose
    request it was); for a changed text the first differing byte and both excerpts on one line each, escaped and
    marked as request-diff shows them."""
    role = departure.role if departure.zhin_role in (None, departure.role) else f"ST {departure.role}, zhin {departure.zhin_role}"
    head = [f"turn {departure.turn}" + (f" ({speaker})" if speaker else ""), f"ST message {_index(departure.st_index)} / zhin {_index(departure.zhin_index)}",
            role, departure.source or "(nothing zhin rendered)", departure.kind]
    if departure.category:
        head.append(departure.category)
    lines = [" · ".join(head)]
    if departure.byte is not None and departure.mark is not None:
        lines += [f"  byte {departure.byte}:",
                  f"    ST   {marked(departure.st_excerpt, departure.mark)}",
                  f"    zhin {marked(departure.zhin_excerpt, departure.mark)}"]
    else:
        lines += [f"    {side} {readable(text)}" for side, text in (("ST  ", departure.st_excerpt),
                                                                       ("zhin", departure.zhin_excerpt)) if text]
    return lines


def _by_design_lines(items: list[ByDesign]) -> list[str]:
    first: dict[str, ByDesign] = {}
    for item in items:
        first.setdefault(item.kind, item)
    counts = Counter(item.kind for item in items)
    return [f"  {kind} × {counts[kind]} (first: turn {item.turn}, ST message {_index(item.st_index)}: {item.detail})"
            for kind, item in first.items()]


def settings_hint(result: CheckResult) -> str | None:
    """One line when half or more of the checked messages depart: then a setting differs rather than a text (ST's
    post-processing is not in the capture, squash and names behaviour are preset settings, a group chat is not a
    private one), and the departures one by one would only repeat it. A group chat checked without its group file
    departs by that alone: any departure gets the line, naming ``--group`` first."""
    checked = sum(check.messages for check in result.checks)
    departing = result.departures  # a message missing on one side counts as much as one that differs
    if departing and result.group_unread:
        return (f"hint: {departing} departures in {checked} ST messages of a group chat checked as a private one — "
                "give its group file with --group and every member's card with --card")
    if not checked or departing * 2 < checked:
        return None
    return (f"hint: {departing} departures in {checked} ST messages — a settings mismatch more likely than a text: "
            "--post-processing, the preset's squash and names behaviour (save it in ST before exporting), "
            "World Info settings (--st-settings, --scan-depth), or a group chat checked as a private one (--group)")


def report_lines(result: CheckResult) -> list[str]:
    """The text report: departures, then what differs by design, ignored keys, notes and a summary line."""
    lines: list[str] = []
    for capture in result.captures:
        if capture.check is None:
            continue
        for departure in capture.check.departures:
            first, *rest = departure_lines(departure, capture.check.speaker)
            lines += [f"{capture.capture.path.name}: {first}", *rest]
    by_design = [b for check in result.checks for b in check.by_design]
    if by_design:
        lines += ["by design (not departures; docs/sillytavern.md §5):", *_by_design_lines(by_design)]
    if result.ignored_keys:
        lines.append("ignored keys (sampling, connection): " + ", ".join(result.ignored_keys))
    notes = [*result.notes, *(f"{c.capture.path.name}: {c.note}" for c in result.captures if c.note),
             *(f"turn {check.turn}: {note}" for check in result.checks for note in check.notes)]
    lines += [f"note: {note}" for note in notes]
    hint = settings_hint(result)
    if hint:
        lines.append(hint)
    turns = len({(check.turn, check.speaker) for check in result.checks})  # a group: each member's request
    kinds = Counter(item.kind for item in by_design)
    design = (" · by design: " + ", ".join(f"{k} × {n}" for k, n in kinds.items())) if kinds else ""
    lines.append(f"{len(result.captures)} captures · {turns} turns checked · {result.departures} departures{design}")
    return lines

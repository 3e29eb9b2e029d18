"""World Info (lorebooks) and the Author's Note, as SillyTavern 1.18 runs them for a chat completion.

The behaviour follows ST's ``world-info.js`` and ``authors-note.js`` (read for behaviour, not copied), and was
checked against real ST 1.18.0 captures (``st-golden2``: runs ``wi``, ``wi-global-scan``, ``an``,
``an-interval``). Library only: the books come in as data (``entry_from_st`` reads one entry of an ST book,
``entries_from_character_book`` a card's embedded ``character_book``), the skeleton builder asks ``activate`` which
entries fire for one request and ``note_fires`` whether the Author's Note goes in.

What ST does, in short:

* **Which books, in which order** (``sorted_entries``): the chat's book first, then — by the *character strategy* —
  the character's and the global books; each book's entries sorted by ``order`` descending (stable). A character or
  chat book that is also selected globally is read once.
* **The scan** (``activate``): the last ``scan depth`` chat messages, newest first, each ``"Name: text"`` (include
  names on) and trimmed, joined with ``"\\n\\x01"`` behind a leading ``"\\x01"``. Constant entries fire; keyword
  entries fire when a primary key matches and the secondary keys satisfy the entry's logic (AND ANY, NOT ALL, NOT
  ANY, AND ALL). A key is macro-expanded and trimmed; ``/pattern/flags`` is a regular expression; otherwise it is
  matched case-insensitively unless the entry (or the global setting) says otherwise, and as a whole word when
  whole-word matching is on and the key is one word (a key of several words is a plain substring).
* **Recursion**: the contents of the entries fired in one pass are added to the scanned text and the scan runs
  again, until a pass fires nothing. ``preventRecursion`` keeps an entry's text out of that, ``excludeRecursion``
  keeps the entry from firing on it, ``delayUntilRecursion`` (a level) lets it fire only on recursion passes.
* **Probability**: an entry with ``useProbability`` and a probability below 100 fires when a roll in [0, 100) is at
  most its probability; ST rolls ``Math.random``, zhin a generator seeded with the request's macro seed and the
  entry (``Probability``), so a request is reproducible.
* **Budget**: the fired contents are counted in tokens, in firing order; the entry that reaches
  ``budget % × context`` (or the cap) and every later one of that pass are dropped, and the scan stops.
* **Placement**: the fired entries sorted by ``order`` descending (ties: firing order) and each put in *front* of
  its position's list — so ascending ``order``, and of equal orders the later-fired first. Before / after the
  character definitions are one text each, joined with ``"\\n"``; @depth entries form one text per depth and role;
  Author's Note top / bottom entries wrap the note.
* **Author's Note** (``note_fires``): with interval 1 it goes into every request; otherwise when the number of
  user messages in the chat (the current one included) is a multiple of the interval. Its text is the top entries,
  the note and the bottom entries joined with ``"\\n"`` (one leading and one trailing newline removed); the World
  Info entries at the note's top or bottom go in only when the note does.

Not simulated (``Entry.unsimulated`` names them for a report): timed effects (sticky, cooldown, delay), inclusion
groups and group scoring, character and tag filters, outlets, ``ignoreBudget``, minimum activations, vector
matching, extra scan sources (``matchCharacterDescription`` …), and World Info regex scripts.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zhin_cli.pipeline.preset.regex import Pattern

# world_info_position
BEFORE, AFTER, AN_TOP, AN_BOTTOM, AT_DEPTH, EM_TOP, EM_BOTTOM, OUTLET = range(8)
# world_info_logic
AND_ANY, NOT_ALL, NOT_ANY, AND_ALL = range(4)
# world_info_insertion_strategy
EVENLY, CHARACTER_FIRST, GLOBAL_FIRST = range(3)
ROLES = ("system", "user", "assistant")  # extension_prompt_roles 0, 1, 2
DEFAULT_DEPTH = 4
MAX_SCAN_DEPTH = 1000
MATCHER = "\x01"  # ST puts it before every scanned message, so "^" of a key regex can match a message start
_JOINER = "\n" + MATCHER
_DECORATORS = ("@@activate", "@@dont_activate")
_REGEX_KEY = re.compile(r"/([\s\S]+?)/([gimsuy]*)", re.DOTALL)
_SOURCES = ("chat", "character", "global")
# Keys are input: a regular-expression key may spend this long on one search, and all of them this long on one
# request; a key that runs out is taken as not found for the rest of the request (and named in a warning)
REGEX_KEY_SECONDS = 0.1
REGEX_BUDGET_SECONDS = 1.0
# Recursion passes one scan may make (ST: unlimited unless max recursion steps is set). Each pass reads every entry
# against a text that grows with every pass, so a book that chains thousands of entries costs the cube; a real book
# recurses a few levels. Past it the scan stops, with a warning.
MAX_PASSES = 200
_JOIN_SLACK = 4  # tokens a junction of two texts may change their count by (BPE merges across it), generously


@dataclass(frozen=True)
class Entry:
    """One World Info entry, as ST holds it (the fields the scan and the placement read)."""

    uid: str
    world: str
    content: str
    comment: str = ""
    keys: tuple[str, ...] = ()
    secondary: tuple[str, ...] = ()
    logic: int = AND_ANY
    selective: bool = True
    constant: bool = False
    disabled: bool = False
    order: float = 100
    position: int = BEFORE
    depth: int = DEFAULT_DEPTH
    role: str = "system"
    case_sensitive: bool | None = None  # None: the global setting
    whole_words: bool | None = None
    scan_depth: int | None = None
    exclude_recursion: bool = False
    prevent_recursion: bool = False
    delay_until_recursion: int = 0  # 0: not delayed; else the recursion level it waits for
    use_probability: bool = True
    probability: float | None = 100
    unsimulated: tuple[str, ...] = ()  # features the entry uses that zhin does not simulate, one phrase each

    @property
    def label(self) -> str:
        return f"{self.world} entry {self.uid}" + (f" ({self.comment})" if self.comment else "")


@dataclass(frozen=True)
class Book:
    name: str
    source: str  # "chat" | "character" | "global"
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class Settings:
    """ST's World Info settings (``world_info_settings`` in settings.json); the defaults are ST's."""

    depth: int = 2
    include_names: bool = True
    recursive: bool = True
    case_sensitive: bool = False
    whole_words: bool = True
    budget_percent: float = 25
    budget_cap: int = 0
    max_recursion_steps: int = 0
    min_activations: int = 0  # not simulated (a note says so)
    strategy: int = CHARACTER_FIRST


@dataclass(frozen=True)
class AuthorsNote:
    """The chat's Author's Note (``chat_metadata`` ``note_*``); position 1 in chat, 0 after the main prompt,
    2 before it."""

    prompt: str = ""
    interval: int = 1
    depth: int = DEFAULT_DEPTH
    position: int = 1
    role: str = "system"


@dataclass(frozen=True)
class WorldInfo:
    """What a request's World Info and Author's Note come from: the books, the settings, the chat's note."""

    books: tuple[Book, ...] = ()
    settings: Settings = Settings()
    note: AuthorsNote | None = None


Placed = tuple[Entry, str]  # an entry and its content as sent (expanded)


@dataclass
class Activation:
    """The entries one scan fired, where each goes (in the order they are joined), and why the scan stopped."""

    fired: list[Entry] = field(default_factory=list)  # in firing order
    before: list[Placed] = field(default_factory=list)
    after: list[Placed] = field(default_factory=list)
    an_top: list[Placed] = field(default_factory=list)
    an_bottom: list[Placed] = field(default_factory=list)
    example_top: list[Placed] = field(default_factory=list)
    example_bottom: list[Placed] = field(default_factory=list)
    at_depth: list[tuple[int, str, list[Placed]]] = field(default_factory=list)  # (depth, role, entries)
    budget_overflowed: bool = False
    failed_probability: list[Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # keys that could not be matched within their bounds


# --- reading ST's entries -------------------------------------------------------------------------------------


def _flag(value: object) -> bool:
    return value is True or (isinstance(value, int | float) and not isinstance(value, bool) and value != 0)


def _optional_bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _number(value: object) -> int | float | None:
    """A JSON number (never a boolean), else None."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: object, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return int(value)


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(k) for k in value if isinstance(k, str | int | float) and not isinstance(k, bool)) \
        if isinstance(value, list) else ()


def _role(value: object) -> str:
    if isinstance(value, str) and value in ROLES:
        return value
    index = _int(value, 0)
    return ROLES[index] if 0 <= index < len(ROLES) else "system"


def _unsimulated(raw: Mapping[str, object]) -> tuple[str, ...]:
    out: list[str] = []
    for key, what in (("sticky", "sticky"), ("cooldown", "cooldown"), ("delay", "delay")):
        if _int(raw.get(key), 0) > 0:
            out.append(what)
    group = raw.get("group")
    if isinstance(group, str) and group.strip():
        out.append("inclusion group")
    flt = raw.get("characterFilter")
    if isinstance(flt, dict) and (flt.get("names") or flt.get("tags")):
        out.append("character filter")
    if any(raw.get(k) is True for k in ("matchCharacterDescription", "matchCharacterPersonality", "matchScenario",
                                        "matchPersonaDescription", "matchCreatorNotes", "matchCharacterDepthPrompt")):
        out.append("extra scan sources")
    if raw.get("ignoreBudget") is True:
        out.append("ignore budget")
    if raw.get("vectorized") is True:
        out.append("vector matching")
    if raw.get("position") == OUTLET:
        out.append("outlet")
    return tuple(out)


def entry_from_st(key: str, raw: Mapping[str, object], world: str) -> Entry:
    """One entry of an ST World Info book (``worlds/<name>.json`` ``entries``), read as ST reads it (missing
    fields take ST's defaults; the caller has checked the types that make a file unusable)."""
    content = raw.get("content")
    comment = raw.get("comment")
    delay = raw.get("delayUntilRecursion")
    order = _number(raw.get("order"))
    return Entry(
        uid=str(raw.get("uid", key)), world=world, content=content if isinstance(content, str) else "",
        comment=comment if isinstance(comment, str) else "",
        keys=_strings(raw.get("key")), secondary=_strings(raw.get("keysecondary")),
        logic=_int(raw.get("selectiveLogic"), AND_ANY), selective=raw.get("selective", True) is not False,
        constant=raw.get("constant") is True, disabled=raw.get("disable") is True,
        order=100 if order is None else order,
        position=_int(raw.get("position"), BEFORE),
        depth=_int(raw.get("depth"), DEFAULT_DEPTH), role=_role(raw.get("role")),
        case_sensitive=_optional_bool(raw.get("caseSensitive")), whole_words=_optional_bool(raw.get("matchWholeWords")),
        scan_depth=None if raw.get("scanDepth") is None else _int(raw.get("scanDepth"), 0),
        exclude_recursion=raw.get("excludeRecursion") is True, prevent_recursion=raw.get("preventRecursion") is True,
        delay_until_recursion=1 if delay is True else _int(delay, 0) if _flag(delay) else 0,
        use_probability=raw.get("useProbability", True) is not False,
        probability=_number(raw.get("probability", 100)),
        unsimulated=_unsimulated(raw))


def entries_from_character_book(book: Mapping[str, object], world: str) -> tuple[Entry, ...]:
    """A card's embedded ``character_book`` (the V2 card spec's form), read as ST converts it into a World Info
    book (``convertCharacterBook``): ``keys``/``secondary_keys``, ``insertion_order``, ``enabled`` (missing:
    disabled), ``selective`` (missing: off — the secondary keys are then ignored), ``position`` before_char /
    after_char unless ``extensions.position`` says otherwise, and ST's other fields under each entry's
    ``extensions`` in snake case (``scan_depth``, ``case_sensitive``, ``match_whole_words``, …)."""
    raw_entries = book.get("entries")
    out: list[Entry] = []
    for index, raw in enumerate(raw_entries if isinstance(raw_entries, list) else ()):
        if not isinstance(raw, dict):
            continue
        ext = raw.get("extensions")
        ext = ext if isinstance(ext, dict) else {}
        position = ext.get("position")
        if position is None:
            position = BEFORE if raw.get("position") == "before_char" else AFTER
        converted = {
            "uid": raw.get("id", index), "content": raw.get("content"), "comment": raw.get("comment") or "",
            "key": raw.get("keys"), "keysecondary": raw.get("secondary_keys") or [],
            "constant": raw.get("constant") is True, "selective": raw.get("selective") is True,
            "order": raw.get("insertion_order"), "position": position, "disable": raw.get("enabled") is not True,
            "excludeRecursion": ext.get("exclude_recursion"), "preventRecursion": ext.get("prevent_recursion"),
            "delayUntilRecursion": ext.get("delay_until_recursion"), "probability": ext.get("probability", 100),
            "useProbability": ext.get("useProbability", True), "depth": ext.get("depth"),
            "selectiveLogic": ext.get("selectiveLogic"), "group": ext.get("group"), "scanDepth": ext.get("scan_depth"),
            "caseSensitive": ext.get("case_sensitive"), "matchWholeWords": ext.get("match_whole_words"),
            "role": ext.get("role"), "vectorized": ext.get("vectorized"), "sticky": ext.get("sticky"),
            "cooldown": ext.get("cooldown"), "delay": ext.get("delay"),
        }
        out.append(entry_from_st(str(index), {k: v for k, v in converted.items() if v is not None}, world))
    return tuple(out)


def settings_from_st(raw: Mapping[str, object]) -> Settings:
    """ST's ``world_info_settings`` (settings.json) as ``Settings``; a missing or mistyped key keeps ST's default."""
    base = Settings()

    def number(key: str, default: float) -> float:
        value = _number(raw.get(key))
        return default if value is None else value

    def boolean(key: str, default: bool) -> bool:
        value = raw.get(key)
        return value if isinstance(value, bool) else default

    return Settings(depth=int(number("world_info_depth", base.depth)),
                    include_names=boolean("world_info_include_names", base.include_names),
                    recursive=boolean("world_info_recursive", base.recursive),
                    case_sensitive=boolean("world_info_case_sensitive", base.case_sensitive),
                    whole_words=boolean("world_info_match_whole_words", base.whole_words),
                    budget_percent=number("world_info_budget", base.budget_percent),
                    budget_cap=int(number("world_info_budget_cap", base.budget_cap)),
                    max_recursion_steps=int(number("world_info_max_recursion_steps", base.max_recursion_steps)),
                    min_activations=int(number("world_info_min_activations", base.min_activations)),
                    strategy=int(number("world_info_character_strategy", base.strategy)))


def note_from_metadata(metadata: Mapping[str, object]) -> AuthorsNote | None:
    """The chat's Author's Note from its ``chat_metadata`` (None when the chat never had one: no ``note_prompt``).
    Missing keys take the AN extension's defaults (depth 4, interval 1, in chat, system)."""
    prompt = metadata.get("note_prompt")
    if not isinstance(prompt, str):
        return None
    return AuthorsNote(prompt=prompt, interval=_int(metadata.get("note_interval"), 1),
                       depth=_int(metadata.get("note_depth"), DEFAULT_DEPTH),
                       position=_int(metadata.get("note_position"), 1), role=_role(metadata.get("note_role")))


# --- the scan -------------------------------------------------------------------------------------------------


def _by_order(entries: Iterable[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda e: -e.order)  # stable: ST's sort by order descending


def sorted_entries(books: Iterable[Book], strategy: int = CHARACTER_FIRST) -> list[Entry]:
    """Every entry of ``books`` in ST's scan order (``getSortedEntries``)."""
    by_source: dict[str, list[Entry]] = {source: [] for source in _SOURCES}
    seen: set[str] = set()
    ordered = sorted(books, key=lambda b: {"global": 0, "chat": 1, "character": 2}.get(b.source, 0))
    for book in ordered:  # a book selected globally is not read again as the chat's or the character's
        if book.name in seen:
            continue
        seen.add(book.name)
        by_source.setdefault(book.source, []).extend(book.entries)
    chat, character, global_ = (by_source[s] for s in _SOURCES)
    if strategy == CHARACTER_FIRST:
        rest = _by_order(character) + _by_order(global_)
    elif strategy == GLOBAL_FIRST:
        rest = _by_order(global_) + _by_order(character)
    else:
        rest = _by_order(global_ + character)
    return _by_order(chat) + rest


def decorators(content: str) -> tuple[tuple[str, ...], str]:
    """``@@activate`` / ``@@dont_activate`` lines at the start of a content, and the content without them (ST's
    ``parseDecorators``: an unknown ``@@`` line, and a ``@@@`` line after it, are dropped too)."""
    if not content.startswith("@@"):
        return (), content
    found: list[str] = []
    lines = content.split("\n")
    fell_back = False
    for index, line in enumerate(lines):
        if not line.startswith("@@"):
            return tuple(found), "\n".join(lines[index:])
        if line.startswith("@@@") and not fell_back:
            continue
        name = line[1:] if line.startswith("@@@") else line
        if name.startswith(_DECORATORS):
            found.append(name)
            fell_back = False
        else:
            fell_back = True
    return tuple(found), content


class KeyTimeout(Exception):
    """A regular-expression key ran past the request's matching budget."""


def key_regex(key: str) -> Pattern | None:
    """A ``/pattern/flags`` key as a compiled pattern (the ``regex`` package, which can be interrupted); None: a
    plain key, or a pattern that does not compile or would unroll too far to compile (ST: not a regex either)."""
    found = _REGEX_KEY.fullmatch(key)
    if found is None:
        return None
    return _compiled_key(found.group(1), found.group(2))


@functools.lru_cache(maxsize=512)
def _compiled_key(pattern: str, letters: str) -> Pattern | None:
    import regex  # the package that can be interrupted; loaded only for a book with a regex key

    from zhin_cli.pipeline.preset.regex import MAX_UNROLL, shape  # imported here: regex.py loads the regex package

    if shape(pattern).unroll > MAX_UNROLL:
        return None
    flags = 0
    for letter, flag in (("i", regex.IGNORECASE), ("m", regex.MULTILINE), ("s", regex.DOTALL)):
        if letter in letters:
            flags |= flag
    try:
        compiled: Pattern = regex.compile(pattern, flags)
    except (regex.error, RecursionError, OverflowError, ValueError, MemoryError):
        return None
    return compiled


def matches(haystack: str, key: str, entry: Entry, settings: Settings, *, deadline: float | None = None,
            lowered: str | None = None) -> bool:
    """Whether ``key`` (already expanded and trimmed) is in ``haystack`` for ``entry`` (ST ``matchKeys``). A
    regular-expression key past ``deadline`` (a ``time.perf_counter()`` value) raises ``KeyTimeout``;
    ``lowered``: ``haystack.lower()`` when the caller has it already."""
    pattern = key_regex(key)
    if pattern is not None:
        timeout = None if deadline is None else max(deadline - time.perf_counter(), 0.0)
        try:
            return pattern.search(haystack, timeout=timeout) is not None
        except TimeoutError:
            raise KeyTimeout(key) from None
    case_sensitive = settings.case_sensitive if entry.case_sensitive is None else entry.case_sensitive
    if not case_sensitive:
        haystack, key = haystack.lower() if lowered is None else lowered, key.lower()
    whole = settings.whole_words if entry.whole_words is None else entry.whole_words
    if key not in haystack:
        return False
    if not whole or len(re.split(r"\s+", key)) > 1:
        return True
    # JavaScript's \W without the u flag: anything but ASCII letters, digits and "_"; ^/$ the text's ends
    return re.search(r"(?:\A|\W)" + re.escape(key) + r"(?:\Z|\W)", haystack, re.ASCII) is not None


class _Buffer:
    """The text one entry is matched against (ST ``WorldInfoBuffer``): the chat to the entry's scan depth, then
    the recursion texts."""

    def __init__(self, chat: list[str], settings: Settings) -> None:
        self.chat = [message.strip() for message in chat[:MAX_SCAN_DEPTH]]
        self.settings = settings
        self.recurse: list[str] = []
        self._texts: dict[tuple[int, bool], str] = {}  # (depth, lowered) → text, for the current pass

    def add_recurse(self, text: str) -> None:
        self.recurse.append(text)
        self._texts.clear()

    def text(self, entry: Entry, *, lowered: bool = False) -> str:
        """The text ``entry`` is matched against (``lowered``: in lower case), built once per depth and pass."""
        depth = self.settings.depth if entry.scan_depth is None else entry.scan_depth
        if depth <= 0:
            return ""
        depth = min(depth, MAX_SCAN_DEPTH)
        found = self._texts.get((depth, lowered))
        if found is None:
            found = MATCHER + _JOINER.join(self.chat[:depth])
            if self.recurse:
                found += _JOINER + _JOINER.join(self.recurse)
            found = self._texts[(depth, lowered)] = found.lower() if lowered else found
        return found


class Probability:
    """The roll of an entry below 100 %: reproducible per request (``seed``) and entry."""

    def __init__(self, seed: str) -> None:
        self.seed = seed

    def roll(self, entry: Entry) -> float:
        digest = hashlib.sha256(f"{self.seed}\x00wi\x00{entry.world}\x00{entry.uid}".encode()).digest()
        return random.Random(digest).random() * 100


def _secondary_ok(entry: Entry, found: Callable[[str], bool]) -> bool:
    any_match, all_match = False, True
    for key in entry.secondary:
        hit = found(key)
        any_match |= hit
        all_match &= hit
        if entry.logic == AND_ANY and hit:
            return True
        if entry.logic == NOT_ALL and not hit:
            return True
    return (entry.logic == NOT_ANY and not any_match) or (entry.logic == AND_ALL and all_match)


@dataclass
class _KeyBounds:
    """The time regular-expression keys have left in one request, and the keys that ran out."""

    deadline: float = field(default_factory=lambda: time.perf_counter() + REGEX_BUDGET_SECONDS)
    spent: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)

    def search(self, buffer: _Buffer, key: str, entry: Entry, settings: Settings) -> bool:
        if key in self.spent:
            return False
        try:
            return matches(buffer.text(entry), key, entry, settings, lowered=buffer.text(entry, lowered=True),
                           deadline=min(self.deadline, time.perf_counter() + REGEX_KEY_SECONDS))
        except KeyTimeout:
            self.spent.add(key)
            self.warnings.append(f"World Info {entry.label}: key {key[:60]!r} ran past its matching bound "
                                 f"({REGEX_KEY_SECONDS * 1000:.0f} ms a search, {REGEX_BUDGET_SECONDS:.0f} s a "
                                 "request); taken as not found")
            return False


def _fires(entry: Entry, buffer: _Buffer, settings: Settings, expand: Callable[[str], str], bounds: _KeyBounds) -> bool:
    def found(key: str) -> bool:
        expanded = expand(key)
        return bool(expanded) and bounds.search(buffer, expanded.strip(), entry, settings)

    if not entry.keys or not any(found(key) for key in entry.keys):
        return False
    if not (entry.selective and entry.secondary):
        return True
    return _secondary_ok(entry, found)


@dataclass
class _Scan:
    entries: list[Entry]
    settings: Settings
    expand: Callable[[str], str]
    count_tokens: Callable[[str], int]
    budget: int
    probability: Probability
    contents: dict[int, str] = field(default_factory=dict)  # id(entry) → content as expanded on firing
    result: Activation = field(default_factory=Activation)
    bounds: _KeyBounds = field(default_factory=lambda: _KeyBounds())

    def candidates(self, buffer: _Buffer, recursion: bool, level: int, done: set[int]) -> list[Entry]:
        out: list[Entry] = []
        for entry in self.entries:
            if id(entry) in done or entry.disabled:
                continue
            if entry.delay_until_recursion and (not recursion or entry.delay_until_recursion > level):
                continue
            if recursion and self.settings.recursive and entry.exclude_recursion:
                continue
            marks, _content = decorators(entry.content)
            if "@@activate" in marks:
                out.append(entry)
            elif "@@dont_activate" in marks:
                continue
            elif entry.constant or _fires(entry, buffer, self.settings, self.expand, self.bounds):
                out.append(entry)
        return out

    def take(self, candidates: list[Entry], done: set[int]) -> list[Entry]:
        """The candidates that pass their roll and fit the budget, in order; marks an overflow."""
        fired_text = "\n".join(self.contents[id(e)] for e in reversed(self.result.fired) if not e.prevent_recursion)
        used = self.count_tokens(fired_text) if fired_text else 0
        new_parts: list[str] = []
        estimate = 0  # the parts' tokens counted one by one: the joined text's count is needed only near the budget
        taken: list[Entry] = []
        for entry in candidates:
            if entry.use_probability and entry.probability != 100:
                limit = entry.probability if entry.probability is not None else 0
                if self.probability.roll(entry) > limit:
                    done.add(id(entry))
                    self.result.failed_probability.append(entry)
                    continue
            content = self.expand(decorators(entry.content)[1])
            new_parts.append(content + "\n")
            estimate += self.count_tokens(new_parts[-1])
            # ST counts the whole new text after each entry (quadratic in the entries); a part's count differs from
            # its share of the joined text only where two parts meet, by a few tokens: count the joined text only
            # when the estimate is within that of the budget
            if used + estimate >= self.budget - _JOIN_SLACK * len(new_parts) and \
                    used + self.count_tokens("".join(new_parts)) >= self.budget:
                self.result.budget_overflowed = True
                break
            self.contents[id(entry)] = content
            self.result.fired.append(entry)
            done.add(id(entry))
            taken.append(entry)
        return taken


def activate(world: WorldInfo, chat: list[str], *, expand: Callable[[str], str], count_tokens: Callable[[str], int],
             max_context: int, seed: str) -> Activation:
    """The entries of ``world``'s books that fire for one request and where each goes (ST ``checkWorldInfo``).

    ``chat``: the chat's messages newest first, as ST scans them (``"Name: text"`` when names are included);
    ``expand``: the request's macro expansion (keys and contents are expanded with it, in firing order);
    ``max_context``: the preset's context size (the budget is a share of it); ``seed``: the request's seed."""
    settings = world.settings
    entries = sorted_entries(world.books, settings.strategy)
    budget = round(settings.budget_percent * max_context / 100) or 1
    if 0 < settings.budget_cap < budget:
        budget = settings.budget_cap
    scan = _Scan(entries, settings, expand, count_tokens, budget, Probability(seed))
    if not entries:
        return scan.result
    buffer = _Buffer(chat, settings)
    levels = sorted({e.delay_until_recursion for e in entries if e.delay_until_recursion})
    level = levels.pop(0) if levels else 0
    done: set[int] = set()
    recursion, passes = False, 0
    while True:
        if settings.max_recursion_steps and passes >= settings.max_recursion_steps:
            break
        if passes >= MAX_PASSES:
            scan.bounds.warnings.append(f"World Info recursion stopped after {MAX_PASSES} passes (zhin's bound; "
                                        "ST goes on): entries deeper in the chain are not sent")
            break
        passes += 1
        taken = scan.take(scan.candidates(buffer, recursion, level, done), done)
        for_recursion = [e for e in taken if not e.prevent_recursion]
        go_on = settings.recursive and not scan.result.budget_overflowed and bool(for_recursion)
        if not go_on and levels and not scan.result.budget_overflowed:
            level, go_on = levels.pop(0), True
        if not go_on:
            break
        recursion = True
        buffer.add_recurse("\n".join(scan.contents[id(e)] for e in for_recursion))
    _place(scan)
    scan.result.warnings = scan.bounds.warnings
    return scan.result


def _place(scan: _Scan) -> None:
    """Each fired entry into its position's list, as ST builds them (sort by order descending, put each in front)."""
    result = scan.result
    lists = {BEFORE: result.before, AFTER: result.after, AN_TOP: result.an_top, AN_BOTTOM: result.an_bottom,
             EM_TOP: result.example_top, EM_BOTTOM: result.example_bottom}
    for entry in _by_order(result.fired):
        content = scan.contents[id(entry)]
        if not content:
            continue
        if entry.position == AT_DEPTH:
            group = next((g for g in result.at_depth if g[0] == entry.depth and g[1] == entry.role), None)
            if group is None:
                result.at_depth.append((entry.depth, entry.role, [(entry, content)]))
            else:
                group[2].insert(0, (entry, content))
        elif entry.position in lists:
            lists[entry.position].insert(0, (entry, content))


# --- the Author's Note ---------------------------------------------------------------------------------------


def note_fires(note: AuthorsNote, user_messages: int) -> bool:
    """Whether the note goes into a request whose chat holds ``user_messages`` user messages, the current one
    included (ST ``setFloatingPrompt``: interval 1 always; else when the count is a multiple of the interval)."""
    count = 1 if note.interval == 1 else user_messages
    if count <= 0 or note.interval <= 0:
        return False
    left = count % note.interval if count >= note.interval else note.interval - count
    return left == 0


NOTE = "note"  # note_pieces: the piece that is the note itself
JOINER = ""  # note_pieces: a "\n" between two pieces


def note_pieces(note_text: str, activation: Activation) -> list[tuple[Entry | str, str]]:
    """The note's text with the World Info entries at its top and bottom, as attributed pieces (an ``Entry``,
    ``NOTE`` or ``JOINER``): ST joins ``top + "\n" + note + "\n" + bottom`` (each side's entries joined with
    ``"\n"``) and drops one leading and one trailing newline — so an empty note between a top and a bottom leaves
    a blank line, and an empty side none."""
    pieces: list[tuple[Entry | str, str]] = []

    def side(placed: list[Placed]) -> None:
        for index, (entry, content) in enumerate(placed):
            if index:
                pieces.append((JOINER, "\n"))
            pieces.append((entry, content))

    side(activation.an_top)
    pieces += [(JOINER, "\n"), (NOTE, note_text), (JOINER, "\n")]
    side(activation.an_bottom)
    _drop_newline(pieces, first=True)
    _drop_newline(pieces, first=False)
    return [p for p in pieces if p[1]]


def _drop_newline(pieces: list[tuple[Entry | str, str]], *, first: bool) -> None:
    """Drop one newline at the start (``first``) or the end of the pieces' joined text, if it has one there."""
    order = range(len(pieces)) if first else range(len(pieces) - 1, -1, -1)
    at = next((i for i in order if pieces[i][1]), None)
    if at is None:
        return
    owner, text = pieces[at]
    if first and text.startswith("\n"):
        pieces[at] = (owner, text[1:])
    elif not first and text.endswith("\n"):
        pieces[at] = (owner, text[:-1])

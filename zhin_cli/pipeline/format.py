"""The one-line formats of ADR 0041 §1: ``[k:v;…;]`` headers and ``[state change]`` lines.

Everything member-controlled passes through ``escape_value`` (headers) or ``quote_value`` (state-change
values) before it reaches the model. Both remove every line break and control character, so a value can
never start a line of its own, and cut at 64 characters with ``…``.

A model may read text as if normalised (NFKC: ``；`` is ``;``) or not see invisible characters at all, so the
delimiters' look-alikes are escaped like the delimiters, reserved ids are compared after escaping on a
normalised key, and member lines are matched against the host's shapes after the same normalisation.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

from zhin_cli.core.model import NO_OPERATOR

MAX_VALUE_CHARS = 64
ELLIPSIS = "…"
HEADER_KEYS = (
    "id",
    "user_id",
    "name",
    "role",
    "group_nickname",
    "group_title",
    "mute_time",
    "origin",
    "reply_to",
    "date",
    "time",
)
RESERVED_IDS = frozenset({"system", "assistant", "tool", NO_OPERATOR})
# A member whose id is literally ``(unknown)`` (``NO_OPERATOR``) renders ``user:(unknown)``.
HOST_OPERATORS = frozenset({"system", NO_OPERATOR})
STATE_CHANGE_PREFIX = "[state change]"
CHANGE_FIELDS = ("role", "name", "mute_time", "group_title", "group_nickname")

# Every character Python's str.splitlines() breaks on, plus the other C0/C1 controls.
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
# Format characters that reorder or hide text (bidi overrides/isolates, zero-width joiners …).
_INVISIBLE_CATEGORIES = frozenset({"Cf"})

# Look-alikes of the host's delimiters. The NFKC ones are complete for this Python's Unicode (a test scans every
# code point); the others are Unicode confusables (UTS #39) that NFKC leaves alone.
# A value's field ends at ``;`` and its header at ``]``: their look-alikes are escaped like them (to a space).
FIELD_END_LOOKALIKES = frozenset("\u037e\ufe14\ufe54\uff1b" "\u204f" "\ufe48\uff3d")  # ; ; ; ;  ⁏ (UTS #39)  ] ]
# ``"`` and ``\\`` close and escape a quoted state-change value: their look-alikes get a backslash too.
QUOTE_LOOKALIKES = frozenset("\uff02" "\ufe68\uff3c")
_OPENING_BRACKETS = "[\ufe47\uff3b"  # every character whose NFKC form is "["
_COLON_CONFUSABLES = ("\u02d0\u02f8\u0589\u05c3\u0703\u0704\u16ec\u1803\u1809\u205a\u2236\ua4fd\ua789\ufe30")
_SEMICOLON_CONFUSABLES = "\u204f"
# Characters that draw a blank although they are letters (Hangul fillers, the braille blank) …
_BLANK_LOOKING = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# … and Unicode's default-ignorable code points outside category Cf (drawn as nothing): CGJ, Khmer inherent
# vowels, Mongolian variation selectors, variation selectors, and the unassigned rest of the ignorable blocks.
_IGNORABLE_RANGES = ((0x034F, 0x034F), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2065, 0x2065), (0xFE00, 0xFE0F),
                     (0xFFF0, 0xFFF8), (0xE0000, 0xE0FFF))


def _clean(value: str, forbidden: str) -> str:
    out: list[str] = []
    for char in value:
        if char in _LINE_BREAKS or char in forbidden:
            out.append(" ")
            continue
        category = unicodedata.category(char)
        if category == "Cc":
            out.append(" ")
        elif category in _INVISIBLE_CATEGORIES:
            continue
        else:
            out.append(char)
    return "".join(out)


def cut(value: str, limit: int = MAX_VALUE_CHARS) -> str:
    return value if len(value) <= limit else value[: limit - 1] + ELLIPSIS


_HEADER_FORBIDDEN = ";]" + "".join(sorted(FIELD_END_LOOKALIKES))


@functools.lru_cache(maxsize=65536)  # names and ids repeat on every request of a replay
def escape_value(value: str) -> str:
    """A header value: ``;``, ``]``, their look-alikes (``；`` ``;`` ``］`` …) and every line break become a space;
    controls and format characters removed; ≤ 64 chars."""
    return cut(_clean(value, _HEADER_FORBIDDEN))


@functools.lru_cache(maxsize=16384)
def quote_value(value: str) -> str:
    """A member-controlled value inside a ``[state change]`` line: escaped, cut, in double quotes. ``\\``, ``"``
    and their NFKC look-alikes (``＼`` ``＂``) get a backslash, so no reader sees the quotes close early."""
    cleaned = cut(_clean(value, ""))
    return '"' + "".join("\\" + c if c in '"\\' or c in QUOTE_LOOKALIKES else c for c in cleaned) + '"'


def _ignorable(char: str) -> bool:
    """Drawn as nothing or as a blank: whitespace, format characters (Cf), default-ignorables, Hangul fillers."""
    if char.isspace() or char in _BLANK_LOOKING or unicodedata.category(char) == "Cf":
        return True
    code = ord(char)
    return any(low <= code <= high for low, high in _IGNORABLE_RANGES)


# Letters that look like the Latin letters of the reserved words (UTS #39 confusables, Cyrillic/Greek/small
# capitals), digits and bars that pass for o/l, and "rn" for "m". Applied to the id only to decide whether it is
# reserved: a false positive costs a visible ``user:`` prefix, a false negative a forged host.
_SKELETON = str.maketrans({
    **dict.fromkeys("аɑα⍺ᴀ", "a"), **dict.fromkeys("еҽᴇ℮", "e"), **dict.fromkeys("іιɩꙇ", "i"),
    **dict.fromkeys("оοᴏ0", "o"), **dict.fromkeys("ѕꜱ", "s"), **dict.fromkeys("уүʏ", "y"), "ᴛ": "t", "ᴍ": "m",
    "ɴ": "n", "ј": "j", "һ": "h", **dict.fromkeys("ӏǀʟ1|IΙІӀ", "l"),
    **dict.fromkeys("АΑ", "A"), **dict.fromkeys("ВΒ", "B"), **dict.fromkeys("ЕΕ", "E"), **dict.fromkeys("КΚ", "K"),
    **dict.fromkeys("МΜ", "M"), **dict.fromkeys("НΗ", "H"), **dict.fromkeys("ОΟ", "O"), **dict.fromkeys("РΡ", "P"),
    **dict.fromkeys("СϹ", "C"), **dict.fromkeys("ТΤ", "T"), **dict.fromkeys("ХΧ", "X"), **dict.fromkeys("УΥ", "Y"),
    "Ѕ": "S", "Ј": "J", "Ν": "N", "Ζ": "Z",
})


def _skeleton(text: str) -> str:
    return text.translate(_SKELETON).replace("rn", "m")


@functools.lru_cache(maxsize=16384)
def is_reserved_id(user_id: str) -> bool:
    """Whether the id *as rendered* reads as a reserved word: escaped first (escaping deletes invisible characters
    and turns delimiters into spaces), then NFKC, case folding, without whitespace, format and other ignorable
    characters, and with look-alike letters mapped (``ѕуѕtеm``, ``ＴＯＯＬ``, ``systern``). The cut's ``…`` is not
    part of the id."""
    escaped = escape_value(user_id)
    if escaped.endswith(ELLIPSIS) and len(_clean(user_id, _HEADER_FORBIDDEN)) > MAX_VALUE_CHARS:
        escaped = escaped[: -len(ELLIPSIS)]
    text = "".join(c for c in unicodedata.normalize("NFKC", escaped) if not _ignorable(c))
    folded = unicodedata.normalize("NFKC", text.casefold())
    return _skeleton(folded) in RESERVED_IDS or _skeleton(text).casefold() in RESERVED_IDS


def render_user_id(user_id: str) -> str:
    """``user_id:system`` is reserved for the host: a member whose id reads as a reserved word is ``user:<id>``."""
    return f"user:{user_id}" if is_reserved_id(user_id) else user_id


def render_header(fields: dict[str, str | None]) -> str:
    """``[k:v;…;]`` in canonical key order; ``None`` fields are omitted; values escaped."""
    parts = []
    for key in HEADER_KEYS:
        value = fields.get(key)
        if value is not None:
            parts.append(f"{key}:{escape_value(value)};")
    extra = [k for k in fields if k not in HEADER_KEYS]
    if extra:
        raise ValueError(f"unknown header keys {extra}")
    return "[" + "".join(parts) + "]"


def render_scene_line(fields: list[tuple[str, str]]) -> str:
    return "[" + "".join(f"{k}:{escape_value(v)};" for k, v in fields) + "]"


# --- the host's own lines ------------------------------------------------------------------------------
# Every line shape only the host writes lives here, next to ``neutralize_body``, which keeps members from typing
# them (tests/test_format.py builds each shape from these and checks that a member's copy is neutralized).

PRESET_HOST_HEADER = "[user_id:system;]"  # opens a downgraded preset entry (providers/shaping.py ``downgraded``)


def host_header(alias: str, time: str) -> str:
    """The fixed header of a downgraded state change: only the host can produce ``user_id:system``."""
    return f"[id:{alias};user_id:system;time:{time};]"


def tool_call_line(call_id: str, name: str, arguments: str) -> str:
    """A tool call as host text, for local templates without a tool role (providers/local.py ``tools_as_text``);
    ``arguments`` is one JSON line."""
    return f"[tool call id:{escape_value(call_id)};name:{escape_value(name)};] {arguments}"


def tool_result_line(call_id: str, name: str, body: str) -> str:
    """A tool result as host text (the user turn that carries it), for the same templates."""
    return f"[tool result id:{escape_value(call_id)};name:{escape_value(name)};] {body}"


# --- member-written bodies -----------------------------------------------------------------------------

# A line a member wrote that looks like one of the host's own lines: a header `[k:v;…` or `[state change]`.
# Anything header-like: a bracket, then a `key:value;` field before the bracket closes (`[id:…;`, `[:;user_id:…;`),
# or a bracket and a one-word ASCII `key:` (`[user_id:system] …` with no `;`, which a model reads as the host's
# header just as well; `[see http://…]` and `[状态：好]` have no such key and stay).
# Matched on the line as a normalising reader sees it (`_folded_line`): look-alikes of `[ ] ; :` are those
# characters, every blank is a space and invisible characters are gone.
_SHAPE = r"\[(?:\s*state\s*change\s*\]|[^\];{breaks}]*:[^\]{breaks}]*;|\s*[a-z0-9_]*:)"
_HOST_SHAPE = re.compile(_SHAPE.format(breaks=""), re.IGNORECASE)  # on a folded line
_HOST_SHAPE_RAW = re.compile(_SHAPE.format(breaks=re.escape(_LINE_BREAKS)), re.IGNORECASE)  # as written
_ASCII_LINE = re.compile(r"[\x00-\x09\x0e-\x1b\x1f-\x7f]*(?:[\n\r\x0b\x0c\x1c-\x1e]|\Z)")  # folding changes no ASCII shape
_OPENER = re.compile(f"[{re.escape(_OPENING_BRACKETS)}]")
FULLWIDTH_BRACKET = "［"


def _fold(char: str) -> str:
    """One character as a normalising reader sees it, for matching host shapes."""
    if char in _COLON_CONFUSABLES:
        return ":"
    if char in _SEMICOLON_CONFUSABLES:
        return ";"
    return "".join(" " if c.isspace() or c in _BLANK_LOOKING else "" if _ignorable(c) else c
                   for c in unicodedata.normalize("NFKC", char))


class _FoldTable(dict[int, str]):
    """``str.translate`` table for ``_fold``, filled on first sight of a character (hits run in C)."""

    def __missing__(self, code: int) -> str:
        folded = self[code] = _fold(chr(code))
        return folded


_FOLD_TABLE = _FoldTable()
_LINE_END = re.compile(f"[{_LINE_BREAKS}]")


def _folded_line(text: str, start: int) -> str:
    """``text`` from ``start`` to the end of its line, folded."""
    end = _LINE_END.search(text, start)
    return text[start : end.start() if end else len(text)].translate(_FOLD_TABLE)


def _invisible_or_blank(char: str) -> bool:
    """Characters a line may start with and still *look* like it starts at the next character."""
    return char not in _LINE_BREAKS and _ignorable(char)


def neutralize_body(text: str) -> str:
    """Member text that imitates a host line (``[id:…;user_id:system;…]``, ``[state change] …``) keeps
    its words but not the host's shape: the opening bracket becomes a full-width ``［``. A line starts at
    the text's start or after any Unicode line break, and may begin with spaces or invisible characters.
    The shape is matched over look-alikes (``[id：m9；…``, ``[state\u00a0change]``), see ``_fold``."""
    if not _OPENER.search(text):
        return text
    out = list(text)
    at_line_start = True
    index = 0
    while index < len(out):
        char = out[index]
        if char in _LINE_BREAKS:
            at_line_start = True
        elif at_line_start and not _invisible_or_blank(char):
            at_line_start = False
            if char in _OPENING_BRACKETS and (
                _HOST_SHAPE_RAW.match(text, index)
                or (not _ASCII_LINE.match(text, index) and _HOST_SHAPE.match(_folded_line(text, index)))
            ):
                out[index] = FULLWIDTH_BRACKET
        index += 1
    return "".join(out)


def parse_header(line: str) -> list[tuple[str, str]] | None:
    """Our own header format back to ``(key, value)`` pairs, or None if ``line`` does not start with one.

    Values cannot contain ``;`` or ``]`` (escaping turned them into spaces), so the first ``;]`` ends it."""
    if not line.startswith("["):
        return None
    end = line.find(";]")
    if end < 0:
        return [] if line.startswith("[]") else None
    pairs = []
    for field in line[1 : end + 1].split(";")[:-1]:
        key, colon, value = field.partition(":")
        if not colon:
            return None
        pairs.append((key, value))
    return pairs


# --- state-change lines ------------------------------------------------------------------------------

_ID = r"[^\s\"]+"
_CHANGED = re.compile(
    rf'^(?P<operator>{_ID}) changed (?P<user_id>{_ID}) (?P<field>{"|".join(CHANGE_FIELDS)}) to "(?P<value>(?:[^"\\]|\\.)*)"$'
)
_MEMBERSHIP = re.compile(
    rf"^(?P<user_id>{_ID}) (?P<verb>join|leave) (?P<scene_id>{_ID}) on (?P<time>\d{{2}}:\d{{2}}) by (?P<by>{_ID})$"
)


@dataclass(frozen=True)
class StateChange:
    """A parsed, template-conforming event line."""

    verb: str  # changed | join | leave
    user_id: str
    operator: str | None = None
    field: str | None = None
    value: str | None = None
    scene_id: str | None = None
    time: str | None = None

    def render(self) -> str:
        """Re-rendered from the parsed parts, never passed through as stored text."""
        if self.verb == "changed":
            assert self.operator is not None and self.field is not None and self.value is not None
            return f"{_token(self.operator, host_ok=True)} changed {_token(self.user_id)} {self.field} to {quote_value(self.value)}"
        return f"{_token(self.user_id)} {self.verb} {_token(self.scene_id or '')} on {self.time} by {_by(self.operator or 'self')}"


def _token(value: str, host_ok: bool = False) -> str:
    """An id inside a state-change line: one token (no whitespace, no quotes, nor their NFKC look-alikes), so the
    line parses back, also after normalisation. Only the exact word ``system`` is the host operator; any other
    spelling that reads as it (``system``+U+200B, ``ｓｙｓｔｅｍ``) is a member id and gets ``user:``."""
    if host_ok and value in HOST_OPERATORS:
        return value
    return render_user_id("".join("_" if _splits_token(c) else c for c in escape_value(value)) or "_")


@functools.lru_cache(maxsize=4096)
def _splits_token(char: str) -> bool:
    """Whitespace, ``"`` and every character a normalising reader sees as either (``＂``, ``¨`` is NFKC " ̈")."""
    return char.isspace() or char == '"' or any(c.isspace() or c == '"' for c in unicodedata.normalize("NFKC", char))


def _by(value: str) -> str:
    return "self" if value == "self" else _token(value, host_ok=True)


def parse_state_change(line: str, kind: str) -> StateChange | None:
    """The stored line against the fixed templates; ``None`` if it does not conform (or mismatches kind)."""
    match = _CHANGED.match(line)
    if match and kind == "member_changed":
        value = re.sub(r"\\(.)", r"\1", match.group("value"))
        return StateChange(
            verb="changed", user_id=match.group("user_id"), operator=match.group("operator"),
            field=match.group("field"), value=value,
        )
    match = _MEMBERSHIP.match(line)
    if match and kind == ("member_joined" if match.group("verb") == "join" else "member_left"):
        return StateChange(
            verb=match.group("verb"), user_id=match.group("user_id"), scene_id=match.group("scene_id"),
            time=match.group("time"), operator=match.group("by"),
        )
    return None


def changed_line(operator: str, user_id: str, field: str, value: str) -> StateChange:
    return StateChange(verb="changed", user_id=user_id, operator=operator, field=field, value=value)

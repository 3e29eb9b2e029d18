"""The one-line formats of ADR 0041 §1: ``[k:v;…;]`` headers and ``[state change]`` lines.

Everything member-controlled passes through ``escape_value`` (headers) or ``quote_value`` (state-change
values) before it reaches the model. Both remove every line break and control character, so a value can
never start a line of its own, and cut at 64 characters with ``…``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

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
RESERVED_IDS = frozenset({"system", "assistant", "tool"})
STATE_CHANGE_PREFIX = "[state change]"
CHANGE_FIELDS = ("role", "name", "mute_time", "group_title", "group_nickname")

# Every character Python's str.splitlines() breaks on, plus the other C0/C1 controls.
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
# Format characters that reorder or hide text (bidi overrides/isolates, zero-width joiners …).
_INVISIBLE_CATEGORIES = frozenset({"Cf"})


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


@functools.lru_cache(maxsize=65536)  # names and ids repeat on every request of a replay
def escape_value(value: str) -> str:
    """A header value: ``;``, ``]`` and every line break become a space; controls removed; ≤ 64 chars."""
    return cut(_clean(value, ";]"))


@functools.lru_cache(maxsize=16384)
def quote_value(value: str) -> str:
    """A member-controlled value inside a ``[state change]`` line: escaped, cut, in double quotes."""
    cleaned = cut(_clean(value, ""))
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_user_id(user_id: str) -> str:
    """``user_id:system`` is reserved for the host: a member whose id is a reserved word is ``user:<id>``."""
    return f"user:{user_id}" if user_id.lower() in RESERVED_IDS else user_id


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


def host_header(alias: str, time: str) -> str:
    """The fixed header of a downgraded state change: only the host can produce ``user_id:system``."""
    return f"[id:{alias};user_id:system;time:{time};]"


# --- member-written bodies -----------------------------------------------------------------------------

# A line a member wrote that looks like one of the host's own lines: a header `[k:v;…` or `[state change]`.
# Anything header-like: a bracket, then a `key:value;` field before the bracket closes (`[id:…;`, `[:;user_id:…;`).
_HOST_SHAPE = re.compile(r"[\[［](?:state change\]|[^\]\n;]*:[^\]\n]*;)", re.IGNORECASE)
FULLWIDTH_BRACKET = "［"


def _invisible_or_blank(char: str) -> bool:
    """Characters a line may start with and still *look* like it starts at the next character."""
    return (char.isspace() and char not in _LINE_BREAKS) or unicodedata.category(char) == "Cf"


def neutralize_body(text: str) -> str:
    """Member text that imitates a host line (``[id:…;user_id:system;…]``, ``[state change] …``) keeps
    its words but not the host's shape: the opening bracket becomes a full-width ``［``. A line starts at
    the text's start or after any Unicode line break, and may begin with spaces or invisible characters."""
    if "[" not in text and "［" not in text:
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
            if char == "[" and _HOST_SHAPE.match(text, index):
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
    """An id inside a state-change line: one token (no whitespace, no quotes), so the line parses back."""
    value = "".join("_" if c.isspace() or c == '"' else c for c in escape_value(value)) or "_"
    if host_ok and value == "system":
        return value
    return render_user_id(value)


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

"""``zhin request-diff``: two request bodies compared structurally (which message, which field) and by bytes.

The preset note's ``tools/st-request-diff`` ("真假上游抓包对比"): capture what a real client sent (``zhin serve
--capture DIR``, or any proxy) and compare it with what this assembler sends (``zhin trace --show-request
--json``), or two captures with each other.

* **Sides.** A side is a JSON file holding a request body, or a ``zhin trace --json`` document (its request of
  ``turn``, default the last one). A captured file is the body exactly as the client sent it.
* **Structure.** ``deepdiff`` finds added, removed and changed fields and list items; each is reported at a
  JSONPath-like path (``messages[3].content``) with both values. For a changed string, the byte offset
  (UTF-8) where the two first differ is given, with the text around it — the place a prompt cache would break.
* **Noise.** ``--ignore PATH`` drops fields that differ for reasons nobody cares about (ids, timestamps,
  ``user``): ``messages[*].tool_calls[*].id``, ``metadata``, ``stream_options.include_usage``. ``*`` stands for any
  list index or key.
* **Bytes.** Whether the two bodies are byte-identical as files, and, when not, whether they are the same JSON
  with different serialization (key order, spacing, escapes) — the providers see the parsed JSON, so only
  structural differences matter to them.
* **Reading it.** Excerpts are shown as prefix-diff shows its own (there they are JSON, so escaped by the
  serialisation): a newline as ``\n``, every control, line-separator and bidi-override character as an escape
  (:func:`readable`), and the first differing character marked with prefix-diff's mark. Under GitHub Actions every
  difference is an annotation at its field's line in the file that holds it, and the step summary lists them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from deepdiff import DeepDiff

from zhin_cli.core.errors import InputError, UsageError, ZhinError
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.readers import read_json_file
from zhin_cli.core.terminaltext import terminal_safe
from zhin_cli.core.textdiff import first_difference, marked

if TYPE_CHECKING:
    from zhin_cli.core.ghactions import Annotation


_SEGMENT = re.compile(r"^(?P<key>[^\[\]]*)(?P<indexes>(\[(\d+|\*)\])*)$")
_INDEX = re.compile(r"\[(\d+|\*)\]")


def ignore_pattern(path: str) -> str:
    """A user path (``messages[*].tool_calls[*].id``) → a deepdiff exclude regex anchored on both ends."""
    text = path.strip()
    text = text[2:] if text.startswith("$.") else text
    if not text:
        raise UsageError(f"--ignore {path!r}: empty path")
    regex = r"^root"
    for segment in text.split("."):
        match = _SEGMENT.match(segment)
        if match is None or (not match.group("key") and not match.group("indexes")):
            raise UsageError(f"--ignore {path!r}: cannot read {segment!r} (expected key, key[0] or key[*], keys joined by '.')")
        key = match.group("key")
        if key == "*":
            regex += r"\[[^\]]+\]"
        elif key:
            regex += r"\[" + re.escape(repr(key)) + r"\]"
        for index in _INDEX.findall(match.group("indexes")):
            regex += r"\[\d+\]" if index == "*" else rf"\[{index}\]"
    return regex + "$"


def display_path(parts: Sequence[str | int]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "$"


@dataclass
class Side:
    label: str
    body: JSONObject
    raw: bytes
    path: Path | None = None  # the file it was read from
    text: str = ""  # that file's text, to find a field's line in it
    at: tuple[str | int, ...] = ()  # where the body lies in that file (a trace document: requests[i].request)

    def line_of(self, parts: Sequence[str | int]) -> int | None:
        """The line of the body's field ``parts`` in the file (None if it cannot be found)."""
        return json_line(self.text, [*self.at, *parts]) if self.text else None


@dataclass
class FieldDifference:
    kind: str  # changed | added | removed | type_changed
    path: str
    before: JSON = None
    after: JSON = None
    byte_offset: int | None = None  # changed strings: first differing UTF-8 byte
    excerpt_before: str = ""
    excerpt_after: str = ""
    excerpt_index: int = 0  # where, in both excerpts, the first differing character is
    parts: list[str | int] = field(default_factory=list, repr=False)  # ``path`` as keys and indexes

    @property
    def marked_before(self) -> str:
        """``excerpt_before`` made readable (:func:`readable`) with :data:`MARK` at the first difference."""
        return marked(self.excerpt_before, self.excerpt_index)

    @property
    def marked_after(self) -> str:
        return marked(self.excerpt_after, self.excerpt_index)

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"kind": self.kind, "path": self.path}
        if self.kind != "added":
            data["before"] = self.before
        if self.kind != "removed":
            data["after"] = self.after
        if self.byte_offset is not None:
            data.update(byte_offset=self.byte_offset, excerpt_before=self.excerpt_before, excerpt_after=self.excerpt_after,
                        excerpt_index=self.excerpt_index)
        return data


@dataclass
class RequestDiff:
    a: str
    b: str
    ignored: list[str]
    byte_identical: bool
    same_json: bool  # after the ignored paths are dropped
    differences: list[FieldDifference] = field(default_factory=list)
    sides: tuple[Side, Side] | None = field(default=None, repr=False)  # the two sides compared (their files)

    @property
    def same(self) -> bool:
        return not self.differences

    def as_dict(self) -> dict[str, object]:
        return {
            "version": 1, "a": self.a, "b": self.b, "ignored": self.ignored, "same": self.same,
            "byte_identical": self.byte_identical, "differences": [d.as_dict() for d in self.differences],
        }


_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def json_line(text: str, parts: Sequence[str | int]) -> int | None:
    """The 1-based line where the value at ``parts`` (keys and indexes) starts in the JSON ``text``; None if it is
    not there. A scan that decodes only the keys on the way and skips every other value whole (the C decoder), so
    finding a field of a large trace document costs one pass over the part before it. For a repeated key the last
    one counts, as ``json.loads`` has it."""
    try:
        position = _SPACE.match(text, 1 if text.startswith("\ufeff") else 0).end()  # type: ignore[union-attr]
        for part in parts:
            found = _member(text, position, part)
            if found is None:
                return None
            position = found
        return text.count("\n", 0, position) + 1
    except (ValueError, IndexError, AttributeError):
        return None


def _member(text: str, position: int, part: str | int) -> int | None:
    """Where the member ``part`` of the object or array starting at ``position`` starts."""
    opening = text[position]
    if (opening == "{") != isinstance(part, str) or opening not in "{[":
        return None
    closing = "}" if opening == "{" else "]"
    position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
    found: int | None = None
    index = 0
    while text[position] != closing:
        if opening == "{":
            key, position = _DECODER.raw_decode(text, position)
            position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
            position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]  # past the ':'
            if key == part:
                found = position
        elif index == part:
            return position
        _, position = _DECODER.raw_decode(text, position)
        index += 1
        position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
        if text[position] == ",":
            position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
    return found


def load_side(path: Path, turn: int | None = None) -> Side:
    """A request body from a JSON file: a body as sent, or a ``zhin trace --json`` document."""
    data, text = read_json_file(path, InputError, "request file")
    raw = text.encode("utf-8")  # the bytes as stored: UTF-8 decoding and encoding round-trip exactly
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object (a request body or a zhin trace --json document), got {type(data).__name__}",
                         where=str(path))
    if isinstance(data.get("requests"), list) and "session_id" in data:
        return _from_trace(path, data, text, turn)
    return Side(str(path), data, raw, path, text)


def _from_trace(path: Path, data: JSONObject, text: str, turn: int | None) -> Side:
    entries = data["requests"]  # a list (load_side checked)
    requests = [(i, r, body) for i, r in enumerate(entries if isinstance(entries, list) else [])
                if isinstance(r, dict) and isinstance(body := r.get("request"), dict)]
    if not requests:
        raise InputError("a zhin trace document without request bodies", where=str(path))
    if turn is None:
        index, chosen, body = requests[-1]
    else:
        matches = [(i, r, b) for i, r, b in requests if r.get("turn") == turn]
        if not matches:
            turns = ", ".join(str(r.get("turn")) for _, r, _ in requests)
            raise UsageError(f"--turn {turn}: {path} holds turn(s) {turns}")
        index, chosen, body = matches[0]
    # The trace document is not what a client sends: compare with the body as zhin serialises it on the wire.
    return Side(f"{path} (turn {chosen.get('turn')})", body, json.dumps(body, ensure_ascii=False).encode("utf-8"),
                path, text, ("requests", index, "request"))


def diff_requests(a: Side, b: Side, ignore: list[str] | None = None) -> RequestDiff:
    ignore = list(ignore or [])
    patterns = [ignore_pattern(p) for p in ignore]
    try:
        tree = DeepDiff(a.body, b.body, exclude_regex_paths=patterns, verbose_level=2, view="tree")
    except Exception as error:  # deepdiff on plain JSON should not fail; if it does, say so in one line
        raise ZhinError(f"cannot compare the two bodies: {type(error).__name__}: {error}") from None
    differences: list[FieldDifference] = []
    kinds = {
        "values_changed": "changed", "type_changes": "type_changed",
        "dictionary_item_added": "added", "iterable_item_added": "added",
        "dictionary_item_removed": "removed", "iterable_item_removed": "removed",
    }
    for report, items in tree.items():
        kind = kinds.get(report, report)
        for item in items:
            parts = item.path(output_format="list")
            before = None if kind == "added" else item.t1
            after = None if kind == "removed" else item.t2
            difference = FieldDifference(kind, display_path(parts), before, after, parts=parts)
            if kind == "changed" and isinstance(before, str) and isinstance(after, str):
                (difference.byte_offset, difference.excerpt_before, difference.excerpt_after,
                 difference.excerpt_index) = first_difference(before, after)
            differences.append(difference)
    differences.sort(key=lambda d: _sort_key(d.path))
    return RequestDiff(a.label, b.label, ignore, a.raw == b.raw, not differences, differences, sides=(a, b))


def _sort_key(path: str) -> list[tuple[int, int, str]]:
    """Document order for paths: ``messages[2]`` before ``messages[10]``."""
    return [(0, int(token), "") if token.isdigit() else (1, 0, token) for token in re.findall(r"\d+|[^\[\].\d]+", path)]


# --- GitHub Actions --------------------------------------------------------------------------------


def _values(difference: FieldDifference) -> tuple[str, str]:
    """What each side holds at the difference, readable and short (a string excerpt marked where they differ)."""
    if difference.byte_offset is not None:
        return f"…{difference.marked_before}…", f"…{difference.marked_after}…"
    return ("" if difference.kind == "added" else short(difference.before),
            "" if difference.kind == "removed" else short(difference.after))


def short(value: object, limit: int = 160) -> str:
    """A value as one readable line of JSON, cut with an ellipsis past ``limit`` characters."""
    text = terminal_safe(json.dumps(value, ensure_ascii=False))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(difference: FieldDifference) -> str:
    """``changed at byte 12``, ``added``, …"""
    where = f" at byte {difference.byte_offset:,}" if difference.byte_offset is not None else ""
    return f"{difference.kind.replace('_', ' ')}{where}"


def github_annotations(result: RequestDiff) -> list[Annotation]:
    """One ``error`` annotation per difference — every one — at the field's line in the file that holds it (side b's
    for a change or an addition, side a's for a removal)."""
    from zhin_cli.core.ghactions import Annotation

    out: list[Annotation] = []
    for difference in result.differences:
        side = None
        if result.sides is not None:
            side = result.sides[0] if difference.kind == "removed" else result.sides[1]
        before, after = _values(difference)
        lines = [f"{difference.path} {describe(difference)} ({result.a} → {result.b})"]
        lines += [f"a: {before}"] if difference.kind != "added" else []
        lines += [f"b: {after}"] if difference.kind != "removed" else []
        out.append(Annotation("error", "\n".join(lines), title=f"request-diff: {difference.path} {difference.kind.replace('_', ' ')}",
                              file=side.path if side is not None else None,
                              line=side.line_of(difference.parts) if side is not None else None))
    return out


def github_summary(result: RequestDiff) -> str:
    """The step summary: the verdict and one table row per difference."""
    from zhin_cli.core.ghactions import summary_cell

    lines = ["### zhin request-diff", ""]
    if result.same:
        detail = "byte-identical" if result.byte_identical else "same JSON, serialised differently"
        lines.append(f"`{summary_cell(result.a)}` and `{summary_cell(result.b)}`: same request ({detail})")
        return "\n".join(lines) + "\n"
    lines += [f"{len(result.differences)} difference(s) between `{summary_cell(result.a)}` and `{summary_cell(result.b)}`",
              "", "| field | change | a | b |", "|---|---|---|---|"]
    for difference in result.differences:
        before, after = _values(difference)
        lines.append(f"| `{summary_cell(difference.path)}` | {describe(difference)} | {summary_cell(before)} | "
                     f"{summary_cell(after)} |")
    return "\n".join(lines) + "\n"

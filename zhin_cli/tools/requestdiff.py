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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepdiff import DeepDiff

from zhin_cli.core.errors import InputError, UsageError, ZhinError
from zhin_cli.core.readers import read_json_file

CONTEXT = 40  # characters of text shown on each side of a string's first difference

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


def display_path(parts: list[Any]) -> str:
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
    body: dict[str, Any]
    raw: bytes


@dataclass
class FieldDifference:
    kind: str  # changed | added | removed | type_changed
    path: str
    before: Any = None
    after: Any = None
    byte_offset: int | None = None  # changed strings: first differing UTF-8 byte
    excerpt_before: str = ""
    excerpt_after: str = ""

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "path": self.path}
        if self.kind != "added":
            data["before"] = self.before
        if self.kind != "removed":
            data["after"] = self.after
        if self.byte_offset is not None:
            data.update(byte_offset=self.byte_offset, excerpt_before=self.excerpt_before, excerpt_after=self.excerpt_after)
        return data


@dataclass
class RequestDiff:
    a: str
    b: str
    ignored: list[str]
    byte_identical: bool
    same_json: bool  # after the ignored paths are dropped
    differences: list[FieldDifference] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not self.differences

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": 1, "a": self.a, "b": self.b, "ignored": self.ignored, "same": self.same,
            "byte_identical": self.byte_identical, "differences": [d.as_dict() for d in self.differences],
        }


def first_difference(before: str, after: str) -> tuple[int, str, str]:
    """(UTF-8 byte offset of the first differing character, excerpt of each side around it)."""
    index = 0
    limit = min(len(before), len(after))
    while index < limit and before[index] == after[index]:
        index += 1
    start = max(0, index - CONTEXT)
    return len(before[:index].encode("utf-8")), before[start : index + CONTEXT], after[start : index + CONTEXT]


def load_side(path: Path, turn: int | None = None) -> Side:
    """A request body from a JSON file: a body as sent, or a ``zhin trace --json`` document."""
    data, text = read_json_file(path, InputError, "request file")
    raw = text.encode("utf-8")  # the bytes as stored: UTF-8 decoding and encoding round-trip exactly
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object (a request body or a zhin trace --json document), got {type(data).__name__}",
                         where=str(path))
    if isinstance(data.get("requests"), list) and "session_id" in data:
        return _from_trace(path, data, raw, turn)
    return Side(str(path), data, raw)


def _from_trace(path: Path, data: dict[str, Any], raw: bytes, turn: int | None) -> Side:
    requests = [r for r in data["requests"] if isinstance(r, dict) and isinstance(r.get("request"), dict)]
    if not requests:
        raise InputError("a zhin trace document without request bodies", where=str(path))
    if turn is None:
        chosen = requests[-1]
    else:
        matches = [r for r in requests if r.get("turn") == turn]
        if not matches:
            turns = ", ".join(str(r.get("turn")) for r in requests)
            raise UsageError(f"--turn {turn}: {path} holds turn(s) {turns}")
        chosen = matches[0]
    body = chosen["request"]
    # The trace document is not what a client sends: compare with the body as zhin serialises it on the wire.
    return Side(f"{path} (turn {chosen.get('turn')})", body, json.dumps(body, ensure_ascii=False).encode("utf-8"))


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
            path = display_path(item.path(output_format="list"))
            before = None if kind == "added" else item.t1
            after = None if kind == "removed" else item.t2
            difference = FieldDifference(kind, path, before, after)
            if kind == "changed" and isinstance(before, str) and isinstance(after, str):
                difference.byte_offset, difference.excerpt_before, difference.excerpt_after = first_difference(before, after)
            differences.append(difference)
    differences.sort(key=lambda d: _sort_key(d.path))
    return RequestDiff(a.label, b.label, ignore, a.raw == b.raw, not differences, differences)


def _sort_key(path: str) -> list[Any]:
    """Document order for paths: ``messages[2]`` before ``messages[10]``."""
    return [(0, int(token), "") if token.isdigit() else (1, 0, token) for token in re.findall(r"\d+|[^\[\].\d]+", path)]

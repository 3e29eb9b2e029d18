"""JSON text → Python values, fast, with exactly the standard library's results and errors.

Sessions are read line by line (JSONL) or row by row (payload columns): parsing is most of a load's time, and
orjson parses 3–10× faster than ``json``. But the two differ at the edges: orjson refuses what ``json`` accepts
(``NaN``, ``Infinity``, integers past 64 bits, lone surrogate escapes), reads a long integer as a float, and nests
deeper than ``json`` can from a deep stack. Every message zhin prints about bad input is ``json``'s (``invalid JSON: Expecting value (column 5)``),
and a 30-digit id must stay an integer so the error says so. So: orjson for text it reads exactly as ``json``
does, ``json`` itself for everything else — a text with a run of 19+ digits or 200+ brackets, and any text orjson refuses (whose
error, or value, then comes from ``json``). Without orjson installed, this is ``json.loads``.
"""

from __future__ import annotations

import json
from typing import TypeAlias

try:
    import orjson
except ImportError:  # optional: the standard library alone gives the same values, slower
    orjson = None  # type: ignore[assignment]

# An integer of 19 digits or more may not fit 64 bits, where orjson would read a float (or refuse it). Found with
# bytes.translate (every digit → "9") and a substring search: ten times a regex's speed, which cost as much as
# the parse itself.
_DIGITS_AS_NINES = bytes.maketrans(b"012345678", b"999999999")
_LONG_RUN = b"9" * 19
# json nests as deep as Python's recursion limit allows from where it is called (a RecursionError that callers
# report as "nested too deeply"), orjson to 1024: a text with this many brackets or more is json's to decide.
# (Counting brackets is a C pass; real payloads have a handful.)
_FEW_BRACKETS = 200

# What a JSON text can hold, for data that really is any JSON (a payload's unknown fields, a file before it is
# checked): readers narrow it with isinstance, where an unchecked type would let a wrong guess about its shape through.
JSON: TypeAlias = "str | int | float | bool | None | list[JSON] | dict[str, JSON]"
JSONObject: TypeAlias = "dict[str, JSON]"


def loads(text: str, data: bytes | None = None) -> JSON:
    """``json.loads(text)``: the same value, or the same exception. ``data``: ``text`` encoded in UTF-8, when the
    caller has it (a file's line), which saves encoding it again."""
    if orjson is not None:
        if data is None:
            try:
                data = text.encode()
            except UnicodeEncodeError:  # a lone surrogate character: json decides
                return _json_loads(text)
        if data.count(b"[") + data.count(b"{") < _FEW_BRACKETS and _LONG_RUN not in data.translate(_DIGITS_AS_NINES):
            try:
                value: JSON = orjson.loads(data)
                return value
            except orjson.JSONDecodeError:
                pass  # json decides: its error message, or its value for what it accepts (NaN, a lone surrogate …)
    return _json_loads(text)


def _json_loads(text: str) -> JSON:
    value: JSON = json.loads(text)
    return value

"""JSON text → Python values, fast, with exactly the standard library's results and errors.

Sessions are read line by line (JSONL) or row by row (payload columns): parsing is most of a load's time, and
orjson parses 3–10× faster than ``json``. But the two differ at the edges: orjson refuses what ``json`` accepts
(``NaN``, ``Infinity``, integers past 64 bits, lone surrogate escapes, nesting past 1024) and reads a long integer
as a float. Every message zhin prints about bad input is ``json``'s (``invalid JSON: Expecting value (column 5)``),
and a 30-digit id must stay an integer so the error says so. So: orjson for text it reads exactly as ``json``
does, ``json`` itself for everything else — a text with a run of 19+ digits, and any text orjson refuses (whose
error, or value, then comes from ``json``). Without orjson installed, this is ``json.loads``.
"""

from __future__ import annotations

import json
import re
from typing import Any

try:
    import orjson
except ImportError:  # optional: the standard library alone gives the same values, slower
    orjson = None  # type: ignore[assignment]

# An integer of 19 digits or more may not fit 64 bits, where orjson would read a float (or refuse it).
_LONG_DIGITS = re.compile(r"\d{19}")


def loads(text: str) -> Any:
    """``json.loads(text)``: the same value, or the same exception."""
    if orjson is not None and _LONG_DIGITS.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # json decides: its error message, or its value for what it accepts (NaN, a lone surrogate …)
    return json.loads(text)

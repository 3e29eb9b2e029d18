"""Text from a request shown on a terminal: what must be escaped, and the mark of the first difference.

prefix-diff and request-diff show excerpts of request bodies; a body is data from a user or a model, so a control
character, a line separator or a bidi override in it could move the cursor, hide text or reorder what a reviewer
reads. One rule and one mark for both commands, so their excerpts read alike.
"""

from __future__ import annotations

import unicodedata

MARK = "⟦"  # printed just before the first character where two excerpts differ


def unsafe_character(character: str) -> bool:
    """A character a terminal would act on or hide: controls (C0, DEL, C1), line and paragraph separators, and the
    bidi embeddings, overrides and isolates (they reorder what follows them)."""
    code = ord(character)
    return unicodedata.category(character) in ("Cc", "Zl", "Zp") or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069


def terminal_safe(text: str) -> str:
    """``text`` with each unsafe character written as its ``\\uXXXX`` escape, the rest as is."""
    return "".join(f"\\u{ord(c):04x}" if unsafe_character(c) else c for c in text)

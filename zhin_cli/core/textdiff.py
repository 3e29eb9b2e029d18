"""Where two texts first differ, shown readably: the first differing character with
``CONTEXT`` characters around it, control characters escaped and the divergence marked. Shared by
``request-diff`` and ``preset check-capture`` (moved out of tools/diff/request.py, issue 32)."""

from __future__ import annotations

from zhin_cli.core.terminaltext import MARK, terminal_safe

CONTEXT = 40  # characters of text shown on each side of a string's first difference


def first_difference(before: str, after: str) -> tuple[int, str, str, int]:
    """(UTF-8 byte offset of the first differing character, excerpt of each side around it, that character's index
    in the excerpts)."""
    index = _first_index(before, after)
    start = max(0, index - CONTEXT)
    return (len(before[:index].encode("utf-8")), before[start : index + CONTEXT], after[start : index + CONTEXT],
            index - start)


def _first_index(before: str, after: str) -> int:
    index = 0
    limit = min(len(before), len(after))
    while index < limit and before[index] == after[index]:
        index += 1
    return index


_SHORT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def readable(text: str) -> str:
    """``text`` on one line, as prefix-diff shows its excerpts: a newline as ``\\n`` (a tab ``\\t``, …, and the
    backslash itself doubled, as JSON writes them), then ``terminal_safe``: any other unsafe character and each
    workflow-command opener as ``\\uXXXX``; the rest as is."""
    return terminal_safe("".join(_SHORT_ESCAPES.get(c) or c for c in text))


def marked(excerpt: str, index: int) -> str:
    """``excerpt`` made readable with :data:`MARK` before the character at ``index``."""
    return readable(excerpt[:index]) + MARK + readable(excerpt[index:])

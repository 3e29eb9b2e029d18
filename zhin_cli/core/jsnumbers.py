"""Numbers in SillyTavern's files as SillyTavern holds them: JavaScript numbers (IEEE doubles).

Python reads a 400-digit JSON integer exactly, and ``1e400`` or ``NaN`` as infinite floats; JavaScript reads the
first two as ``Infinity`` (or a rounded value) and refuses ``NaN``. A number no double holds exactly has no
meaning ST and zhin could agree on, and handing it on crashed float arithmetic (``math.isfinite`` of a 400-digit
``order``: an ``OverflowError`` traceback). So every number read from an ST file (chat, card, World Info book,
preset) goes through :func:`js_number_problem`, and its reader refuses one with a problem at its ``file:line``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

# JavaScript's Number.MAX_SAFE_INTEGER: past it, neighbouring integers share one double
JS_MAX_SAFE_INTEGER = 2**53 - 1


def js_number_problem(value: object) -> str | None:
    """Why ``value`` (a number from an ST file) is not one SillyTavern holds exactly; None for any other value
    (text, booleans, lists…: their type is the reader's business) and for a number within the bound."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number (a number past 1e308 reads as infinite)"
    if abs(value) > JS_MAX_SAFE_INTEGER:
        text = str(value) if isinstance(value, int) else f"{value:.3g}"
        size = text if len(text) <= 30 else f"an integer of {len(text.lstrip('-'))} digits"
        return f"{size} is past ±{JS_MAX_SAFE_INTEGER:,}, the largest SillyTavern (JavaScript) holds exactly"
    return None


def js_number_problems(obj: Mapping[str, object], skip: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """(key, problem) for each number among ``obj``'s values (and the items of a list value: ``key[i]``) that
    :func:`js_number_problem` refuses — one rule for every field an ST object carries, read or kept."""
    for key, value in obj.items():
        if key in skip:
            continue
        if isinstance(value, list):
            for index, item in enumerate(value):
                problem = js_number_problem(item)
                if problem is not None:
                    yield f"{key}[{index}]", problem
            continue
        problem = js_number_problem(value)
        if problem is not None:
            yield str(key), problem

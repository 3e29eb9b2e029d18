"""Preset-bound regex scripts at prompt time (docs/spec/sillytavern.md §5).

Only ``promptOnly`` scripts run while assembling (the others already rewrote the stored text, or only
change the display). They run on history messages before macros and injections; depth 0 is the newest
history message. User messages use placement 1, everything else placement 2. The replacement's
``{{match}}``, ``$n`` and ``$<name>`` insert the match and its groups (with ``trimStrings`` removed from
each group), then the whole replacement is macro-expanded.

A script comes from a preset file and runs on what chat members wrote, so it runs under bounds
(docs/design-notes.md, "Presets"): the ``regex`` package (the stdlib ``re`` cannot be interrupted) with a
time budget per script and request, ``BUDGET_SECONDS``, that covers matching and the replacements; at most
``MAX_GROWTH`` characters added to one message; and no pattern whose fixed repetition counts the compiler
would unroll past ``MAX_UNROLL``. A script past a bound raises ``ScriptSkipped``: the request is built
without it and says so in a warning naming the script. ``preset lint`` warns about nested quantifiers, the
shape of the patterns that backtrack catastrophically (``nested_quantifier``).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import regex

if TYPE_CHECKING:  # only named in annotations: worldinfo imports this module, and the model imports worldinfo
    from zhin_cli.pipeline.preset.model import RegexScript

USER_INPUT = 1
AI_OUTPUT = 2
BUDGET_SECONDS = 0.25  # matching + replacing time one script may spend on one request's history
MAX_GROWTH = 1_000_000  # characters one script may add to one message
MAX_UNROLL = 100_000  # characters of fixed repetition (a{n}, nested: multiplied) the compiler may unroll
_FLAGS = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL}
_NAMED_GROUP = re.compile(r"\(\?<(?![=!])")  # JS (?<name>…) → Python (?P<name>…)
_REFERENCE = re.compile(r"\{\{match\}\}|\$(\d+)|\$<([^>]+)>|\$&", re.IGNORECASE)
_COUNTED = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
INFINITE = -1


class Match(Protocol):
    """What zhin uses of a match of the ``regex`` package (which ships no types)."""

    def group(self, key: int | str, /) -> str | None: ...

    def start(self) -> int: ...

    def end(self) -> int: ...


class Pattern(Protocol):
    """What zhin uses of a pattern compiled by the ``regex`` package: both take a ``timeout`` in seconds."""

    def sub(self, repl: Callable[[Match], str], string: str, count: int = 0, *, timeout: float | None = None) -> str: ...

    def search(self, string: str, *, timeout: float | None = None) -> Match | None: ...


class ScriptSkipped(Exception):
    """A script hit one of its bounds; the request is assembled without it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def budget_reason() -> str:
    return f"it took longer than its time budget ({BUDGET_SECONDS * 1000:.0f} ms for one request)"


# -- the shape of a pattern, without compiling it ----------------------------------------------------------


@dataclass
class _Group:
    start: int
    atomic: bool = False
    variable: bool = False  # holds a backtracking quantifier whose count can vary (a+, a*, a?, a{1,3})
    unroll: int = 0  # characters the compiler writes out for its fixed repetition counts
    last: tuple[int, bool, int] | None = None  # the last atom: (start, variable, unroll)


@dataclass
class Shape:
    nested: str | None  # the first quantified group holding a quantifier, as written ("(a+)+")
    unroll: int


def _quantifier(pattern: str, index: int) -> tuple[int, int, int] | None:
    """``(min, max, end)`` of the quantifier at ``index`` (max INFINITE when unbounded), or None."""
    char = pattern[index] if index < len(pattern) else ""
    if char in "*+?":
        low, high, end = (0, INFINITE, index + 1) if char == "*" else (1, INFINITE, index + 1) if char == "+" else (0, 1, index + 1)
    elif char == "{":
        counted = _COUNTED.match(pattern, index)
        if counted is None or not (counted.group(1) or counted.group(3)):
            return None  # "{" that is not a count is a literal (JS and Python agree)
        low_text, comma, high_text = counted.groups()
        if len(low_text) > 9 or len(high_text or "") > 9:
            return (10**9, 10**9, counted.end())  # absurd counts: past MAX_UNROLL whatever they are
        low = int(low_text or 0)
        high = low if not comma else (int(high_text) if high_text else INFINITE)
        end = counted.end()
    else:
        return None
    return low, high, end


@functools.lru_cache(maxsize=512)
def shape(pattern: str) -> Shape:
    """Nested quantifiers and unrolled size of a JS/Python pattern, by a scan that never recurses or backtracks."""
    stack = [_Group(0)]
    nested: str | None = None
    index = 0
    length = len(pattern)
    while index < length:
        char = pattern[index]
        top = stack[-1]
        if char == "\\":
            top.last = (index, False, 1)
            top.unroll += 1
            index += 2
        elif char == "[":
            end = index + 1
            if end < length and pattern[end] == "^":
                end += 1
            if end < length and pattern[end] == "]":
                end += 1  # a leading ] is a literal
            while end < length and pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            top.last = (index, False, 1)
            top.unroll += 1
            index = end + 1
        elif char == "(":
            if pattern.startswith("(?#", index):  # a comment
                close = pattern.find(")", index)
                index = length if close < 0 else close + 1
                continue
            flags = re.match(r"\(\?[a-zA-Z-]+\)", pattern[index : index + 20])
            if flags:  # inline flags (?i): not a group
                index += flags.end()
                continue
            stack.append(_Group(index, atomic=pattern.startswith("(?>", index)))
            top.last = None
            index += 1
        elif char == ")" and len(stack) > 1:
            group = stack.pop()
            parent = stack[-1]
            variable = group.variable and not group.atomic
            parent.last = (group.start, variable, group.unroll)
            parent.variable = parent.variable or variable
            parent.unroll += group.unroll
            index += 1
        elif (quantifier := _quantifier(pattern, index)) is not None and top.last is not None:
            low, high, end = quantifier
            possessive = end < length and pattern[end] == "+"
            if end < length and pattern[end] in "?+":
                end += 1
            atom_start, atom_variable, atom_unroll = top.last
            if atom_variable and (high == INFINITE or high > 1) and not possessive and nested is None:
                nested = pattern[atom_start:end]
            top.unroll += atom_unroll * (max(low, 1) - 1)
            if high != low and not possessive:
                top.variable = True
            top.last = None  # a quantifier on a quantifier is an error (or JS lazy "?"), not a new atom
            index = end
        else:
            top.last = None if char == "|" else (index, False, 1)
            top.unroll += 1
            index += 1
        if stack[-1].unroll > MAX_UNROLL * 10:  # enough to refuse; stop counting
            break
    return Shape(nested, sum(group.unroll for group in stack))


def nested_quantifier(script: RegexScript) -> str | None:
    """The first quantified group that holds a quantifier (``(a+)+``, ``(\\w+\\s?)*``), or None."""
    return shape(script.pattern).nested


# -- compiling and running ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str, flags: str) -> Pattern | str:
    """The compiled pattern, or the reason it cannot be used (a str)."""
    if shape(pattern).unroll > MAX_UNROLL:
        return f"repeats fixed counts over {MAX_UNROLL:,} characters in all (compiling it would take too long)"
    mask = 0
    for flag in flags:
        mask |= _FLAGS.get(flag, 0)
    try:
        compiled: Pattern = regex.compile(_NAMED_GROUP.sub("(?P<", pattern), mask)
    except (regex.error, RecursionError, OverflowError, ValueError, MemoryError):
        return "does not compile"
    return compiled


def compile_problem(script: RegexScript) -> str | None:
    """Why the script's pattern cannot be used, or None."""
    compiled = _compiled(script.pattern, script.flags)
    return compiled if isinstance(compiled, str) else None


def compile_script(script: RegexScript) -> Pattern | None:
    compiled = _compiled(script.pattern, script.flags)
    return None if isinstance(compiled, str) else compiled


def applies(script: RegexScript, placement: int, depth: int | None) -> bool:
    if script.disabled or not script.prompt_only or placement not in script.placement:
        return False
    if depth is not None:
        if script.min_depth is not None and script.min_depth >= -1 and depth < script.min_depth:
            return False
        if script.max_depth is not None and script.max_depth >= 0 and depth > script.max_depth:
            return False
    return True


def run_script(script: RegexScript, text: str, expand: Callable[[str], str], *, deadline: float | None = None) -> str:
    """``text`` rewritten by ``script``. ``deadline`` (a ``time.perf_counter()`` value): past it, or when the
    replacements grow ``text`` by more than ``MAX_GROWTH``, ``ScriptSkipped``."""
    pattern = compile_script(script)
    if pattern is None:
        return text
    timeout = None
    if deadline is not None:
        timeout = deadline - time.perf_counter()
        if timeout <= 0:
            raise ScriptSkipped(budget_reason())
    produced = 0
    matched = 0

    def group_text(match: Match, key: int | str) -> str:
        try:
            value = match.group(key) or ""
        except IndexError:
            return ""
        for trim in script.trim_strings:
            value = value.replace(expand(trim), "")
        return value

    def replace(match: Match) -> str:
        nonlocal produced, matched

        def reference(ref: re.Match[str]) -> str:
            if ref.group(1) is not None:
                return group_text(match, int(ref.group(1)))
            if ref.group(2) is not None:
                return group_text(match, ref.group(2))
            return group_text(match, 0)

        if deadline is not None and time.perf_counter() > deadline:
            raise ScriptSkipped(budget_reason())
        result: str = expand(_REFERENCE.sub(reference, script.replace))
        produced += len(result)
        matched += match.end() - match.start()
        if produced - matched > MAX_GROWTH:
            raise ScriptSkipped(f"its replacements grew a message by more than {MAX_GROWTH:,} characters")
        return result

    count = 0 if "g" in script.flags else 1  # a pattern without the g flag replaces the first match only
    try:
        rewritten: str = pattern.sub(replace, text, count=count, timeout=timeout)
    except TimeoutError:
        raise ScriptSkipped(budget_reason()) from None
    except RecursionError:
        raise ScriptSkipped("the regex engine ran out of stack on this message") from None
    return rewritten

"""Macros, expanded at assembly time (reference/sillytavern.md §4, the new engine's semantics).

One left-to-right pass; a macro's arguments are expanded before the macro itself (inside-out). ``{{…}}``
is found with balanced braces, so ``{{// a {{nested}} comment}}`` is one comment. Unknown macros (and
known ones called with the wrong arguments) stay verbatim, with their nested macros expanded, and are
reported. Variables live in one ``MacroContext`` — one assembly — and are visible to later entries.

Randomness (``roll``, ``random``) comes from the context's seeded generator: the same request always
expands the same way (replays and diffs are reproducible). ``pick`` is seeded by the session and the
text, so it also stays the same across turns.

A hostile text cannot make expansion raise or hang (docs/design-notes.md, "Presets"): braces are paired
in one linear pass, each argument is expanded once, macros nested deeper than ``MAX_NESTING`` levels stay
verbatim, and everything the macros of one assembly produce (results, variable values) shares one budget
of ``MAX_OUTPUT`` characters. Past a bound a macro stays verbatim and the context records a problem, which
the request reports as a warning; ``roll`` and ``newline`` outside their bounds are "bad arguments".

Before the pass, ST's legacy angle-bracket markers (``<USER>``, ``<BOT>``, ``<CHAR>``, ``<GROUP>``,
``<CHARIFNOTGROUP>``, any case) are rewritten into their macros, as ST's engine pre-processor does — so a
preset's ``<user>`` meant as an XML tag becomes the user's name there too (lint notes it). Card fields go
through ``prepare_card_fields`` (ST's ``getCharacterCardFields``) before anything else is expanded.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from zhin_cli.core.registry import Registry

TRIM_MARK = "\x00trim\x00"
# Possessive quantifiers: each class is disjoint from the next, so the language is the same as with greedy
# ones, and a formula of a million blanks is refused in linear time instead of backtracking quadratically.
_DICE = re.compile(r"^\s*+(\d*+)\s*+d\s*+(\d++)\s*+(?:([+-])\s*+(\d++))?\s*+$", re.IGNORECASE)
_COUNT = re.compile(r"\s*+([0-9]{1,6})\s*+")  # {{newline::N}}: ASCII digits (str.isdigit also takes "²", int() does not)

MAX_NESTING = 100  # macro levels expanded; a macro nested deeper stays verbatim (ST has no limit; no real preset nests 10)
MAX_OUTPUT = 10_000_000  # characters the macros of one assembly may produce: results and variable values, together
MAX_DICE = 1000  # {{roll:NdS}}: at most this many dice …
MAX_DIE = 10**15  # … sides and modifier below this
MAX_NEWLINES = 10_000  # {{newline::N}}

# ST's legacy non-brace markers → the macro each becomes (MacroEngine pre-processor "core:legacy-markers": a
# case-insensitive /<USER>/gi …). re.ASCII: JS /i without the u flag never folds a non-ASCII letter onto an
# ASCII one, while Python's Unicode folding would read "<uſer>" (long s) as <USER>.
LEGACY_MARKERS = {"user": "user", "bot": "char", "char": "char", "group": "group", "charifnotgroup": "charIfNotGroup"}
_LEGACY = re.compile(r"<(user|bot|char|group|charifnotgroup)>", re.IGNORECASE | re.ASCII)
# What JavaScript's String.prototype.trim removes (WhiteSpace and LineTerminator): not Python's str.strip,
# which also strips U+001C–U+001F and U+0085 and keeps U+FEFF.
JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
# Card fields in the order ST resolves them (getCharacterCardFields): variables flow in that order. All but
# the examples are also macros ({{description}} …), read from the context.
CARD_FIELDS = ("examples", "description", "personality", "persona", "scenario")
CARD_MACRO_FIELDS = ("description", "personality", "persona", "scenario")


def js_trim(text: str) -> str:
    """``text.trim()`` as JavaScript does it."""
    return text.strip(JS_WHITESPACE)


def rewrite_legacy_markers(text: str) -> str:
    """``<USER>`` → ``{{user}}``, ``<BOT>``/``<CHAR>`` → ``{{char}}``, ``<GROUP>`` → ``{{group}}``,
    ``<CHARIFNOTGROUP>`` → ``{{charIfNotGroup}}``, any case; the macros are then expanded like any other."""
    if "<" not in text:
        return text
    return _LEGACY.sub(lambda m: "{{" + LEGACY_MARKERS[m.group(1).lower()] + "}}", text)


def legacy_markers(text: str) -> list[str]:
    """The legacy markers in ``text`` as written (for lint)."""
    return [m.group() for m in _LEGACY.finditer(text)] if "<" in text else []


class OverBudget(Exception):
    """Raised by ``MacroContext.charge`` when the macros of one assembly would produce more than ``MAX_OUTPUT``."""


@dataclass
class MacroContext:
    user: str = "User"
    char: str = "Assistant"
    persona: str = ""
    description: str = ""
    personality: str = ""
    scenario: str = ""
    group: str = ""
    last_user_message: str = ""
    last_char_message: str = ""
    last_message: str = ""
    summary: str = ""  # {{summary}}: the compaction summary of the window, "" without one (ST: the Summarize extension's)
    model: str = ""
    now_ms: int = 0
    timezone: str = "UTC"
    seed: str = "0"
    session_seed: str = ""
    variables: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)  # unknown macro name → times seen
    random_used: list[str] = field(default_factory=list)  # macros whose value is random (cache warning)
    problems: dict[str, int] = field(default_factory=dict)  # bounds hit (nesting, output) → times; reported as warnings
    budget: int = MAX_OUTPUT  # characters the macros may still produce (``charge``)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def charge(self, characters: int) -> None:
        """Account for ``characters`` a macro is about to produce or copy; ``OverBudget`` past ``MAX_OUTPUT``."""
        if characters > self.budget:
            self.budget = 0
            raise OverBudget
        self.budget -= characters

    def problem(self, text: str) -> None:
        self.problems[text] = self.problems.get(text, 0) + 1

    def snapshot(self) -> tuple[Any, ...]:
        """Everything expansion can change, to undo a regex script that was skipped half-way."""
        return (dict(self.variables), dict(self.unknown), list(self.random_used), dict(self.problems), self.budget,
                self.rng.getstate())

    def restore(self, state: tuple[Any, ...]) -> None:
        variables, unknown, random_used, problems, self.budget, rng = state
        self.variables, self.unknown, self.random_used, self.problems = dict(variables), dict(unknown), list(random_used), dict(problems)
        self.rng.setstate(rng)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms / 1000, tz=ZoneInfo(self.timezone))


Handler = Callable[[MacroContext, list[str]], "str | None"]  # None: wrong arguments → left verbatim
MACROS: Registry[Handler] = Registry("macro")  # keyed by the lower-cased name: ST's macro names ignore case


def macro(*names: str, replace: bool = False) -> Callable[[Handler], Handler]:
    return MACROS.adding(*(name.lower() for name in names), replace=replace)


def _no_args(value: Callable[[MacroContext], str]) -> Handler:
    return lambda ctx, args: value(ctx) if not args else None


for _name, _getter in {
    "user": lambda c: c.user, "char": lambda c: c.char, "persona": lambda c: c.persona,
    "description": lambda c: c.description, "charDescription": lambda c: c.description,
    "personality": lambda c: c.personality, "charPersonality": lambda c: c.personality,
    "scenario": lambda c: c.scenario, "charScenario": lambda c: c.scenario,
    "group": lambda c: c.group or c.char, "charIfNotGroup": lambda c: c.group or c.char,
    "lastUserMessage": lambda c: c.last_user_message, "lastCharMessage": lambda c: c.last_char_message,
    "lastMessage": lambda c: c.last_message, "model": lambda c: c.model, "summary": lambda c: c.summary,
    "noop": lambda c: "", "trim": lambda c: TRIM_MARK,
    "isotime": lambda c: c.now().strftime("%H:%M"), "isodate": lambda c: c.now().strftime("%Y-%m-%d"),
    "weekday": lambda c: c.now().strftime("%A"),
    "date": lambda c: f"{c.now():%B} {c.now().day}, {c.now().year}",  # moment "LL"
    "time": lambda c: f"{(c.now().hour % 12) or 12}:{c.now():%M} {c.now():%p}",  # moment "LT"
}.items():
    macro(_name)(_no_args(_getter))


@macro("newline")
def _newline(ctx: MacroContext, args: list[str]) -> str | None:
    if not args:
        return "\n"
    count = _COUNT.fullmatch(args[0]) if len(args) == 1 else None
    if count is None or int(count.group(1)) > MAX_NEWLINES:
        return None
    return "\n" * int(count.group(1))


@macro("getvar")
def _getvar(ctx: MacroContext, args: list[str]) -> str | None:
    return ctx.variables.get(args[0].strip(), "") if len(args) == 1 else None


@macro("setvar")
def _setvar(ctx: MacroContext, args: list[str]) -> str | None:
    if len(args) != 2:
        return None
    ctx.variables[args[0].strip()] = args[1]
    return ""


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value  # JS: Number("NaN") is not a number, so addvar concatenates


def _format_number(value: float) -> str:
    if math.isinf(value) or math.isnan(value):  # "1e999" is Infinity in JS too; int() of it would raise
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return str(int(value)) if value == int(value) else str(value)


def _json_array(text: str) -> list[Any] | None:
    """``text`` as a JSON array, or None when it is not one: not JSON, or nested past the recursion limit (which
    is then a value like any other non-array, so addvar concatenates — never a RecursionError)."""
    if not text.startswith("["):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, list) else None


def _appended(array: list[Any] | None, value: str) -> str | None:
    """``array`` with ``value`` appended, as JSON; None if it cannot be written (nested past the recursion limit)."""
    if array is None:
        return None
    try:
        return json.dumps([*array, value], ensure_ascii=False, separators=(",", ":"))  # JSON.stringify: no spaces
    except RecursionError:
        return None


@macro("addvar")
def _addvar(ctx: MacroContext, args: list[str]) -> str | None:
    if len(args) != 2:
        return None
    name, value = args[0].strip(), args[1]
    current = ctx.variables.get(name, "")
    ctx.charge(len(current) + len(value))  # the new value is a copy of both (and parsing reads the old one)
    appended = _appended(_json_array(current), value)
    left, right = _number(current), _number(value)
    if appended is not None:
        ctx.variables[name] = appended
    elif left is not None and right is not None:
        ctx.variables[name] = _format_number(left + right)
    else:
        ctx.variables[name] = current + value
    return ""


def _step(delta: int) -> Handler:
    def handler(ctx: MacroContext, args: list[str]) -> str | None:
        if len(args) != 1:
            return None
        name = args[0].strip()
        ctx.charge(len(ctx.variables.get(name, "")))  # parsing reads the old value
        value = _format_number((_number(ctx.variables.get(name, "")) or 0) + delta)
        ctx.variables[name] = value
        return value

    return handler


macro("incvar")(_step(1))
macro("decvar")(_step(-1))


@macro("roll")
def _roll(ctx: MacroContext, args: list[str]) -> str | None:
    if len(args) != 1:
        return None
    formula = args[0].strip()
    if formula.isdigit():
        formula = f"1d{formula}"
    match = _DICE.match(formula)
    ctx.random_used.append("roll")
    if not match:
        return ""  # ST: an invalid formula gives ""
    numbers = [match.group(1) or "1", match.group(2), match.group(4) or "0"]
    if any(len(number) > 15 for number in numbers):  # past MAX_DIE (and int() refuses 4,300 digits)
        return None
    count, sides, modifier = (int(number) for number in numbers)
    if sides < 1:
        return ""
    if count > MAX_DICE or sides >= MAX_DIE or modifier >= MAX_DIE:
        return None  # left verbatim and reported, never a silently smaller roll
    total = sum(ctx.rng.randint(1, sides) for _ in range(count))
    return str(total + (modifier if match.group(3) != "-" else -modifier))


def _choices(args: list[str]) -> list[str]:
    if len(args) == 1:  # {{random:a,b}} / {{random a,b}}: comma list, "\," escapes a comma
        return [item.replace("\\,", ",").strip() for item in re.split(r"(?<!\\),", args[0])]
    return args


@macro("random")
def _random(ctx: MacroContext, args: list[str]) -> str | None:
    if not args:
        return None
    ctx.random_used.append("random")
    return ctx.rng.choice(_choices(args))


@macro("pick")
def _pick(ctx: MacroContext, args: list[str]) -> str | None:
    if not args:
        return None
    items = _choices(args)
    digest = hashlib.sha256(f"{ctx.session_seed}\x00{'::'.join(args)}".encode()).digest()
    return items[int.from_bytes(digest[:8], "big") % len(items)]


_BRACES = re.compile(r"\{\{|\}\}")
_OPEN_OR_SEPARATOR = re.compile(r"\{\{|::")


def _pairs(text: str) -> dict[int, int]:
    """Start of every ``{{`` → start of the ``}}`` that balances it, in one pass (an unbalanced ``{{`` is absent).

    The same pairing a scan from each ``{{`` counting ``{{`` up and ``}}`` down finds, for all of them at once:
    nesting thousands deep costs one pass, not one per level."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for token in _BRACES.finditer(text):
        if token.group() == "{{":
            stack.append(token.start())
        elif stack:
            pairs[stack.pop()] = token.start()
    return pairs


def _closing(text: str, start: int, end: int, pairs: dict[int, int]) -> int | None:
    """Index of the ``}}`` that balances the ``{{`` at ``start`` inside ``text[:end]``, or None (then it is text)."""
    close = pairs.get(start)
    return close if close is not None and close + 2 <= end else None


def _split_top(text: str, lo: int, hi: int, pairs: dict[int, int]) -> list[tuple[int, int]]:
    """``text[lo:hi]`` split at ``::`` outside nested ``{{…}}``, as (start, end) ranges. Nested macros are jumped
    over through ``pairs``, so each level reads only its own separators."""
    parts: list[tuple[int, int]] = []
    start = index = lo
    while True:
        token = _OPEN_OR_SEPARATOR.search(text, index, hi)
        if token is None:
            break
        if token.group() == "::":
            parts.append((start, token.start()))
            start = index = token.end()
            continue
        close = _closing(text, token.start(), hi, pairs)
        if close is None:  # an unbalanced {{ swallows the rest: no separator after it counts
            break
        index = close + 2
    parts.append((start, hi))
    return parts


# A macro's head: its name, then (an argument follows) blanks and at most one ":". Anchored on both sides and
# possessive, so it reads the head only, never the argument (which may hold the rest of a deeply nested text).
_HEAD = re.compile(r"\s*+([A-Za-z_.$][^\s:{}]*+)(?=[\s:]|$)\s*+:?\s*+")
_COMMENT = re.compile(r"\s*+//")
_BLOCK_COMMENT = re.compile(r"\s*+//\s*+")
NESTING_PROBLEM = f"macros nested deeper than {MAX_NESTING} levels are left verbatim"
OUTPUT_PROBLEM = f"macros produced more than {MAX_OUTPUT:,} characters in one request; the rest are left verbatim"


def _apply_trim(text: str) -> str:
    """``{{trim}}``: remove each mark and the newlines on both sides of it (a split, not a regex: linear on any text)."""
    if TRIM_MARK not in text:
        return text
    pieces = text.split(TRIM_MARK)
    last = len(pieces) - 1
    for index, piece in enumerate(pieces):
        if index < last:
            piece = piece.rstrip("\n")
        if index:
            piece = piece.lstrip("\n")
        pieces[index] = piece
    return "".join(pieces)


class MacroEngine:
    def __init__(self, context: MacroContext) -> None:
        self.context = context
        self._text = ""
        self._pairs: dict[int, int] = {}

    def expand(self, text: str) -> str:
        """Rewrite the legacy markers, expand every macro in ``text`` and apply ``{{trim}}`` (which never crosses texts)."""
        text = rewrite_legacy_markers(text)
        if "{{" not in text:
            return text
        outer = self._text, self._pairs  # a handler never expands, but keep expand() re-entrant anyway
        self._text, self._pairs = text, _pairs(text)
        try:
            return _apply_trim(self._expand(0, len(text), 0))
        finally:
            self._text, self._pairs = outer

    def _expand(self, lo: int, hi: int, depth: int) -> str:
        text = self._text
        out: list[str] = []
        index = lo
        while True:
            start = text.find("{{", index, hi)
            if start < 0:
                out.append(text[index:hi])
                break
            out.append(text[index:start])
            end = _closing(text, start, hi, self._pairs)
            if end is None:
                out.append(text[start:hi])
                break
            index = end + 2
            if _BLOCK_COMMENT.fullmatch(text, start + 2, end):  # block comment {{//}} … {{///}}
                closer = text.find("{{///}}", index, hi)
                index = hi if closer < 0 else closer + len("{{///}}")
                continue
            if depth >= MAX_NESTING:
                self.context.problem(NESTING_PROBLEM)
                out.append(text[start:index])
                continue
            out.append(self._call(start + 2, end, depth))
        return "".join(out)

    def _call(self, lo: int, hi: int, depth: int) -> str:
        text = self._text
        comment = _COMMENT.match(text, lo, hi)
        if comment:
            self._expand(comment.end(), hi, depth + 1)  # nested macros still run (ST evaluates arguments first), then vanish
            return ""
        parts = _split_top(text, lo, hi, self._pairs)
        first_lo, first_hi = parts[0]
        match = _HEAD.match(text, first_lo, first_hi)
        if match is None:
            return "{{" + self._expand(lo, hi, depth + 1) + "}}"
        name = match.group(1)
        has_argument = match.end() < first_hi
        if len(parts) > 1:
            if has_argument:  # "{{name rest::x}}": not a macro call we understand
                return "{{" + self._expand(lo, hi, depth + 1) + "}}"
            pieces, prefix = parts[1:], text[first_lo:first_hi] + "::"
        elif has_argument:  # "{{name arg}}" / "{{name:arg}}": one argument
            pieces, prefix = [(match.end(), hi)], text[lo : match.end()]
        else:
            pieces, prefix = [], text[lo:hi]
        # Each argument is expanded once: a verbatim macro is rebuilt from them (expanding the body again would
        # run their variables twice, and double the work at every level of nesting).
        expanded = [self._expand(a, b, depth + 1) for a, b in pieces]

        def verbatim() -> str:
            return "{{" + prefix + "::".join(expanded) + "}}"

        handler = MACROS.get(name.lower())
        if handler is None:
            # Legacy {{time_UTC+2}} and similar names are unknown too; report and keep.
            self.context.unknown[name] = self.context.unknown.get(name, 0) + 1
            return verbatim()
        try:
            result = handler(self.context, expanded)
            if result is not None:
                self.context.charge(len(result))
        except OverBudget:
            self.context.problem(OUTPUT_PROBLEM)
            return verbatim()
        if result is None:
            self.context.unknown.setdefault(f"{name} (bad arguments)", 0)
            self.context.unknown[f"{name} (bad arguments)"] += 1
            return verbatim()
        return result


def prepare_card_fields(engine: MacroEngine, raw: dict[str, str]) -> dict[str, str]:
    """The card fields as ST prepares them (``getCharacterCardFields`` → ``baseChatReplace``), once per request
    and before anything else is expanded: each field trimmed (JS ``trim``), then macro-expanded with the card
    macros empty — ``{{description}}`` inside a card field gives "", never itself — then ``\\r`` removed. They
    are set on ``engine``'s context (the markers and the card macros read them there) and returned, the
    examples included."""
    context = engine.context
    for name in CARD_MACRO_FIELDS:
        setattr(context, name, "")
    prepared = {name: engine.expand(js_trim(raw.get(name, ""))).replace("\r", "") for name in CARD_FIELDS}
    for name in CARD_MACRO_FIELDS:
        setattr(context, name, prepared[name])
    return prepared


def scan_macros(text: str) -> tuple[list[str], int]:
    """The names of the macros in ``text`` (pre-order, any depth; a comment is ``//`` and hides its insides) and
    how deep balanced ``{{…}}`` nest, without expanding anything and without recursion."""
    pairs = _pairs(text)
    names: list[str] = []
    ranges = [(0, len(text))]
    while ranges:
        lo, hi = ranges[-1]
        start = text.find("{{", lo, hi)
        end = None if start < 0 else _closing(text, start, hi, pairs)
        if start < 0 or end is None:  # an unclosed {{ ends this level, as it ends expansion there
            ranges.pop()
            continue
        ranges[-1] = (end + 2, hi)
        if _COMMENT.match(text, start + 2, end):
            names.append("//")
            continue
        first = _split_top(text, start + 2, end, pairs)[0]
        match = _HEAD.match(text, first[0], first[1])
        names.append(match.group(1) if match else text[start + 2 : min(end, start + 4096)].strip()[:20])
        ranges.append((start + 2, end))
    depth = deepest = 0
    for _position, step in sorted([(s, 1) for s in pairs] + [(e, -1) for e in pairs.values()]):
        depth += step
        deepest = max(deepest, depth)
    return names, deepest


def macro_names(text: str) -> list[str]:
    """Names of the macros in ``text`` at any nesting depth (for lint), without expanding anything."""
    return scan_macros(text)[0]


def macro_depth(text: str) -> int:
    """How deep the balanced ``{{…}}`` in ``text`` nest (lint warns past ``MAX_NESTING``)."""
    return scan_macros(text)[1]


def is_known(name: str) -> bool:
    return name == "//" or name.lower() in MACROS


RANDOM_MACROS = frozenset({"random", "roll"})
TIME_MACROS = frozenset({"time", "date", "weekday", "isotime", "isodate"})

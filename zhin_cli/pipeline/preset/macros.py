"""Macros, expanded at assembly time: SillyTavern 1.18's macro engine (docs/spec/sillytavern.md §4).

What a text means is decided as ST's lexer, parser and walker decide it (read for behaviour only; no ST code):

* ``{{`` opens a macro when what follows (after blanks and flags ``! ? ~ # / >``) is a name (an ASCII letter
  first), ``//`` (a comment), ``.``/``$`` (a variable shorthand) or ``}}``; otherwise the braces are text. Of a
  run of ``{``, the last two open the macro (``{{{char}}`` → ``{`` + the name). The first ``}}`` after a macro's
  nested macros closes it; a macro never closed is text, and the macros inside it still run.
* Arguments: ``{{name::a::b}}`` is a list; ``{{name:rest}}`` and ``{{name rest}}`` are one argument, colons and
  ``::`` included. Blanks around each argument are not part of it.
* Scoped (block) form ``{{name args}}content{{/name}}``: the content, its macros expanded, is the last argument,
  trimmed and dedented unless the ``#`` flag is set. A closer pairs with the nearest opener of the same name
  (any case) that can take one more argument; an opener that cannot, keeps both tags as they are written; a
  closer with no opener is text. ``{{//}}…{{///}}`` (any ``{{//`` whose argument starts with ``/``) is a block
  comment.
* ``{{if cond}}then{{else}}other{{/if}}`` (and ``{{if::cond::then}}``): the condition is expanded, a bare name
  of a macro that takes no argument is called, ``.x``/``$x`` read a variable, a leading ``!`` negates; ``""``,
  ``false``, ``off`` and ``0`` (any case, trimmed) are false. Only the chosen branch is expanded (its macros run
  only then), trimmed and dedented unless ``#``. ``{{.x}}``, ``{{.x = v}}``, ``{{.x += v}}``, ``{{.x++}}``,
  ``{{.x--}}`` (and ``$x`` for the global map) are the variable macros.
* One left-to-right pass; a macro's arguments are expanded before the macro itself (inside-out), except
  ``{{if}}``'s. Unknown macros (and known ones called with the wrong arguments) stay as written with their
  nested macros expanded, and are reported. After the pass: ``\\{``/``\\}`` lose their backslash, ``{{trim}}``
  is removed with the line breaks around it, a stray ``{{else}}`` vanishes.

Variables live in one ``MacroContext`` — one assembly — and are visible to later entries.

Randomness (``roll``, ``random``) comes from the context's seeded generator: the same request always
expands the same way (replays and diffs are reproducible). ``pick`` is seeded by the session and the
text, so it also stays the same across turns.

A hostile text cannot make expansion raise or hang (docs/design-notes.md, "Presets"): braces are paired
in one linear pass, each argument is expanded once, macros nested deeper than ``MAX_NESTING`` levels stay
verbatim, block tags are paired within a bounded number of steps, and everything the macros of one assembly
produce (results, variable values) shares one budget of ``MAX_OUTPUT`` characters. Past a bound a macro stays
verbatim and the context records a problem, which the request reports as a warning; ``roll`` and ``newline``
outside their bounds are "bad arguments".

Before the pass, ST's legacy angle-bracket markers (``<USER>``, ``<BOT>``, ``<CHAR>``, ``<GROUP>``,
``<CHARIFNOTGROUP>``, any case) are rewritten into their macros, as ST's engine pre-processor does — so a
preset's ``<user>`` meant as an XML tag becomes the user's name there too (lint notes it). Card fields go
through ``prepare_card_fields`` (ST's ``getCharacterCardFields``) before anything else is expanded.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple
from zoneinfo import ZoneInfo

from zhin_cli.core.registry import Registry

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSON

TRIM_MARK = "{{trim}}"  # what a plain {{trim}} gives; removed with the line breaks around it after the pass
ELSE_MARK = "\x00\x1fELSE\x1f\x00"  # what {{else}} gives outside an {{if}}; removed after the pass
# Possessive quantifiers: each class is disjoint from the next, so the language is the same as with greedy
# ones, and a formula of a million blanks is refused in linear time instead of backtracking quadratically.
_DICE = re.compile(r"^\s*+(\d*+)\s*+d\s*+(\d++)\s*+(?:([+-])\s*+(\d++))?\s*+$", re.IGNORECASE)
_COUNT = re.compile(r"\s*+([0-9]{1,6})\s*+")  # {{newline::N}}: ASCII digits (str.isdigit also takes "²", int() does not)

MAX_NESTING = 100  # macro levels expanded; a macro nested deeper stays verbatim (ST has no limit; no real preset nests 10)
MAX_OUTPUT = 10_000_000  # characters the macros of one assembly may produce: results and variable values, together
MAX_DICE = 1000  # {{roll:NdS}}: at most this many dice …
MAX_DIE = 10**15  # … sides and modifier below this
MAX_NEWLINES = 10_000  # {{newline::N}}
MAX_PAIRING_STEPS = 1_000_000  # block tags looked at while pairing openers with closers, in one expansion

# ST's legacy non-brace markers → the macro each becomes (MacroEngine pre-processor "core:legacy-markers": a
# case-insensitive /<USER>/gi …). re.ASCII: JS /i without the u flag never folds a non-ASCII letter onto an
# ASCII one, while Python's Unicode folding would read "<uſer>" (long s) as <USER>.
LEGACY_MARKERS = {"user": "user", "bot": "char", "char": "char", "group": "group", "charifnotgroup": "charIfNotGroup"}
_LEGACY = re.compile(r"<(user|bot|char|group|charifnotgroup)>", re.IGNORECASE | re.ASCII)
# What JavaScript's String.prototype.trim removes (WhiteSpace and LineTerminator): not Python's str.strip,
# which also strips U+001C–U+001F and U+0085 and keeps U+FEFF. It is also what JS's \s matches.
JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_SPACE = frozenset(JS_WHITESPACE)
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


class MacroState(NamedTuple):
    """What expansion can change in a ``MacroContext`` (``snapshot`` / ``restore``)."""

    variables: dict[str, str]
    global_variables: dict[str, str]
    unknown: dict[str, int]
    random_used: list[str]
    problems: dict[str, int]
    budget: int
    rng: tuple[object, ...]  # random.Random.getstate()


@dataclass
class MacroContext:
    user: str = "User"
    char: str = "Assistant"
    persona: str = ""
    description: str = ""
    personality: str = ""
    scenario: str = ""
    group: str = ""  # {{group}}: every member of a group chat, "" outside one
    group_not_muted: str = ""  # {{groupNotMuted}}: the members who are not muted
    not_char: str = ""  # {{notChar}} in a group: the members who are not muted, but for {{char}}
    last_user_message: str = ""
    last_char_message: str = ""
    last_message: str = ""
    summary: str = ""  # {{summary}}: the compaction summary of the window, "" without one (ST: the Summarize extension's)
    model: str = ""
    now_ms: int = 0
    timezone: str = "UTC"
    seed: str = "0"
    session_seed: str = ""
    variables: dict[str, str] = field(default_factory=dict)  # the chat's ({{getvar}}, {{.x}})
    global_variables: dict[str, str] = field(default_factory=dict)  # ST's global ones ({{getglobalvar}}, {{$x}})
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

    def report_unknown(self, name: str) -> None:
        self.unknown[name] = self.unknown.get(name, 0) + 1

    def problem(self, text: str) -> None:
        self.problems[text] = self.problems.get(text, 0) + 1

    def snapshot(self) -> MacroState:
        """Everything expansion can change, to undo a regex script that was skipped half-way."""
        return MacroState(dict(self.variables), dict(self.global_variables), dict(self.unknown), list(self.random_used),
                          dict(self.problems), self.budget, self.rng.getstate())

    def restore(self, state: MacroState) -> None:
        variables, global_variables, unknown, random_used, problems, self.budget, rng = state
        self.variables, self.global_variables = dict(variables), dict(global_variables)
        self.unknown, self.random_used, self.problems = dict(unknown), list(random_used), dict(problems)
        self.rng.setstate(rng)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms / 1000, tz=ZoneInfo(self.timezone))


Handler = Callable[[MacroContext, list[str]], "str | None"]  # None: wrong arguments → left verbatim
MACROS: Registry[Handler] = Registry("macro")  # keyed by the lower-cased name: ST's macro names ignore case


@dataclass(frozen=True)
class Arity:
    """How many arguments a macro takes (ST's ``unnamedArgs``/``list``). It decides whether a block closer can
    give the macro its content as one more argument, and whether ``{{if name}}`` calls the macro ``name``."""

    minimum: int
    maximum: int | None  # None: a list macro ({{random::a::b::…}}), which never takes block content
    delayed: bool = False  # the arguments reach the macro unexpanded ({{if}} expands only its chosen branch)

    def admits(self, count: int) -> bool:
        return count >= self.minimum and (self.maximum is None or count <= self.maximum)

    def takes_block(self, inline: int) -> bool:
        return self.maximum is not None and self.admits(inline + 1)


ARITIES: Registry[Arity] = Registry("macro arity")  # lower-cased name → arity; a plugin's macro without one takes any arguments
NONE, ONE, TWO, OPTIONAL = Arity(0, 0), Arity(1, 1), Arity(2, 2), Arity(0, 1)


def macro(*names: str, replace: bool = False, arity: Arity | None = None) -> Callable[[Handler], Handler]:
    def add(handler: Handler) -> Handler:
        MACROS.adding(*(name.lower() for name in names), replace=replace)(handler)
        for name in names:
            if arity is not None:
                ARITIES.add(name.lower(), arity, replace=replace)
            else:
                ARITIES.remove(name.lower())
        return handler

    return add


def _no_args(value: Callable[[MacroContext], str]) -> Handler:
    return lambda ctx, args: value(ctx) if not args else None


for _name, _getter in {
    "user": lambda c: c.user, "char": lambda c: c.char, "persona": lambda c: c.persona,
    "description": lambda c: c.description, "charDescription": lambda c: c.description,
    "personality": lambda c: c.personality, "charPersonality": lambda c: c.personality,
    "scenario": lambda c: c.scenario, "charScenario": lambda c: c.scenario,
    "group": lambda c: c.group or c.char, "charIfNotGroup": lambda c: c.group or c.char,
    # ST 1.18's macro environment: in a group the lists below; outside one the character, and the user
    "groupNotMuted": lambda c: c.group_not_muted if c.group else c.char,
    "notChar": lambda c: c.not_char if c.group else c.user,
    "lastUserMessage": lambda c: c.last_user_message, "lastCharMessage": lambda c: c.last_char_message,
    "lastMessage": lambda c: c.last_message, "model": lambda c: c.model, "summary": lambda c: c.summary,
    "noop": lambda c: "", "else": lambda c: ELSE_MARK,
    "isotime": lambda c: c.now().strftime("%H:%M"), "isodate": lambda c: c.now().strftime("%Y-%m-%d"),
    "weekday": lambda c: c.now().strftime("%A"),
    "date": lambda c: f"{c.now():%B} {c.now().day}, {c.now().year}",  # moment "LL"
    "time": lambda c: f"{(c.now().hour % 12) or 12}:{c.now():%M} {c.now():%p}",  # moment "LT"
}.items():
    macro(_name, arity=NONE)(_no_args(_getter))


@macro("trim", arity=OPTIONAL)
def _trim(ctx: MacroContext, args: list[str]) -> str:
    """A plain {{trim}} marks its place for the pass after; in block form the engine gives it its content."""
    return TRIM_MARK


@macro("//", "comment", arity=ONE)
def _comment(ctx: MacroContext, args: list[str]) -> str:
    return ""  # its argument was expanded (its macros ran) and is dropped


@macro("if", arity=Arity(2, 2, delayed=True))
def _if(ctx: MacroContext, args: list[str]) -> str | None:
    return None  # never called: the engine runs {{if}} itself (it expands only the branch it chooses)


@macro("reverse", arity=ONE)
def _reverse(ctx: MacroContext, args: list[str]) -> str:
    return args[0][::-1]  # by code point, as Array.from(value).reverse()


@macro("newline", arity=OPTIONAL)
def _newline(ctx: MacroContext, args: list[str]) -> str | None:
    if not args:
        return "\n"
    count = _COUNT.fullmatch(args[0]) if len(args) == 1 else None
    if count is None or int(count.group(1)) > MAX_NEWLINES:
        return None
    return "\n" * int(count.group(1))


Store = Callable[[MacroContext], dict[str, str]]


def _local(ctx: MacroContext) -> dict[str, str]:
    return ctx.variables


def _global(ctx: MacroContext) -> dict[str, str]:
    return ctx.global_variables


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


def _json_array(text: str) -> list[JSON] | None:
    """``text`` as a JSON array, or None when it is not one: not JSON, or nested past the recursion limit (which
    is then a value like any other non-array, so addvar concatenates — never a RecursionError)."""
    if not text.startswith("["):
        return None
    try:
        value: JSON = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, list) else None


def _appended(array: list[JSON] | None, value: str) -> str | None:
    """``array`` with ``value`` appended, as JSON; None if it cannot be written (nested past the recursion limit)."""
    if array is None:
        return None
    try:
        return json.dumps([*array, value], ensure_ascii=False, separators=(",", ":"))  # JSON.stringify: no spaces
    except RecursionError:
        return None


def get_variable(ctx: MacroContext, store: dict[str, str], name: str) -> str:
    return store.get(name, "")


def set_variable(ctx: MacroContext, store: dict[str, str], name: str, value: str) -> str:
    store[name] = value
    return ""


def add_variable(ctx: MacroContext, store: dict[str, str], name: str, value: str) -> str:
    current = store.get(name, "")
    ctx.charge(len(current) + len(value))  # the new value is a copy of both (and parsing reads the old one)
    appended = _appended(_json_array(current), value)
    left, right = _number(current), _number(value)
    if appended is not None:
        store[name] = appended
    elif left is not None and right is not None:
        store[name] = _format_number(left + right)
    else:
        store[name] = current + value
    return ""


def step_variable(ctx: MacroContext, store: dict[str, str], name: str, delta: int) -> str:
    ctx.charge(len(store.get(name, "")))  # parsing reads the old value
    value = _format_number((_number(store.get(name, "")) or 0) + delta)
    store[name] = value
    return value


def _variable_macros(scope: str, store: Store) -> None:
    macro(f"get{scope}var", arity=ONE)(lambda ctx, args: get_variable(ctx, store(ctx), args[0]))
    macro(f"set{scope}var", arity=TWO)(lambda ctx, args: set_variable(ctx, store(ctx), args[0], args[1]))
    macro(f"add{scope}var", arity=TWO)(lambda ctx, args: add_variable(ctx, store(ctx), args[0], args[1]))
    macro(f"inc{scope}var", arity=ONE)(lambda ctx, args: step_variable(ctx, store(ctx), args[0], 1))
    macro(f"dec{scope}var", arity=ONE)(lambda ctx, args: step_variable(ctx, store(ctx), args[0], -1))


_variable_macros("", _local)
_variable_macros("global", _global)


@macro("roll", arity=ONE)
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


@macro("random", arity=Arity(1, None))
def _random(ctx: MacroContext, args: list[str]) -> str | None:
    if not args:
        return None
    ctx.random_used.append("random")
    return ctx.rng.choice(_choices(args))


@macro("pick", arity=Arity(1, None))
def _pick(ctx: MacroContext, args: list[str]) -> str | None:
    if not args:
        return None
    items = _choices(args)
    digest = hashlib.sha256(f"{ctx.session_seed}\x00{'::'.join(args)}".encode()).digest()
    return items[int.from_bytes(digest[:8], "big") % len(items)]


# --- reading a text as ST's lexer and parser do ----------------------------------------------------------

_FLAGS = frozenset("!?~#/>")  # ST's flags before a name ("/" closes a block, "#" keeps a block's blanks)
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_BRACES = re.compile(r"\{\{+|\}\}")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*+")  # ST's macro identifier (ASCII, a letter first)
_VARIABLE_NAME = re.compile(r"[A-Za-z](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?")  # a shorthand's: not ending in "-"
_VARIABLE_OPERATOR = re.compile(r"\+\+|--|\+=|=")
_LOOSE_NAME = re.compile(r"[^\s:{}]*+")  # what zhin reports of a name ST's lexer cannot end ("time_UTC+2")
_VARIABLE_CONDITION = re.compile(r"([.$])([A-Za-z](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?)")
_SPACE_CLASS = "[" + re.escape(JS_WHITESPACE) + "]"
_NEGATION = re.compile(f"{_SPACE_CLASS}*+!{_SPACE_CLASS}*+")
_ESCAPED_BRACE = re.compile(r"\\([{}])")
_TRIM = re.compile(re.escape(TRIM_MARK), re.IGNORECASE)
_INDENT = re.compile(r"[ \t]*+")
NESTING_PROBLEM = f"macros nested deeper than {MAX_NESTING} levels are left verbatim"
OUTPUT_PROBLEM = f"macros produced more than {MAX_OUTPUT:,} characters in one request; the rest are left verbatim"
PAIRING_PROBLEM = (f"block macros past {MAX_PAIRING_STEPS:,} pairing steps in one text are left unpaired "
                   "(expanded as single macros)")


def _opens(text: str, at: int) -> bool:
    """Whether the ``{{`` at ``at`` opens a macro: after blanks and flags comes ``}}``, ``//``, ``.``, ``$`` or
    a letter (else ST's lexer leaves its macro mode and the braces are text)."""
    index, end = at + 2, len(text)
    while index < end:
        if text.startswith("}}", index) or text.startswith("//", index):
            return True
        character = text[index]
        if character in ".$" or character in _LETTERS:
            return True
        if character not in _FLAGS and character not in _JS_SPACE:
            return False
        index += 1
    return False


def _pairs(text: str) -> dict[int, int]:
    """Start of every ``{{`` that opens a macro → start of the ``}}`` that closes it, in one pass (a macro never
    closed is absent: its braces are text). Of a run of ``{``, the last two open."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for token in _BRACES.finditer(text):
        if token.group()[0] == "{":
            at = token.end() - 2
            if _opens(text, at):
                stack.append(at)
        elif stack:
            pairs[stack.pop()] = token.start()
    return pairs


@dataclass
class _Doc:
    text: str
    pairs: dict[int, int]
    parsed: dict[int, _Call] = field(default_factory=dict)  # each macro read once, whatever level reads it

    def call(self, start: int) -> _Call:
        call = self.parsed.get(start)
        if call is None:
            call = self.parsed[start] = _parse(self, start, self.pairs[start])
        return call

    def macro_at(self, found: int, hi: int) -> tuple[int, int, int]:
        """For a ``{{`` found at ``found``: (start, close, after) of the macro its brace run opens inside
        ``[.., hi)``, or (-1, -1, after) when those braces are text; ``after`` is where scanning goes on."""
        run = found
        while run < hi and self.text[run] == "{":
            run += 1
        start = run - 2
        close = self.pairs.get(start, -1)
        if close < 0 or close + 2 > hi:
            return -1, -1, run
        return start, close, close + 2

    def macros(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The macros of ``[lo, hi)`` that are not inside another one, as (start of ``{{``, start of ``}}``)."""
        out: list[tuple[int, int]] = []
        index = lo
        while True:
            found = self.text.find("{{", index, hi)
            if found < 0:
                return out
            start, close, index = self.macro_at(found, hi)
            if start >= 0:
                out.append((start, close))

    def split(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """``[lo, hi)`` cut at each ``::`` outside nested macros."""
        parts: list[tuple[int, int]] = []
        text, start = self.text, lo
        brace, colons = text.find("{{", lo, hi), text.find("::", lo, hi)
        while colons >= 0:  # each search only moves forward: linear in the range
            if 0 <= brace < colons:
                index = self.macro_at(brace, hi)[2]
                brace = text.find("{{", index, hi)
                if colons < index:
                    colons = text.find("::", index, hi)
                continue
            parts.append((start, colons))
            start = colons + 2
            colons = text.find("::", start, hi)
        parts.append((start, hi))
        return parts

    def stripped(self, lo: int, hi: int) -> tuple[int, int]:
        """``[lo, hi)`` without JS blanks at either end (ST's lexer skips them: no argument starts or ends with one)."""
        text = self.text
        while lo < hi and text[lo] in _JS_SPACE:
            lo += 1
        while hi > lo and text[hi - 1] in _JS_SPACE:
            hi -= 1
        return lo, hi


@dataclass
class _Call:
    """One macro as ST's parser reads it. ``name`` is lower-cased for lookup; ``written`` is as written."""

    start: int  # the "{{"
    close: int  # the "}}"
    flags: str = ""
    name: str = ""  # "" when the body is no macro ST can call ({{}}, {{#}}, a malformed shorthand)
    written: str = ""
    args: list[tuple[int, int]] = field(default_factory=list)
    closing: bool = False
    variable: tuple[str, str, str, tuple[int, int] | None] | None = None  # (scope, name, operator, value)

    @property
    def end(self) -> int:
        return self.close + 2


def _parse(doc: _Doc, start: int, close: int) -> _Call:
    text, call = doc.text, _Call(start, close)
    index = start + 2
    while index < close and not text.startswith("//", index) and (text[index] in _FLAGS or text[index] in _JS_SPACE):
        call.flags += text[index] if text[index] in _FLAGS else ""
        index += 1
    call.closing = "/" in call.flags
    if text.startswith("//", index):
        call.name = call.written = "//"
        _arguments(doc, call, index + 2)
        first = call.args[0] if call.args else None
        if first is not None and first[0] < first[1] and text[first[0]] == "/":
            call.closing = True  # {{///}}: the lexer reads "//" first, so ST takes an argument "/…" as the closer
        return call
    if index < close and text[index] in ".$":
        return _parse_variable(doc, call, index)
    name = _NAME.match(text, index, close)
    if name is None:
        return call
    after = name.end()
    if after < close and text[after] not in _JS_SPACE and text[after] not in ":|}":
        loose = _LOOSE_NAME.match(text, index, close)
        if loose is not None and loose.end() > after:  # a name ST's lexer cannot end ("time_UTC+2"): reported
            call.written = loose.group()
            call.name = "\x00" + call.written.lower()
        return call
    call.written, call.name = name.group(), name.group().lower()
    _arguments(doc, call, after)
    return call


def _arguments(doc: _Doc, call: _Call, index: int) -> None:
    """``{{name::a::b}}`` → a list; ``{{name:rest}}``, ``{{name rest}}`` → one argument, colons included."""
    lo, hi = doc.stripped(index, call.close)
    if lo == hi:
        return
    if doc.text.startswith("::", lo):
        call.args = [doc.stripped(a, b) for a, b in doc.split(lo + 2, hi)]
        return
    if doc.text[lo] == ":":
        lo = doc.stripped(lo + 1, hi)[0]
        if lo == hi:
            return
    call.args = [(lo, hi)]


def _parse_variable(doc: _Doc, call: _Call, index: int) -> _Call:
    text, close = doc.text, call.close
    scope = text[index]
    lo = doc.stripped(index + 1, close)[0]
    name = _VARIABLE_NAME.match(text, lo, close)
    call.written = text[index:close].strip(JS_WHITESPACE)
    if name is None:
        return call
    lo = doc.stripped(name.end(), close)[0]
    operator = _VARIABLE_OPERATOR.match(text, lo, close)
    value: tuple[int, int] | None = None
    if operator is not None:
        if operator.group() in ("=", "+="):
            value = doc.stripped(operator.end(), close)
        elif doc.stripped(operator.end(), close)[0] != close:
            return call
    elif lo != close:
        return call
    call.name = scope
    call.variable = (scope, name.group(), operator.group() if operator else "", value)
    return call


def _pairable(call: _Call) -> bool:
    """A call block tags can pair: a comment or a macro name (not a shorthand, not an unreadable name)."""
    return call.name == "//" or _NAME.fullmatch(call.name) is not None


def trim_block(content: str) -> str:
    """ST's trim of block content: JS ``trim``, and the indent of the first non-blank line taken off every line
    (a line indented less loses its leading blanks)."""
    lines = content.split("\n")
    base = 0
    for line in lines:
        if line.strip(JS_WHITESPACE):
            indent = _INDENT.match(line)
            base = indent.end() if indent else 0
            break
    if not base:
        return js_trim(content)
    dedented = []
    for line in lines:
        indent = _INDENT.match(line)
        dedented.append(line[base:] if indent is not None and indent.end() >= base else line.lstrip(JS_WHITESPACE))
    return js_trim("\n".join(dedented))


def is_false(text: str) -> bool:
    """ST's ``isFalseBoolean``: ``off``, ``false`` or ``0``, trimmed, any case."""
    return js_trim(text).lower() in ("off", "false", "0")


def _strip_line_breaks(text: str, *, leading: bool) -> str:
    """``text`` without the ``(\\r?\\n)*`` at its start (``leading``) or its end — a loop, linear on any text."""
    if leading:
        index = 0
        while True:
            if text.startswith("\n", index):
                index += 1
            elif text.startswith("\r\n", index):
                index += 2
            else:
                return text[index:]
    end = len(text)
    while end and text[end - 1] == "\n":
        end -= 1
        if end and text[end - 1] == "\r":
            end -= 1
    return text[:end]


def _apply_trim(text: str) -> str:
    """``{{trim}}`` (any case): removed with the line breaks on both sides of it (a split: linear on any text)."""
    if "{{" not in text:
        return text
    pieces = _TRIM.split(text)
    last = len(pieces) - 1
    for index, piece in enumerate(pieces):
        if index < last:
            piece = _strip_line_breaks(piece, leading=False)
        if index:
            piece = _strip_line_breaks(piece, leading=True)
        pieces[index] = piece
    return "".join(pieces)


def _after_pass(text: str) -> str:
    """ST's post-processors, in their order: unescape ``\\{``/``\\}``, apply ``{{trim}}``, drop stray ``{{else}}``."""
    if "\\" in text:
        text = _ESCAPED_BRACE.sub(r"\1", text)
    return _apply_trim(text).replace(ELSE_MARK, "")


class MacroEngine:
    def __init__(self, context: MacroContext) -> None:
        self.context = context
        self._steps = 0  # block-pairing steps taken in this expansion

    def expand(self, text: str) -> str:
        """Rewrite the legacy markers, expand every macro in ``text`` and run ST's passes after (``{{trim}}``
        never crosses texts)."""
        self._steps = 0
        return self._evaluate(text, 0)

    def _evaluate(self, text: str, depth: int) -> str:
        """One ST ``evaluate``: markers rewritten, the pass, the passes after."""
        text = rewrite_legacy_markers(text)
        if "{{" not in text:
            return _after_pass(text)
        doc = _Doc(text, _pairs(text))
        return _after_pass(self._level(doc, 0, len(text), depth))

    # -- one level: the macros of a range, block tags paired, each evaluated in order -------------------------

    def _level(self, doc: _Doc, lo: int, hi: int, depth: int) -> str:
        calls = [doc.call(start) for start, _close in doc.macros(lo, hi)]
        blocks, raw = self._pair_blocks(calls)
        out: list[str] = []
        cursor = lo
        for index, call in enumerate(calls):
            if call.start < cursor:  # inside a block: its content, expanded with it
                continue
            out.append(doc.text[cursor:call.start])
            if index in raw or call.closing:  # kept as written (its nested macros unexpanded, as ST does)
                out.append(doc.text[call.start:call.end])
                cursor = call.end
                continue
            closer = blocks.get(index)
            end = call.end if closer is None else calls[closer].end
            if depth >= MAX_NESTING:
                self.context.problem(NESTING_PROBLEM)
                out.append(doc.text[call.start:end])
            else:
                block = None if closer is None else (call.end, calls[closer].start)
                out.append(self._call(doc, call, block, depth))
            cursor = end
        out.append(doc.text[cursor:hi])
        return "".join(out)

    def _pair_blocks(self, calls: list[_Call]) -> tuple[dict[int, int], set[int]]:
        """ST's pairing of block tags on one level: each opener not inside an earlier block, in order, takes the
        first closer of its name (any case) at which the openers of that name that can take content are all
        closed. An opener that cannot take one more argument keeps both tags as written. Returns opener →
        closer and the tags kept as written."""
        blocks: dict[int, int] = {}
        raw: set[int] = set()
        matched: set[int] = set()
        inside_until = -1
        tags: dict[str, list[int]] = {}  # name → its tags on this level, in order (a closer is searched among them)
        for index, call in enumerate(calls):
            if _pairable(call):
                tags.setdefault(call.name, []).append(index)
        closers = {name for name, indices in tags.items() if any(calls[i].closing for i in indices)}
        for index, call in enumerate(calls):
            if call.closing or call.name not in closers or index in matched or index <= inside_until:
                continue
            closer = self._closer(calls, tags[call.name], index, matched)
            if closer is None:
                continue
            matched.update((index, closer))
            if not self._takes_block(call):
                raw.update((index, closer))
                continue
            blocks[index] = closer
            inside_until = closer
        return blocks, raw

    def _closer(self, calls: list[_Call], tags: list[int], opener: int, matched: set[int]) -> int | None:
        depth = 1
        for index in tags[bisect.bisect_right(tags, opener):]:
            self._steps += 1
            if self._steps > MAX_PAIRING_STEPS:
                if self._steps == MAX_PAIRING_STEPS + 1:
                    self.context.problem(PAIRING_PROBLEM)
                return None
            call = calls[index]
            if index in matched:
                continue
            if call.closing:
                depth -= 1
                if depth == 0:
                    return index
            elif self._takes_block(call):
                depth += 1
        return None

    @staticmethod
    def _takes_block(call: _Call) -> bool:
        if call.variable is not None:
            return False
        arity = ARITIES.get(call.name)
        return arity.takes_block(len(call.args)) if arity is not None else True

    # -- one macro --------------------------------------------------------------------------------------------

    def _call(self, doc: _Doc, call: _Call, block: tuple[int, int] | None, depth: int) -> str:
        if call.variable is not None:
            return self._variable(doc, call, depth)
        if not call.name or call.name.startswith("\x00"):  # no macro ST can call: as written, insides expanded
            if call.written:
                self.context.report_unknown(call.written)
            return "{{" + self._expand(doc, call.start + 2, call.close, depth) + "}}"
        arity = ARITIES.get(call.name)
        delayed = arity is not None and arity.delayed
        values = [doc.text[a:b] if delayed else self._expand(doc, a, b, depth) for a, b in call.args]
        if block is not None:
            content = doc.text[block[0]:block[1]] if delayed else self._expand(doc, *block, depth)
            values.append(content if delayed or "#" in call.flags else trim_block(content))

        def verbatim() -> str:
            return self._verbatim(doc, call, values, block)

        handler = MACROS.get(call.name)
        if handler is None:
            self.context.report_unknown(call.written)
            return verbatim()
        if arity is not None and not arity.admits(len(values)):
            self.context.report_unknown(f"{call.written} (bad arguments)")
            return verbatim()
        try:
            if call.name == "if":
                result: str | None = self._if(values, call.flags, depth)
            elif call.name == "trim" and block is not None:
                result = values[-1]
            else:
                result = handler(self.context, values)
            if result is not None:
                self.context.charge(len(result))
        except OverBudget:
            self.context.problem(OUTPUT_PROBLEM)
            return verbatim()
        if result is None:
            self.context.report_unknown(f"{call.written} (bad arguments)")
            return verbatim()
        return result

    def _expand(self, doc: _Doc, lo: int, hi: int, depth: int) -> str:
        """An argument or block content: its macros expanded on the next level (no passes after: ST runs those
        once, on the whole text)."""
        if doc.text.find("{{", lo, hi) < 0:
            return doc.text[lo:hi]
        return self._level(doc, lo, hi, depth + 1)

    @staticmethod
    def _verbatim(doc: _Doc, call: _Call, values: list[str], block: tuple[int, int] | None) -> str:
        """The macro as written with its arguments as expanded (ST's ``raw``). A block's content follows the
        opener's ``}}`` and ends with ``}}``: ST rebuilds it so, the closer's name is lost."""
        text, out, cursor = doc.text, ["{{"], call.start + 2
        for (lo, hi), value in zip(call.args, values, strict=False):
            if lo < hi:
                out.append(text[cursor:lo])
                out.append(value)
                cursor = hi
        out.append(text[cursor:call.close])
        if block is not None:
            out.append("}}" + values[-1])
        out.append("}}")
        return "".join(out)

    def _variable(self, doc: _Doc, call: _Call, depth: int) -> str:
        assert call.variable is not None
        scope, name, operator, value = call.variable
        store = self.context.variables if scope == "." else self.context.global_variables
        try:
            if operator == "":
                result = get_variable(self.context, store, name)
            elif operator in ("++", "--"):
                result = step_variable(self.context, store, name, 1 if operator == "++" else -1)
            else:
                assert value is not None
                expanded = js_trim(self._expand(doc, *value, depth))
                setter = set_variable if operator == "=" else add_variable
                result = setter(self.context, store, name, expanded)
            self.context.charge(len(result))
        except OverBudget:
            self.context.problem(OUTPUT_PROBLEM)
            return doc.text[call.start:call.end]
        return result

    # -- {{if}} -----------------------------------------------------------------------------------------------

    def _if(self, raw: list[str], flags: str, depth: int) -> str:
        condition, content = raw
        negation = _NEGATION.match(condition)
        inverted = negation is not None
        if negation is not None:
            condition = condition[negation.end():]
        condition = self._evaluate(condition, depth + 1)
        variable = _VARIABLE_CONDITION.fullmatch(condition)
        if variable is not None:
            store = self.context.variables if variable.group(1) == "." else self.context.global_variables
            condition = store.get(variable.group(2), "")
        else:
            arity = ARITIES.get(condition.lower())
            if condition.lower() in MACROS and arity is not None and arity.minimum == 0 and not arity.delayed:
                condition = self._evaluate("{{" + condition + "}}", depth + 1)
        false = condition == "" or is_false(condition)
        then, otherwise = self._split_else(content)
        chosen = otherwise if false != inverted else then
        if chosen is None:
            return ""
        result = self._evaluate(chosen, depth + 1)
        return result if "#" in flags else trim_block(result)

    @staticmethod
    def _split_else(content: str) -> tuple[str, str | None]:
        """``content`` cut at its first ``{{else}}`` outside a nested block ``{{if}}`` (one with only a condition)."""
        doc = _Doc(content, _pairs(content))
        depth = 0
        for start, _close in doc.macros(0, len(content)):
            call = doc.call(start)
            if call.name == "if" and not call.closing and len(call.args) == 1:
                depth += 1
            elif call.name == "if" and call.closing:
                depth -= 1
            elif call.name == "else" and depth == 0:
                return content[:start], content[call.end:]
        return content, None


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
    """The names of the macros in ``text`` as written (in text order, any depth; a comment is ``//`` and hides
    its insides; block closers and variable shorthands are not names) and how deep macros nest, without
    expanding anything and without recursion."""
    doc = _Doc(text, _pairs(text))
    return _preorder(doc), _deepest(doc.pairs)


def _preorder(doc: _Doc) -> list[str]:
    """Macro names in text order of their ``{{`` (the order a pre-order walk of the nesting gives)."""
    names: list[str] = []
    hidden_until = -1
    for start in sorted(doc.pairs):
        if start < hidden_until:
            continue
        call = doc.call(start)
        if call.name == "//" and not call.closing:
            names.append("//")
            hidden_until = call.close
            continue
        if call.closing or call.variable is not None:
            continue
        names.append(call.written or doc.text[start + 2 : min(call.close, start + 4096)].strip()[:20])
    return names


def _deepest(pairs: dict[int, int]) -> int:
    depth = deepest = 0
    for _position, step in sorted([(s, 1) for s in pairs] + [(e, -1) for e in pairs.values()]):
        depth += step
        deepest = max(deepest, depth)
    return deepest


def macro_names(text: str) -> list[str]:
    """Names of the macros in ``text`` at any nesting depth (for lint), without expanding anything."""
    return scan_macros(text)[0]


def macro_depth(text: str) -> int:
    """How deep the macros in ``text`` nest (lint warns past ``MAX_NESTING``)."""
    return scan_macros(text)[1]


def variable_names(text: str) -> list[str]:
    """The chat variables ``text`` reads or writes — ``{{getvar::x}}`` and its kin, ``{{.x}}`` shorthands and
    ``{{if .x}}`` conditions — in text order, each once; names made by macros are not known without expanding."""
    doc = _Doc(text, _pairs(text))
    found: list[str] = []
    for start in sorted(doc.pairs):
        call = doc.call(start)
        if call.variable is not None and call.variable[0] == ".":
            found.append(call.variable[1])
        elif call.name in _LOCAL_VARIABLE_MACROS and call.args:
            found.append(text[call.args[0][0]:call.args[0][1]])
        elif call.name == "if" and call.args:
            condition = text[call.args[0][0]:call.args[0][1]]
            negation = _NEGATION.match(condition)
            variable = _VARIABLE_CONDITION.fullmatch(condition[negation.end():] if negation else condition)
            if variable is not None and variable.group(1) == ".":
                found.append(variable.group(2))
    return [name for name in dict.fromkeys(found) if name and "{{" not in name]


_LOCAL_VARIABLE_MACROS = frozenset({"getvar", "setvar", "addvar", "incvar", "decvar"})


def is_known(name: str) -> bool:
    return name == "//" or name.lower() in MACROS


RANDOM_MACROS = frozenset({"random", "roll"})
TIME_MACROS = frozenset({"time", "date", "weekday", "isotime", "isodate"})

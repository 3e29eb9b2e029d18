"""Macros, expanded at assembly time (reference/sillytavern.md §4, the new engine's semantics).

One left-to-right pass; a macro's arguments are expanded before the macro itself (inside-out). ``{{…}}``
is found with balanced braces, so ``{{// a {{nested}} comment}}`` is one comment. Unknown macros (and
known ones called with the wrong arguments) stay verbatim, with their nested macros expanded, and are
reported. Variables live in one ``MacroContext`` — one assembly — and are visible to later entries.

Randomness (``roll``, ``random``) comes from the context's seeded generator: the same request always
expands the same way (replays and diffs are reproducible). ``pick`` is seeded by the session and the
text, so it also stays the same across turns.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

TRIM_MARK = "\x00trim\x00"
_TRIM = re.compile(r"\n*" + re.escape(TRIM_MARK) + r"\n*")
_DICE = re.compile(r"^\s*(\d*)\s*d\s*(\d+)\s*(?:([+-])\s*(\d+))?\s*$", re.IGNORECASE)


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
    model: str = ""
    now_ms: int = 0
    timezone: str = "UTC"
    seed: str = "0"
    session_seed: str = ""
    variables: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)  # unknown macro name → times seen
    random_used: list[str] = field(default_factory=list)  # macros whose value is random (cache warning)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms / 1000, tz=ZoneInfo(self.timezone))


Handler = Callable[[MacroContext, list[str]], "str | None"]  # None: wrong arguments → left verbatim
MACROS: dict[str, Handler] = {}


def macro(*names: str) -> Callable[[Handler], Handler]:
    def add(handler: Handler) -> Handler:
        for name in names:
            MACROS[name.lower()] = handler
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
    "lastUserMessage": lambda c: c.last_user_message, "lastCharMessage": lambda c: c.last_char_message,
    "lastMessage": lambda c: c.last_message, "model": lambda c: c.model,
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
    return "\n" * int(args[0]) if len(args) == 1 and args[0].strip().isdigit() else None


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
        return float(text)
    except ValueError:
        return None


def _format_number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


@macro("addvar")
def _addvar(ctx: MacroContext, args: list[str]) -> str | None:
    if len(args) != 2:
        return None
    name, value = args[0].strip(), args[1]
    current = ctx.variables.get(name, "")
    try:
        array = json.loads(current) if current.startswith("[") else None
    except json.JSONDecodeError:
        array = None
    left, right = _number(current), _number(value)
    if isinstance(array, list):
        array.append(value)
        ctx.variables[name] = json.dumps(array, ensure_ascii=False)
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
    if not match or int(match.group(2)) < 1:
        return ""  # ST: an invalid formula gives ""
    count = int(match.group(1) or 1)
    total = sum(ctx.rng.randint(1, int(match.group(2))) for _ in range(min(count, 1000)))
    if match.group(3):
        total += int(match.group(4)) * (1 if match.group(3) == "+" else -1)
    return str(total)


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


def _split_top(body: str, separator: str = "::") -> list[str]:
    """Split at ``separator`` outside nested ``{{…}}``."""
    parts: list[str] = []
    depth = 0
    start = 0
    index = 0
    while index < len(body):
        if body.startswith("{{", index):
            depth += 1
            index += 2
        elif body.startswith("}}", index) and depth:
            depth -= 1
            index += 2
        elif depth == 0 and body.startswith(separator, index):
            parts.append(body[start:index])
            index += len(separator)
            start = index
        else:
            index += 1
    parts.append(body[start:])
    return parts


def _closing(text: str, start: int) -> int | None:
    """Index of the ``}}`` that balances the ``{{`` at ``start``, or None (an unclosed ``{{`` is text)."""
    depth = 0
    index = start
    while index < len(text) - 1:
        if text.startswith("{{", index):
            depth += 1
            index += 2
        elif text.startswith("}}", index):
            depth -= 1
            if depth == 0:
                return index
            index += 2
        else:
            index += 1
    return None


_NAME = re.compile(r"\s*([A-Za-z_.$][^\s:{}]*)\s*(?:[:\s]\s*(.*))?$", re.DOTALL)


class MacroEngine:
    def __init__(self, context: MacroContext) -> None:
        self.context = context

    def expand(self, text: str) -> str:
        """Expand every macro in ``text`` and apply ``{{trim}}`` (which never crosses texts)."""
        if "{{" not in text:
            return text
        return _TRIM.sub("", self._expand(text))

    def _expand(self, text: str) -> str:
        out: list[str] = []
        index = 0
        while True:
            start = text.find("{{", index)
            if start < 0:
                out.append(text[index:])
                break
            out.append(text[index:start])
            end = _closing(text, start)
            if end is None:
                out.append(text[start:])
                break
            body = text[start + 2 : end]
            if body.strip() == "//":  # block comment {{//}} … {{///}}
                closer = text.find("{{///}}", end + 2)
                index = len(text) if closer < 0 else closer + len("{{///}}")
                continue
            out.append(self._call(body))
            index = end + 2
        return "".join(out)

    def _call(self, body: str) -> str:
        stripped = body.lstrip()
        if stripped.startswith("//"):
            self._expand(stripped[2:])  # nested macros still run (ST evaluates arguments first), then vanish
            return ""
        parts = _split_top(body)
        head = parts[0]
        match = _NAME.match(head)
        if match is None:
            return "{{" + self._expand(body) + "}}"
        name = match.group(1)
        args = [a for a in ([match.group(2)] if match.group(2) is not None and match.group(2) != "" else [])]
        if len(parts) > 1:
            if match.group(2):  # "{{name rest::x}}": not a macro call we understand
                return "{{" + self._expand(body) + "}}"
            args = parts[1:]
        handler = MACROS.get(name.lower())
        expanded = [self._expand(a) for a in args]
        if handler is None:
            # Legacy {{time_UTC+2}} and similar names are unknown too; report and keep.
            self.context.unknown[name] = self.context.unknown.get(name, 0) + 1
            return "{{" + self._expand(body) + "}}"
        result = handler(self.context, expanded)
        if result is None:
            self.context.unknown.setdefault(f"{name} (bad arguments)", 0)
            self.context.unknown[f"{name} (bad arguments)"] += 1
            return "{{" + self._expand(body) + "}}"
        return result


def macro_names(text: str) -> list[str]:
    """Names of the macros in ``text`` at any nesting depth (for lint), without expanding anything."""
    names: list[str] = []
    index = 0
    while True:
        start = text.find("{{", index)
        if start < 0:
            return names
        end = _closing(text, start)
        if end is None:
            return names
        body = text[start + 2 : end]
        if body.lstrip().startswith("//") or body.strip() == "//":
            names.append("//")
        else:
            match = _NAME.match(_split_top(body)[0])
            names.append(match.group(1) if match else body.strip()[:20])
            names.extend(macro_names(body))
        index = start + 2 if end is None else end + 2


def is_known(name: str) -> bool:
    return name == "//" or name.lower() in MACROS


RANDOM_MACROS = frozenset({"random", "roll"})
TIME_MACROS = frozenset({"time", "date", "weekday", "isotime", "isodate"})

"""``zhin preset lint`` and ``zhin preset probe`` as library calls that return data.

lint: the importer's diagnostics plus what only the whole preset shows — unknown macros (``known=false``),
entries that can never be sent, holes missing from the order, macros that break the prompt cache
because their value changes between requests while they sit in the stable prefix (before chatHistory),
macros nested past what zhin expands, regex scripts with nested quantifiers (catastrophic backtracking), lower-case
``<user>``-style tags that ST's legacy markers rewrite into names, and where ``{{summary}}`` comes from.

Every finding has a stable rule code (``ZP001`` …, ``RULES``; docs/preset-lint.md lists them) beside its name
(``no-history``), a file and a line: the text output is one ``file:line: CODE severity: message [name]`` per finding,
sorted by line, the way ruff and gcc print theirs, so editors, ``grep`` and CI problem matchers read it. A finding
the preset has no line for (one about the whole order, say) is put at the key it is about when the file has it
(``"prompt_order"``, ``"wi_format"``), else at line 1. ``ignore`` drops rules by code or name: they neither print
nor fail the lint.

probe: the message skeleton the preset produces for one request — each wire message's role, the preset
entries or holes it is made of, its characters and tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from zhin_cli.core.errors import UsageError
from zhin_cli.core.ghactions import Annotation, Level, summary_cell
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.pipeline.preset.importer import load_preset
from zhin_cli.pipeline.preset.macros import (
    LEGACY_MARKERS,
    MAX_NESTING,
    RANDOM_MACROS,
    TIME_MACROS,
    is_known,
    js_trim,
    legacy_markers,
    scan_macros,
)
from zhin_cli.pipeline.preset.model import BUILTIN_PROMPTS, HOLE_ALIASES, ST_MARKERS, ZHIN_HOLES, Diagnostic, Preset, RegexScript
from zhin_cli.pipeline.preset.regex import BUDGET_SECONDS, nested_quantifier

if TYPE_CHECKING:
    from zhin_cli.core.model import Session
    from zhin_cli.pipeline.context import RunContext


def applies_at_all(script: RegexScript) -> bool:
    """Whether zhin ever runs ``script`` at assembly (promptOnly, enabled, on some placement)."""
    return script.prompt_only and not script.disabled and bool(script.placement)

LINT_VERSION = 1
PROBE_VERSION = 1
TURN_DEPENDENT = frozenset({"lastusermessage", "lastmessage", "lastcharmessage"})
# Top-level texts the skeleton macro-expands (and so rewrites legacy markers in).
EXPANDED_SETTINGS = ("new_chat_prompt", "new_example_chat_prompt", "personality_format", "scenario_format", "wi_format",
                     "send_if_empty")
_BECOMES = {"user": "the user's name", "char": "the character's name", "group": "the group's names (or the character's name)",
            "charIfNotGroup": "the group's names (or the character's name)"}


def _xml_like_markers(text: str) -> list[str]:
    """Legacy markers written in lower case (``<user>``, ``<char>``, …): the spelling of an XML tag, which ST's
    engine rewrites like ``<USER>``. Each distinct tag once, in order."""
    return list(dict.fromkeys(tag for tag in legacy_markers(text) if tag == tag.lower()))


def _legacy_note(tags: list[str], where: str, text: str) -> str:
    described = "; ".join(
        f"{tag} becomes {_BECOMES[LEGACY_MARKERS[tag[1:-1]]]}"
        + (f" (its closing </{tag[1:-1]}> stays)" if f"</{tag[1:-1]}>" in text.lower() else "") for tag in tags)
    return (f"{where}: {described} — ST's macro engine rewrites the legacy markers <USER>, <BOT>, <CHAR>, <GROUP> and "
            "<CHARIFNOTGROUP> in any case, and zhin does the same; if an XML tag is meant, rename it (e.g. <user_input>)")


# Stable rule codes: a name may be reworded, a code never changes meaning and is never reused (docs/preset-lint.md).
RULES: dict[str, str] = {
    # what the order sends (lint)
    "no-history": "ZP001", "system-appended": "ZP002", "system-disabled": "ZP003", "never-sent": "ZP004",
    "unknown-marker": "ZP005", "in-chat-not-in-order": "ZP006",
    # macros and the prompt cache (lint)
    "random-in-prefix": "ZP010", "volatile-in-prefix": "ZP011", "unknown-macro": "ZP012", "deep-macros": "ZP013",
    "summary-macro": "ZP014", "legacy-marker": "ZP015", "wi-format-without-text": "ZP016",
    # regex scripts
    "nested-quantifier": "ZP020", "bad-regex": "ZP021",
    # prompts[] entries (import)
    "bad-role": "ZP030", "bad-content": "ZP031", "bad-depth": "ZP032", "duplicate-prompt": "ZP033",
    "forbid-overrides": "ZP034", "unknown-field": "ZP035", "not-in-order": "ZP036",
    # prompt_order (import)
    "legacy-order-used": "ZP040", "legacy-order": "ZP041", "default-order": "ZP042", "other-character-order": "ZP043",
    "string-character-id": "ZP044", "bad-order-entry": "ZP045", "order-unknown-prompt": "ZP046", "order-duplicate": "ZP047",
    # top-level settings and extensions (import)
    "unknown-key": "ZP050", "bad-squash": "ZP051", "bad-post-processing": "ZP052", "single-user-message": "ZP053",
    "bad-extensions": "ZP054", "unknown-extension": "ZP055",
}
UNKNOWN_RULE = "ZP999"  # a diagnostic without a code here (a new one not yet given a code): shown, never hidden
# Where a finding about the whole preset points when it has no line of its own: the key it is about.
RULE_KEYS = {"no-history": "prompt_order", "system-appended": "prompt_order", "system-disabled": "prompt_order",
             "wi-format-without-text": "wi_format"}
_AT_LINE = re.compile(r"^(?P<file>.*):(?P<line>\d+)$")
_AT_KEY = re.compile(r"^(?P<file>.*) \((?P<key>[^()]*)\)$")


def rule_code(name: str) -> str:
    return RULES.get(name, UNKNOWN_RULE)


def resolve_ignored(names: Iterable[str]) -> set[str]:
    """``--ignore`` values (a code such as ZP012, or a name such as unknown-macro) as codes; an unknown one is a
    usage error, not a silent no-op."""
    codes = set(RULES.values())
    out = set()
    for raw in names:
        value = raw.strip()
        if value.upper() in codes:
            out.add(value.upper())
        elif value in RULES:
            out.add(RULES[value])
        else:
            raise UsageError(f"--ignore {raw!r}: no such preset lint rule (a code ZP001… or a name such as "
                             "unknown-macro; docs/preset-lint.md lists them)")
    return out


@dataclass(frozen=True)
class Finding:
    """One diagnostic with its place: ``file:line: CODE severity: message [name]`` (gcc's ``[-Wname]`` suffix)."""

    file: str
    line: int
    code: str  # the stable rule code, ZP012
    name: str  # the rule's name, unknown-macro
    severity: str
    message: str

    def text(self) -> str:
        return f"{self.file}:{self.line}: {self.code} {self.severity}: {self.message} [{self.name}]"

    def as_dict(self) -> JSONObject:
        # "code" stays the rule's name (what version 1 documents carried); "rule" is the stable code
        return {"severity": self.severity, "code": self.name, "rule": self.code, "message": self.message,
                "where": f"{self.file}:{self.line}", "file": self.file, "line": self.line}

    def annotation(self) -> Annotation:
        level: Level = {"error": "error", "warning": "warning"}.get(self.severity, "notice")  # type: ignore[assignment]
        return Annotation(level, self.message, title=f"zhin preset lint: {self.code} {self.name}", file=self.file, line=self.line)


def _line_of(text: str | None, needle: str) -> int | None:
    if not text:
        return None
    at = text.find(needle)
    return text.count("\n", 0, at) + 1 if at >= 0 else None


def _place(diagnostic: Diagnostic, default_file: str, text: str | None, lines: dict[str, int | None]) -> tuple[str, int]:
    where = diagnostic.where or default_file
    matched = _AT_LINE.match(where)
    if matched:
        return matched["file"], int(matched["line"])
    keyed = _AT_KEY.match(where)
    file, key = (keyed["file"], keyed["key"]) if keyed else (where, RULE_KEYS.get(diagnostic.code))
    needle = None
    if key and key.startswith("prompt "):
        needle = f'"{key.removeprefix("prompt ")}"'
    elif key:
        needle = f'"{key.split(".")[0].split("[")[0]}"'
    if needle is None:
        return file, 1
    if needle not in lines:
        lines[needle] = _line_of(text, needle)
    return file, lines[needle] or 1


class MacroUse(TypedDict):
    """One macro the enabled entries use: ``lint --json``'s ``macros`` rows."""

    name: str
    known: bool
    entries: list[str]  # the entries that use it, in order, each once


@dataclass
class LintResult:
    file: str
    preset: Preset
    diagnostics: list[Diagnostic]
    macros: list[MacroUse]
    ignored: set[str] = field(default_factory=set)  # rule codes left out (``--ignore``)
    text: str | None = field(default=None, repr=False)  # the preset file, to place findings that carry no line
    _cache: tuple[tuple[frozenset[str], int], list[Finding]] | None = field(default=None, repr=False, compare=False)

    def findings(self) -> list[Finding]:
        """The diagnostics not ignored, each placed at a line, sorted by line (then code: a stable order). Computed
        once per set of ignored rules: counts, the exit status, the output and the annotations all read it, and a
        preset can have tens of thousands of diagnostics."""
        key = (frozenset(self.ignored), len(self.diagnostics))
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        lines: dict[str, int | None] = {}  # needle → line: one search of the file per key, not per diagnostic
        out = []
        for diagnostic in self.diagnostics:
            code = rule_code(diagnostic.code)
            if code in self.ignored:
                continue
            file, line = _place(diagnostic, self.file, self.text, lines)
            out.append(Finding(file, line, code, diagnostic.code, diagnostic.severity, diagnostic.message))
        out.sort(key=lambda f: (f.line, f.code))
        self._cache = (key, out)
        return out

    @property
    def failed(self) -> bool:
        return any(f.severity in ("error", "warning") for f in self.findings())

    def counts(self) -> dict[str, int]:
        out = {"error": 0, "warning": 0, "info": 0}
        for finding in self.findings():
            out[finding.severity] += 1
        return out

    def as_dict(self) -> JSONObject:
        preset = self.preset
        return {
            "version": LINT_VERSION,
            "file": self.file,
            "order_source": preset.order_source,
            "prompts": len(preset.prompts),
            "order": [{"identifier": e.identifier, "enabled": e.enabled} for e in preset.order],
            "squash_system_messages": preset.squash,
            "custom_prompt_post_processing": preset.post_processing,
            "regex_scripts": len(preset.regex_scripts),
            "unknown_keys": list[JSON](preset.unknown_keys),
            "unknown_extensions": list[JSON](preset.unknown_extensions),
            "counts": dict[str, JSON](self.counts()),
            "ignored": list[JSON](sorted(self.ignored)),
            "diagnostics": list[JSON]([f.as_dict() for f in self.findings()]),
            "macros": [{"name": m["name"], "known": m["known"], "entries": list[JSON](m["entries"])} for m in self.macros],
        }

    def annotations(self) -> list[Annotation]:
        return [f.annotation() for f in self.findings()]

    def summary(self) -> str:
        counts = self.counts()
        lines = [f"### zhin preset lint · {summary_cell(self.file)}", "",
                 f"**{counts['error']}** error(s) · **{counts['warning']}** warning(s) · **{counts['info']}** note(s)", ""]
        findings = self.findings()
        if findings:
            lines += ["| line | rule | severity | message |", "|---|---|---|---|"]
            lines += [f"| {f.line} | {f.code} `{f.name}` | {f.severity} | {summary_cell(f.message)} |" for f in findings]
        return "\n".join(lines) + "\n"


def _where(preset: Preset, identifier: str) -> str:
    entry = preset.prompts.get(identifier)
    name = str(preset.path) if preset.path else preset.name
    return f"{name}:{entry.line}" if entry is not None and entry.line else f"{name} (prompt {identifier})"


def lint_preset(preset: Preset, file: str = "") -> LintResult:
    out = list(preset.diagnostics)

    def report(severity: str, code: str, message: str, identifier: str | None = None) -> None:
        where = _where(preset, identifier) if identifier else (str(preset.path) if preset.path else None)
        out.append(Diagnostic(severity, code, message, where))  # type: ignore[arg-type]

    enabled = [e.identifier for e in preset.order if e.enabled]
    canonical = [HOLE_ALIASES.get(i, i) for i in enabled]
    mentioned = {HOLE_ALIASES.get(e.identifier, e.identifier) for e in preset.order}
    if "chatHistory" not in canonical:
        report("error", "no-history", "chatHistory is not enabled in the order: the conversation (and the current turn) is never sent")
    if "worldBookBefore" not in mentioned:
        report("warning", "system-appended", "worldInfoBefore/worldBookBefore is not in the order: zhin's system prompt is appended "
               "after the last ordered entry (as ST appends unplaced markers)")
    elif "worldBookBefore" not in canonical:
        report("warning", "system-disabled", "worldInfoBefore/worldBookBefore is disabled: zhin's system prompt is never sent")
    history_at = canonical.index("chatHistory") if "chatHistory" in canonical else len(canonical)
    macros: dict[str, MacroUse] = {}
    seen: dict[str, set[str]] = {}  # macro name → the entries of its record, as a set
    for position, identifier in enumerate(enabled):
        entry = preset.prompts.get(identifier)
        if entry is None:
            continue
        relative_custom = (not entry.in_chat and not entry.marker and identifier not in BUILTIN_PROMPTS
                           and entry.system_prompt is not False)
        if relative_custom:
            report("warning", "never-sent", f"prompt {identifier!r} has system_prompt {entry.system_prompt!r}: ST sends a custom "
                   "relative prompt only with system_prompt false; never sent", identifier)
            continue
        if entry.marker and identifier not in ST_MARKERS and identifier not in ZHIN_HOLES and identifier not in BUILTIN_PROMPTS:
            report("warning", "unknown-marker", f"marker {identifier!r} is not one zhin fills; it sends nothing", identifier)
        in_prefix = position < history_at and not entry.in_chat
        tags = _xml_like_markers(entry.content)
        if tags:
            report("info", "legacy-marker", _legacy_note(tags, f"prompt {identifier!r}", entry.content), identifier)
        names, depth = scan_macros(entry.content)
        if depth > MAX_NESTING:
            report("warning", "deep-macros", f"prompt {identifier!r} nests macros {depth} levels deep: zhin expands {MAX_NESTING} "
                   "levels and leaves the deeper ones verbatim", identifier)
        for name in names:
            record = macros.setdefault(name, MacroUse(name=name, known=is_known(name), entries=[]))
            if identifier not in seen.setdefault(name, set()):
                seen[name].add(identifier)
                record["entries"].append(identifier)
            lower = name.lower()
            if in_prefix and lower in RANDOM_MACROS:
                report("warning", "random-in-prefix", f"prompt {identifier!r} uses {{{{{name}}}}} before chatHistory: its value changes "
                       "every request, so the cached prefix breaks there", identifier)
            elif in_prefix and (lower in TIME_MACROS or lower in TURN_DEPENDENT):
                report("warning", "volatile-in-prefix", f"prompt {identifier!r} uses {{{{{name}}}}} before chatHistory: it changes "
                       "between requests and breaks the cached prefix there", identifier)
    for record in macros.values():
        if not record["known"]:
            report("warning", "unknown-macro", f"unknown macro {{{{{record['name']}}}}} (known=false) in "
                   f"{', '.join(record['entries'])}: zhin leaves it verbatim, as stock ST does (an ST extension that "
                   "defines it would expand it there)", record["entries"][0])
        elif record["name"].lower() == "summary":
            report("info", "summary-macro", f"{{{{{record['name']}}}}} in {', '.join(record['entries'])} is zhin's compaction "
                   "summary when the window has one, else empty (in ST: the Summarize extension's summary); the summary "
                   "message itself also stays in the history", record["entries"][0])
    card = preset.card
    for option in ("persona", "description", "personality", "scenario", "examples", "world_book_after"):
        text = getattr(card, option)
        tags = _xml_like_markers(text)
        if tags:
            report("info", "legacy-marker", _legacy_note(tags, f"preset option {option}", text))
    for key in EXPANDED_SETTINGS:
        value = preset.settings.get(key)
        if isinstance(value, str) and (tags := _xml_like_markers(value)):
            report("info", "legacy-marker", _legacy_note(tags, key, value))
    wi_format = preset.setting("wi_format", "{0}")
    if isinstance(wi_format, str) and js_trim(wi_format) and "{0}" not in wi_format:  # blank as ST: trim()
        report("warning", "wi-format-without-text", f"wi_format {wi_format[:80]!r} has no {{0}}: ST drops the World Info "
               "text, and so does zhin for world_book_after; zhin's own system prompt (worldInfoBefore) is kept, after "
               "the format")
    ordered = {e.identifier for e in preset.order}  # once: per prompt, a preset of 50,000 prompts took minutes
    for identifier in preset.prompts:
        if identifier not in ordered and preset.prompts[identifier].in_chat:
            report("info", "in-chat-not-in-order", f"in-chat prompt {identifier!r} is not in the order: never injected", identifier)
    for script in preset.regex_scripts:
        nested = nested_quantifier(script)
        if nested is None:
            continue
        runs = applies_at_all(script)
        where = f"{preset.path or preset.name}:{script.line}" if script.line else None
        out.append(Diagnostic("warning" if runs else "info", "nested-quantifier",
                              f"regex script {script.name!r}: {nested[:80]!r} is a quantified group that holds a quantifier, the "
                              "shape that backtracks catastrophically (a few dozen characters of one chat message can take "
                              f"minutes); zhin stops a script after {BUDGET_SECONDS * 1000:.0f} ms per request and skips it, "
                              "but ST does not: make the inner part possessive or atomic, or rewrite it without nesting"
                              + ("" if runs else " (zhin does not run this script: not promptOnly, or disabled)"), where))
    return LintResult(file or (str(preset.path) if preset.path else preset.name), preset, out, sorted(macros.values(), key=lambda m: m["name"]))


def lint(path: Path, *, ignore: Iterable[str] = ()) -> LintResult:
    """Lint the preset file at ``path``; ``ignore``: rule codes or names left out (``--ignore``)."""
    from zhin_cli.core.readers import read_text_file

    ignored = resolve_ignored(ignore)  # a bad --ignore is refused before the file is read
    result = lint_preset(load_preset(path), str(path))
    result.ignored = ignored
    result.text = read_text_file(path, what="preset file")  # read again only to place findings that carry no line
    return result


# -- probe -------------------------------------------------------------------------------------------------


@dataclass
class ProbeMessage:
    index: int  # wire message index; -1: the top-level system (Anthropic, Gemini)
    role: str
    sources: list[str]
    chars: int
    tokens: int
    preview: str
    current: bool = False  # holds the current turn (the newest member message)

    @property
    def labels(self) -> list[str]:
        """What the message is made of, in skeleton terms: preset entries and holes."""
        labels = [_label(source) for source in self.sources]
        if self.current:
            labels = ["hole currentTurn" if source == "history.user" else label for source, label in zip(self.sources, labels, strict=True)]
        return list(dict.fromkeys(labels))

    def as_dict(self) -> JSONObject:
        return {"index": self.index, "role": self.role, "from": list[JSON](self.labels), "sources": list[JSON](self.sources), "chars": self.chars,
                "tokens": self.tokens, "preview": self.preview}


HOLE_OF_SEGMENT = {"system": "worldBookBefore", "tail": "postTurn"}


def _label(segment_id: str) -> str:
    if segment_id.startswith("preset:"):
        return "entry " + segment_id.removeprefix("preset:")
    if segment_id in HOLE_OF_SEGMENT:
        return f"hole {HOLE_OF_SEGMENT[segment_id]}"
    return f"hole chatHistory ({segment_id})"


@dataclass
class ProbeResult:
    file: str
    session_id: str
    turn: int
    provider: str
    model: str
    messages: list[ProbeMessage]
    warnings: list[str] = field(default_factory=list)
    request: JSONObject = field(default_factory=dict)

    def as_dict(self) -> JSONObject:
        return {"version": PROBE_VERSION, "file": self.file, "session_id": self.session_id, "turn": self.turn,
                "provider": self.provider, "model": self.model, "messages": [m.as_dict() for m in self.messages],
                "warnings": list[JSON](self.warnings), "request": self.request}


def _wire_text(message: object) -> str:
    if not isinstance(message, dict):
        return str(message)
    content = message.get("content")
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else message.get("parts") or []
    texts = []
    for block in blocks:
        if isinstance(block, dict):
            value = block.get("text") or block.get("content") or ""
            texts.append(value if isinstance(value, str) else str(value))
    return "\n".join(texts)


def sample_session() -> Session:
    """A small group conversation for probing a preset without a database: two members, the bot, three turns."""
    from zhin_cli.core.model import Actor, AssistantMessage, BotFacts, Message, SceneFacts, Session, UserMessage

    t0 = 1761699600000
    bot = BotFacts(user_id="8596238", name="Zhin", group_nickname="小知", platform_role="member")
    scene = SceneFacts(scene_id="1048877509", scene_type="group", scene_name="示例群", owner_id="10001", admins=(),
                       member_count=3, global_mute=False)
    alice = Actor(subject_id="10002", display_name="阿丽", platform_role="member")
    bob = Actor(subject_id="10003", display_name="Bob", platform_role="member")

    def text(value: str) -> list[JSONObject]:
        return [{"type": "text", "text": value}]

    messages: list[Message] = [
        UserMessage(text("我推门进去"), t0, alice, 1),
        AssistantMessage(text("门后是雨……"), t0 + 60_000, 2, model="gpt-4o"),
        UserMessage(text("I look up"), t0 + 120_000, bob, 3),
        AssistantMessage(text("A lamp swings overhead."), t0 + 180_000, 4, model="gpt-4o"),
        UserMessage(text("我抬头"), t0 + 240_000, alice, 5),
        AssistantMessage(text("(reply)"), t0 + 300_000, 6, model="gpt-4o"),
    ]
    return Session("probe#1", "probe:group:1048877509", "Asia/Shanghai", bot, scene, messages)


def probe(
    path: Path,
    *,
    session_ref: str | None = None,
    db: str | None = None,
    config_path: Path | None = None,
    provider: str | None = None,
    model: str | None = None,
    cwd: Path | None = None,
    after_load: Callable[[], None] | None = None,
    context: RunContext | None = None,
) -> ProbeResult:
    """``context``: the command's run context (it replaces ``db``, ``config_path`` and ``cwd``): its config,
    plugins and sessions are used, not read again."""
    from zhin_cli.core.errors import UsageError
    from zhin_cli.core.tokens import counter as shared_counter
    from zhin_cli.core.tokens import encoding_for_model
    from zhin_cli.pipeline.context import RunContext

    run = context or RunContext.load(config_path, cwd=cwd or Path.cwd(), db=db)
    preset = load_preset(path, run.config.preset_options)
    session = run.session(session_ref) if session_ref else sample_session()
    if after_load is not None:
        after_load()
    if not session.outline.assistant_positions:
        raise UsageError(f"session {session.session_id!r} has no assistant message, so no request to probe")
    with run.pipeline(provider=provider, model=model, preset=preset) as pipeline:
        last = pipeline.turns(session).last_request_turn
        if last is None:
            raise UsageError(f"session {session.session_id!r} has only its greeting, so no request to probe")
        request = pipeline.request(session, turn=last)  # the last request: the one a new message would get
    counter = shared_counter(encoding_for_model(request.model))
    body = request.request
    rows: list[ProbeMessage] = []
    top_level = body.get("system") or (body.get("systemInstruction") or {}).get("parts")
    if top_level:
        for block in top_level:
            text = block.get("text", "")
            sources = [p.segment_id for p in request.parts if p.message_index == -1 and p.text and p.text in text]
            rows.append(ProbeMessage(-1, "system (top-level)", sorted(set(sources), key=sources.index), len(text),
                                     counter.count(text), text[:60]))
    for index, message in enumerate(body.get("messages") or body.get("contents") or []):
        text = _wire_text(message)
        sources = [p.segment_id for p in request.parts if p.message_index == index]
        rows.append(ProbeMessage(index, str(message.get("role")), list(dict.fromkeys(sources)), len(text), counter.count(text),
                                 text[:60]))
    current = [row for row in rows if "history.user" in row.sources]
    if current:  # the current turn is the newest member message: the last one on the wire
        current[-1].current = True
    return ProbeResult(str(path), session.session_id, request.turn, request.provider, request.model, rows, request.warnings, body)

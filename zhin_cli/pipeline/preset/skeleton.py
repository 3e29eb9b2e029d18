"""Fill a preset's skeleton with one request's content (preset-message-skeleton; sillytavern.md §2).

The runtime only fills holes; it never appends outside the skeleton:

* ``worldBookBefore`` (ST ``worldInfoBefore``): zhin's system segments, one system message, then the World Info
  entries that fired before the character definitions (``worldinfo.py``, when the card options carry World Info);
* ``chatHistory``: the projected history as real turns (headers, state changes, tool groups), with the
  in-chat injections placed by depth (the preset's, the Author's Note's and World Info's @depth entries) and
  ``[Start a new Chat]`` on top;
* ``worldBookAfter`` (ST ``worldInfoAfter``): the ``world_book_after`` option, then the entries that fired after the
  character definitions; empty unless configured;
* ``currentTurn``: the newest member message the request answers (and, in a tool loop, the calls and
  results after it). Not in the order → the last message of the chatHistory block, as in ST;
* ``postTurn``: the runtime tail (scene line). Not in the order → appended to the current turn after
  ``"\n\n"`` (ADR 0045), exactly as the built-in layout does.

The built-in default preset (``DEFAULT_PRESET``) is ``worldBookBefore → chatHistory`` with nothing else:
the ADR 0041 layout, byte for byte.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from zhin_cli.pipeline.format import neutralize_body
from zhin_cli.pipeline.headers import SUMMARY_PREFIX, Projected
from zhin_cli.pipeline.preset import regex as regex_module
from zhin_cli.pipeline.preset import worldinfo
from zhin_cli.pipeline.preset.layout import SYSTEM_SEGMENT, TAIL_SEGMENT, TAIL_SEPARATOR, Item, Layout, PresetMessage
from zhin_cli.pipeline.preset.macros import JS_WHITESPACE, MacroContext, MacroEngine, js_trim, prepare_card_fields
from zhin_cli.pipeline.preset.model import (
    APPENDED_WHEN_MISSING,
    BUILTIN_PROMPTS,
    HOLE_ALIASES,
    MAX_INJECTION_DEPTH,
    ST_MARKERS,
    ZHIN_HOLES,
    CardOptions,
    OrderEntry,
    Preset,
    PromptEntry,
    RegexScript,
)
from zhin_cli.pipeline.preset.regex import AI_OUTPUT, USER_INPUT, ScriptSkipped, applies, run_script
from zhin_cli.pipeline.preset.shaping import post_process, squash

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSON

# ST code defaults for keys a preset may leave out (openai.js default_settings).
ST_DEFAULTS: dict[str, JSON] = {
    "new_chat_prompt": "[Start a new Chat]",
    "new_example_chat_prompt": "[Example Chat]",
    "new_group_chat_prompt": "[Start a new group chat. Group members: {{group}}]",
    "group_nudge_prompt": "[Write the next reply only as {{char}}.]",
    "wi_format": "{0}",
    "scenario_format": "{{scenario}}",
    "personality_format": "{{personality}}",
    "send_if_empty": "",
}
INJECTION_ROLES = ("assistant", "user", "system")  # top to bottom inside one order group (ST code)
WORLD_INFO_SEGMENT = "preset:world-info:"  # + "<book>:<uid>": one World Info entry's text
AUTHORS_NOTE_SEGMENT = "preset:authors-note"  # the Author's Note's own text
GROUP_NUDGE_SEGMENT = "preset:groupNudge"  # a group chat's last message: who replies next (group_nudge_prompt)
NEW_GROUP_CHAT_SEGMENT = "preset:newGroupChat"  # a group chat's history opener (new_group_chat_prompt)
GROUP_NAME_SEGMENT = "preset:groupName"  # "Name: " that ST puts in front of a group's example messages
EXTENSION_ORDER = 100  # ST's default injection order: the Author's Note and @depth entries join that group
DEFAULT_MAX_CONTEXT = 4095  # openai.js default openai_max_context (the World Info budget is a share of it)
MARKER_IDS = frozenset(ST_MARKERS) | frozenset(ZHIN_HOLES)

DEFAULT_PRESET = Preset(
    name="default (ADR 0041)",
    path=None,
    prompts={
        "worldBookBefore": PromptEntry("worldBookBefore", name="zhin system prompt", marker=True),
        "chatHistory": PromptEntry("chatHistory", name="history and current input", marker=True),
    },
    order=[OrderEntry("worldBookBefore"), OrderEntry("chatHistory")],
    order_source="default",
    settings={"new_chat_prompt": "", "new_example_chat_prompt": ""},
    builtin=True,
)


@dataclass(frozen=True)
class Facts:
    """What the macros and the holes need to know about the request, beyond the projected messages."""

    session_id: str = ""
    position: int = 0  # where the request sits in the session (seeds {{roll}} / {{random}})
    request_time: int = 0
    timezone: str = "UTC"
    model: str = ""
    bot_name: str | None = None
    is_group: bool = True
    speaker_of: Callable[[int], str | None] = field(default=lambda row: None)  # row id → sender display name
    raw_text_of: Callable[[int], str | None] = field(default=lambda row: None)  # row id → stored text


@dataclass
class EntryReport:
    identifier: str
    status: str  # sent | in-chat | disabled | not-in-order | never-sent | empty | skipped-trigger | appended
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"identifier": self.identifier, "status": self.status, "detail": self.detail}


@dataclass
class Arrangement:
    layout: Layout
    downgrade_mid_system: bool  # semi/strict post-processing: no system message after the first
    entries: list[EntryReport]
    unknown_macros: dict[str, int]
    random_macros: list[str]
    variables: dict[str, str]
    warnings: list[str]


class _Skip(Exception):
    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason


def regex_budget() -> float:
    return regex_module.BUDGET_SECONDS  # read at run time, so a test can shorten it


def _skipped_warning(script: RegexScript, reason: str) -> str:
    return f"preset regex script {script.name!r} was skipped: {reason}"


def _current_index(messages: list[Projected]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return index
    return None


def _seed(preset: Preset, facts: Facts) -> str:
    return hashlib.sha256(f"{preset.card.seed}\x00{facts.session_id}\x00{facts.position}".encode()).hexdigest()


def _format_wi(template: str) -> list[str]:
    """``wi_format`` split at its ``{0}`` (ST ``formatWorldInfo``: the text goes in at every ``{0}``, any other
    ``{n}`` stays as written; a blank format is the text alone)."""
    if not js_trim(template):  # ST: format.trim()
        return ["", ""]
    return template.split("{0}")


@dataclass(frozen=True)
class _Injection:
    """An in-chat entry, expanded, waiting for its place in the chatHistory block."""

    depth: int
    order: int
    sequence: int  # position in the prompt order (members of one group keep it)
    role: str
    segment: str
    text: str  # as expanded, not trimmed
    report: EntryReport
    pieces: tuple[tuple[str, str], ...] = ()  # several attributed parts (an extension prompt); else (segment, text)


def _trimmed(pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``pieces`` as one text trimmed as JavaScript's ``trim`` does (``JS_WHITESPACE``; attribution kept)."""
    out = list(pieces)
    while out and not out[0][1].lstrip(JS_WHITESPACE):
        out.pop(0)
    if out:
        out[0] = (out[0][0], out[0][1].lstrip(JS_WHITESPACE))
    while out and not out[-1][1].rstrip(JS_WHITESPACE):
        out.pop()
    if out:
        out[-1] = (out[-1][0], out[-1][1].rstrip(JS_WHITESPACE))
    return out


def _injected(role: str, members: list[_Injection]) -> PresetMessage | None:
    """One message for the entries of one depth, order and role (ST ``populationInjectionPrompts``): their texts
    joined as written with ``"\n"``, and only the joined text trimmed — so blank lines inside an entry, and a
    whitespace-only entry between two others, stay. A group that is only whitespace sends nothing."""
    pieces: list[tuple[str, str]] = []
    for member in members:
        if pieces:
            pieces.append(("", "\n"))
        pieces.extend(member.pieces or [(member.segment, member.text)])
    pieces = _trimmed(pieces)
    if not pieces:
        for member in members:
            member.report.status, member.report.detail = "empty", "whitespace only, alone in its group"
        return None
    return PresetMessage(role, pieces, in_history=True)  # type: ignore[arg-type]


def _example_turns(block: str, user: str, char: str, members: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """One ``<START>`` block as (role, text) example messages, the way ST 1.18 reads it (golden set).

    A line starting ``{{user}}:`` or ``{{char}}:`` (the names as they are, spaces included) opens a message when
    the speaker changes; every other line — and a second line of the same speaker — belongs to the message being
    read, and lines before the block's first speaker line join the first message. A message's text is its lines
    joined with ``"\n"``, the first ``Name:`` in it removed (the space after it stays where it was not at the
    start: ``"*The motor hums.*\n Is it cold?"``), then trimmed. A block without any speaker line gives no
    message (its separator is still sent). In a group chat (``members``) a line of any member opens an assistant
    message named for that member (ST 1.18, golden2 group runs: the joined cards' examples keep each speaker).
    Returns (role, speaker's name, text)."""
    turns: list[tuple[str, str, str]] = []
    speaker: tuple[str, str] | None = None
    lines: list[str] = []
    characters = tuple(dict.fromkeys((char, *members)))

    def flush() -> None:
        if speaker is not None:
            content = js_trim("\n".join(lines).replace(f"{speaker[1]}:", "", 1))
            if content:
                turns.append((speaker[0], speaker[1], content))
        lines.clear()

    for line in block.split("\n"):
        found = ("user", user) if line.startswith(f"{user}:") else next(
            (("assistant", name) for name in characters if line.startswith(f"{name}:")), None)
        if found is not None and speaker is not None and found != speaker:
            flush()
        if found is not None:
            speaker = found
        lines.append(line)
    flush()
    return turns


def _example_blocks(text: str) -> list[str]:
    """ST ``parseMesExamples``: a text not starting with ``<START>`` (case-sensitive) gets one; the split is
    case-insensitive and drops what comes before the first marker. Every block gets its separator, even one that
    gives no example message (ST inserts newChat per block). ST checks the length, not the trimmed text: "\x1f"
    gets a separator."""
    if not text or text == "<START>":
        return []
    if not text.startswith("<START>"):
        text = "<START>\n" + js_trim(text)
    return re.split(r"<start>", text, flags=re.IGNORECASE)[1:]


def _entry_segment(entry: worldinfo.Entry) -> str:
    """The attribution of one World Info entry's text (stcheck's ``world-info`` category reads it)."""
    return f"{WORLD_INFO_SEGMENT}{entry.world}:{entry.uid}"


def downgrades_mid_system(preset: Preset | None) -> bool:
    """Whether ``preset``'s post-processing (semi, strict, single) leaves no system message after the first, so
    every mid-conversation system message is downgraded: ``post_process``'s own answer, asked before arranging."""
    return preset is not None and post_process([], preset.post_processing)[1]


def _chat_value(text: str | None) -> str:
    """A macro value taken from the chat (``{{lastUserMessage}}``, ``{{lastCharMessage}}``, ``{{lastMessage}}``,
    the member's name as ``{{user}}``): what members wrote, so it gets the member rule (format.py
    ``neutralize_body``) — inside a preset entry, which may speak for the host (a downgraded entry's
    ``[user_id:system;]``), no line of it may read as a host line. Every chat-derived value passes here, and so
    does a history message a preset regex script rewrote (``{{match}}`` / ``$1`` groups stay in that message)."""
    return neutralize_body(text) if text else ""


def macro_names(card: CardOptions, *, member: str | None, bot_name: str | None, is_group: bool) -> tuple[str, str]:
    """``({{user}}, {{char}})``: the one rule for the preset entries and the card greeting (``greeting_text``).

    Card options win; else ``{{char}}`` is the bot's name and ``{{user}}`` the member's display name — in a
    private chat only: in a group the speaker changes every turn, and a name that changes in the prefix breaks
    the prompt cache on every request, so a group gets ``User``. The member's name is chat-derived (``_chat_value``)."""
    user = _chat_value(member)
    return card.user or (user if not is_group and user else "User"), card.char or bot_name or "Assistant"


def greeting_text(card: CardOptions, *, member: str | None, bot_name: str | None, is_group: bool, now_ms: int,
                  timezone: str) -> str:
    """The card's ``greeting`` (ST's ``first_mes``) expanded once, as ST does when the chat opens: ``member`` is
    the sender of the chat's first member message, ``now_ms`` the chat's opening time. ST never rewrites the
    greeting later (a persona renamed afterwards keeps the old name there), as zhin renders every past message as
    it was; so the greeting is the same in every request while the entries' ``{{user}}`` follows the speaker."""
    user, char = macro_names(card, member=member, bot_name=bot_name, is_group=is_group)
    return MacroEngine(MacroContext(user=user, char=char, now_ms=now_ms, timezone=timezone)).expand(card.greeting)


class _Builder:
    def __init__(self, preset: Preset, facts: Facts, system: str, messages: list[Projected], tail: str | None) -> None:
        self.preset = preset
        self.facts = facts
        self.system = system
        self.tail = tail
        index = _current_index(messages)
        self.history = list(messages if index is None else messages[:index])
        self.current = None if index is None else messages[index]
        self.loop = [] if index is None else list(messages[index + 1 :])
        speaker = facts.speaker_of(self.current.rows[0]) if self.current is not None and self.current.rows else None
        card = preset.card
        last_char = next((m for m in reversed(self.history) if m.role == "assistant" and m.body), None)
        user, char = macro_names(card, member=speaker, bot_name=facts.bot_name, is_group=facts.is_group)
        self.context = MacroContext(
            user=user, char=char,
            last_user_message=self._raw(self.current), last_char_message=self._raw(last_char),
            last_message=self._raw(self.current or (self.history[-1] if self.history else None)),
            # {{summary}}: the window's compaction summary (its text, as the summary message carries it), else ""
            summary=next((m.body.removeprefix(SUMMARY_PREFIX) for m in messages if m.role == "summary"), ""),
            model=facts.model, now_ms=facts.request_time, timezone=facts.timezone,
            seed=_seed(preset, facts), session_seed=f"{card.seed}\x00{facts.session_id}",
            variables=dict(card.variables), group=card.group.names if card.group is not None else "",
            group_not_muted=card.group.not_muted if card.group is not None else "",
            not_char=card.group.others(char) if card.group is not None else "",
        )
        self.engine = MacroEngine(self.context)
        # ST's order (sillytavern.md §4.6): card fields first, then the World Info entries, then the preset's
        # entries — so a {{setvar}} in a card field or the world book is seen by every entry.
        fields = prepare_card_fields(self.engine, {"examples": card.examples, "description": card.description,
                                                   "personality": card.personality, "persona": card.persona,
                                                   "scenario": card.scenario})
        self.card_examples = fields["examples"]  # prepared like the other card fields; not expanded again
        self.world_info_after = self.engine.expand(card.world_book_after)  # an entry's macros expand on activation
        self.entries: list[EntryReport] = []
        self.warnings: list[str] = []
        self.user_messages = 0  # in the chat, the current one included (the Author's Note's interval counts them)
        self.activation = self._scan_world_info()
        self._note: tuple[worldinfo.AuthorsNote, list[tuple[str, str]]] | None | bool = False  # False: not yet

    def _scan_world_info(self) -> worldinfo.Activation:
        """The World Info entries that fire for this request (ST scans after preparing the card fields and before
        the preset's entries); nothing without World Info."""
        world = self.preset.card.world_info
        if world is None:
            return worldinfo.Activation()
        from zhin_cli.core.tokens import counter

        chat = [m for m in self.history + ([self.current] if self.current is not None else [])
                if m.role in ("user", "assistant")]
        texts: list[str] = []
        for message in reversed(chat):
            row = message.rows[0] if message.rows else None
            text = (self.facts.raw_text_of(row) if row is not None else None) or message.body
            if world.settings.include_names:
                # ST scans "Name: text" with each message's own speaker (a group's other characters too)
                name = (self.facts.speaker_of(row) if row is not None else None) or \
                    (self.context.user if message.role == "user" else self.context.char)
                text = f"{name}: {text}"
            texts.append(text)
        max_context = self.preset.setting("openai_max_context", DEFAULT_MAX_CONTEXT)
        if not isinstance(max_context, int | float) or isinstance(max_context, bool):
            max_context = DEFAULT_MAX_CONTEXT
        activation = worldinfo.activate(world, texts, expand=self.engine.expand, count_tokens=counter().count,
                                        max_context=int(max_context), seed=self.context.seed)
        self.user_messages = sum(1 for m in chat if m.role == "user")
        self.warnings.extend(activation.warnings)
        return activation

    def _world_pieces(self, placed: list[worldinfo.Placed]) -> list[tuple[str, str]]:
        """Fired entries as attributed pieces joined with ``"\n"``."""
        pieces: list[tuple[str, str]] = []
        for entry, content in placed:
            if pieces:
                pieces.append(("", "\n"))
            pieces.append((_entry_segment(entry), content))
        return pieces

    def _wrapped_pieces(self, pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """World Info pieces in ``wi_format`` (the format's own text attributed to ``preset:wi_format``)."""
        template = self.setting("wi_format")
        if not pieces or template == "{0}":
            return pieces
        parts = _format_wi(template)
        out: list[tuple[str, str]] = []  # no {0}: ST sends the format alone (the text is dropped)
        for index, part in enumerate(parts):
            if index:
                out.extend(pieces)
            expanded = self.engine.expand(part) if part else ""
            if expanded:
                out.append(("preset:wi_format", expanded))
        return out

    def world_book_pieces(self, identifier: str, segment: str) -> list[tuple[str, str]]:
        """The ``worldBookBefore`` / ``worldBookAfter`` hole: zhin's own text (system prompt; the configured
        ``world_book_after``) and the World Info entries that fired for that position, joined with ``"\n"``."""
        if identifier == "worldBookBefore":
            own, placed = self._wrap_wi(self.system, keep=True), self.activation.before
        else:
            own, placed = self._wrap_wi(self.world_info_after), self.activation.after
        pieces = [(segment, own)] if own else []
        fired = self._wrapped_pieces(self._world_pieces(placed))
        if pieces and fired:
            pieces.append(("", "\n"))
        return pieces + fired

    def note(self) -> tuple[worldinfo.AuthorsNote, list[tuple[str, str]]] | None:
        """The Author's Note and its text as attributed pieces, when it goes into this request (ST: only then do
        the World Info entries at its top and bottom go in), else None. Expanded once per request."""
        if self._note is False:
            self._note = self._make_note()
        return None if isinstance(self._note, bool) else self._note

    def _make_note(self) -> tuple[worldinfo.AuthorsNote, list[tuple[str, str]]] | None:
        world = self.preset.card.world_info
        if world is None:
            return None
        note = world.note or worldinfo.AuthorsNote()  # ST fills a chat's note settings with the defaults
        if not worldinfo.note_fires(note, self.user_messages):
            return None
        text = self.engine.expand(note.prompt)
        pieces: list[tuple[str, str]] = []
        for owner, piece in worldinfo.note_pieces(text, self.activation):
            if isinstance(owner, worldinfo.Entry):
                pieces.append((_entry_segment(owner), piece))
            else:
                pieces.append((AUTHORS_NOTE_SEGMENT if owner == worldinfo.NOTE else "", piece))
        pieces = _trimmed(pieces)  # ST trims each extension prompt
        return (note, pieces) if pieces else None

    def extension_injections(self, sequence: int) -> list[_Injection]:
        """The Author's Note (in chat) and the @depth World Info groups as in-chat injections: ST's extension
        prompts, each trimmed, joined into the group of their depth and role after the preset's own entries
        (the note, ``2_floating_prompt``, sorts before the ``customDepthWI`` groups)."""
        out: list[_Injection] = []
        found = self.note()
        if found is not None and found[0].position == 1:
            note, pieces = found
            report = EntryReport("authorsNote", "in-chat", f"depth {note.depth}, {note.role}")
            self.entries.append(report)
            out.append(_Injection(note.depth, EXTENSION_ORDER, sequence, note.role, AUTHORS_NOTE_SEGMENT,
                                  "".join(t for _s, t in pieces), report, tuple(pieces)))
        for depth, role, placed in self.activation.at_depth:
            pieces = _trimmed(self._world_pieces(placed))
            if not pieces or not 0 <= depth <= MAX_INJECTION_DEPTH:
                continue
            report = EntryReport(f"worldInfoDepth{depth}{role}", "in-chat", f"depth {depth}, {role}")
            self.entries.append(report)
            out.append(_Injection(depth, EXTENSION_ORDER, sequence + 1 + len(out), role, pieces[0][0],
                                  "".join(t for _s, t in pieces), report, tuple(pieces)))
        return out

    def note_in_prompt(self, before: bool) -> list[PresetMessage]:
        """The Author's Note at position 2 (before the main prompt) or 0 (after it), as its own message."""
        found = self.note()
        if found is None or found[0].position != (2 if before else 0):
            return []
        note, pieces = found
        self.entries.append(EntryReport("authorsNote", "sent", "before main" if before else "after main"))
        return [PresetMessage(note.role, pieces)]  # type: ignore[arg-type]

    def _raw(self, message: Projected | None) -> str:
        if message is None or not message.rows:
            return ""
        return _chat_value(self.facts.raw_text_of(message.rows[0]) or message.body)

    def setting(self, key: str) -> str:
        value = self.preset.setting(key, ST_DEFAULTS.get(key, ""))
        return value if isinstance(value, str) else str(value)

    # -- regex (promptOnly, history only, before macros and injections) --------------------------------
    def apply_regex(self) -> None:
        """Run the scripts; one that hits a bound (time, growth) is skipped for the whole request: everything it
        did is undone (messages and macro state), the scripts run again without it, and a warning names it."""
        scripts = self.preset.regex_scripts  # ``applies`` keeps the promptOnly, enabled ones
        if not scripts:
            return
        skipped = self.preset.skipped_scripts  # kept for the run: a later request skips it without trying again
        for index in sorted(skipped):
            self.warnings.append(_skipped_warning(scripts[index], skipped[index]))
        while True:
            state = self.context.snapshot()
            try:
                self._run_scripts([(i, s) for i, s in enumerate(scripts) if i not in skipped])
                return
            except _Skip as skip:
                self.context.restore(state)
                skipped[skip.index] = skip.reason
                self.warnings.append(_skipped_warning(scripts[skip.index], skip.reason))

    def _run_scripts(self, scripts: list[tuple[int, RegexScript]]) -> None:
        chat = self.history + ([self.current] if self.current is not None else [])
        rewritten: dict[int, Projected] = {}
        left = {index: regex_budget() for index, _script in scripts}  # seconds each script may still spend
        for position, message in enumerate(chat):
            if message.role not in ("user", "assistant") or not message.body:
                continue
            depth = len(chat) - 1 - position
            placement = USER_INPUT if message.role == "user" else AI_OUTPUT
            body = message.body
            for index, script in scripts:
                if applies(script, placement, depth):
                    started = time.perf_counter()
                    try:
                        body = run_script(script, body, self.engine.expand, deadline=started + left[index])
                    except ScriptSkipped as exc:
                        raise _Skip(index, exc.reason) from None
                    left[index] -= time.perf_counter() - started
            if body != message.body:  # still member text: a script may not shape a host line out of it either
                rewritten[id(message)] = replace(message, body=_chat_value(body))
        self.history = [rewritten.get(id(m), m) for m in self.history]
        if self.current is not None:
            self.current = rewritten.get(id(self.current), self.current)

    # -- the ordered collection -----------------------------------------------------------------------
    def collection(self) -> list[PromptEntry]:
        preset = self.preset
        mentioned = {HOLE_ALIASES.get(e.identifier, e.identifier) for e in preset.order}
        out: list[PromptEntry] = []
        for order_entry in preset.order:
            entry = preset.prompts.get(order_entry.identifier) or PromptEntry(order_entry.identifier, marker=True)
            if not order_entry.enabled:
                self.entries.append(EntryReport(entry.identifier, "disabled"))
            elif not entry.triggered("normal"):
                self.entries.append(EntryReport(entry.identifier, "skipped-trigger", ",".join(entry.injection_trigger)))
            else:
                out.append(entry)
        listed = {e.identifier for e in preset.order}
        for identifier in preset.prompts:
            if identifier not in listed and HOLE_ALIASES.get(identifier, identifier) not in APPENDED_WHEN_MISSING:
                self.entries.append(EntryReport(identifier, "not-in-order"))
        for hole in APPENDED_WHEN_MISSING:
            if hole not in mentioned:
                # ST: runtime-filled markers the order does not mention come after every ordered block.
                out.append(preset.prompts.get(hole) or PromptEntry(hole, marker=True))
        return out

    def marker_text(self, identifier: str) -> str | None:
        """Content of a runtime-filled marker, or None if ``identifier`` is not one."""
        identifier = HOLE_ALIASES.get(identifier, identifier)
        context = self.context  # the card fields as prepare_card_fields left them: trimmed and expanded
        if identifier == "worldBookBefore":
            # zhin's own segment text is data, never a template: only the wi_format wrapper is expanded.
            return self._wrap_wi(self.system, keep=True)
        if identifier == "worldBookAfter":
            return self._wrap_wi(self.world_info_after)
        if identifier == "charDescription":
            return context.description
        if identifier == "personaDescription":
            return context.persona
        if identifier in ("charPersonality", "scenario"):
            # ST: a non-empty field goes through its format (whose {{personality}}/{{scenario}} is the prepared
            # field); a blank format sends the field itself; an empty field sends nothing, whatever the format.
            value = context.personality if identifier == "charPersonality" else context.scenario
            template = self.setting("personality_format" if identifier == "charPersonality" else "scenario_format")
            return (self.engine.expand(template) if template else value) if value else ""
        return None

    def _wrap_wi(self, text: str, keep: bool = False) -> str:
        """``text`` in ``wi_format``: the format's macros are expanded, ``text`` is not expanded again. A format
        without ``{0}`` drops the text, as ST does — except zhin's own system prompt (``keep``), which then
        follows the format (losing it would be worse than not matching ST; lint warns)."""
        template = self.setting("wi_format")
        if not text or template == "{0}":
            return text
        pieces = _format_wi(template)
        if len(pieces) == 1 and keep:
            pieces.append("")
        return text.join(self.engine.expand(piece) for piece in pieces)

    def examples(self, segment: str, role_set: bool, role: str) -> list[PresetMessage]:
        blocks = [(segment, block) for block in _example_blocks(self.card_examples)]
        # World Info at the top / bottom of the examples (ST: each entry's blocks put in front of the examples —
        # so of the top entries the highest order comes first — or after them)
        for entry, content in self.activation.example_top:
            blocks[0:0] = [(_entry_segment(entry), block) for block in _example_blocks(content)]
        for entry, content in self.activation.example_bottom:
            blocks += [(_entry_segment(entry), block) for block in _example_blocks(content)]
        if not blocks:
            return []
        user, char = self.context.user, self.context.char
        out: list[PresetMessage] = []
        separator = self.engine.expand(self.setting("new_example_chat_prompt"))
        group = self.preset.card.group
        members = group.members if group is not None else ()
        for source, block in blocks:
            turns = _example_turns(js_trim(block), user, char, members)
            if separator:
                out.append(PresetMessage("system", [("preset:newChat", separator)], exempt=True))
            for speaker_role, name, content in turns:
                pieces = [(source, content)]
                if group is not None:  # ST names the speaker in the text of a group's example messages
                    pieces.insert(0, (GROUP_NAME_SEGMENT, f"{name}: "))
                out.append(PresetMessage("system", pieces,
                                         name="example_user" if speaker_role == "user" else "example_assistant", speaker=name))
        return out

    # -- chatHistory block with in-chat injections ----------------------------------------------------------
    def history_block(self, injections: list[_Injection], with_current: bool) -> list[Item]:
        chat: list[Projected] = list(self.history)
        if with_current and self.current is not None:
            chat.append(self.current)
        inserts: dict[int, list[PresetMessage]] = {}
        count = len(chat)
        by_depth: dict[int, list[_Injection]] = {}
        for injection in injections:
            by_depth.setdefault(injection.depth, []).append(injection)
        for depth in sorted(by_depth, reverse=True):
            position = max(0, count - depth)
            while 0 < position < count and chat[position].role == "tool":
                position -= 1  # never between a tool call and its result
            groups: dict[int, list[_Injection]] = {}
            for injection in by_depth[depth]:
                groups.setdefault(injection.order, []).append(injection)
            for order in sorted(groups):
                for role in INJECTION_ROLES:
                    members = sorted((i for i in groups[order] if i.role == role), key=lambda i: i.sequence)
                    injected = _injected(role, members)
                    if injected is not None:
                        inserts.setdefault(position, []).append(injected)
        out: list[Item] = []
        group = self.preset.card.group is not None
        new_chat = self.engine.expand(self.setting("new_group_chat_prompt" if group else "new_chat_prompt"))
        if new_chat:
            segment = NEW_GROUP_CHAT_SEGMENT if group else "preset:newMainChat"
            out.append(PresetMessage("system", [(segment, new_chat)], exempt=True, in_history=True))
        for position, message in enumerate(chat):
            out.extend(inserts.get(position, []))
            out.append(message)
        out.extend(inserts.get(count, []))
        send_if_empty = self.setting("send_if_empty")
        if send_if_empty and chat and chat[-1].role == "assistant":
            out.append(PresetMessage("user", [("preset:send_if_empty", self.engine.expand(send_if_empty))], in_history=True))
        if with_current:
            out.extend(self.loop)
        nudge = self.engine.expand(self.setting("group_nudge_prompt")) if group else ""
        if nudge:  # ST: the last message of the chatHistory block, after everything injected into it
            out.append(PresetMessage("system", [(GROUP_NUDGE_SEGMENT, nudge)], in_history=True))
        return out

    def build(self) -> Arrangement:
        preset = self.preset
        self.apply_regex()
        collection = self.collection()
        ordered = {HOLE_ALIASES.get(e.identifier, e.identifier) for e in collection}
        explicit_current = "currentTurn" in ordered
        explicit_post = "postTurn" in ordered
        # First pass, in prompt order: expand every entry (variables flow from earlier entries to later ones).
        slots: list[tuple[str, list[PresetMessage]]] = []  # (a hole's name, []) or ("messages", its messages)
        injections: list[_Injection] = []
        for sequence, entry in enumerate(collection):
            identifier = HOLE_ALIASES.get(entry.identifier, entry.identifier)
            segment = SYSTEM_SEGMENT if identifier == "worldBookBefore" else f"preset:{entry.identifier}"
            role = entry.role if entry.role_set or not (entry.marker or identifier in MARKER_IDS) else "system"
            if identifier in ("chatHistory", "currentTurn", "postTurn"):
                if entry.in_chat:
                    self.warnings.append(f"preset entry {entry.identifier!r} is a hole and cannot be injected in-chat; placed by order")
                slots.append((identifier, []))
                self.entries.append(EntryReport(entry.identifier, "sent", "hole"))
                continue
            if identifier == "dialogueExamples":
                slots.append(("messages", self.examples(segment, entry.role_set, role)))
                self.entries.append(EntryReport(entry.identifier, "sent", "examples"))
                continue
            if identifier in ("worldBookBefore", "worldBookAfter") and not entry.in_chat:
                pieces = self.world_book_pieces(identifier, segment)
                if pieces:
                    slots.append(("messages", [PresetMessage(role, pieces)]))
                self.entries.append(EntryReport(entry.identifier, "sent" if pieces else "empty"))
                continue
            if identifier == "main":
                slots.append(("messages", self.note_in_prompt(before=True)))
            text = self.marker_text(identifier)
            if text is None:
                if entry.marker and entry.identifier not in BUILTIN_PROMPTS:
                    self.entries.append(EntryReport(entry.identifier, "never-sent", "unknown marker"))
                    continue
                if not entry.in_chat and entry.identifier not in BUILTIN_PROMPTS and entry.system_prompt is not False:
                    # ST: a relative custom prompt is sent only with system_prompt === false
                    self.entries.append(EntryReport(entry.identifier, "never-sent", "system_prompt is not false"))
                    continue
                text = self.engine.expand(entry.content)
            if entry.in_chat:
                if entry.injection_depth is None:
                    self.entries.append(EntryReport(entry.identifier, "never-sent", "in-chat without an integer depth"))
                elif text:  # whitespace only is kept: it counts inside its group (see _injected)
                    report = EntryReport(entry.identifier, "in-chat", f"depth {entry.injection_depth}, order {entry.injection_order}")
                    injections.append(_Injection(entry.injection_depth, entry.injection_order, sequence, role, segment, text, report))
                    self.entries.append(report)
                else:
                    self.entries.append(EntryReport(entry.identifier, "empty"))
                continue
            if not text:
                self.entries.append(EntryReport(entry.identifier, "empty"))
                continue
            slots.append(("messages", [PresetMessage(role, [(segment, text)])]))
            self.entries.append(EntryReport(entry.identifier, "sent"))
            if identifier == "main":
                slots.append(("messages", self.note_in_prompt(before=False)))
        injections.extend(self.extension_injections(len(collection)))
        # Second pass: lay the slots out.
        items: list[Item] = []
        for kind, value in slots:
            if kind == "messages":
                items.extend(value)
            elif kind == "chatHistory":
                items.extend(self.history_block(injections, with_current=not explicit_current))
            elif kind == "currentTurn" and self.current is not None:
                items.append(self.current)
                items.extend(self.loop)
            elif kind == "postTurn" and self.tail:
                items.append(PresetMessage("system", [(TAIL_SEGMENT, self.tail)]))
        if "chatHistory" not in ordered and injections:
            self.warnings.append("in-chat entries need a chatHistory entry in the order; none was placed")
        items = [i for i in items if not isinstance(i, PresetMessage) or i.text]  # ST: empty messages vanish
        if preset.squash:
            items = squash(items)
        tail = None if explicit_post else self.tail
        folded_tail: list[bool] = []

        def history_pieces(message: Projected) -> list[tuple[str, str]]:
            """A history message folded into another by post-processing: the current input takes its tail along."""
            if message is self.current and tail:
                folded_tail.append(True)
                return [(message.segment_id, message.text), (TAIL_SEGMENT, TAIL_SEPARATOR + tail)]
            return [(message.segment_id, message.text)]

        items, downgrade = post_process(items, preset.post_processing, history_pieces=history_pieces,
                                        user=self.context.user, char=self.context.char)
        return self._arrangement(items, downgrade, None if folded_tail else tail)

    def _arrangement(self, items: list[Item], downgrade: bool, tail: str | None) -> Arrangement:
        leading: list[PresetMessage] = []
        while items and isinstance(items[0], PresetMessage) and items[0].role == "system":
            first = items.pop(0)
            assert isinstance(first, PresetMessage)
            leading.append(first)
        tail_index = next((i for i, m in enumerate(items) if m is self.current), None) if tail else None
        # tail_index None with a tail: the current turn was not sent (no chatHistory), the tail travels alone
        system = "\n".join(block.text for block in leading)
        layout = Layout(system=system, messages=items, tail=tail, tail_index=tail_index, system_blocks=leading)
        bounds = [f"{problem} ({count}×)" for problem, count in self.context.problems.items()]  # macros past a bound
        return Arrangement(layout, downgrade, self.entries, dict(self.context.unknown), list(self.context.random_used),
                           dict(self.context.variables), self.warnings + bounds)


def arrange(preset: Preset | None, system: str, messages: list[Projected], tail: str | None, facts: Facts | None = None) -> Arrangement:
    """The preset stage: the skeleton of ``preset`` (default: the ADR 0041 layout) filled with this request."""
    return _Builder(preset or DEFAULT_PRESET, facts or Facts(), system, messages, tail).build()

"""One captured SillyTavern request body compared with zhin's request for the same turn of the same chat.

A user moving a chat-completion preset from SillyTavern to a zhin bot wants to know whether zhin sends what ST
sent. zhin adds a few things on purpose (history headers, its own system segments in the ``worldInfoBefore``
hole, the scene line on the current input); those are removed using zhin's own attribution of every wire part
(``RenderedPart`` segment ids and ``AssembledRequest.projected`` headers), never by guessing at text. Two
differences on ST's side are by design and handled narrowly: ``names_behavior`` on history messages, and chat
variables (ST keeps them across generations, zhin's scope is one request) — the bytes that depend on variable
state are found by rendering the turn again with every variable pre-set to a sentinel. Whatever is left is a
``Departure``, located (message indices, first differing UTF-8 byte) and, where zhin's attribution can tell,
given a category.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from zhin_cli.core.errors import AssemblyError, InputError
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.textdiff import CONTEXT, first_difference
from zhin_cli.pipeline.assemble import DEFAULT_MODEL, DEFAULT_PROVIDER, TAIL_SEGMENT, AssembledRequest, Assembler
from zhin_cli.pipeline.config import parse_config
from zhin_cli.pipeline.preset import worldinfo
from zhin_cli.pipeline.preset.layout import SYSTEM_SEGMENT
from zhin_cli.pipeline.preset.macros import MacroContext, MacroEngine, js_trim, variable_names
from zhin_cli.pipeline.preset.model import GroupOptions, Preset
from zhin_cli.pipeline.preset.skeleton import (
    AUTHORS_NOTE_SEGMENT,
    GROUP_NAME_SEGMENT,
    GROUP_NUDGE_SEGMENT,
    NEW_GROUP_CHAT_SEGMENT,
    WORLD_INFO_SEGMENT,
)
from zhin_cli.store.sillytavern import GENERATION_MODES, Card, ChatTurn, Group, Lore, SillyTavernChat

JOINERS = ("\n", "\n\n")  # what squash / merge / post-processing put between the parts of one message
HISTORY_PREFIX = "history."
_SENTINEL = "\ue000{}\ue001"  # a non-numeric value that names its variable (private-use characters)
_SENTINEL_AT = re.compile("\ue000(\\d+)\ue001")
_CARD_FIELD_SEGMENTS = frozenset({"preset:charDescription", "preset:charPersonality", "preset:scenario",
                                  "preset:personaDescription", "preset:worldInfoAfter"})
_EXAMPLE_SEGMENTS = frozenset({"preset:dialogueExamples", "preset:newChat"})
_GROUP_SEGMENTS = frozenset({GROUP_NUDGE_SEGMENT, NEW_GROUP_CHAT_SEGMENT, GROUP_NAME_SEGMENT})
# the card fields ST joins from every member's card in a group's Join mode
_JOINED_SEGMENTS = frozenset({"preset:charDescription", "preset:charPersonality", "preset:scenario",
                              "preset:dialogueExamples"})


@dataclass(frozen=True)
class CheckSetup:
    """Everything fixed for a whole check: the chat, the card, and the assemblers built once."""

    chat: SillyTavernChat
    card: Card | None
    assembler: Assembler = field(repr=False)
    variables: tuple[str, ...] = ()  # the chat variables the preset and card use (the state probe pre-sets them)
    probe: Assembler | None = field(default=None, repr=False)  # the assembler with those variables pre-set
    # texts of the World Info entries and the Author's Note (macros expanded with the chat's names): an extra
    # message on ST's side that holds one of them gets its category (zhin rendered nothing there to ask)
    known_texts: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()  # World Info and Author's Note features that are set but not simulated
    # a group chat: (member, assembler, probe) for every member who replies, in member order; ``member`` is the
    # one this setup speaks for (``for_turn``)
    members: tuple[tuple[str, Assembler, Assembler | None], ...] = field(default=(), repr=False)
    member: str | None = None

    @property
    def character(self) -> str:
        """The bot's name: the speaking member's, else the card's, else the chat's."""
        if self.member is not None:
            return self.member
        return self.card.name if self.card is not None else self.chat.character_name

    @property
    def joined_cards(self) -> bool:
        group = self.chat.group
        return group is not None and group.generation_mode != 0

    @property
    def characters(self) -> tuple[str, ...]:
        """Every character whose messages the history holds (a group's members; else the bot)."""
        group = self.chat.group
        return group.names if group is not None else (self.character,)

    def for_turn(self, turn: ChatTurn) -> CheckSetup:
        """The setup of the member whose reply ``turn`` made (a group chat), else this one."""
        if not self.members or turn.speaker is None:
            return self
        for name, assembler, probe in self.members:
            if name == turn.speaker:
                return replace(self, assembler=assembler, probe=probe, member=name)
        raise InputError(f"turn {turn.number}: {turn.speaker!r} replied, but is not a member who replies in the "
                         "group file (muted, or not a member)", where=str(self.chat.path))


@dataclass(frozen=True)
class Departure:
    turn: int
    st_index: int | None  # index in the captured body's messages (None: missing on ST's side)
    zhin_index: int | None  # index in zhin's wire messages (None: extra on ST's side)
    role: str  # ST's role (zhin's when st_index is None)
    zhin_role: str | None
    source: str  # what zhin rendered there: segment ids ("preset:<identifier>", "history", …) joined by ", "
    kind: str  # "changed" | "role" | "moved" | "missing" | "extra"
    category: str | None
    byte: int | None  # UTF-8 byte offset of the first differing byte in the content (changed)
    st_excerpt: str
    zhin_excerpt: str
    mark: int | None = None  # index of the first differing character in both excerpts (changed)

    def as_dict(self) -> JSONObject:
        return {"turn": self.turn, "kind": self.kind, "st_index": self.st_index, "zhin_index": self.zhin_index,
                "role": self.role, "zhin_role": self.zhin_role, "source": self.source, "category": self.category,
                "byte": self.byte, "st_excerpt": self.st_excerpt, "zhin_excerpt": self.zhin_excerpt,
                "mark": self.mark}


@dataclass(frozen=True)
class ByDesign:
    """A difference zhin makes on purpose; never a departure."""

    kind: str  # "chat-variable" | "names"
    turn: int
    st_index: int | None
    detail: str

    def as_dict(self) -> JSONObject:
        return {"kind": self.kind, "turn": self.turn, "st_index": self.st_index, "detail": self.detail}


@dataclass(frozen=True)
class TurnCheck:
    turn: int
    departures: list[Departure]
    by_design: list[ByDesign]
    removed: dict[str, int]  # {"headers": n, "system_parts": n, "tail": n}: zhin's own additions taken out
    ignored_keys: list[str]  # top-level keys of either body not compared (sampling/connection), sorted
    notes: list[str] = field(default_factory=list)  # e.g. the capture's model is not the profile zhin used
    messages: int = 0  # messages in ST's body (what the departures are out of)
    speaker: str | None = None  # a group chat: the member whose request this was

    def as_dict(self) -> JSONObject:
        return {"turn": self.turn, "speaker": self.speaker, "departures": [d.as_dict() for d in self.departures],
                "by_design": [b.as_dict() for b in self.by_design], "removed": dict(self.removed),
                "ignored_keys": list(self.ignored_keys), "notes": list(self.notes), "messages": self.messages}


# --- setup ---------------------------------------------------------------------------------------------------


def prepare(preset: Path, chat: SillyTavernChat, *, card: Card | None = None, members: Sequence[Card] = (),
            lore: Lore | Sequence[Lore] | None = None, persona_description: str = "",
            post_processing: str | None = None, world_settings: worldinfo.Settings | None = None,
            provider: str = DEFAULT_PROVIDER, model: str = DEFAULT_MODEL) -> CheckSetup:
    """Load the preset once with the card, persona and lorebooks, and build the assembler (and the state probe)
    for ``provider``/``model`` — ST's Custom source speaks OpenAI's shape, hence the default profile; a capture's
    own ``model`` is not known until it is read, and one that differs gets a note. The lorebooks, the card's
    embedded book and the chat's Author's Note go to the World Info engine (``world_info``), with
    ``world_settings`` (ST's defaults when None). A group chat (``chat.group``) gets one assembler per member who
    replies, from the members' cards (``card`` and ``members``) in the group's card mode (``group_card``)."""
    options: dict[str, str] = {"user": chat.persona_name, "char": chat.character_name,  # the card's name, below
                               "persona": persona_description}
    if card is not None:
        # the greeting is the chat's own first message already (ST writes first_mes into the chat file)
        options.update({k: v for k, v in card.card_options().items() if k != "greeting"})
    lores = [] if lore is None else [lore] if isinstance(lore, Lore) else list(lore)
    # in a group, the other members' books are theirs: never the first card's (``card``) request's
    world, notes = world_info(chat, card, lores, world_settings or worldinfo.Settings(),
                              members if chat.group is not None else ())
    assembler = _assembler(preset, options, world, post_processing, provider, model)
    variables = _used_variables(assembler.preset)
    saved = [name for name in variables if name in chat.variables]
    if 2 ** len(saved) > MAX_SAVED_STATES:
        notes.append(f"the chat saved {len(saved)} of the chat variables the preset uses: their states per turn "
                     f"are not tried (at most {MAX_SAVED_STATES.bit_length() - 1})")
    names = (options["user"] or "User", card.name if card is not None else chat.character_name)
    known = list(_known_texts(world, *names))
    speaking: list[tuple[str, Assembler, Assembler | None]] = []
    if chat.group is not None:
        cards = _member_cards(chat.group, [c for c in (card, *members) if c is not None])
        group = GroupOptions(chat.group.names, tuple(n for n in chat.group.names if n not in chat.group.speaking))
        for name in chat.group.speaking:
            fields = group_card(chat.group, cards, name, options["user"] or "User")
            # ST scans the speaking member's book (its card's), not the first card's
            own, member_notes = world_info(chat, cards[name], lores, world_settings or worldinfo.Settings(),
                                           [c for other, c in cards.items() if other != name])
            notes += [note for note in member_notes if note not in notes]
            known += [text for text in _known_texts(own, names[0], name) if text not in known]
            member = _assembler(preset, {**options, **fields}, own, post_processing, provider, model, group)
            speaking.append((name, member, _probe(member, variables)))
        notes.append(f"group chat {chat.group.name!r}: {GENERATION_MODES[chat.group.generation_mode]} cards, "
                     f"replies checked for {', '.join(chat.group.speaking)}")
        if chat.group.activation_strategy != 1:
            notes.append("the group's reply order is not List: each reply is checked as its member's request, "
                         "whoever ST chose")
    return CheckSetup(chat, card, assembler, variables, _probe(assembler, variables), tuple(known),
                      tuple(notes), tuple(speaking))


def _assembler(preset: Path, options: dict[str, str], world: worldinfo.WorldInfo, post_processing: str | None,
               provider: str, model: str, group: GroupOptions | None = None) -> Assembler:
    config = parse_config({"preset": {"file": str(preset), **options}})
    registry, _ = config.registry()
    assembler = Assembler(registry, config, provider=provider, model=model)
    if assembler.preset is not None:
        if post_processing is not None:
            # a connection setting in ST, not part of an export: the caller says what ST used
            assembler.preset.settings["custom_prompt_post_processing"] = post_processing
        # ST's own files, not zhin.yaml options: set on the loaded preset, as the connection setting is
        assembler.preset.card = replace(assembler.preset.card, world_info=world, group=group)
    return assembler


def _member_cards(group: Group, cards: list[Card]) -> dict[str, Card]:
    """Each member's card, by name (ST names a character's avatar file after the character). A member without
    a card is an ``InputError``: its fields are in every joined request, and its own requests need them."""
    by_name = {c.name: c for c in cards}
    missing = [name for name in group.names if name not in by_name]
    if missing:
        raise InputError(f"no --card for group member(s) {', '.join(missing)}: give every member's card "
                         f"(cards given: {', '.join(by_name) or 'none'})", where=str(group.path))
    return {name: by_name[name] for name in group.names}


_JOIN_FIELDS = (("description", "Description"), ("personality", "Personality"), ("scenario", "Scenario"),
                ("examples", "Example Messages"))


def group_card(group: Group, cards: dict[str, Card], speaker: str, user: str) -> dict[str, str]:
    """The card options of ``speaker``'s request in ``group``: in Swap mode the speaker's own card; in Join mode
    every member's description, personality, scenario and examples, each expanded with that member as
    ``{{char}}``, wrapped in the join prefix and suffix (``<FIELDNAME>`` named), joined with ``"\n"`` — mode 1
    leaves the muted members out (the speaker never), mode 2 keeps them (ST's getGroupCharacterCards)."""
    own = {k: v for k, v in cards[speaker].card_options().items() if k != "greeting"}
    if group.generation_mode == 0:
        return own
    joined: dict[str, list[str]] = {key: [] for key, _label in _JOIN_FIELDS}
    for avatar, name in zip(group.members, group.names, strict=True):
        if group.generation_mode == 1 and avatar in group.disabled and name != speaker:
            continue
        engine = MacroEngine(MacroContext(user=user, char=name))
        values = cards[name].card_options()
        for key, label in _JOIN_FIELDS:
            joined[key].append(_joined_field(engine, values[key], label, group))
    return {**own, **{key: "\n".join(v for v in values if v) for key, values in joined.items()}}


def _joined_field(engine: MacroEngine, value: str, label: str, group: Group) -> str:
    """One member's field as ST joins it: the prefix and suffix on their own lines around the trimmed value."""
    value = js_trim(value)
    if not value:
        return ""

    def expand(text: str) -> str:
        return engine.expand(js_trim(re.sub("<FIELDNAME>", label, text, flags=re.IGNORECASE))) if text else ""

    prefix, suffix = expand(group.join_prefix), expand(group.join_suffix)
    return f"{prefix + chr(10) if prefix else ''}{expand(value)}{chr(10) + suffix if suffix else ''}"


def _book_name(name: str) -> str:
    return name.replace("_", " ").strip().casefold()


def _stands_for(lores: list[Lore], named: list[str | None]) -> list[str | None]:
    """For each ``--lore`` book, the (compared) name of the book it stands for among ``named`` (the chat's book,
    the cards' books), None for a global one. One file named as none of them stands for the one named book, when
    exactly one is named (the documented rule: with one ``--lore`` file, that file is taken to be it)."""
    wanted = {_book_name(name) for name in named if name}
    out = [_book_name(lore.name) if _book_name(lore.name) in wanted else None for lore in lores]
    if len(lores) == 1 and out[0] is None and len(wanted) == 1:
        return [next(iter(wanted))]
    return out


def world_info(chat: SillyTavernChat, card: Card | None, lores: list[Lore], settings: worldinfo.Settings,
               others: Sequence[Card] = ()) -> tuple[worldinfo.WorldInfo, list[str]]:
    """The books ST scans for this chat, each with its role (ST orders them by it): a ``--lore`` book named as the
    chat's book (``chat_metadata.world_info``) is the chat's, one named as the card's (``extensions.world``) the
    character's, any other a global one; the card's embedded ``character_book`` is the character's book when no
    file stands for it. Names compare as ST's file names, ``_`` and spaces alike, case-insensitively; a single
    ``--lore`` file named as no book stands for the one book the chat or the cards name (if exactly one is named).
    In a group chat ``card`` is the speaking member's and ``others`` the other members' cards: ST reads only the
    speaker's book, so a book that stands for another member's is left out. And one note for each book the chat
    or card names that is not given, and each feature that is not simulated."""
    notes: list[str] = []
    chat_book = chat.metadata.get("world_info")
    chat_book = chat_book if isinstance(chat_book, str) and chat_book else None
    card_book = card.world if card is not None else None
    stands_for = _stands_for(lores, [chat_book, card_book, *(other.world for other in others)])
    books: list[worldinfo.Book] = []
    for lore, named in zip(lores, stands_for, strict=True):
        source = "chat" if named is not None and named == _book_name(chat_book or "") else \
            "character" if named is not None and named == _book_name(card_book or "") else \
            "global" if named is None else None
        if source is None:
            continue  # another group member's book: ST scans it only for that member's requests
        books.append(worldinfo.Book(lore.name, source, tuple(worldinfo.entry_from_st(key, raw, lore.name)
                                                             for key, raw in lore.entries)))
    sources = {book.source for book in books}
    if card is not None and card.character_book is not None and "character" not in sources:
        name = card_book or card.name
        books.append(worldinfo.Book(name, "character", worldinfo.entries_from_character_book(card.character_book, name)))
        sources.add("character")
    if card_book is not None and "character" not in sources:
        notes.append(f"the card links World Info book {card_book!r} (extensions.world): give it with --lore")
    if chat_book is not None and "chat" not in sources:
        notes.append(f"the chat is bound to World Info book {chat_book!r} (chat_metadata.world_info): give it with --lore")
    for book in books:
        for entry in book.entries:
            if entry.unsimulated and not entry.disabled:
                notes.append(f"{entry.label}: {', '.join(entry.unsimulated)} not simulated")
    if settings.min_activations > 0:
        notes.append(f"World Info minimum activations ({settings.min_activations}) is not simulated")
    note = worldinfo.note_from_metadata(chat.metadata)
    if note is not None and note.prompt.strip():
        place = {0: "after the main prompt", 2: "before the main prompt"}.get(note.position, f"in chat at depth {note.depth}")
        every = "every request" if note.interval == 1 else "never" if note.interval <= 0 else \
            f"every {note.interval} user messages"
        notes.append(f"the chat has an Author's Note (chat_metadata), simulated: {place}, {every}, role {note.role}")
    return worldinfo.WorldInfo(tuple(books), settings, note), notes


def _known_texts(world: worldinfo.WorldInfo, user: str, char: str) -> tuple[tuple[str, str], ...]:
    """(category, text) for every entry's content and the note, macros expanded with the chat's names."""
    engine = MacroEngine(MacroContext(user=user, char=char))
    out = [("world-info", engine.expand(entry.content).strip()) for book in world.books for entry in book.entries]
    if world.note is not None:
        out.append(("authors-note", engine.expand(world.note.prompt).strip()))
    return tuple((category, text) for category, text in out if text)


def _used_variables(preset: Preset | None) -> tuple[str, ...]:
    if preset is None:
        return ()
    texts = [p.content for p in preset.prompts.values()]
    card = preset.card
    texts += [card.description, card.personality, card.scenario, card.persona, card.examples, card.world_book_after]
    if card.world_info is not None:
        texts += [e.content for book in card.world_info.books for e in book.entries]
        texts += [card.world_info.note.prompt] if card.world_info.note is not None else []
    return tuple(sorted({name.strip() for text in texts for name in variable_names(text) if name.strip()}))


# --- zhin's side ---------------------------------------------------------------------------------------------


@dataclass
class _Piece:
    segment: str  # "" for a joiner between parts
    text: str


@dataclass(frozen=True)
class ZhinMessage:
    """A zhin wire message with zhin's own additions removed."""

    index: int  # in zhin's wire messages
    role: str
    content: str
    sources: tuple[str, ...]  # segment ids of what is left, in order, without repeats
    name: str | None = None
    rewritten: bool = False  # a history part differs from its projected body: the preset stage rewrote it (regex)
    spans: tuple[tuple[str, int, int], ...] = ()  # (segment id, start, end) UTF-8 byte offsets of each part
    sender: str | None = None  # a history message of one chat message: who sent it (from the chat, by row)

    def part_at(self, byte: int) -> tuple[str, int, int] | None:
        """The attributed part holding ``byte`` (None: a joiner, or past the end)."""
        return next((span for span in self.spans if span[1] <= byte < span[2] and span[0]), None)

    @property
    def history(self) -> bool:
        return any(s.startswith(HISTORY_PREFIX) for s in self.sources)

    @property
    def source(self) -> str:
        labels: list[str] = []
        for s in self.sources:
            label = "history" if s.startswith(HISTORY_PREFIX) else "examples" if s in _EXAMPLE_SEGMENTS else s
            if label not in labels:
                labels.append(label)
        return ", ".join(labels)


def _pieces(content: str, parts: list[tuple[str, str]]) -> list[_Piece]:
    """A wire message's text cut into its attributed parts (in order) and the joiners between them."""
    out: list[_Piece] = []
    cursor = 0
    for segment, text in parts:
        at = content.find(text, cursor)
        if at < 0:
            raise AssemblyError(f"cannot attribute zhin's request: part {segment!r} {text[:40]!r} is not in its wire "
                                "message (a preset regex script may have rewritten it)")
        if at > cursor:
            out.append(_Piece("", content[cursor:at]))
        out.append(_Piece(segment, text))
        cursor = at + len(text)
    if cursor < len(content):
        out.append(_Piece("", content[cursor:]))
    return out


def _without(pieces: list[_Piece], segment: str, *, joined: bool = True) -> tuple[list[_Piece], int]:
    """Drop the parts of ``segment`` and, if they were ``joined`` to their neighbours (squash, merge), for each the
    one joiner that tied it in (the tail part carries its own separator: it is not joined). Returns the count."""
    out = list(pieces)
    count = 0
    while any(p.segment == segment for p in out):
        at = next(i for i, p in enumerate(out) if p.segment == segment)
        before = joined and at > 0 and not out[at - 1].segment and out[at - 1].text in JOINERS
        after = joined and at + 1 < len(out) and not out[at + 1].segment and out[at + 1].text in JOINERS
        start = at - 1 if before else at
        end = at + 2 if after and not before else at + 1
        del out[start:end]
        count += 1
    return out, count


def zhin_messages(request: AssembledRequest,
                  senders: dict[int, str] | None = None) -> tuple[list[ZhinMessage], dict[str, int]]:
    """zhin's wire messages without what zhin adds by design, located through zhin's own attribution, and how
    many of each addition were removed. ``senders`` (chat row → sender's name) names each history message's
    sender (``ZhinMessage.sender``)."""
    # (header, header + body as projected before the preset stage, rows) of each history message with a header
    headers = [(m.header, m.text, m.rows) for m in request.projected if m.header]
    history_segments = {m.segment_id for m in request.projected}
    by_message: dict[int, list[tuple[str, str]]] = {}
    for part in request.parts:
        by_message.setdefault(part.message_index, []).append((part.segment_id, part.text))
    removed = {"headers": 0, "system_parts": 0, "tail": 0}
    out: list[ZhinMessage] = []
    for index, message in enumerate(request.request["messages"]):
        pieces = _pieces(message.get("content") or "", by_message.get(index, []))
        rewritten = False
        sent_by: list[str | None] = []
        for piece in pieces:  # history parts in wire order are the projected messages in order: strip each header
            if piece.segment in history_segments and headers and piece.text.startswith(headers[0][0]):
                header, projected, rows = headers.pop(0)
                sent_by.append((senders or {}).get(rows[0]) if len(rows) == 1 else None)
                rewritten |= piece.text != projected
                piece.text = piece.text[len(header):].removeprefix(" ")
                removed["headers"] += 1
        pieces, system = _without(pieces, SYSTEM_SEGMENT)
        pieces, tail = _without(pieces, TAIL_SEGMENT, joined=False)
        removed["system_parts"] += system
        removed["tail"] += tail
        text = "".join(p.text for p in pieces)
        if not text:
            continue  # the message was only zhin's additions
        sources = tuple(dict.fromkeys(p.segment for p in pieces if p.segment))
        sender = sent_by[0] if len(sent_by) == 1 else None
        out.append(ZhinMessage(index, message["role"], text, sources, message.get("name"), rewritten, _spans(pieces),
                               sender))
    if headers:
        raise AssemblyError(f"cannot attribute zhin's request: {len(headers)} history headers are not on the wire "
                            "(a preset regex script may have rewritten them)")
    return out, removed


def _spans(pieces: list[_Piece]) -> tuple[tuple[str, int, int], ...]:
    out: list[tuple[str, int, int]] = []
    cursor = 0
    for piece in pieces:
        size = len(piece.text.encode("utf-8"))
        out.append((piece.segment, cursor, cursor + size))
        cursor += size
    return tuple(out)


def _position(setup: CheckSetup, turn: ChatTurn) -> tuple[int, int]:
    """Where the request for ``turn`` is made (before the reply, at its time; without a reply, right after the
    user message, at its time)."""
    messages = setup.chat.session.messages
    if turn.reply_position is not None:
        return turn.reply_position, messages[turn.reply_position].timestamp
    return turn.user_position + 1, messages[turn.user_position].timestamp


def _assemble(assembler: Assembler, setup: CheckSetup, turn: ChatTurn) -> AssembledRequest:
    position, time = _position(setup, turn)
    return assembler.assemble(setup.chat.session, position, time)


def zhin_request(setup: CheckSetup, turn: ChatTurn) -> AssembledRequest:
    """zhin's request for ``turn``, as sent (before any removal)."""
    return _assemble(setup.assembler, setup, turn)


def _probe(base: Assembler, names: tuple[str, ...]) -> Assembler | None:
    """The same assembler with every chat variable the preset uses pre-set to a sentinel naming it: the bytes of
    its request that differ from the plain one are the ones that depend on chat-variable state."""
    if base.preset is None or not names:
        return None
    variables = tuple((name, _SENTINEL.format(i)) for i, name in enumerate(names))
    preset = replace(base.preset, card=replace(base.preset.card, variables=variables))
    return Assembler(base.registry, base.config, provider=base.provider, model=base.model, timezone=base.timezone,
                     preset=preset, facts=base.facts)


MAX_SAVED_STATES = 64  # 2^6: past six saved variables the states are not tried (a note says so)


def variable_states(used: tuple[str, ...], saved: dict[str, str]) -> list[tuple[tuple[str, str], ...]]:
    """Each state ST may have held at a turn, from the chat's saved end state: every used variable that was saved
    either unset or at its saved value, fewest set first (the plain request, all unset, is not among them).
    Empty past ``MAX_SAVED_STATES`` states."""
    names = [name for name in used if name in saved]
    if not names or 2 ** len(names) > MAX_SAVED_STATES:
        return []
    states = [tuple((name, saved[name]) for bit, name in enumerate(names) if mask >> bit & 1)
              for mask in range(1, 2 ** len(names))]
    return sorted(states, key=len)


def _state_label(state: tuple[tuple[str, str], ...], names: list[str]) -> str:
    return "ST's text with the " + _state_text(state, names)


def _state_text(state: tuple[tuple[str, str], ...], names: list[str]) -> str:
    values = dict(state)
    shown = [f"{name}={values[name]}" if name in values else f"{name} unset" for name in names]
    return "saved chat variables " + "; ".join(shown) + " (the chat file keeps only the end state)"


def _saved_variable_states(setup: CheckSetup, turn: ChatTurn, st: list[_StMessage],
                           departures: list[Departure]) -> tuple[list[Departure], list[ByDesign], list[str]]:
    """ST keeps chat variables across generations, and its chat file keeps only their end state: a value typed in
    the send box (``{{setvar}}``) is gone from the message, so on which turn it was set is not known. Each
    departing ST message is compared with zhin's rendered in each state the saved variables allow (cheapest
    first): one that matches in some state is that state, by design, not a departure. One that matches in none
    is reported against the closest state — its first difference the latest (ties: fewest variables set) — with
    that state's category, and a note naming the state (the plain render's first difference is often only the
    variable-decided branch)."""
    base = setup.assembler
    saved = setup.chat.variables
    states = variable_states(setup.variables, saved)
    if base.preset is None or not states:
        return departures, [], []
    names = [name for name in setup.variables if name in saved]
    open_indices = {d.st_index for d in departures if d.st_index is not None}
    State = tuple[tuple[str, str], ...]
    closest: dict[int | None, tuple[Departure, State | None]] = {
        d.st_index: (d, None) for d in departures if d.kind == "changed" and d.byte is not None}
    by_design: list[ByDesign] = []
    for state in states:
        if not open_indices:
            break
        preset = replace(base.preset, card=replace(base.preset.card, variables=state))
        assembler = Assembler(base.registry, base.config, provider=base.provider, model=base.model,
                              timezone=base.timezone, preset=preset, facts=base.facts)
        zhin, _ = zhin_messages(_assemble(assembler, setup, turn))
        found = _compare(turn.number, st, zhin, preset, setup.known_texts, setup.joined_cards)
        still = {d.st_index for d in found}
        for index in sorted(open_indices - still):
            by_design.append(ByDesign("chat-variable", turn.number, index, _state_label(state, names)))
            open_indices.discard(index)
        for departure in found:
            best = closest.get(departure.st_index)
            if best is not None and departure.kind == "changed" and (departure.byte or 0) > (best[0].byte or 0):
                closest[departure.st_index] = (departure, state)
    left: list[Departure] = []
    notes: list[str] = []
    for departure in departures:
        if departure.st_index is not None and departure.st_index not in open_indices:
            continue
        better, near = closest.get(departure.st_index, (departure, None))
        if near is not None:
            departure = better
            notes.append(f"ST message {better.st_index} is compared with zhin's text in its closest chat-variable "
                         "state: " + _state_text(near, names))
        left.append(departure)
    return left, by_design, notes


def _variable_near(text: str, start: int, end: int, names: tuple[str, ...]) -> str:
    """The variable whose sentinel is at (or next to) ``text[start:end]``, the changed stretch of the probe."""
    for found in _SENTINEL_AT.finditer(text, max(0, start - len(_SENTINEL) - 4), min(len(text), end + len(_SENTINEL) + 4)):
        index = int(found.group(1))
        if index < len(names):
            return names[index]
    return "?"


_VALUE_CHARACTER = re.compile(r"[0-9A-Za-z_]")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _value_group(zhin_value: str) -> str:
    """What ST may hold where zhin shows ``zhin_value``: a number where zhin's is a number (ST's counters run on),
    else a run of ASCII letters, digits and ``_`` — so text around a value is never excused with it."""
    return r"(-?\d+(?:\.\d+)?)" if _NUMBER.fullmatch(zhin_value) else r"([0-9A-Za-z_]*)"


def _state_patterns(normal: list[ZhinMessage], probed: list[ZhinMessage],
                    names: tuple[str, ...]) -> dict[int, tuple[re.Pattern[str], list[str]]]:
    """For each zhin message whose text depends on chat-variable state: a pattern of its text with those spans as
    groups, and the variable each group shows (read off the sentinel)."""
    out: dict[int, tuple[re.Pattern[str], list[str]]] = {}
    if len(normal) != len(probed):
        return out
    for at, (mine, other) in enumerate(zip(normal, probed, strict=True)):
        if mine.content == other.content:
            continue
        spans: list[tuple[int, int, str]] = []
        matcher = difflib.SequenceMatcher(None, mine.content, other.content, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            start, end = i1, i2
            # the whole value, not just the changed characters (difflib may pair the sentinel's digits with it):
            # widened over ASCII letters and digits only, never over the text around it (CJK is alphanumeric too)
            while start > 0 and _VALUE_CHARACTER.fullmatch(mine.content[start - 1]):
                start -= 1
            while end < len(mine.content) and _VALUE_CHARACTER.fullmatch(mine.content[end]):
                end += 1
            name = _variable_near(other.content, j1, j2, names)
            if spans and start <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]), spans[-1][2])
            else:
                spans.append((start, end, name))
        pattern, cursor = "", 0
        for start, end, _name in spans:
            pattern += re.escape(mine.content[cursor:start]) + _value_group(mine.content[start:end])
            cursor = end
        pattern += re.escape(mine.content[cursor:])
        out[at] = (re.compile(pattern, re.DOTALL), [name for _s, _e, name in spans])
    return out


# --- the comparison ------------------------------------------------------------------------------------------


@dataclass
class _StMessage:
    index: int
    role: str
    content: str
    name: str | None
    compared: str  # the content in zhin's terms (by-design differences put back)


def _st_messages(body: JSONObject, zhin: list[ZhinMessage], patterns: dict[int, tuple[re.Pattern[str], list[str]]],
                 speakers: dict[str, tuple[str, ...]], turn: int,
                 forced: list[Departure] | None = None) -> tuple[list[_StMessage], list[ByDesign]]:
    """ST's messages in zhin's terms. A ``Name: `` prefix on a history message is by design when ``Name`` is
    the message's own sender (or, the sender unknown, any speaker of the role); with ``forced`` (a group chat),
    any other prefix on a history message of a known sender is a ``group`` departure added to it."""
    history: dict[tuple[str, str], list[ZhinMessage]] = {}
    for m in zhin:
        if m.history:
            history.setdefault((m.role, m.content), []).append(m)
    by_design: list[ByDesign] = []
    out: list[_StMessage] = []
    messages = body.get("messages")
    objects = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    if not isinstance(messages, list) or len(objects) != len(messages):
        raise InputError("the captured body has no chat-completion \"messages\" list of objects")
    for index, raw in enumerate(objects):
        role, content = str(raw.get("role")), raw.get("content")
        # non-text content (parts lists) is compared as its JSON: it can only equal zhin's if zhin sent the same
        content = content if isinstance(content, str) else "" if content is None else json.dumps(content, ensure_ascii=False)
        name = raw.get("name")
        if name is not None and not isinstance(name, str):  # compared as its JSON, like non-text content
            name = json.dumps(name, ensure_ascii=False)
        compared = content
        names_of_role = speakers.get(role, ())
        speaker = next((n for n in names_of_role if content.startswith(f"{n}: ")
                        and _sent_by(history.get((role, content[len(n) + 2:]), []), n)), None)
        misnamed = None if speaker is not None or forced is None or (role, content) in history else \
            _misnamed(history, role, content)  # a text zhin sent as is has no prefix to judge
        if name is not None and (role, content) in history and any(name in (n, n.replace(" ", "_")) for n in names_of_role):
            by_design.append(ByDesign("names", turn, index, f"ST sent name {name!r}; zhin names the sender in its header"))
            name = None
        elif speaker is not None:
            compared = content[len(speaker) + 2:]
            by_design.append(ByDesign("names", turn, index, f"ST prefixed {speaker + ': '!r}; zhin names the sender in its header"))
        elif misnamed is not None and forced is not None:
            mine, expected = misnamed
            compared = mine.content  # the body matches: the departure is the prefix alone
            forced.append(Departure(turn, index, mine.index, role, mine.role, mine.source, "changed", "group",
                                    *_located(content, expected)))
        else:
            for at, (pattern, names) in patterns.items():
                found = pattern.fullmatch(content)
                mine = zhin[at]
                if found is None or mine.role != role:
                    continue
                zhin_values = pattern.fullmatch(mine.content)
                assert zhin_values is not None
                for group, variable in enumerate(names, start=1):
                    if found.group(group) != zhin_values.group(group):
                        by_design.append(ByDesign("chat-variable", turn, index,
                                                  f"{variable}: ST {found.group(group)}, zhin {zhin_values.group(group)}"))
                compared = mine.content
                break
        out.append(_StMessage(index, role, content, name, compared))
    return out, by_design


def _sent_by(messages: list[ZhinMessage], name: str) -> bool:
    """Some of ``messages`` (zhin's history messages of one text) is ``name``'s, or its sender is not known."""
    return any(m.sender in (None, name) for m in messages)


_NAME_LIMIT = 200  # a forced name is on the message's first line, and no longer than this


def _misnamed(history: dict[tuple[str, str], list[ZhinMessage]], role: str,
              content: str) -> tuple[ZhinMessage, str] | None:
    """A history message of a known sender that ST sent behind another ``Name: `` prefix (a wrong or misspelt
    forced name): zhin's message and the text ST should have sent (its sender's prefix)."""
    line = content[:_NAME_LIMIT + 2].split("\n", 1)[0]
    at = line.find(": ")
    while at > 0:
        body = content[at + 2:]
        known = [m for m in history.get((role, body), []) if m.sender is not None]
        if known:
            return known[0], f"{known[0].sender}: {body}"
        at = line.find(": ", at + 1)
    return None


def _opening(text: str) -> str:
    """How a whole message is shown (moved, missing, extra, role): its start, as long as request-diff's excerpts."""
    return text[:CONTEXT]


class _Categorizer:
    """A departure's category, from zhin's attribution of the message (never from guessing at text)."""

    def __init__(self, preset: Preset | None, known: tuple[tuple[str, str], ...] = (), joined_cards: bool = False) -> None:
        self.preset = preset
        self.known = known
        self.joined_cards = joined_cards  # a group in Join mode: the card fields are every member's, joined

    def whole(self, sources: tuple[str, ...]) -> str | None:
        """A whole message zhin rendered (missing or moved): the group's own messages, the World Info or the note
        it holds, else an in-chat preset entry (``injection``)."""
        if any(s in _GROUP_SEGMENTS for s in sources):
            return "group"
        if any(s == AUTHORS_NOTE_SEGMENT for s in sources):
            return "authors-note"
        if any(s.startswith(WORLD_INFO_SEGMENT) for s in sources):
            return "world-info"
        return "injection" if self.in_chat(sources) else None

    def beside(self, zhin: list[ZhinMessage], moved: ZhinMessage) -> str | None:
        """A history message that moved did so past something zhin inserts by depth: the World Info or note
        message next to it on zhin's side names the cause (a depth or an interval that differs)."""
        at = zhin.index(moved)
        for neighbour in zhin[max(0, at - 1):at] + zhin[at + 1:at + 2]:
            category = self.whole(neighbour.sources)
            if category in ("world-info", "authors-note"):
                return category
        return None

    def extra(self, content: str) -> str | None:
        """An ST message zhin has no partner for: the category of a World Info entry or note text it holds."""
        return next((category for category, text in self.known if text in content), None)

    def in_chat(self, sources: tuple[str, ...]) -> bool:
        if self.preset is None:
            return False
        for source in sources:
            entry = self.preset.prompts.get(source.removeprefix("preset:")) if source.startswith("preset:") else None
            if entry is not None and entry.in_chat:
                return True
        return False

    def joined(self) -> str | None:
        """squash / post-processing: one side's message is two adjacent messages of the other joined."""
        if self.preset is None:
            return None
        if self.preset.post_processing:  # every mode but ST's "" (None) joins same-role neighbours
            return "post-processing"
        return "squash" if self.preset.squash else None

    def changed(self, mine: ZhinMessage, byte: int) -> str | None:
        """What zhin rendered at the first differing byte (past zhin's text: the message's last part) says it."""
        part = mine.part_at(byte) or mine.part_at(byte - 1)
        if part is None:
            return None
        segment = part[0]
        if segment in _GROUP_SEGMENTS or (self.joined_cards and segment in _JOINED_SEGMENTS):
            return "group"
        if segment in _EXAMPLE_SEGMENTS:
            return "example-dialogue"
        if segment in _CARD_FIELD_SEGMENTS:
            return "card-field"
        if segment.startswith(WORLD_INFO_SEGMENT):
            return "world-info"
        if segment == AUTHORS_NOTE_SEGMENT:
            return "authors-note"
        if segment.startswith(HISTORY_PREFIX):
            # a history text the preset stage rewrote, and only its regex scripts rewrite history texts
            return "regex" if mine.rewritten and self.preset is not None and self.preset.regex_scripts else None
        if self.preset is not None and byte < part[2] and self._macro(mine, part, byte):
            return "macro"
        return None

    def _macro(self, mine: ZhinMessage, part: tuple[str, int, int], byte: int) -> bool:
        """The differing byte is in the output of a macro of the entry that rendered it: the entry's raw text has
        macros, and the byte is not inside a literal stretch of that text (as found in the entry's output) — its
        first byte right after a macro is the macro's too (there the macro's output ends, empty or not: ST's may
        run on where zhin's stopped)."""
        assert self.preset is not None
        segment, start, end = part
        entry = self.preset.prompts.get(segment.removeprefix("preset:")) if segment.startswith("preset:") else None
        if entry is None or "{{" not in entry.content:
            return False
        output = mine.content.encode("utf-8")[start:end]
        cursor = 0
        after_macro = False
        for token in re.split(r"(\{\{.*?\}\})", entry.content, flags=re.DOTALL):
            if token.startswith("{{") and token.endswith("}}"):
                after_macro = True
                continue
            literal = token.encode("utf-8")
            if not literal:
                continue
            at = output.find(literal, cursor)
            if at < 0:
                after_macro = False
                continue
            if at <= byte - start < at + len(literal):
                return after_macro and byte - start == at
            cursor = at + len(literal)
            after_macro = False
        return True


def _compare(turn: int, st: list[_StMessage], zhin: list[ZhinMessage], preset: Preset | None,
             known: tuple[tuple[str, str], ...] = (), joined_cards: bool = False) -> list[Departure]:
    cat = _Categorizer(preset, known, joined_cards)
    left = [(m.role, m.compared, m.name) for m in st]
    right = [(m.role, m.content, m.name) for m in zhin]
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    out: list[Departure] = []
    deleted: list[ZhinMessage] = []  # zhin messages with no ST partner
    inserted: list[_StMessage] = []  # ST messages with no zhin partner
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        theirs, mine = st[i1:i2], zhin[j1:j2]
        joined = _joined_pairs(theirs, mine)
        if joined is not None:
            out.extend(Departure(turn, s.index, z.index, s.role, z.role, z.source, "changed", cat.joined(),
                                 *_located(s.compared, z.content)) for s, z in joined)
            continue
        pairs = min(len(theirs), len(mine)) if tag == "replace" else 0
        for s, z in zip(theirs[:pairs], mine[:pairs], strict=True):
            out.extend(_pair(turn, s, z, cat))
        inserted.extend(theirs[pairs:])
        deleted.extend(mine[pairs:])
    for z in list(deleted):  # the same message elsewhere on ST's side: moved
        partner = next((s for s in inserted if (s.role, s.compared) == (z.role, z.content)), None)
        if partner is None:
            continue
        deleted.remove(z)
        inserted.remove(partner)
        category = cat.whole(z.sources) or cat.beside(zhin, z)
        out.append(Departure(turn, partner.index, z.index, partner.role, z.role, z.source, "moved", category, None,
                             _opening(partner.content), _opening(z.content)))
    for z in deleted:
        out.append(Departure(turn, None, z.index, z.role, z.role, z.source, "missing",
                             cat.whole(z.sources), None, "", _opening(z.content)))
    for s in inserted:
        out.append(Departure(turn, s.index, None, s.role, None, "", "extra", cat.extra(s.content), None,
                             _opening(s.content), ""))
    return sorted(out, key=lambda d: (d.st_index if d.st_index is not None else 10**9, d.zhin_index or 0))


def _joined_pairs(theirs: list[_StMessage], mine: list[ZhinMessage]) -> list[tuple[_StMessage, ZhinMessage]] | None:
    """A block where one ST message is zhin's messages joined (or the reverse): paired first with first."""
    for joiner in JOINERS:
        if len(theirs) == 1 and len(mine) > 1 and theirs[0].compared == joiner.join(m.content for m in mine):
            return [(theirs[0], mine[0])]
        if len(mine) == 1 and len(theirs) > 1 and mine[0].content == joiner.join(s.compared for s in theirs):
            return [(theirs[0], mine[0])]
    return None


def _located(theirs: str, mine: str) -> tuple[int, str, str, int]:
    """request-diff's rule (one definition): the UTF-8 offset of the first differing character, the excerpts
    around it and its index in them."""
    return first_difference(theirs, mine)


def _pair(turn: int, s: _StMessage, z: ZhinMessage, cat: _Categorizer) -> list[Departure]:
    out: list[Departure] = []
    if s.role != z.role:
        out.append(Departure(turn, s.index, z.index, s.role, z.role, z.source, "role", cat.whole(z.sources), None,
                             _opening(s.content), _opening(z.content)))
    if s.compared != z.content or s.name != z.name:
        byte: int | None
        byte, st_excerpt, zhin_excerpt, mark = _located(s.compared, z.content)
        if s.compared == z.content:
            byte = None  # only the name field differs
        category = cat.changed(z, byte) if byte is not None else None
        out.append(Departure(turn, s.index, z.index, s.role, z.role, z.source, "changed", category, byte,
                             st_excerpt, zhin_excerpt, mark if byte is not None else None))
    return out


def _senders(setup: CheckSetup) -> dict[int, str]:
    """Each chat row's sender by name: the user's persona, a character's name (a group member's own)."""
    out: dict[int, str] = {}
    for message in setup.chat.session.messages:
        actor = getattr(message, "assistant_actor", None) or getattr(message, "actor", None)
        name = getattr(actor, "display_name", None)
        if message.row_id is not None and isinstance(name, str):
            out[message.row_id] = name
    return out


def check_turn(setup: CheckSetup, turn: ChatTurn, body: JSONObject) -> TurnCheck:
    """Compare ST's captured ``body`` with zhin's request for ``turn``. A body without a ``messages`` list of
    objects is an ``InputError`` (the caller names the file)."""
    setup = setup.for_turn(turn)
    request = zhin_request(setup, turn)
    zhin, removed = zhin_messages(request, _senders(setup))
    patterns: dict[int, tuple[re.Pattern[str], list[str]]] = {}
    if setup.probe is not None:
        probed, _ = zhin_messages(_assemble(setup.probe, setup, turn))
        patterns = _state_patterns(zhin, probed, setup.variables)
    speakers = {"user": (setup.chat.persona_name,), "assistant": setup.characters}
    forced: list[Departure] | None = [] if setup.chat.group is not None else None
    st, by_design = _st_messages(body, zhin, patterns, speakers, turn.number, forced)
    departures = _compare(turn.number, st, zhin, setup.assembler.preset, setup.known_texts, setup.joined_cards)
    departures = sorted(departures + (forced or []), key=lambda d: (d.st_index if d.st_index is not None else 10**9,
                                                                    d.zhin_index or 0))
    state_notes: list[str] = []
    if departures:
        departures, saved_state, state_notes = _saved_variable_states(setup, turn, st, departures)
        by_design += saved_state
    ignored = sorted((set(body) | set(request.request)) - {"messages"})
    model = body.get("model")
    notes = [] if model in (None, setup.assembler.model) else [
        f"the capture's model is {model!r}; zhin's request was built with the {setup.assembler.provider} "
        f"{setup.assembler.model} profile"]
    notes += [w for w in request.warnings if w.startswith("World Info")]  # a bound the scan hit (a key, recursion)
    notes += state_notes
    return TurnCheck(turn.number, departures, by_design, removed, ignored, notes, len(st), setup.member)

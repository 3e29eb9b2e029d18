"""The pipeline for one request, and the replay of a session (DESIGN.md §2).

store → window → segments → merge → headers → preset (layout) → provider render → validate.
Each stage is a module; this file only wires them, in that order, and collects what the trace shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from zhin_cli.core.errors import ConfigError
from zhin_cli.core.model import AssistantMessage, Message, Session, UserMessage
from zhin_cli.core.tokens import counter as shared_counter
from zhin_cli.core.tokens import encoding_for_model
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.headers import Aliases, Projected, ProjectedEvent, Projection, events_timed_on_wire, project
from zhin_cli.pipeline.merge import ItemKey, item_key, merge
from zhin_cli.pipeline.preset import SYSTEM_SEGMENT, PresetMessage
from zhin_cli.pipeline.preset.model import Preset
from zhin_cli.pipeline.preset.skeleton import Arrangement, Facts, arrange, downgrades_mid_system, greeting_text
from zhin_cli.pipeline.providers import Capabilities, RenderedPart, RenderedRequest, render, resolve_profile
from zhin_cli.pipeline.providers.shaping import shape
from zhin_cli.pipeline.segments import (
    MESSAGE_KINDS,
    SYSTEM_PROMPT_KINDS,
    FactsReader,
    PromptSegmentRegistry,
    RuntimeView,
    SegmentInput,
    SessionView,
    enforce_budget,
    inject_text,
    run_inject,
    system_text,
)
from zhin_cli.pipeline.validate import Verdict, validate
from zhin_cli.pipeline.window import SessionIndex, summary_in_prefix, visible_window

DEFAULT_PROVIDER = "openai"
DEFAULT_MODEL = "gpt-4o"
# The row id of the card greeting (``Assembler.greeted``), which is not a stored row: below every value a signed
# 64-bit column can hold, so it can never equal a stored row id (1 … 2^63-1) nor any summary anchor a store can
# hold (0 there means "no anchor"; JSONL allows negatives), and it still sorts before every stored row.
CARD_GREETING_ROW = -(2**63) - 1


@dataclass
class SegmentReport:
    id: str
    kind: str
    weight: float
    chars: int
    tokens: int
    trimmed: int  # characters cut by the budget (text segments)
    messages: int | None = None  # message segments: how many messages they produced

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id, "kind": self.kind, "weight": self.weight, "chars": self.chars,
            "tokens": self.tokens, "trimmed": self.trimmed,
        }
        if self.messages is not None:
            data["messages"] = self.messages
        return data


@dataclass
class AssembledRequest:
    session_id: str
    turn: int
    provider: str
    model: str
    encoding: str
    segments: list[SegmentReport]
    state_rendering: str
    full_headers: int
    short_headers: int
    cache_breakpoints: list[dict[str, Any]]
    request: dict[str, Any]
    prompt_tokens: int
    verdict: Verdict
    warnings: list[str]
    window: dict[str, Any]
    sent_keys: list[ItemKey] = field(default_factory=list, repr=False)
    # for prefix analysis: what each wire message is made of, and the profile that rendered it
    parts: list[RenderedPart] = field(default_factory=list, repr=False)
    profile: Capabilities | None = field(default=None, repr=False)
    system_texts: list[tuple[str, str]] = field(default_factory=list, repr=False)  # (segment id, text) in order

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "turn": self.turn,
            "provider": self.provider,
            "model": self.model,
            "encoding": self.encoding,
            "segments": [s.as_dict() for s in self.segments],
            "state_rendering": self.state_rendering,
            "headers": {"full": self.full_headers, "short": self.short_headers},
            "cache_breakpoints": self.cache_breakpoints,
            "prompt_tokens": self.prompt_tokens,
            "validation": self.verdict.as_dict(),
            "window": self.window,
            "warnings": self.warnings,
            "request": self.request,
        }


class _Built(NamedTuple):
    """Stages 5–7 of one request (projection → shaping → preset → render), for one choice of timed events."""

    projection: Projection
    shaped: list[Projected]
    shape_warnings: list[str]
    arrangement: Arrangement
    profile: Capabilities
    rendered: RenderedRequest


class _RowIndex:
    """Sender names and stored texts of the window's messages by row id (macros: {{user}}, {{lastUserMessage}});
    built only if a preset asks."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.by_row: dict[int, Message] | None = None

    def _get(self, row: int) -> Message | None:
        if self.by_row is None:
            self.by_row = {m.row_id: m for m in self.messages}
        return self.by_row.get(row)

    def speaker(self, row: int) -> str | None:
        message = self._get(row)
        actor = getattr(message, "actor", None)
        return getattr(actor, "display_name", None)

    def text(self, row: int) -> str | None:
        message = self._get(row)
        return getattr(message, "text", None)


def _system_texts(system_parts: list[Any], leading: list[PresetMessage] | None) -> list[tuple[str, str]]:
    """(segment id, text) of the stable system prefix, in order: the system segments, and with a preset the
    leading preset entries around them (``preset:main`` …), so prefix-diff can name what changed."""
    segments = [(p.segment.id, p.text) for p in system_parts if p.text]
    if leading is None:
        return segments
    out: list[tuple[str, str]] = []
    for block in leading:
        for segment_id, text in block.pieces:
            if segment_id == SYSTEM_SEGMENT:
                out.extend(segments)
            elif segment_id:
                out.append((segment_id, text))
    return out


def _macro_warnings(unknown: dict[str, int]) -> list[str]:
    return [f"unknown macro {{{{{name}}}}} left verbatim ({count}×)" for name, count in sorted(unknown.items())]


def _wire_messages(body: dict[str, Any]) -> list[Any]:
    return list(body.get("messages") or body.get("contents") or [])


def _all_timed_guess(profile: Capabilities, preset: Preset | None) -> bool:
    """The first build's guess whether every state change is downgraded (and so shows its time) on the wire: yes
    when the profile takes no system message mid-conversation, when the preset's post-processing downgrades every
    one (semi, strict, single), and on Anthropic's allow-listed models, which accept one only between a user turn
    and the reply or at the end (``_mid_system_ok``) — a state change that opens a member's turn, the usual
    place, is downgraded there. A wrong guess costs a second build, never a wrong request."""
    return profile.mid_conversation_system == "none" or downgrades_mid_system(preset) or bool(profile.mid_system_models)


def greeting_position(messages: Sequence[Message]) -> int | None:
    """Where the session's greeting is, if it has one: an assistant message with text and no tool call that opens
    the conversation, with no member input before it.

    SillyTavern writes the card's ``first_mes`` into a new chat without calling the model; a bot that does the
    same stores it as the first assistant row. No request produced it, so a replay makes none for it (turn
    numbers still count it: turn k is the k-th assistant message). Only the very first stored message can be the
    greeting: a bot message after a join or another event answered that event, which is model input.
    (docs/design-notes.md, "The greeting (B5)")"""
    if not messages:
        return None
    first = messages[0]
    if isinstance(first, AssistantMessage) and first.text and not first.tool_calls:
        return 0
    return None


def greeting_turn(messages: Sequence[Message]) -> int | None:
    """The greeting's turn number (1: it is the first assistant message), or None without a greeting."""
    return 1 if greeting_position(messages) is not None else None


class Assembler:
    """Assembles requests for one session under one configuration (registry, provider, model)."""

    def __init__(
        self,
        registry: PromptSegmentRegistry,
        config: Config,
        *,
        provider: str | None = None,
        model: str | None = None,
        timezone: str | None = None,
        preset: Preset | None = None,
        facts: FactsReader | None = None,
    ) -> None:
        self.registry = registry
        self.facts = facts  # current member/scene facts for segments (SessionView.facts); None in replays
        self.config = config
        # The message skeleton: the given preset, else zhin.yaml's ``preset:``, else the ADR 0041 layout.
        self.preset = preset if preset is not None else config.preset()
        self.provider = provider or config.provider or DEFAULT_PROVIDER
        self.model = model or config.model
        self.timezone = timezone or config.timezone
        resolve_profile(self.provider, self.model or DEFAULT_MODEL, config.provider_overrides.get(self.provider))

    def _timezone(self, session: Session) -> str:
        name = self.timezone or session.timezone or "UTC"
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"unknown time zone {name!r}") from None
        return name

    def replay(self, session: Session) -> Iterator[AssembledRequest]:
        """Turn k = the request that produced the k-th stored assistant message, from what was visible then.

        The greeting (``greeting_position``) has no request: nobody asked the model for it. A stored greeting keeps
        its turn number (turn 1); a card greeting (``greeted``) is not a stored message and has none. Either way it
        stays in the history of every later request, as the first thing in the chat."""
        stored = session
        session, _ = self.greeted(session, 0)
        aliases = Aliases.of(session)
        session_index = SessionIndex.of(session)
        sent: list[ItemKey] = []
        turn = 0
        greeting = greeting_position(session.messages)
        for position, message in enumerate(session.messages):
            if not isinstance(message, AssistantMessage):
                continue
            if position == greeting:
                turn += 1 if session is stored else 0
                sent = [("row", message.row_id)]  # in the chat before anything else arrived
                continue
            turn += 1
            request = self.assemble(session, position, message.timestamp, turn=turn, sent_prefix=sent, aliases=aliases,
                                    stored_model=message.model, index=session_index)
            # What the next request must keep as its prefix: what this one sent, plus the reply it produced.
            sent = [*request.sent_keys, ("row", message.row_id)]
            yield request

    def greeted(self, session: Session, upto: int) -> tuple[Session, int]:
        """``session`` opened with the preset's card greeting (``greeting`` option, ST's ``first_mes``) when it
        stored no greeting of its own, and ``upto`` moved past it; else both unchanged.

        SillyTavern writes ``first_mes`` into every new chat, so its requests carry it as the first assistant
        message; a bot bound to the same card that never stored it would otherwise be replayed without it. The
        text is expanded once, as ST does when the chat opens (``skeleton.greeting_text``: ``{{user}}`` and
        ``{{char}}`` by the preset stage's one rule, for the sender of the chat's first member message). The row
        is not stored: its id is ``CARD_GREETING_ROW`` (below and apart from every stored id and summary anchor;
        ``min(row_id) - 1`` was 0, a summary's "no anchor", or a row of another branch) and its time 1 ms before
        the first message, so the merge keeps it first."""
        card = self.preset.card if self.preset is not None else None
        if card is None or not card.greeting or not session.messages or greeting_position(session.messages) is not None:
            return session, upto
        first = session.messages[0]
        member = next((m.actor.display_name for m in session.messages if isinstance(m, UserMessage) and m.actor), None)
        text = greeting_text(card, member=member, bot_name=session.bot.name, is_group=session.is_group,
                             now_ms=first.timestamp - 1, timezone=self._timezone(session))
        greeting = AssistantMessage([{"type": "text", "text": text}], first.timestamp - 1, CARD_GREETING_ROW)
        return replace(session, messages=[greeting, *session.messages]), upto + 1

    def assemble(
        self,
        session: Session,
        upto: int,
        request_time: int,
        *,
        turn: int = 0,
        sent_prefix: list[ItemKey] | None = None,
        aliases: Aliases | None = None,
        stored_model: str | None = None,
        index: SessionIndex | None = None,
    ) -> AssembledRequest:
        greeted, upto = self.greeted(session, upto)
        if greeted is not session:  # positions, aliases and index of the stored session do not fit the greeted one
            session, aliases, index = greeted, None, None
        model = self.model or stored_model or DEFAULT_MODEL
        profile: Capabilities = resolve_profile(self.provider, model, self.config.provider_overrides.get(self.provider))
        timezone = self._timezone(session)
        counter = shared_counter(encoding_for_model(model))
        aliases = aliases or Aliases.of(session)

        window = visible_window(session, upto, request_time, self.config.window, index)
        runtime = RuntimeView(model=model, provider=self.provider, timezone=timezone, tools=tuple(self.config.tools))
        view = SessionView(
            session_id=session.session_id,
            scene=session.scene_at(request_time),
            bot=session.bot,
            is_group=session.is_group,
            summary=window.summary,
            summary_timestamp=window.summary_anchor_timestamp,
            session_key=session.session_key,
            facts=self.facts,
        )
        seg_input = SegmentInput(history=[*window.carried_events, *window.messages], runtime=runtime, session=view)

        system_parts = enforce_budget(inject_text(self.registry.ordered(SYSTEM_PROMPT_KINDS), seg_input), self.config.max_chars)
        tail_parts = inject_text(self.registry.ordered(("scene",)), seg_input)
        message_segments = self.registry.ordered(MESSAGE_KINDS)
        outputs = [(segment, list(run_inject(segment, seg_input) or [])) for segment in message_segments]
        placed = merge(outputs, summary_in_prefix(window, sent_prefix or ()))
        rows = _RowIndex(window.messages)
        facts = Facts(session_id=session.session_id, position=upto, request_time=request_time, timezone=timezone,
                      model=model, bot_name=session.bot.name, is_group=session.is_group, speaker_of=rows.speaker,
                      raw_text_of=rows.text)
        base_profile = profile

        def build(timed: Callable[[ProjectedEvent], bool]) -> _Built:
            projection = project(placed, aliases=aliases, bot=session.bot, timezone=timezone, timed_events=timed)
            shaped, shape_warnings = shape(projection.messages, base_profile)
            arrangement = arrange(self.preset, system_text(system_parts), shaped, system_text(tail_parts) or None, facts)
            used = base_profile
            if arrangement.downgrade_mid_system:  # semi/strict post-processing: no system message after the first
                used = replace(base_profile, mid_conversation_system="none")
            return _Built(projection, shaped, shape_warnings, arrangement, used, render(arrangement.layout, used, runtime))

        # A time counts as shown only where it is on the wire (ADR §1's 1-minute rule): a downgraded state change
        # prints it in its host header, a system/developer one does not. Guess (``_all_timed_guess``); where the
        # renderer decided otherwise for some message, project again with what it really sent. Times never change
        # roles or positions, so the second rendering makes the same choices.
        guess = _all_timed_guess(base_profile, self.preset)
        projection, shaped, shape_warnings, arrangement, profile, rendered = build(lambda _event: guess)
        timed = events_timed_on_wire(projection, ((p.segment_id, p.text) for p in rendered.parts))
        if timed != {e.alias for m in projection.messages for e in m.events if guess}:
            projection, shaped, shape_warnings, arrangement, profile, rendered = build(lambda event: event.alias in timed)
        verdict = validate(profile.validator, rendered.body, model)

        reports = [
            SegmentReport(p.segment.id, p.segment.kind, p.segment.weight, len(p.text), counter.count(p.text), p.trimmed)
            for p in system_parts + tail_parts
        ]
        texts_by_segment: dict[str, list[str]] = {}
        for part in rendered.parts:
            texts_by_segment.setdefault(part.segment_id, []).append(part.text)
        for segment in message_segments:
            texts = texts_by_segment.get(segment.id, [])
            produced = sum(1 for m in shaped if m.segment_id == segment.id)
            reports.append(SegmentReport(segment.id, segment.kind, segment.weight, sum(map(len, texts)),
                                         sum(counter.count(t) for t in texts), 0, messages=produced))
        if self.preset is not None:  # preset entries (fixed texts, injections) get their own rows
            for segment_id, texts in texts_by_segment.items():
                if segment_id.startswith("preset:"):
                    produced = len({p.message_index for p in rendered.parts if p.segment_id == segment_id})
                    reports.append(SegmentReport(segment_id, "preset", 0, sum(map(len, texts)),
                                                 sum(counter.count(t) for t in texts), 0, messages=produced))
        # Estimate: the text on the wire, plus OpenAI's 3 tokens per message and 3 to prime the reply.
        prompt_tokens = 3 + sum(counter.count(p.text) for p in rendered.parts) + 3 * len(_wire_messages(rendered.body))
        return AssembledRequest(
            session_id=session.session_id,
            turn=turn,
            provider=profile.name,
            model=model,
            encoding=counter.encoding,
            segments=reports,
            state_rendering=rendered.state_rendering,
            full_headers=projection.full_headers,
            short_headers=projection.short_headers,
            cache_breakpoints=rendered.cache_breakpoints,
            request=rendered.body,
            prompt_tokens=prompt_tokens,
            verdict=verdict,
            warnings=projection.warnings + shape_warnings + arrangement.warnings + _macro_warnings(arrangement.unknown_macros)
            + rendered.warnings,
            window={
                "messages": len(window.messages),
                "dropped": window.dropped,
                "summary_anchor": window.summary.anchor_row_id if window.summary else None,
                "carried_events": len(window.carried_events),
            },
            sent_keys=[item_key(p.item) for p in placed],
            parts=rendered.parts,
            profile=profile,
            system_texts=_system_texts(system_parts, arrangement.layout.leading if self.preset is not None else None),
        )

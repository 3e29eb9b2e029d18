"""A scenario's timeline → a ``Session`` and the points where the bot is asked (turns).

Each step is registered (``@step``, into ``STEPS``: a duplicate name is an error) with its JSON Schema. Steps
append stored messages exactly as the upstream would store them (facts, never header strings), change member or
scene facts, compact the history, load or unload plugins, and mark requests. Tests reuse ``build`` to script
sessions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from zhin_cli.core.errors import EXIT_INVALID_CASE, ZhinError
from zhin_cli.core.model import (
    Actor,
    AssistantMessage,
    BotFacts,
    EventMessage,
    Message,
    SceneChange,
    SceneFacts,
    Session,
    Summary,
    ToolResultMessage,
    UserMessage,
)
from zhin_cli.core.registry import Registry
from zhin_cli.pipeline.assemble import greeting_position
from zhin_cli.pipeline.format import CHANGE_FIELDS, StateChange, changed_line
from zhin_cli.tools.eval.registry import spec_text, summary_of

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSON, JSONObject

DEFAULT_START = "2025-10-29T09:00:00+08:00"
DEFAULT_STEP_MS = 10_000
DEFAULT_TIMEZONE = "Asia/Shanghai"
DEFAULT_BOT = {"user_id": "8596238", "name": "Zhin", "group_nickname": "小知", "platform_role": "admin"}
DEFAULT_SCENE = {"scene_id": "1048877509", "scene_type": "group", "scene_name": "测试群", "owner_id": "10001",
                 "admins": ["10003"], "member_count": 42, "global_mute": False}


class StepError(ZhinError):
    """A timeline step that cannot be applied (unknown label, tool result for no call …): invalid case."""

    exit_code = EXIT_INVALID_CASE


@dataclass
class TurnPoint:
    """The bot is asked at ``time``, seeing ``session.messages[:upto]``; ``reply_row``: the stored reply, if any.

    ``greeting``: the turn is the session's greeting (``assemble.greeting_position``): it has a turn number, as in
    ``zhin trace``, but nobody asked the model for it, so no request is made."""

    upto: int
    time: int
    label: str | None
    reply_row: int | None
    line: int | None = None
    greeting: bool = False


@dataclass
class PluginAction:
    load: bool
    name: str
    spec: str | None  # module:function or file.py[:function]
    segments: list[JSONObject]  # inline text segments (each checked by the step's schema: id, kind, text …)
    line: int | None = None


Action = TurnPoint | PluginAction


@dataclass
class Built:
    session: Session
    actions: list[Action]
    base: Path  # folder that relative plugin and session paths are resolved against

    @property
    def turns(self) -> list[TurnPoint]:
        return [a for a in self.actions if isinstance(a, TurnPoint)]


# Member facts in a case use the header field names (ADR 0041 §1); this maps them onto ``Actor``.
FACT_FIELDS = {
    "name": "display_name",
    "role": "platform_role",
    "roles": "roles",
    "group_nickname": "card",
    "group_title": "title",
    "mute_time": "muted_until",
    "origin": "origin",
}
FACTS_SCHEMA: JSONObject = {
    "name": {"type": "string", "description": "display name"},
    "role": {"type": "string", "description": "platform role: owner, admin or member"},
    "roles": {"type": "array", "items": {"type": "string"}, "description": "product roles (master, trusted …)"},
    "group_nickname": {"type": "string"},
    "group_title": {"type": "string"},
    "mute_time": {"type": "integer", "minimum": 0, "description": "seconds of mute left at that moment (0 = not muted)"},
    "origin": {"type": "string", "enum": ["peer_bot"]},
}


def _facts_of(actor: Actor, timestamp: int) -> JSONObject:
    facts: JSONObject = {"name": actor.display_name, "role": actor.platform_role, "roles": list(actor.roles) or None,
                             "group_nickname": actor.card, "group_title": actor.title, "origin": actor.origin}
    if actor.muted_until is not None:
        facts["mute_time"] = max(0, (actor.muted_until - timestamp) // 1000) if actor.muted_until else 0
    return {k: v for k, v in facts.items() if v is not None}


class Builder:
    """Appends stored messages with increasing row ids and a running clock."""

    def __init__(self, *, base: Path, timezone: str, start_ms: int, bot: BotFacts, scene: SceneFacts,
                 members: Mapping[str, JSONObject], session: Session | None = None, session_id: str = "eval") -> None:
        self.base = base
        self.zone = ZoneInfo(timezone)
        self.timezone = timezone
        self.now = start_ms
        self.members: dict[str, JSONObject] = {uid: dict(facts) for uid, facts in members.items()}
        self.labels: dict[str, int] = {}  # label → row id
        self.actions: list[Action] = []
        self.line: int | None = None
        if session is None:
            session = Session(session_id, f"eval:{session_id}", timezone, bot, scene, [])
        else:
            # A stored conversation: each stored reply is a turn (replay semantics: the greeting one without a
            # request); the timeline continues it.
            greeting = greeting_position(session.messages)
            for position, message in enumerate(session.messages):
                if isinstance(message, AssistantMessage):
                    self.actions.append(TurnPoint(position, message.timestamp, None, message.row_id,
                                                  greeting=position == greeting))
                elif isinstance(message, UserMessage) and message.actor is not None:
                    # Continue with the facts last stored for each member, so the timeline changes only what it says.
                    self.members.setdefault(message.actor.subject_id, {}).update(_facts_of(message.actor, message.timestamp))
            if session.messages:
                self.now = max(self.now, max(m.timestamp for m in session.messages))
        self.session = session
        self.next_row = max((m.row_id for m in session.messages), default=0) + 1

    # --- helpers for steps -----------------------------------------------------------------------------

    def advance(self, at: object) -> None:
        self.now = parse_at(at, self.now, self.zone)

    def append(self, message: Message) -> Message:
        messages = self.session.messages
        if not isinstance(messages, list):  # a source's read-only sequence (LazyMessages): continue on a copy
            messages = self.session.messages = list(messages)
        messages.append(message)
        self.next_row += 1
        return message

    def row(self) -> int:
        return self.next_row

    def label_row(self, label: str) -> int:
        if label not in self.labels:
            raise StepError(f"no earlier step is labelled {label!r}")
        return self.labels[label]

    def actor(self, uid: str, overrides: Mapping[str, JSON]) -> Actor:
        facts = self.members.setdefault(uid, {"name": uid, "role": "member", "mute_time": 0})
        facts.update({k: v for k, v in overrides.items() if k in FACT_FIELDS})
        return self._actor(uid, facts)

    def _actor(self, uid: str, facts: JSONObject) -> Actor:
        """The member as its facts say (keys of ``FACTS_SCHEMA``, checked); a fact not given keeps Actor's default."""

        def text(key: str) -> str | None:
            value = facts.get(key)
            return value if isinstance(value, str) else None

        roles, seconds = facts.get("roles"), facts.get("mute_time")
        return Actor(subject_id=uid, scope="group", display_name=text("name"), platform_role=text("role"),
                     roles=tuple(r for r in roles if isinstance(r, str)) if isinstance(roles, list) else (),
                     card=text("group_nickname"), title=text("group_title"), origin=text("origin"),
                     muted_until=None if not isinstance(seconds, int) else 0 if seconds == 0 else self.now + seconds * 1000)

    def hhmm(self) -> str:
        return datetime.fromtimestamp(self.now / 1000, self.zone).strftime("%H:%M")

    def scene_id(self) -> str:
        return self.session.scene_at(self.now).scene_id or "scene"

    def build(self) -> Built:
        stored = len(self.session.messages)
        last = self.actions[-1] if self.actions else None
        asked_last = isinstance(last, TurnPoint) and (
            last.upto == stored or (last.reply_row is not None and last.upto == stored - 1))
        if not asked_last:
            # The conversation always ends with the bot being asked about everything stored so far.
            self.actions.append(TurnPoint(stored, self.now + 1000, None, None))
        return Built(self.session, self.actions, self.base)


_RELATIVE = re.compile(r"^\+(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
AT_PATTERN = r"^(\+\d+(\.\d+)?(ms|s|m|h|d)|\d{1,2}:\d{2}(:\d{2})?|\d{4}-\d{2}-\d{2}T.+)$"


def parse_at(at: object, now: int, zone: ZoneInfo) -> int:
    """``+30s`` / ``+2m`` after the previous step; ``09:05`` on the current day; or an ISO date-time."""
    if at is None:
        return now + DEFAULT_STEP_MS
    text = str(at)
    match = _RELATIVE.match(text)
    if match:
        return now + int(float(match.group(1)) * _UNITS_MS[match.group(2)])
    match = _CLOCK.match(text)
    if match:
        day = datetime.fromtimestamp(now / 1000, zone)
        moment = day.replace(hour=int(match.group(1)), minute=int(match.group(2)), second=int(match.group(3) or 0),
                             microsecond=0)
        return int(moment.timestamp() * 1000)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise StepError(f"bad time {text!r} (expected +30s, +2m, 09:05 or an ISO date-time)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return int(moment.timestamp() * 1000)


def start_ms(value: str | None, zone: ZoneInfo) -> int:
    return parse_at(value or DEFAULT_START, 0, zone)


# --- steps ---------------------------------------------------------------------------------------------

# A step's keys as the case gives them, already checked against its schema.
StepApply = Callable[[Builder, "JSONObject"], None]


@dataclass(frozen=True)
class StepType:
    name: str
    apply: StepApply
    schema: JSONObject
    summary: str = ""


STEPS: Registry[StepType] = Registry("timeline step")


def step(name: str, schema: JSONObject, *, replace: bool = False) -> Callable[[StepApply], StepApply]:
    """Register a timeline step: ``- <name>: {...}`` in a case's ``timeline``."""

    def add(apply: StepApply) -> StepApply:
        STEPS.add(name, StepType(name, apply, schema, summary_of(apply)), replace=replace)
        return apply

    return add


_ID: JSONObject = {"type": "string", "minLength": 1}
_TEXT: JSONObject = {"type": "string"}


@step("user", {
    "type": "object", "required": ["from", "text"], "additionalProperties": False,
    "properties": {"from": {**_ID, "description": "the member's user_id"}, "text": _TEXT,
                   "reply_to": {**_ID, "description": "label of an earlier step"},
                   "message_id": _ID, **FACTS_SCHEMA},
})
def _user(builder: Builder, spec: JSONObject) -> None:
    """A member message; fact keys set the member's facts from now on (no event: the assembler must notice)."""
    reply_to = None
    if "reply_to" in spec:
        label = spec_text(spec, "reply_to")
        target = builder.label_row(label)
        message = next(m for m in builder.session.messages if m.row_id == target)
        reply_to = getattr(message, "message_id", None)
        if reply_to is None:
            raise StepError(f"reply_to {label!r}: that step has no message_id")
    actor = builder.actor(str(spec["from"]), spec)
    builder.append(UserMessage([{"type": "text", "text": spec_text(spec, "text")}], builder.now, actor, builder.row(),
                               message_id=spec_text(spec, "message_id", f"p-{builder.row()}"), reply_to=reply_to))


@step("assistant", {
    "type": "object", "additionalProperties": False,
    "properties": {
        "text": _TEXT, "message_id": _ID,
        "tool_calls": {"type": "array", "items": {
            "type": "object", "required": ["id", "name"], "additionalProperties": False,
            "properties": {"id": _ID, "name": _ID, "arguments": {"type": "object"}}}},
    },
})
def _assistant(builder: Builder, spec: JSONObject) -> None:
    """A stored bot reply; the request that produced it is a turn. The greeting (text, no tool call, before anything
    else) is a turn without a request, as in ``zhin trace``."""
    text, calls, message_id = spec_text(spec, "text"), spec.get("tool_calls"), spec.get("message_id")
    content: list[JSONObject] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "toolCall", "id": c["id"], "name": c["name"], "arguments": c.get("arguments", {})}
                for c in (calls if isinstance(calls, list) else []) if isinstance(c, dict)]
    if not content:
        raise StepError("an assistant step needs text or tool_calls")
    upto = len(builder.session.messages)
    message = AssistantMessage(content, builder.now, builder.row(), model=None,
                               message_id=message_id if isinstance(message_id, str) else None)
    greeting = greeting_position([*builder.session.messages, message]) == upto
    builder.actions.append(TurnPoint(upto, builder.now, None, message.row_id, builder.line, greeting=greeting))
    builder.append(message)


@step("tool_result", {
    "type": "object", "required": ["call"], "additionalProperties": False,
    "properties": {"call": {**_ID, "description": "the tool call id"}, "text": _TEXT, "error": {"type": "boolean"},
                   "tool": _ID},
})
def _tool_result(builder: Builder, spec: JSONObject) -> None:
    """The result of a tool call."""
    tool = spec.get("tool")
    builder.append(ToolResultMessage(spec_text(spec, "call"), tool if isinstance(tool, str) else None,
                                     [{"type": "text", "text": spec_text(spec, "text")}],
                                     bool(spec.get("error", False)), builder.now, builder.row()))


@step("change", {
    "type": "object", "required": ["member", "field", "value"], "additionalProperties": False,
    "properties": {"member": _ID, "field": {"enum": list(CHANGE_FIELDS)},
                   "value": {"type": ["string", "integer"]},
                   "by": {**_ID, "description": "operator user_id (default: system)"},
                   "event": {"type": "boolean", "description": "store the platform event (default true); false: "
                             "the facts change silently and the assembler must synthesize the change"}},
})
def _change(builder: Builder, spec: JSONObject) -> None:
    """A member fact change, with (default) or without a stored platform event."""
    uid = str(spec["member"])
    field_name = spec_text(spec, "field")
    value = spec["value"]
    if isinstance(value, bool) or not isinstance(value, (str, int)):  # the schema: a string or an integer
        raise TypeError(f"change: value {value!r} is neither text nor an integer")
    builder.actor(uid, {field_name: int(value) if field_name == "mute_time" else value})
    if spec.get("event", True):
        line = changed_line(str(spec.get("by", "system")), uid, field_name, str(value)).render()
        builder.append(EventMessage("member_changed", line, builder.now, builder.row()))


def _membership(builder: Builder, spec: JSONObject, verb: str) -> None:
    uid = str(spec["member"])
    builder.actor(uid, spec)
    line = StateChange(verb=verb, user_id=uid, scene_id=builder.scene_id(), time=builder.hhmm(),
                       operator=str(spec.get("by", "self"))).render()
    kind = "member_joined" if verb == "join" else "member_left"
    builder.append(EventMessage(kind, line, builder.now, builder.row()))


_MEMBERSHIP_SCHEMA: JSONObject = {
    "type": "object", "required": ["member"], "additionalProperties": False,
    "properties": {"member": _ID, "by": {**_ID, "description": "self (default) or the operator's user_id"}, **FACTS_SCHEMA},
}


@step("join", _MEMBERSHIP_SCHEMA)
def _join(builder: Builder, spec: JSONObject) -> None:
    """A member joined (stored platform event)."""
    _membership(builder, spec, "join")


@step("leave", _MEMBERSHIP_SCHEMA)
def _leave(builder: Builder, spec: JSONObject) -> None:
    """A member left (stored platform event)."""
    _membership(builder, spec, "leave")


@step("event", {
    "type": "object", "required": ["kind", "line"], "additionalProperties": False,
    "properties": {"kind": {"enum": ["member_changed", "member_joined", "member_left"]}, "line": _TEXT},
})
def _event(builder: Builder, spec: JSONObject) -> None:
    """A stored event line verbatim (e.g. a legacy or non-conforming row)."""
    builder.append(EventMessage(spec_text(spec, "kind"), spec_text(spec, "line"), builder.now, builder.row()))


@step("compact", {
    "type": "object", "required": ["summary"], "additionalProperties": False,
    "properties": {"summary": _TEXT, "through": {**_ID, "description": "label of the last summarised step (default: the previous message)"}},
})
def _compact(builder: Builder, spec: JSONObject) -> None:
    """Compaction: a summary stands in for the history up to ``through``."""
    if "through" in spec:
        anchor = builder.label_row(spec_text(spec, "through"))
    elif builder.session.messages:
        anchor = builder.session.messages[-1].row_id
    else:
        raise StepError("compact: nothing to summarise yet")
    builder.session.summaries.append(Summary(builder.now, spec_text(spec, "summary"), anchor))


@step("scene", {
    "type": "object", "minProperties": 1, "additionalProperties": False,
    "properties": {"scene_name": _TEXT, "owner_id": _ID, "admins": {"type": "array", "items": _ID},
                   "member_count": {"type": "integer"}, "global_mute": {"type": "boolean"}},
})
def _scene(builder: Builder, spec: JSONObject) -> None:
    """Scene facts change from now on (group rename, admins …)."""
    builder.session.scene_changes.append(SceneChange(builder.now, dict(spec)))


_SEGMENT: JSONObject = {
    "type": "object", "required": ["id", "kind", "text"], "additionalProperties": False,
    "properties": {"id": _ID, "kind": {"enum": ["system", "environment", "role_rules", "platform", "scene"]},
                   "text": _TEXT, "weight": {"type": "number"}, "retention": {"enum": ["required", "preferred"]}},
}


@step("plugin", {
    "type": "object", "additionalProperties": False, "minProperties": 1, "maxProperties": 2,
    "properties": {
        "load": {"oneOf": [{**_ID, "description": "module:function or file.py[:function], relative to the case file"},
                           {"type": "object", "required": ["name", "segments"], "additionalProperties": False,
                            "properties": {"name": _ID, "segments": {"type": "array", "items": _SEGMENT}}}]},
        "unload": {**_ID, "description": "the spec or name given to load"},
    },
})
def _plugin(builder: Builder, spec: JSONObject) -> None:
    """Load a plugin (its segments register in a new generation) or unload it (the generation is released)."""
    if "load" in spec:
        load = spec["load"]
        if isinstance(load, str):
            builder.actions.append(PluginAction(True, load, load, [], builder.line))
        elif isinstance(load, dict):  # the schema: a spec text or {name, segments}
            listed = load.get("segments")  # the schema: a list of segment objects
            segments = [s for s in listed if isinstance(s, dict)] if isinstance(listed, list) else []
            builder.actions.append(PluginAction(True, spec_text(load, "name"), None, segments, builder.line))
    if "unload" in spec:
        builder.actions.append(PluginAction(False, spec_text(spec, "unload"), None, [], builder.line))


@step("request", {
    "type": "object", "additionalProperties": False, "properties": {},
})
def _request(builder: Builder, spec: JSONObject) -> None:
    """The bot is asked now, with no stored reply (e.g. the next request after the last message)."""
    builder.actions.append(TurnPoint(len(builder.session.messages), builder.now, None, None, builder.line))


STEP_COMMON: JSONObject = {
    "at": {"type": "string", "pattern": AT_PATTERN,
           "description": "when: +30s / +2m after the previous step (default +10s), 09:05 on the same day, or ISO"},
    "label": {**_ID, "description": "name this step (turn label, reply_to and compact targets)"},
}


def apply_step(builder: Builder, item: JSONObject, line: int | None) -> None:
    kinds = [k for k in item if k in STEPS]
    name = kinds[0]
    builder.line = line
    builder.advance(item.get("at"))
    before_rows = len(builder.session.messages)
    before_actions = len(builder.actions)
    params = item[name] or {}
    if not isinstance(params, dict):  # the step's schema: an object (or nothing)
        raise TypeError(f"step {name}: {params!r} is not an object")
    STEPS[name].apply(builder, params)
    if "label" in item and item["label"] is not None:
        label = spec_text(item, "label")
        if label in builder.labels or any(isinstance(a, TurnPoint) and a.label == label for a in builder.actions):
            raise StepError(f"label {label!r} used twice")
        if len(builder.session.messages) > before_rows:
            builder.labels[label] = builder.session.messages[-1].row_id
        for action in builder.actions[before_actions:]:
            if isinstance(action, TurnPoint):
                action.label = label


__all__ = ["Builder", "Built", "TurnPoint", "PluginAction", "apply_step", "StepError", "DEFAULT_BOT", "DEFAULT_SCENE"]

"""One stored ``AgentMessage`` payload (camelCase, as upstream writes ``agent_messages.payload``) → a message.

Shared by every data source, so JSONL lines and database rows are checked by the same rules and fail with
the same one-line errors (the caller supplies ``where``: ``file:line`` or ``table row N``).
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, TypeGuard, TypeVar

import zhin_cli.store.legacy as legacy
import zhin_cli.store.upstream as upstream
from zhin_cli.core import jsontext
from zhin_cli.core.errors import InputError
from zhin_cli.core.inputfiles import lone_surrogate_in_json, surrogate_message
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.model import (
    EVENT_KINDS,
    Actor,
    AssistantMessage,
    BotFacts,
    EventMessage,
    Message,
    OutlineRole,
    SceneFacts,
    Session,
    ToolResultMessage,
    UserMessage,
)

ROLES = ("user", "assistant", "toolResult", "event")

# Timestamps are ms epochs that headers turn into dates: outside years 1..9999 (a day's margin for time zones)
# no date exists, so such a value is bad input, not a crash at render time.
MIN_TIMESTAMP = -62_135_596_800_000 + 86_400_000
MAX_TIMESTAMP = 253_402_300_800_000 - 2 * 86_400_000
# Integers that are stored in database columns (row ids, counts): a signed 64-bit integer, the widest column any
# of the three databases has. 10^30 is bad input at read, not an OverflowError half-way through an import.
MAX_ROW_ID = 2**63 - 1


def short(value: object) -> str:
    """``repr`` for an error message: a 5 MB field must not become a 5 MB error line (nor take a second to format:
    strings and containers are cut before they are formatted)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {len(str(abs(value))) if value.bit_length() < 14_000 else 'over 4,300'} digits"
    if isinstance(value, str) and len(value) > 200:
        value = value[:200]
    elif isinstance(value, (list, dict)):
        text = _REPR.repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 6, 6, 60, 60, 60


def check_payload_text(text: str, where: str) -> None:
    """A stored payload's JSON text (a database column) holding a lone surrogate escape (``\\ud800``) is bad input
    (see ``zhin_cli.core.inputfiles``): call before or after ``json.loads`` of the column."""
    if "\\u" not in text and "\\U" not in text:  # no escape at all (most rows): nothing to scan
        return
    offset = lone_surrogate_in_json(text)
    if offset is not None:
        raise InputError(surrogate_message(text[offset : offset + 6]), where=where)


def json_column(value: object, column: str, where: str) -> JSON:
    """A JSON text column: not JSON, not UTF-8 (a BLOB), NULL, nested past Python's recursion limit or holding a lone
    surrogate escape (``\\ud800``, which no output can encode: the same rule as JSONL) is one line."""
    if isinstance(value, str):
        check_payload_text(value, where)
    elif not isinstance(value, bytes | bytearray):  # NULL, a number: no JSON text
        raise InputError(f"{column} is not JSON", where=where)
    try:
        return jsontext.loads(value) if isinstance(value, str) else _json_bytes(value)
    except RecursionError:
        raise InputError(f"{column} is nested too deeply", where=where) from None
    except (ValueError, TypeError):
        raise InputError(f"{column} is not JSON", where=where) from None


def _json_bytes(value: bytes | bytearray) -> JSON:
    parsed: JSON = json.loads(value)
    return parsed


def _check_int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_timestamp(value: object, key: str, where: str) -> int:
    """An integer ms epoch that dates can be made from (years 1..9999)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"'{key}' must be an integer (ms epoch), got {short(value)}", where=where)
    if not MIN_TIMESTAMP <= value <= MAX_TIMESTAMP:
        raise InputError(f"'{key}' is out of range: {short(value)} is not a ms epoch between the years 1 and 9999", where=where)
    return value


def check_str(data: JSONObject, keys: tuple[str, ...], where: str, prefix: str = "") -> None:
    """Optional id/text fields: a string (or an integer id), never an object, list, float or boolean."""
    for key in keys:
        value = data.get(key)
        if value is not None and (not isinstance(value, (str, int)) or isinstance(value, bool)):
            raise InputError(f"'{prefix}{key}' must be a string, got {short(value)}", where=where)


def check_scene_facts(data: JSONObject, where: str, prefix: str = "") -> None:
    """Scene facts (session line ``scene``, ``scene`` lines, database profile and scene-change rows)."""
    check_str(data, ("scene_id", "scene_type", "scene_name", "owner_id"), where, prefix)
    admins = data.get("admins")
    if admins is not None and not (
        isinstance(admins, list) and all(isinstance(a, (str, int)) and not isinstance(a, bool) for a in admins)
    ):
        raise InputError(f"'{prefix}admins' must be a list of user ids, got {short(admins)}", where=where)
    count = data.get("member_count")
    if count is not None and not _check_int(count, 0, MAX_ROW_ID):
        raise InputError(f"'{prefix}member_count' must be a non-negative integer (at most 2^63 - 1), got {short(count)}",
                         where=where)
    mute = data.get("global_mute")
    if mute is not None and not isinstance(mute, bool):
        raise InputError(f"'{prefix}global_mute' must be true or false, got {short(mute)}", where=where)


def check_member_facts(data: JSONObject, where: str) -> None:
    """Member facts (``member`` lines, ``ai_scene_members`` rows); other keys are kept and ignored."""
    check_str(data, ("platform_role", "card", "title"), where)
    muted = data.get("muted_until")
    if muted is not None and not _check_int(muted, MIN_TIMESTAMP, MAX_TIMESTAMP):
        raise InputError(f"'muted_until' must be an integer (ms epoch, 0 = not muted) between the years 1 and 9999, "
                         f"got {short(muted)}", where=where)


def message_from_payload(
    given: JSON, *, row_id: int, where: str, extra: JSONObject | None = None
) -> Message:
    payload, role, timestamp = _role_and_timestamp(given, where)
    if role == "event":
        kind = _event_kind(payload, where)
        return EventMessage(kind=kind, name=_str(payload, "name", where), timestamp=timestamp, row_id=row_id, raw=payload)
    content = _content(payload, where)
    if role == "toolResult":
        if payload.get("isError") is not None and not isinstance(payload.get("isError"), bool):
            raise InputError(f"'isError' must be true or false, got {short(payload.get('isError'))}", where=where)
        return ToolResultMessage(
            tool_call_id=_str(payload, "toolCallId", where),
            tool_name=_opt_str(payload, "toolName", where),
            content=content,
            is_error=bool(payload.get("isError", False)),
            timestamp=timestamp,
            row_id=row_id,
            raw=payload,
        )
    if role == "assistant":
        for block in content:
            if block.get("type") == "toolCall":
                if not isinstance(block.get("id"), str) or not block["id"] or not isinstance(block.get("name"), str):
                    raise InputError("toolCall block needs a string 'id' and 'name'", where=where)
        if payload.get("usage") is not None and not isinstance(payload.get("usage"), dict):
            raise InputError(f"'usage' must be an object, got {short(payload.get('usage'))}", where=where)
        check_str(payload, ("name",), where)
        return AssistantMessage(
            content=content,
            timestamp=timestamp,
            row_id=row_id,
            # a legacy row may hold the bot's old header in ``name``: its facts are what the model was shown
            assistant_actor=legacy.actor_with_header(
                _actor(payload.get("assistantActor"), where, "assistantActor"),
                _roles_known(payload.get("assistantActor")), _header_actor(payload, timestamp)),
            message_id=_opt_str(payload, "messageId", where),
            provider=_opt_str(payload, "provider", where),
            model=_opt_str(payload, "model", where),
            usage=usage if isinstance(usage := payload.get("usage"), dict) else None,
            raw=payload,
        )
    return _user_message(payload, content, timestamp, row_id, where, extra or {})


def _user_message(
    payload: JSONObject,
    content: list[JSONObject],
    timestamp: int,
    row_id: int,
    where: str,
    extra: JSONObject,
) -> UserMessage:
    actor = _actor(payload.get("actor"), where, "actor")
    check_str(payload, ("name", "replyTo"), where)
    cleaned, prefix_actor, quoted = _cleaned_content(content)
    header_actor = _header_actor(payload, timestamp)
    sender_actor = _sender_actor(extra)
    if actor is None:
        # Rows without an ``actor`` take their facts from the legacy sources, the old header first.
        for fallback in (header_actor, sender_actor, prefix_actor):
            actor = legacy.merge_actor(actor, fallback)
    else:
        # With an ``actor``, only an old header in ``name`` fills the facts the actor lacks (it is what the model
        # was shown for this very row). ``extra.sender`` and text prefixes never do (as in upstream's
        # agentMessageRowToLlm): they are older projections that can disagree with the actor, and filling gaps
        # from them would show facts the actor never claimed (e.g. a platform role).
        actor = legacy.actor_with_header(actor, _roles_known(payload.get("actor")), header_actor)
    reply_to = payload.get("replyTo")
    quote = extra.get("quote") if isinstance(extra, dict) else None
    if reply_to is None and isinstance(quote, dict) and quote.get("messageId") is not None:
        reply_to = quote["messageId"]
    reply_to = quoted if reply_to is None else reply_to
    return UserMessage(
        content=cleaned,
        timestamp=timestamp,
        actor=actor,
        row_id=row_id,
        message_id=_opt_str(payload, "messageId", where),
        reply_to=None if reply_to is None else str(reply_to),
        raw=payload,
    )


def _cleaned_content(content: list[JSONObject]) -> tuple[list[JSONObject], Actor | None, str | None]:
    """A user row's content without the host's text before the member's words, the facts that text held (the
    legacy prefix's actor) and the quoted message's id. Legacy (ADR §7): `[sender:…]` / `[User]{…}` leave the
    first text block, whatever else we know; upstream's host context comes first, then its own sender prefix —
    both the host's, both facts."""
    first = content[0] if content else None
    first_text = first.get("text") if first is not None and first.get("type") == "text" else None
    if first is None or not isinstance(first_text, str):
        return list(content), None, None
    context, text = upstream.split_turn_context(first_text)
    text, prefix_actor = legacy.strip_text_prefix(text)
    quoted = None
    if context is not None:  # the host's row: a quote notice after its prefix is the reply's target
        quoted, text = upstream.split_references(text)
    return [{**first, "text": text}, *content[1:]], prefix_actor, quoted


def _extra_sender(extra: object) -> JSONObject | None:
    """A row's ``extra.sender`` (legacy rows), if it names a sender."""
    sender = extra.get("sender") if isinstance(extra, dict) else None
    return sender if isinstance(sender, dict) and sender.get("id") is not None else None


def _sender_actor(extra: object) -> Actor | None:
    """The facts of a row's ``extra.sender``, if it names a sender."""
    sender = _extra_sender(extra)
    return None if sender is None else legacy.actor_from_sender(sender)


class Said(NamedTuple):
    """Who said what in a stored user row or reply, as its message says it (``sender_id`` None: the bot's reply):
    what matching a row to its platform message needs (``store.upstream.give_platform_ids``)."""

    sender_id: str | None
    text: str


def _user_sender(payload: JSONObject, timestamp: int, extra: object, prefix_actor: Actor | None) -> str | None:
    """The sender id of the message ``_user_message`` builds: its own ``actor``'s (None when that is not an actor:
    the row is refused when read), else the first legacy source naming one — the old header, extra, the prefix."""
    actor = payload.get("actor")
    if actor is not None:
        subject = actor.get("subjectId") if isinstance(actor, dict) else None
        return str(subject) if isinstance(subject, (str, int)) else None
    header, sender = _header_actor(payload, timestamp), _extra_sender(extra)
    if header is not None:
        return header.subject_id
    if sender is not None:
        return str(sender["id"])
    return prefix_actor.subject_id if prefix_actor is not None else None


def facts_from_key(session_key: str | None, bot: BotFacts, scene: SceneFacts) -> tuple[BotFacts, SceneFacts]:
    """The one rule for facts a session key implies, applied by every reader (JSONL session line, database
    profile, stored session line) to the facts it read: upstream's key is ``<platform>:<bot account>:<kind>:<scene
    id>``, so a bot without ``user_id`` is that account and a scene without type or id is that kind and id. Facts
    the source names are never replaced; a key of another shape implies nothing."""
    parts = (session_key or "").split(":")
    if len(parts) < 4:
        return bot, scene
    if bot.user_id is None:
        bot = replace(bot, user_id=parts[1])
    if scene.scene_type is None:
        scene = replace(scene, scene_type=parts[2])
    if scene.scene_id is None:
        scene = replace(scene, scene_id=parts[3])
    return bot, scene


def settle_bot_headers(session: Session) -> Session:
    """The second half of the A4a rule, run by every loader once the session's bot is known (a database's rows
    are parsed before its profile names the bot): see ``settle_bot_header``. A lazy session's messages are
    settled when they are parsed (its loader calls ``settle_bot_header``), not here."""
    if isinstance(session.messages, list):
        for message in session.messages:
            settle_bot_header(message, session.bot.user_id)
    return session


def settle_bot_header(message: Message, bot_id: str | None) -> Message:
    """An assistant row without ``assistantActor`` takes the facts of the header in its ``name`` only when that
    header is the bot's own (it names the session bot's ``user_id``). A header naming another user_id adds nothing
    (docs/storage.md), so the row renders the session's bot facts — never the bot as another sender. Without a
    known bot id no header can be shown to be the bot's."""
    if (isinstance(message, AssistantMessage) and message.assistant_actor is not None
            and message.assistant_actor.subject_id != bot_id
            and isinstance(message.raw, dict) and message.raw.get("assistantActor") is None):
        message.assistant_actor = None  # adopted from a header (``message_from_payload``) that is not the bot's
    return message


def _header_actor(payload: JSONObject, timestamp: int) -> Actor | None:
    """The facts of an old header string stored in ``name`` (legacy rows, ADR §7), if it holds one."""
    name = payload.get("name")
    return legacy.parse_header_string(name, timestamp) if isinstance(name, str) else None


def _roles_known(value: object) -> bool:
    """An actor that lists its roles (even ``[]``) states its product roles."""
    return isinstance(value, dict) and value.get("roles") is not None


def _actor(value: object, where: str, key: str) -> Actor | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("subjectId"), (str, int)):
        raise InputError(f"'{key}' must be an object with a 'subjectId'", where=where)
    muted = value.get("mutedUntil")
    if muted is not None and not _check_int(muted, MIN_TIMESTAMP, MAX_TIMESTAMP):
        raise InputError(f"'{key}.mutedUntil' must be an integer (ms epoch, 0 = not muted) between the years 1 and 9999",
                         where=where)
    roles = value.get("roles")
    if roles is not None and not (isinstance(roles, list) and all(isinstance(r, str) for r in roles)):
        raise InputError(f"'{key}.roles' must be a list of strings", where=where)
    check_str(value, ("displayName", "scope", "platformRole", "card", "title", "origin"), where, f"{key}.")
    actor = Actor.from_payload(value)
    # Upstream roles mix product roles with its own spellings: `user` (no product role) and `scene_admin` /
    # `scene_owner` (platform roles). Split them as for legacy rows, so a header never shows `role:user`.
    product, platform = legacy.split_roles(actor.roles)
    if product != actor.roles or (platform is not None and actor.platform_role is None):
        actor = replace(actor, roles=product, platform_role=actor.platform_role or platform)
    return actor


@dataclass
class ToolPairing:
    """Tool calls seen so far while reading one session (call id → where it was made)."""

    called: dict[str, str] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    pending: dict[str, str] = field(default_factory=dict)  # called, not yet answered
    # ``repair``: a call still unanswered when the next assistant message comes (a turn the bot was stopped in) is
    # not refused but listed in ``interrupted`` (call id, where it was made) for a placeholder result — a database
    # the bot wrote is read as the bot itself sends it; a JSONL file is the interchange format and is refused
    repair: bool = False
    interrupted: list[tuple[str, str]] = field(default_factory=list)


def check_tool_pairing(message: Message, state: ToolPairing, where: str) -> None:
    """A tool result must answer a call made by an earlier assistant message, once; a call id is used once; and
    every call is answered before the next assistant message (no provider accepts a request with an open
    call). Checked while reading, so the error names the file line (or table row) of the culprit."""
    if isinstance(message, AssistantMessage):
        check_pairing("assistant", [call.id for call in message.tool_calls], None, state, where)
    elif isinstance(message, ToolResultMessage):
        check_pairing("toolResult", (), message.tool_call_id, state, where)


def check_pairing(role: str, call_ids: Sequence[str], result_for: str | None, state: ToolPairing, where: str) -> None:
    """``check_tool_pairing`` on the facts alone: an assistant row's call ids, a tool result's call id."""
    if role == "assistant":
        if state.pending and state.repair:
            state.interrupted.extend(state.pending.items())
            state.answered.update(state.pending)
            state.pending.clear()
        if state.pending:
            call_id, call_where = next(iter(state.pending.items()))
            raise InputError(
                f"tool call {short(call_id)} has no tool result before the next assistant message", where=call_where
            )
        for call_id in call_ids:
            if call_id in state.called:
                raise InputError(f"duplicate tool call id {short(call_id)} (already called by an earlier message)", where=where)
            state.called[call_id] = where
            state.pending[call_id] = where
    elif role == "toolResult" and result_for is not None:
        if result_for not in state.called:
            raise InputError(f"orphan tool result: no earlier assistant message calls {short(result_for)}", where=where)
        if result_for in state.answered:
            raise InputError(f"second tool result for {short(result_for)}", where=where)
        state.answered.add(result_for)
        state.pending.pop(result_for, None)


class OutlineFacts(NamedTuple):
    """What the outline needs of one stored payload, and what tool pairing checks (``outline_facts``). A named
    tuple, not a frozen dataclass: a lazy load makes one per row, and a frozen dataclass's ``__init__`` (nine
    ``object.__setattr__`` calls) cost more than reading the facts."""

    role: OutlineRole
    timestamp: int
    has_tool_calls: bool
    has_text: bool
    model: str | None
    message_id: str | None
    event_kind: str | None
    call_ids: tuple[str, ...] = ()
    result_for: str | None = None
    said: Said | None = None  # asked for (``outline_facts``): a user row's sender and text, a reply's text


def outline_facts(given: JSON, where: str, extra: object = None, *, said: bool = False) -> OutlineFacts:
    """The outline's facts of a payload without building its message: the same values as
    ``SessionOutline.of_messages([message_from_payload(payload, …)])`` (tests compare them on every fixture), and
    the same errors for the fields they come from (role, timestamp, event kind, content blocks, tool call ids,
    message id, model). The rest of a payload (actors, legacy headers, usage) is checked when its message is
    read — for a database, when a request's window holds the row (docs/storage.md). ``said``: also who said what
    (``Said``; ``extra``: the row's parsed ``extra``), as its message says it — of a user row that names its
    sender and of an assistant row, so a lazy load matches rows to their platform messages without parsing them
    again; a field only the message checks is not checked here (a row it makes bad is refused when read)."""
    payload, role, timestamp = _role_and_timestamp(given, where)
    if role == "event":
        kind = _event_kind(payload, where)
        _str(payload, "name", where)
        return OutlineFacts("event", timestamp, False, False, None, None, kind)
    content = _content(payload, where)
    texts = [str(b["text"]) for b in content if b.get("type") == "text"]  # text blocks hold text (_content)
    if role == "toolResult":
        result_for = _str(payload, "toolCallId", where)
        return OutlineFacts("toolResult", timestamp, False, bool("\n".join(texts)), None, None, None,
                            result_for=result_for)
    if role == "assistant":
        calls = [b for b in content if b.get("type") == "toolCall"]
        for block in calls:
            if not isinstance(block.get("id"), str) or not block["id"] or not isinstance(block.get("name"), str):
                raise InputError("toolCall block needs a string 'id' and 'name'", where=where)
        text = "\n".join(texts)
        return OutlineFacts("assistant", timestamp, bool(calls), bool(text),
                            _opt_str(payload, "model", where), _opt_str(payload, "messageId", where), None,
                            call_ids=tuple(str(b["id"]) for b in calls), said=Said(None, text) if said else None)
    prefix_actor = None
    if content and content[0].get("type") == "text" and str(content[0]["text"]).startswith("["):
        # the host's text before the member's words is not text (``_user_message``)
        cleaned, prefix_actor, _ = _cleaned_content(content)
        texts[0] = str(cleaned[0]["text"])
    text = "\n".join(texts)
    sender = _user_sender(payload, timestamp, extra, prefix_actor) if said else None
    return OutlineFacts("user", timestamp, False, bool(text), None, _opt_str(payload, "messageId", where), None,
                        said=None if sender is None else Said(sender, text))


def _role_and_timestamp(payload: JSON, where: str) -> tuple[JSONObject, str, int]:
    """A payload (an object), its role and timestamp, checked: the first checks of a message and of its outline
    facts (one rule, so a refused row says the same whether the load is eager or lazy)."""
    if not isinstance(payload, dict):
        raise InputError(f"message is a JSON {type(payload).__name__}, expected an object", where=where)
    role = payload.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise InputError(f"unknown role {short(role)} (expected one of {', '.join(ROLES)})", where=where)
    return payload, role, check_timestamp(payload.get("timestamp"), "timestamp", where)


def _event_kind(payload: JSONObject, where: str) -> str:
    kind = payload.get("kind")
    if kind not in EVENT_KINDS:
        raise InputError(f"unknown event kind {short(kind)} (expected one of {', '.join(EVENT_KINDS)})", where=where)
    return str(kind)


def _all_objects(values: list[JSON]) -> TypeGuard[list[JSONObject]]:
    return all(isinstance(value, dict) for value in values)


def _content(payload: JSONObject, where: str) -> list[JSONObject]:
    content = payload.get("content")
    if isinstance(content, str):  # tolerated: some writers store plain strings
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not _all_objects(content):
        raise InputError("'content' must be a list of content blocks", where=where)
    for block in content:
        if block.get("type") == "text" and not isinstance(block.get("text"), str):
            raise InputError("text block without a string 'text'", where=where)
    return content


def _str(payload: JSONObject, key: str, where: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str):
        raise InputError(f"'{key}' must be a string", where=where)
    return value


def _opt_str(payload: JSONObject, key: str, where: str) -> str | None:
    value = payload.get(key)
    if value is None:
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise InputError(f"'{key}' must be a string", where=where)
    return str(value)


INTERRUPTED_RESULT = "(no result: the turn was interrupted before this tool answered)"
# Below every other synthetic row id (an events-block line or member event is minus its conversation_events id).
_FIRST_PLACEHOLDER_ROW = -(1 << 40)


def placeholder_result(call_id: str, timestamp: int, number: int) -> ToolResultMessage:
    """The result a call of an interrupted turn never got, so that the history is one a provider accepts (upstream
    repairs its own history the same way before it sends it); ``number`` makes the row id unique."""
    content: list[JSONObject] = [{"type": "text", "text": INTERRUPTED_RESULT}]
    return ToolResultMessage(tool_call_id=call_id, tool_name=None, content=content, is_error=True, timestamp=timestamp,
                             row_id=_FIRST_PLACEHOLDER_ROW - number,
                             raw={"role": "toolResult", "toolCallId": call_id, "content": [*content], "isError": True,
                                  "timestamp": timestamp, "placeholder": True})


def interrupted_note(call_id: str, where: str) -> str:
    return (f"{where}: tool call {short(call_id)} has no tool result (an interrupted turn): read with a placeholder "
            "result, as the bot repairs its own history before sending it")


T = TypeVar("T")


def with_placeholders(items: list[T], repairs: list[tuple[int, str, str]],
                      timestamps: Sequence[int]) -> list[T | ToolResultMessage]:
    """``items`` (messages, or a lazy session's positions) with a placeholder result after each interrupted call's
    message, in call order."""
    if not repairs:
        return list(items)
    after: dict[int, list[str]] = {}
    for position, call_id, _ in repairs:
        after.setdefault(position, []).append(call_id)
    out: list[T | ToolResultMessage] = []
    number = 0
    for position, item in enumerate(items):
        out.append(item)
        for call_id in after.get(position, ()):
            out.append(placeholder_result(call_id, timestamps[position], number))
            number += 1
    return out

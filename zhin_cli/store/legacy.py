"""Legacy rows (ADR 0041 §7): facts recovered from what older upstream versions stored.

Older rows carry no ``actor``; the sender lives in a ``[sender:…]`` or ``[User]{…}`` text prefix, in the
``extra.sender`` column, or in an old header string in the payload's ``name``. We turn all of them back into
``Actor`` facts and strip the prefixes from the text, so they are never re-emitted to the model.
"""

from __future__ import annotations

import json
import re

from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.model import PLATFORM_ROLES, Actor

# upstream buildSenderPrefix: `[sender:id=<id> name=<name> roles=<r1,r2>] ` (name has no spaces or `]`)
_SENDER_PREFIX = re.compile(
    r"^\[sender:id=(?P<id>[^\s\]]+)(?: name=(?P<name>[^\s\]]*))?(?: roles=(?P<roles>[^\s\]]*))?\][ \t]*"
)
_USER_PREFIX = re.compile(r"^\[User\](?P<obj>\{[^\n]*?\})[ \t]*")
_HEADER = re.compile(r"^\[(?P<body>(?:[a-z_]+:[^;\]\n]*;)+)\]")

# upstream product roles vs platform roles as it spelled them
_PLATFORM_ALIASES = {"scene_owner": "owner", "scene_admin": "admin", "owner": "owner", "admin": "admin", "member": "member"}


def split_roles(roles: list[str] | tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """Product roles (``master``, ``trusted``) and the platform role, from a mixed list.

    Upstream's ``user`` is the absence of a product role and is dropped.
    """
    product: list[str] = []
    platform: str | None = None
    for role in roles:
        role = role.strip()
        if not role or role == "user":
            continue
        if role in _PLATFORM_ALIASES:
            platform = _PLATFORM_ALIASES[role]
        else:
            product.append(role)
    return tuple(product), platform


def actor_from_sender(sender: JSONObject, scope: str | None = None) -> Actor:
    """``extra.sender`` = ``{id, name, roles, scope}``."""
    listed = sender.get("roles")
    roles, platform = split_roles([str(r) for r in listed] if isinstance(listed, list | str | dict) else [])
    return Actor(
        subject_id=str(sender["id"]),
        display_name=None if sender.get("name") is None else str(sender["name"]),
        roles=roles,
        scope=str(sender.get("scope") or scope) if (sender.get("scope") or scope) else None,
        platform_role=platform,
    )


def parse_header_string(header: str, timestamp: int) -> Actor | None:
    """An old stored header string ``[id:m3;user_id:10005;name:Carol;role:member;…;]`` back to facts."""
    match = _HEADER.match(header.strip())
    if not match:
        return None
    fields: dict[str, str] = {}
    for part in match.group("body").split(";"):
        if ":" in part:
            key, value = part.split(":", 1)
            fields.setdefault(key, value)
    user_id = fields.get("user_id")
    if not user_id or user_id == "system":
        return None  # a host event header is not a member
    if user_id.startswith("user:"):
        user_id = user_id[len("user:") :]
    roles, platform = split_roles(fields["role"].split(",")) if "role" in fields else ((), None)
    muted_until: int | None = None
    if "mute_time" in fields and fields["mute_time"].isdigit():
        seconds = int(fields["mute_time"])
        muted_until = timestamp + seconds * 1000 if seconds else 0
    return Actor(
        subject_id=user_id,
        display_name=fields.get("name"),
        roles=roles,
        platform_role=platform,
        card=fields.get("group_nickname"),
        title=fields.get("group_title"),
        muted_until=muted_until,
        origin=fields.get("origin"),
    )


def strip_text_prefix(text: str) -> tuple[str, Actor | None]:
    """Remove a leading ``[sender:…]`` or ``[User]{…}`` prefix; return the clean text and its facts."""
    match = _SENDER_PREFIX.match(text)
    if match:
        roles, platform = split_roles((match.group("roles") or "").split(","))
        actor = Actor(
            subject_id=match.group("id"),
            display_name=match.group("name") or None,
            roles=roles,
            platform_role=platform,
        )
        return text[match.end() :], actor
    match = _USER_PREFIX.match(text)
    if match:
        data = _parse_user_object(match.group("obj"))
        if data and data.get("id") is not None:
            raw_roles = data.get("roles") or []
            listed = raw_roles.split(",") if isinstance(raw_roles, str) else raw_roles if isinstance(raw_roles, list | dict) else []
            roles, platform = split_roles([str(r) for r in listed])
            actor = Actor(
                subject_id=str(data["id"]),
                display_name=None if data.get("name") is None else str(data["name"]),
                roles=roles,
                platform_role=platform,
            )
            return text[match.end() :], actor
    return text, None


def _parse_user_object(text: str) -> JSONObject | None:
    """``{"id":…}`` as JSON, or the loose ``{id:10002,name:Bob,roles:master}`` form."""
    try:
        value: JSON = json.loads(text)
        return value if isinstance(value, dict) else None
    except json.JSONDecodeError:
        pass
    except RecursionError:  # JSON nested too deeply to parse: not a header (nor a loose one)
        return None
    inner = text[1:-1]
    result: JSONObject = {}
    for part in re.split(r"[,;]\s*(?=[a-zA-Z_]+\s*[:=])", inner):
        if ":" in part or "=" in part:
            key, value = re.split(r"\s*[:=]\s*", part, maxsplit=1)
            result[key.strip().strip('"')] = value.strip().strip('"')
    return result or None


def merge_actor(primary: Actor | None, fallback: Actor | None, *, roles_known: bool = False) -> Actor | None:
    """Facts from ``primary`` win; ``fallback`` only fills fields primary does not know (same sender only).

    ``roles_known``: primary's product roles are a stated fact even when empty (an upstream ``actor`` with
    ``roles: []`` or ``["user"]`` says "no product role"), so they are never filled from ``fallback``.
    """
    if primary is None:
        return fallback
    if fallback is None or fallback.subject_id != primary.subject_id:
        return primary
    values = dict(primary.__dict__)
    for key, value in fallback.__dict__.items():
        if key == "roles" and roles_known:
            continue
        if values.get(key) in (None, ()) and value not in (None, ()):
            values[key] = value
    return Actor(**values)


def actor_with_header(actor: Actor | None, roles_known: bool, header: Actor | None) -> Actor | None:
    """A row's facts when its ``name`` holds an old header string (ADR §4, §7): each fact from the row's actor
    when it has one, else from the header — upstream actors never carry the platform role, card, title or mute
    that the header showed, and dropping them would render the row differently from what was sent before. A
    header of another sender is ignored. Without an actor the header's facts are the row's facts."""
    return merge_actor(actor, header, roles_known=roles_known)


assert set(_PLATFORM_ALIASES.values()) <= set(PLATFORM_ROLES)

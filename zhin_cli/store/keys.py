"""Upstream's conversation keys (every form it has stored: NUL-joined, plain on PostgreSQL, ``k1:``) as zhin's
session key ``platform:endpoint:kind:id`` (the forms: ``store.events``' module docstring). Pure text: no database,
no other store module."""

from __future__ import annotations

from urllib.parse import unquote


def session_key_of(conversation_key: str) -> str | None:
    """The session key ``platform:endpoint:kind:id`` of any of upstream's conversation (or message) key forms."""
    if conversation_key.startswith("k1:"):
        return _key_from_parts([unquote(part) for part in conversation_key[3:].split(":")])
    if "\0" not in conversation_key:
        # PostgreSQL text cannot hold NUL: there the key is stored as the session key itself
        colon_parts = conversation_key.split(":")
        return conversation_key if len(colon_parts) >= 4 and all(colon_parts[:4]) else None
    return _key_from_parts(conversation_key.split("\0"))


def _key_from_parts(parts: list[str]) -> str | None:
    """``adapter, endpoint…, kind, id, parentKind, parentId, threadId`` (a message key adds the message id; the
    endpoint id may hold several NUL-joined parts, whose last is ``slot~entry`` or the endpoint itself)."""
    for tail in (5, 6):  # a conversation key, then a message key
        if len(parts) < tail + 2:
            continue
        kind, scene_id = parts[-tail], parts[-tail + 1]
        if kind not in ("group", "private", "channel"):
            continue
        adapter, endpoint = parts[0], "\0".join(parts[1:-tail]).split("\0")[-1]
        if not (adapter and endpoint and scene_id):
            return None
        platform, tilde, entry = endpoint.partition("~")
        if tilde:  # a capability's local part slot~entry: platform = slot, endpoint = entry
            return f"{platform}:{entry}:{kind}:{scene_id}" if platform and entry else None
        return f"{adapter.rsplit('/', 1)[-1]}:{endpoint}:{kind}:{scene_id}"
    return None

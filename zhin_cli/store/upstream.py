"""What today's upstream writes into a turn row's text, read back as facts (ADR 0041 §7, issue 28).

A triggered turn's user row opens with the host's runtime context, then the host's own sender prefix:

    [Turn context]
    Time: 2026/10/16 12:07:20 (Asia/Tokyo)
    Model: openai/gpt-4.1-mini
    Sender: id=284100102 name=晴天☀ roles=master,admin
    …
    [/Turn context]

    [sender:id=284100102 name=晴天☀ roles=master,admin] 周六下午横滨天气怎么样？

Both are written by the host (trusted), not typed by the member: the context becomes facts (zone, model, the
sender's roles) and leaves the body; the prefix after it is the legacy sender prefix (``legacy.strip_text_prefix``).
Pure functions over text: no database access.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zhin_cli.core.timezones import valid_timezone

_OPEN = "[Turn context]\n"
_CLOSE = "\n[/Turn context]"
_TIME = re.compile(r"^Time: (?P<time>[0-9/]+ [0-9:]+) \((?P<zone>[^()\s]+)\)$", re.MULTILINE)
_MODEL = re.compile(r"^Model: (?P<model>\S+)$", re.MULTILINE)
_SENDER_ROLES = re.compile(r"^Sender: id=(?P<id>\S+) .*?roles=(?P<roles>[^\s]*)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class TurnContext:
    """The facts of one ``[Turn context]`` block (None: the block did not say)."""

    zone: str | None = None  # an IANA name, checked
    local_time: str | None = None  # as written: ``2026/10/16 12:07:20``
    model: str | None = None  # ``openai/gpt-4.1-mini``
    sender_id: str | None = None
    sender_roles: tuple[str, ...] = ()


def split_turn_context(text: str) -> tuple[TurnContext | None, str]:
    """A text opening with a closed ``[Turn context]`` block: its facts and the text after it (the blank line
    after the block dropped). Any other text (no block, a block never closed, one not at the start) is returned
    unchanged with None — a member who types ``[Turn context]`` mid-message keeps their words."""
    if not text.startswith(_OPEN):
        return None, text
    end = text.find(_CLOSE, len(_OPEN) - 1)
    if end < 0:
        return None, text
    block = text[len(_OPEN) - 1 : end + 1]
    rest = text[end + len(_CLOSE) :]
    return _context_facts(block), rest.removeprefix("\n").removeprefix("\n")


def _context_facts(block: str) -> TurnContext:
    time = _TIME.search(block)
    model = _MODEL.search(block)
    sender = _SENDER_ROLES.search(block)
    zone = time.group("zone") if time else None
    return TurnContext(
        zone=zone if zone and valid_timezone(zone) else None,
        local_time=time.group("time") if time else None,
        model=model.group("model") if model else None,
        sender_id=sender.group("id") if sender else None,
        sender_roles=tuple(r for r in sender.group("roles").split(",") if r) if sender else (),
    )

"""Stage 2 — the visible window of one request: compaction summary, tail limit, membership carried over.

Turn ``k`` of a replay is the request that produced the ``k``-th assistant message; what it could see is
the stored history before that message. Compaction replaces everything up to a summary's anchor with the
summary. Join/leave events from the compacted (or cut) part are carried into the window (at most
``keep_membership_events``), so "who joined / left" stays visible after compaction (ADR 0041 acceptance 3;
see docs/design-notes.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zhin_cli.model import EventMessage, Message, Session, Summary, ToolResultMessage


@dataclass(frozen=True)
class WindowConfig:
    max_messages: int | None = 80  # upstream keeps ≤ 80 rows of the active branch
    keep_membership_events: int = 20


@dataclass
class Window:
    messages: list[Message]  # storage order
    summary: Summary | None
    summary_anchor_timestamp: int
    carried_events: list[EventMessage] = field(default_factory=list)
    dropped: int = 0  # messages before the window (compacted or cut)
    request_time: int = 0


def visible_window(session: Session, upto: int, request_time: int, config: WindowConfig) -> Window:
    """The window of the request made before ``session.messages[upto]`` at ``request_time``."""
    history = session.messages[:upto]
    position = {m.row_id: i for i, m in enumerate(history)}
    summary = None
    start = 0
    for candidate in session.summaries:
        if candidate.timestamp <= request_time and candidate.anchor_row_id in position:
            if summary is None or candidate.timestamp >= summary.timestamp:
                summary = candidate
    anchor_ts = 0
    if summary is not None:
        start = position[summary.anchor_row_id] + 1
        anchor_ts = history[start - 1].timestamp
    if config.max_messages is not None and len(history) - start > config.max_messages:
        start = len(history) - config.max_messages
    # Never open the window in the middle of a tool group: results without their call are orphans.
    while start < len(history) and isinstance(history[start], ToolResultMessage):
        start += 1
    carried: list[EventMessage] = []
    if config.keep_membership_events > 0:
        membership = [m for m in history[:start] if isinstance(m, EventMessage) and m.kind != "member_changed"]
        carried = membership[-config.keep_membership_events :]
    return Window(
        messages=history[start:],
        summary=summary,
        summary_anchor_timestamp=anchor_ts,
        carried_events=carried,
        dropped=start,
        request_time=request_time,
    )

"""Stage 2 — the visible window of one request: compaction summary, tail limit, membership carried over.

Turn ``k`` of a replay is the request that produced the ``k``-th assistant message; what it could see is
the stored history before that message. Compaction replaces everything up to a summary's anchor with the
summary. Join/leave events from the compacted (or cut) part are carried into the window (at most
``keep_membership_events``), so "who joined / left" stays visible after compaction (ADR 0041 acceptance 3;
see docs/design-notes.md).

The work per request is proportional to the window, not to the session: a ``SessionIndex`` built once
per session answers "where is row N" and "which membership events come before position P".
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from zhin_cli.core.model import (
    EventMessage,
    Message,
    OutlineRole,
    RowPositions,
    Session,
    Summary,
    ToolResultMessage,
    messages_at,
)

__all__ = ["RowPositions", "SessionIndex", "Window", "WindowConfig", "sliding", "summary_in_prefix", "tail_start", "visible_window"]
from zhin_cli.pipeline.merge import ItemKey


@dataclass(frozen=True)
class WindowConfig:
    max_messages: int | None = 80  # upstream keeps ≤ 80 rows of the active branch
    keep_membership_events: int = 20
    # Hysteresis: a window that would exceed ``max_messages`` is cut to the newest ``cut_to`` (default half),
    # so the cached prefix breaks once every ``max_messages - cut_to`` messages instead of on every message.
    # ``cut_to = max_messages - 1`` is upstream's sliding window (see ``tail_start``).
    cut_to: int | None = None
    # The same hysteresis counted in *blocks* (rounds: the members' messages since the bot's last reply, and that
    # reply with its tool loop), preset-message-skeleton's "超过 2n 才裁到 n，前缀每 n 轮才断一次": over
    # ``max_blocks`` the window is cut to the newest ``cut_blocks_to`` (default half), so the prefix breaks once
    # per ``max_blocks - cut_blocks_to`` bot turns however busy the chat is. Off by default (None).
    max_blocks: int | None = None
    cut_blocks_to: int | None = None

    @property
    def keep_after_cut(self) -> int | None:
        if self.max_messages is None:
            return None
        return self.cut_to if self.cut_to is not None else self.max_messages // 2

    @property
    def keep_blocks_after_cut(self) -> int | None:
        if self.max_blocks is None:
            return None
        return self.cut_blocks_to if self.cut_blocks_to is not None else self.max_blocks // 2


def sliding(window: WindowConfig) -> WindowConfig:
    """Upstream's window on the same message limit: cut to ``max_messages - 1``, so every message past the limit
    moves the window (the cached prefix breaks on every turn); no block limit. Without a message limit: no cap."""
    if window.max_messages is None:
        return dataclasses.replace(window, cut_to=None, max_blocks=None, cut_blocks_to=None)
    return dataclasses.replace(window, cut_to=window.max_messages - 1, max_blocks=None, cut_blocks_to=None)


@dataclass
class Window:
    messages: list[Message]  # storage order
    summary: Summary | None
    summary_anchor_timestamp: int
    carried_events: list[EventMessage] = field(default_factory=list)
    dropped: int = 0  # messages before the window (compacted or cut)
    request_time: int = 0


@dataclass(frozen=True)
class SessionIndex:
    positions: Mapping[int, int]  # row id → position in session.messages
    membership: list[int]  # positions of join/leave events, ascending
    summaries: list[Summary]  # by time
    summary_times: list[int]
    block_starts: list[int] = field(default_factory=list)  # positions right after a final bot reply, ascending
    roles: Sequence[OutlineRole] = ()  # the outline's, by position (empty: read from the messages)
    timestamps: Sequence[int] = ()

    @staticmethod
    def of(session: Session) -> SessionIndex:
        """From the session's outline alone: no message content is read (a lazy source parses nothing here)."""
        outline = session.outline
        positions = RowPositions(outline.row_ids)
        membership = [
            i for i, kind in enumerate(outline.event_kinds) if kind is not None and kind != "member_changed"
        ]
        summaries = sorted(session.summaries, key=lambda s: s.timestamp)
        # A block ends with the bot's final reply (an assistant message without tool calls): the next one starts
        # right after it.
        block_starts = [i + 1 for i in outline.assistant_positions if not outline.has_tool_calls[i]]
        return SessionIndex(positions, membership, summaries, [s.timestamp for s in summaries], block_starts,
                            outline.roles, outline.timestamps)

    def summary_for(self, upto: int, request_time: int) -> Summary | None:
        """The newest summary made by ``request_time`` whose anchor is visible before position ``upto``."""
        for candidate in reversed(self.summaries[: bisect.bisect_right(self.summary_times, request_time)]):
            position = self.positions.get(candidate.anchor_row_id)
            if position is not None and position < upto:
                return candidate
        return None


def tail_start(available: int, max_messages: int, cut_to: int) -> int:
    """Where the tail limit opens a window over ``available`` messages: an offset into them.

    Stateless, so replaying one turn alone gives the window a full replay gives it. The window may start only
    at multiples of ``step = max_messages - cut_to`` (a grid anchored at the history's base, i.e. the start
    after the compaction summary); it takes the latest grid point that leaves more than ``cut_to`` messages.
    Its length therefore stays in ``(cut_to, max_messages]``, and the start moves once per ``step`` messages:
    the hysteresis of preset-message-skeleton ("超过 2n 才裁到 n"). ``cut_to = max_messages - 1`` makes the step 1,
    which is exactly a sliding window of ``max_messages``.
    """
    if available <= max_messages:
        return 0
    step = max_messages - cut_to
    return ((available - cut_to - 1) // step) * step


def visible_window(
    session: Session, upto: int, request_time: int, config: WindowConfig, index: SessionIndex | None = None
) -> Window:
    """The window of the request made before ``session.messages[upto]`` at ``request_time``."""
    index = index or SessionIndex.of(session)
    messages = session.messages
    summary = index.summary_for(upto, request_time)
    start = 0
    anchor_ts = 0
    if summary is not None:
        start = index.positions[summary.anchor_row_id] + 1
        anchor_ts = index.timestamps[start - 1] if index.timestamps else messages[start - 1].timestamp
    base = start
    keep = config.keep_after_cut
    if config.max_messages is not None and keep is not None:
        start = base + tail_start(upto - base, config.max_messages, keep)
    keep_blocks = config.keep_blocks_after_cut
    if config.max_blocks is not None and keep_blocks is not None:
        # Blocks of the history after the base: the base itself opens one, then every start before ``upto``.
        # (Counted with two bisections, never sliced: per-request work stays independent of the session's length.)
        first = bisect.bisect_right(index.block_starts, base)
        count = 1 + bisect.bisect_left(index.block_starts, upto) - first
        offset = tail_start(count, config.max_blocks, keep_blocks)
        block_start = base if offset == 0 else index.block_starts[first + offset - 1]
        start = max(start, block_start)  # both grids are stateless; the later start wins
    # Never open the window in the middle of a tool group: results without their call are orphans.
    while start < upto and (index.roles[start] == "toolResult" if index.roles
                            else isinstance(messages[start], ToolResultMessage)):
        start += 1
    carried: list[EventMessage] = []
    if config.keep_membership_events > 0:
        end = bisect.bisect_left(index.membership, start)
        chosen = index.membership[max(0, end - config.keep_membership_events) : end]
        carried = messages_at(messages, chosen)  # type: ignore[assignment]  # membership positions hold events
    return Window(
        messages=list(messages[start:upto]),
        summary=summary,
        summary_anchor_timestamp=anchor_ts,
        carried_events=carried,
        dropped=start,
        request_time=request_time,
    )


def summary_in_prefix(window: Window, sent: Sequence[ItemKey]) -> list[ItemKey]:
    """The previous request's order (``merge``'s append-only prefix) with a new compaction summary in its place.

    Append-only puts everything the previous request did not send after what it sent, so a summary made since
    would follow messages it is older than (m5, m6, then the summary of rows 1–4, then m7). But compaction has
    already broken the cached prefix at its first removed message, so nothing is gained by appending it, and the
    model would read the summary of the past after the present. The summary therefore takes its anchor's place
    among the sent items, as a merge by time would put it: after the (carried) events up to its anchor's time,
    before every later message. Everything else keeps the sent order (a late event still goes after the reply
    that was written without it). Once sent, the summary is part of the prefix like any item.
    (docs/design-notes.md, "Summary placement after compaction (A5)")
    """
    if window.summary is None:
        return list(sent)
    key: ItemKey = ("summary", window.summary.anchor_row_id)
    if not sent or key in sent:
        return list(sent)
    # sort keys as in merge: time, then state (events) before the summary, the summary before other messages
    order = {("row", m.row_id): (m.timestamp, 0 if isinstance(m, EventMessage) else 1)
             for m in (*window.carried_events, *window.messages)}
    at = (window.summary_anchor_timestamp, 0)
    position = next((i for i, k in enumerate(sent) if k in order and order[k] > at), len(sent))
    return [*sent[:position], key, *sent[position:]]

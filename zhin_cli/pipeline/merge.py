"""Stage 4 — merge message segments into one history (ADR 0041 §2–3).

* Stable merge by timestamp; ties ``state → user → tool → assistant`` (a state change comes before the
  message it affects), then segment weight (higher first), then segment output order.
* A tool group (an assistant message with tool calls plus all its results) is one unit: nothing can land
  between a call and its results. An event that arrived during the tool call sorts after the whole group.
* Append-only: items already sent in the previous request keep that order as the prefix; everything new is
  appended after it, never inserted back (a late event would otherwise break the cached prefix).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from zhin_cli.core.errors import AssemblyError
from zhin_cli.core.model import AssistantMessage, HistoryItem, SummaryMessage, ToolResultMessage
from zhin_cli.pipeline.segments import MESSAGE_KINDS, PromptSegment

TIE_ORDER = {"state": 0, "user": 1, "tool": 2, "assistant": 3}
assert set(TIE_ORDER) == set(MESSAGE_KINDS)

ItemKey = tuple[str, int]


def item_key(item: HistoryItem) -> ItemKey:
    if isinstance(item, SummaryMessage):
        return ("summary", item.anchor_row_id)
    return ("row", item.row_id)


@dataclass
class Placed:
    item: HistoryItem
    segment_id: str


@dataclass(slots=True)
class _Unit:
    items: list[Placed]
    timestamp: int
    tie: int
    weight: float
    seq: int
    keys: list[ItemKey] = field(default_factory=list)


def _call_ids(item: AssistantMessage) -> set[str]:
    """``{c.id for c in item.tool_calls}`` without building the ToolCall objects (every request merges its window)."""
    return {str(b["id"]) for b in item.content if b.get("type") == "toolCall"}


def _orphan_call(group: _Unit | None, waiting: set[str]) -> AssemblyError:
    assert group is not None  # calls wait only inside a group
    return AssemblyError(
        f"orphan tool call {sorted(waiting)[0]!r} (row {item_key(group.items[0].item)[1]}): no tool result follows it"
    )


def _units(segment: PromptSegment, output: Sequence[HistoryItem], seq_start: int) -> list[_Unit]:
    units: list[_Unit] = []
    group: _Unit | None = None  # the open tool group …
    waiting: set[str] = set()  # … and the calls of it still without a result
    # read once: every request merges the whole window again, item by item
    segment_id, tie, weight = segment.id, TIE_ORDER[segment.kind], segment.weight
    seq = seq_start
    for item in output:
        if isinstance(item, ToolResultMessage):
            if group is None or item.tool_call_id not in waiting:
                raise AssemblyError(
                    f"orphan tool result for {item.tool_call_id!r} (row {item.row_id}) from segment {segment.id!r}: "
                    "it does not follow the assistant message that calls it"
                )
            waiting.discard(item.tool_call_id)
            group.items.append(Placed(item, segment_id))
            group.keys.append(("row", item.row_id))
            continue
        if waiting:
            raise _orphan_call(group, waiting)
        key = ("summary", item.anchor_row_id) if isinstance(item, SummaryMessage) else ("row", item.row_id)
        unit = _Unit([Placed(item, segment_id)], item.timestamp, tie, weight, seq, [key])
        seq += 1
        units.append(unit)
        if isinstance(item, AssistantMessage):
            waiting = _call_ids(item)
            group = unit if waiting else None
        else:
            group = None
    if waiting:
        raise _orphan_call(group, waiting)
    return units


def merge(
    outputs: Sequence[tuple[PromptSegment, Sequence[HistoryItem]]],
    sent_prefix: Sequence[ItemKey] = (),
) -> list[Placed]:
    units: list[_Unit] = []
    seen: set[ItemKey] = set()
    for segment, output in outputs:
        produced = _units(segment, output, len(units))
        keys = [key for unit in produced for key in unit.keys]
        before = len(seen)
        seen.update(keys)
        if len(seen) != before + len(keys):  # a key twice: name the first, as a key-by-key check would
            earlier = {key for unit in units for key in unit.keys}
            for key in keys:
                if key in earlier:
                    raise AssemblyError(f"{key[0]} {key[1]} produced twice (again by segment {segment.id!r})")
                earlier.add(key)
        units.extend(produced)
    units.sort(key=lambda u: (u.timestamp, u.tie, -u.weight, u.seq))
    if sent_prefix:
        position = {key: i for i, key in enumerate(sent_prefix)}
        old = [u for u in units if u.keys[0] in position]
        new = [u for u in units if u.keys[0] not in position]
        old.sort(key=lambda u: position[u.keys[0]])
        units = old + new
    return [placed for unit in units for placed in unit.items]

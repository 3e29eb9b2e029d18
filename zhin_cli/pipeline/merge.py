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
from typing import Any

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


def _units(segment: PromptSegment, output: Sequence[Any], seq_start: int) -> list[_Unit]:
    units: list[_Unit] = []
    open_group: tuple[_Unit, set[str]] | None = None
    # read once: every request merges the whole window again, item by item
    segment_id, tie, weight = segment.id, TIE_ORDER[segment.kind], segment.weight
    for item in output:
        if isinstance(item, ToolResultMessage):
            if open_group is None or item.tool_call_id not in open_group[1]:
                raise AssemblyError(
                    f"orphan tool result for {item.tool_call_id!r} (row {item.row_id}) from segment {segment.id!r}: "
                    "it does not follow the assistant message that calls it"
                )
            open_group[1].discard(item.tool_call_id)
            open_group[0].items.append(Placed(item, segment_id))
            open_group[0].keys.append(("row", item.row_id))
            continue
        if open_group is not None and open_group[1]:
            raise AssemblyError(
                f"orphan tool call {sorted(open_group[1])[0]!r} (row {item_key(open_group[0].items[0].item)[1]}): "
                "no tool result follows it"
            )
        unit = _Unit([Placed(item, segment_id)], item.timestamp, tie, weight, seq_start + len(units), [item_key(item)])
        units.append(unit)
        open_group = None
        if isinstance(item, AssistantMessage) and item.tool_calls:
            open_group = (unit, {c.id for c in item.tool_calls})
    if open_group is not None and open_group[1]:
        raise AssemblyError(
            f"orphan tool call {sorted(open_group[1])[0]!r} (row {item_key(open_group[0].items[0].item)[1]}): "
            "no tool result follows it"
        )
    return units


def merge(
    outputs: Sequence[tuple[PromptSegment, Sequence[Any]]],
    sent_prefix: Sequence[ItemKey] = (),
) -> list[Placed]:
    units: list[_Unit] = []
    seen: set[ItemKey] = set()
    for segment, output in outputs:
        for unit in _units(segment, output, len(units)):
            for key in unit.keys:
                if key in seen:
                    raise AssemblyError(f"{key[0]} {key[1]} produced twice (again by segment {segment.id!r})")
                seen.add(key)
            units.append(unit)
    units.sort(key=lambda u: (u.timestamp, u.tie, -u.weight, u.seq))
    if sent_prefix:
        position = {key: i for i, key in enumerate(sent_prefix)}
        old = [u for u in units if u.keys[0] in position]
        new = [u for u in units if u.keys[0] not in position]
        old.sort(key=lambda u: position[u.keys[0]])
        units = old + new
    return [placed for unit in units for placed in unit.items]

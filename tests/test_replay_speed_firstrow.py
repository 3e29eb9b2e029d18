"""``FirstRowOf`` (platform message id → first row) costs a request its window, and a replay one pass.

Counted work, not time: the outline's ids are a sequence that counts every element it hands out (by index or by
iteration). A replay looks up every reply of the session; before, each new id was a scan of every id (quadratic in
the session). A request with a few replies must not build an index of the whole session (negative control), and the
answers are ``dict.setdefault`` order over the chosen ids before and after the switch to the index.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import overload

from zhin_cli.core.model import FirstRowOf


class CountingIds(Sequence[str | None]):
    """A sequence of message ids that counts the elements read (``reads``)."""

    def __init__(self, ids: list[str | None]) -> None:
        self._ids = ids
        self.reads = 0

    @overload
    def __getitem__(self, index: int) -> str | None: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str | None]: ...

    def __getitem__(self, index: int | slice) -> str | None | Sequence[str | None]:
        value = self._ids[index]
        self.reads += len(value) if isinstance(index, slice) else 1  # type: ignore[arg-type]
        return value

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str | None]:
        for value in self._ids:
            self.reads += 1
            yield value


def outline(n: int) -> tuple[list[str | None], list[int], list[bool]]:
    ids: list[str | None] = [f"p{i}" if i % 7 else None for i in range(n)]
    return ids, [100 + 3 * i for i in range(n)], [i % 11 != 5 for i in range(n)]


def test_a_replays_lookups_read_the_ids_a_bounded_number_of_times() -> None:
    n = 5_000
    ids, rows, chosen = outline(n)
    counted = CountingIds(ids)
    first = FirstRowOf(counted, rows, chosen)
    targets = [f"p{i}" for i in range(n - 1, 0, -13) if i % 7]  # replies to recent messages, as a replay asks
    for target in targets:
        first.get(target)
    assert len(targets) > 300
    # a few scans and one index, not one scan per reply (the old code read ~len(targets) × n / 2 ids)
    assert counted.reads <= (FirstRowOf.SCANS_BEFORE_INDEX + 2) * n


def test_a_request_with_a_few_replies_does_not_index_the_session() -> None:
    """Negative control: a handful of look-ups near the end read only what a scan to them reads."""
    n = 50_000
    ids, rows, chosen = outline(n)
    counted = CountingIds(ids)
    first = FirstRowOf(counted, rows, chosen)
    for i in range(3):
        first.get(f"p{i + 1}")  # the first ids: a scan stops at once
    assert counted.reads < 100
    assert first.get("p49999") == rows[49999]
    assert counted.reads <= n + 100  # one scan to the end, no index of the whole outline on top


def test_answers_are_setdefault_order_over_the_chosen_ids() -> None:
    rng = random.Random(18)
    n = 2_000
    ids: list[str | None] = [rng.choice([None, "", *(f"p{k}" for k in range(400))]) for _ in range(n)]
    rows = list(range(10, 10 + n))
    chosen = [rng.random() < 0.8 for _ in range(n)]
    expected: dict[str, int] = {}
    for known, row, keep in zip(ids, rows, chosen, strict=True):
        if known and keep:
            expected.setdefault(known, row)
    first = FirstRowOf(ids, rows, chosen)
    asked = [f"p{k}" for k in rng.sample(range(450), 450)] + ["", "missing"]
    # before and after the switch to the index (SCANS_BEFORE_INDEX scans), the same answers
    assert [first.get(a) for a in asked] == [expected.get(a) for a in asked]
    assert dict(first) == expected and len(first) == len(expected)

"""Cache groups: which requests of a session could have hit a warm prompt cache at all.

A *cache group* is a run of consecutive requests of one session, each sent within the provider's cache
lifetime (``CacheRules.lifetime_seconds``) of the previous one. The first request of a group finds a cold
cache by construction (nothing of this session is cached any more), so hit rates are reported separately for
"first of group" and "later in group" requests — the split the preset note's baseline uses (first 8.6 %,
later 20.7 %). Shared by ``zhin stats cache`` (logged usage) and ``zhin report economy`` (simulated hits).
"""

from __future__ import annotations

from collections.abc import Sequence


def first_of_group(times: Sequence[int], lifetime_seconds: int) -> list[bool]:
    """For request times (epoch seconds, one session, ascending), whether each request starts a group."""
    flags: list[bool] = []
    previous: int | None = None
    for time in times:
        flags.append(previous is None or time - previous > lifetime_seconds)
        previous = time
    return flags

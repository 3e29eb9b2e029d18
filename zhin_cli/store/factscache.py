"""``FactsCache``: the runtime read path of member and scene facts for a bot host (ADR 0041 §6).

L1 is an in-process cache (60 s) in front of the L2 ``FactsStore`` (:mod:`zhin_cli.store.facts`); the platform
(the bot's adapter, a ``PlatformSource``) answers what neither level has. It has threads (a bounded pool of
background refreshes), which is why it is a module of its own: the toolkit's replays read stored facts
(``StoredFacts``) and never start one. A host passes its cache to the pipeline; segments read it.

Rules, each covered by ``tests/test_facts.py``:

* read order L1 → L2 → platform; a platform answer is written through to L1 and L2;
* platform failure → the last L2 value, else the field is omitted (``None``);
* an L2 row older than 24 h is still served, and triggers one background refresh per key (de-duplicated,
  bounded concurrency, cancelled when the cache is released with its generation);
* side events write through; a leave / kick deletes the member row;
* the bot's own role is read fresh from the platform on every call (it decides tool permissions) and written
  through; on failure the last known value is used;
* pruning (``store.facts.prune``) at start and every 6 h.

The clock is injectable (``Clock`` returns ms), so tests never sleep.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from zhin_cli.core.inputfiles import clean_text
from zhin_cli.store.facts import (
    HOUR,
    SECOND,
    Clock,
    FactsStore,
    MemberFacts,
    PlatformError,
    PlatformSource,
    PruneReport,
    SceneFactsRow,
    system_clock,
)

L1_TTL_MS = 60 * SECOND
STALE_AFTER_MS = 24 * HOUR
PRUNE_EVERY_MS = 6 * HOUR
DEFAULT_REFRESH_WORKERS = 4


# What L1 holds: a member row, a scene row (by their keys' first word), or the bot's role
_L1Value = MemberFacts | SceneFactsRow | str | None


@dataclass
class _Entry:
    value: _L1Value
    stored_at: int


class FactsCache:
    """The runtime read path: L1 → L2 → platform, with background refresh of stale L2 rows.

    Create one per plugin generation and ``release()`` it with the generation: pending refreshes are cancelled
    and no new one starts."""

    def __init__(self, store: FactsStore, platform: PlatformSource, *, clock: Clock = system_clock,
                 refresh_workers: int = DEFAULT_REFRESH_WORKERS) -> None:
        self.store = store
        self.platform = platform
        self.clock = clock
        self._l1: dict[tuple[str, ...], _Entry] = {}
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, ...], Future[None]] = {}
        self._executor = ThreadPoolExecutor(max_workers=refresh_workers, thread_name_prefix="zhin-facts-refresh")
        self._released = False
        self.last_prune: int | None = None
        self.last_report: PruneReport | None = None
        self.maybe_prune()  # at start

    # -- members

    def member(self, scene_key: str, user_id: str) -> MemberFacts | None:
        self.maybe_prune()
        key = ("member", scene_key, user_id)
        cached = self._l1_get(key)
        if cached is not None and isinstance(cached.value, MemberFacts):  # a "member" key holds only those
            return cached.value
        stored = self.store.member(scene_key, user_id)
        if stored is not None:
            if self.clock() - stored.updated_at > STALE_AFTER_MS:
                self._refresh(key, lambda: self._refresh_member(scene_key, user_id))
            self._l1_put(key, stored)
            return stored
        try:
            fresh = self.platform.member(scene_key, user_id)
        except PlatformError:
            return None  # no L2 value either: the field is omitted
        if fresh is None:
            return None
        fresh = replace(fresh, updated_at=self.clock()).cleaned()
        self.store.put_member(scene_key, user_id, fresh)
        self._l1_put(key, fresh)
        return fresh

    def _refresh_member(self, scene_key: str, user_id: str) -> None:
        try:
            fresh = self.platform.member(scene_key, user_id)
        except PlatformError:
            return  # keep serving the last L2 value
        key = ("member", scene_key, user_id)
        if fresh is None:  # gone from the scene
            self.store.delete_member(scene_key, user_id)
            self._l1_drop(key)
            return
        fresh = replace(fresh, updated_at=self.clock()).cleaned()
        self.store.put_member(scene_key, user_id, fresh)
        self._l1_put(key, fresh)

    # -- scene

    def scene(self, scene_key: str) -> SceneFactsRow | None:
        self.maybe_prune()
        key = ("scene", scene_key)
        cached = self._l1_get(key)
        if cached is not None and isinstance(cached.value, SceneFactsRow):  # a "scene" key holds only those
            return cached.value
        stored = self.store.scene(scene_key)
        if stored is not None:
            if self.clock() - stored.facts_updated_at > STALE_AFTER_MS:
                self._refresh(key, lambda: self._refresh_scene(scene_key))
            self._l1_put(key, stored)
            return stored
        try:
            fresh = self.platform.scene(scene_key)
        except PlatformError:
            return None
        if fresh is None:
            return None
        fresh = replace(fresh, facts_updated_at=self.clock()).cleaned()
        self.store.put_scene(scene_key, fresh)
        self._l1_put(key, fresh)
        return fresh

    def _refresh_scene(self, scene_key: str) -> None:
        try:
            fresh = self.platform.scene(scene_key)
        except PlatformError:
            return
        if fresh is None:
            return
        fresh = replace(fresh, facts_updated_at=self.clock()).cleaned()
        self.store.put_scene(scene_key, fresh)
        self._l1_put(("scene", scene_key), fresh)

    # -- the bot's own role: never from a cache first

    def bot_role(self, scene_key: str) -> str | None:
        key = ("bot_role", scene_key)
        try:
            role = clean_text(self.platform.bot_role(scene_key))
        except PlatformError:
            cached = self._l1_get(key)
            if cached is not None and (cached.value is None or isinstance(cached.value, str)):
                return cached.value
            return self.store.bot_role(scene_key)
        self.store.put_bot_role(scene_key, role)
        self._l1_put(key, role)
        return role

    # -- side events (notice.*, member_increase / member_decrease): write through

    def member_changed(self, scene_key: str, user_id: str, **changes: Any) -> MemberFacts:
        """A card / title / mute / role change: merged into the member's row (created if missing)."""
        unknown = set(changes) - {"platform_role", "card", "title", "muted_until"}
        if unknown:
            raise ValueError(f"unknown member facts: {', '.join(sorted(unknown))}")
        current = self.store.member(scene_key, user_id) or MemberFacts()
        updated = replace(current, **changes, updated_at=self.clock()).cleaned()
        self.store.put_member(scene_key, user_id, updated)
        self._l1_put(("member", scene_key, user_id), updated)
        return updated

    def member_joined(self, scene_key: str, user_id: str, facts: MemberFacts | None = None) -> MemberFacts:
        joined = replace(facts or MemberFacts(), updated_at=self.clock()).cleaned()
        self.store.put_member(scene_key, user_id, joined)
        self._l1_put(("member", scene_key, user_id), joined)
        return joined

    def member_left(self, scene_key: str, user_id: str) -> None:
        """Leave or kick: the member's row is deleted from both levels."""
        self.store.delete_member(scene_key, user_id)
        self._l1_drop(("member", scene_key, user_id))

    def scene_changed(self, scene_key: str, **changes: Any) -> SceneFactsRow:
        current = self.store.scene(scene_key) or SceneFactsRow()
        if "admins" in changes and changes["admins"] is not None:
            changes["admins"] = tuple(map(str, changes["admins"]))
        updated = replace(current, **changes, facts_updated_at=self.clock()).cleaned()
        self.store.put_scene(scene_key, updated)
        self._l1_put(("scene", scene_key), updated)
        return updated

    # -- bounds

    def maybe_prune(self) -> PruneReport | None:
        """Prune at start and then whenever 6 h have passed since the last prune."""
        now = self.clock()
        if self.last_prune is not None and now - self.last_prune < PRUNE_EVERY_MS:
            return None
        self.last_prune = now
        self.last_report = self.store.prune(now)
        with self._lock:
            self._l1.clear()  # pruned rows must not live on in L1
        return self.last_report

    # -- background refresh

    def _refresh(self, key: tuple[str, ...], work: Callable[[], None]) -> None:
        """At most one refresh per key in flight; at most ``refresh_workers`` running at once."""
        with self._lock:
            if self._released or key in self._pending:
                return
            future = self._executor.submit(work)
            self._pending[key] = future
        future.add_done_callback(lambda _f: self._done(key))

    def _done(self, key: tuple[str, ...]) -> None:
        with self._lock:
            self._pending.pop(key, None)

    def pending_refreshes(self) -> int:
        with self._lock:
            return len(self._pending)

    def wait_for_refreshes(self, timeout: float | None = None) -> None:
        with self._lock:
            futures = list(self._pending.values())
        for future in futures:
            try:
                future.result(timeout=timeout)
            except Exception:  # a refresh that failed keeps the L2 value; the error has nowhere to go
                pass

    def release(self) -> None:
        """With the generation: cancel queued refreshes, stop starting new ones, wait for the running ones."""
        with self._lock:
            self._released = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._pending.clear()
            self._l1.clear()

    # -- L1

    def _l1_get(self, key: tuple[str, ...]) -> _Entry | None:
        with self._lock:
            entry = self._l1.get(key)
            if entry is None:
                return None
            if self.clock() - entry.stored_at >= L1_TTL_MS:
                del self._l1[key]
                return None
            return entry

    def _l1_put(self, key: tuple[str, ...], value: _L1Value) -> None:
        with self._lock:
            self._l1[key] = _Entry(value, self.clock())

    def _l1_drop(self, key: tuple[str, ...]) -> None:
        with self._lock:
            self._l1.pop(key, None)

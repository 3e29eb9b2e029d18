"""Member and scene facts, cached at two levels (ADR 0041 §6).

L1 is an in-process cache (60 s). L2 is the database: scene facts in ``ai_session_profiles`` (``owner_id``,
``member_count``, ``facts_updated_at`` besides upstream's ``title`` / ``admins`` / ``muted_all`` / ``bot_role``),
member facts in ``ai_scene_members`` keyed by platform + scene_key + user_id. The platform (the bot's adapter)
sits behind ``PlatformSource``.

Rules, each covered by ``tests/test_facts.py``:

* read order L1 → L2 → platform; a platform answer is written through to L1 and L2;
* platform failure → the last L2 value, else the field is omitted (``None``);
* an L2 row older than 24 h is still served, and triggers one background refresh per key (de-duplicated,
  bounded concurrency, cancelled when the cache is released with its generation);
* side events write through; a leave / kick deletes the member row;
* the bot's own role is read fresh from the platform on every call (it decides tool permissions) and written
  through; on failure the last known value is used;
* bounds: 90 days without update → pruned; at most 2000 member rows per session (oldest ``updated_at``
  evicted); pruning at start and every 6 h; stored text stripped of control characters and cut at 128.

The clock is injectable (``Clock`` returns ms), so tests never sleep.

The toolkit itself replays stored sessions: there, facts come from the L2 rows as loaded (``StoredFacts``).
"""

from __future__ import annotations

import json
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, and_, func, select
from sqlalchemy.exc import SQLAlchemyError

from zhin_cli.core.model import Session
from zhin_cli.store import schema

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

L1_TTL_MS = 60 * SECOND
STALE_AFTER_MS = 24 * HOUR
RETENTION_MS = 90 * DAY
MAX_MEMBERS_PER_SESSION = 2000
PRUNE_EVERY_MS = 6 * HOUR
MAX_TEXT_CHARS = 128
DEFAULT_REFRESH_WORKERS = 4

Clock = Callable[[], int]  # now, ms epoch


def system_clock() -> int:
    return time.time_ns() // 1_000_000


def clean_text(value: Any) -> Any:
    """Stored member-controlled text: control characters (Unicode category Cc) removed, cut at 128 characters.
    Anything that is not a string passes through unchanged."""
    if not isinstance(value, str):
        return value
    stripped = "".join(ch for ch in value if unicodedata.category(ch) != "Cc")
    return stripped[:MAX_TEXT_CHARS]


def needs_cleaning(value: Any) -> bool:
    return isinstance(value, str) and clean_text(value) != value


@dataclass(frozen=True)
class MemberFacts:
    """One ``ai_scene_members`` row's facts."""

    platform_role: str | None = None
    card: str | None = None
    title: str | None = None
    muted_until: int | None = None
    updated_at: int = 0

    def cleaned(self) -> MemberFacts:
        return replace(self, platform_role=clean_text(self.platform_role), card=clean_text(self.card),
                       title=clean_text(self.title))


@dataclass(frozen=True)
class SceneFactsRow:
    """The scene facts of one ``ai_session_profiles`` row."""

    title: str | None = None
    owner_id: str | None = None
    admins: tuple[str, ...] | None = None
    member_count: int | None = None
    muted_all: bool | None = None
    facts_updated_at: int = 0

    def cleaned(self) -> SceneFactsRow:
        return replace(self, title=clean_text(self.title), owner_id=clean_text(self.owner_id))


class PlatformError(Exception):
    """The platform could not answer (timeout, adapter offline, API error)."""


class PlatformSource(Protocol):
    """The bot's adapter. ``member`` returns ``None`` for someone who is not in the scene."""

    def member(self, scene_key: str, user_id: str) -> MemberFacts | None: ...

    def scene(self, scene_key: str) -> SceneFactsRow | None: ...

    def bot_role(self, scene_key: str) -> str | None: ...


def platform_of(scene_key: str) -> str:
    return scene_key.split(":", 1)[0]


# --- L2: the database rows ---------------------------------------------------------------------------------


@dataclass
class PruneReport:
    """What ``prune`` removed (or would remove, with ``dry_run``), as (scene_key, user_id) pairs."""

    dry_run: bool
    expired: list[tuple[str, str]] = field(default_factory=list)
    over_cap: list[tuple[str, str]] = field(default_factory=list)
    left: list[tuple[str, str]] = field(default_factory=list)
    cleaned: list[tuple[str, str]] = field(default_factory=list)  # rows whose text was stripped / cut

    @property
    def removed(self) -> int:
        return len(self.expired) + len(self.over_cap) + len(self.left)

    def as_dict(self) -> dict[str, Any]:
        def rows(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
            return [{"scene_key": k, "user_id": u} for k, u in pairs]

        return {"version": 1, "dry_run": self.dry_run, "removed": self.removed, "expired": rows(self.expired),
                "over_cap": rows(self.over_cap), "left": rows(self.left), "cleaned": rows(self.cleaned)}


class FactsStore:
    """L2: facts rows in a zhin database (any SQLAlchemy engine; creates the two tables if missing)."""

    def __init__(self, engine: Engine, *, create: bool = True) -> None:
        self.engine = engine
        if create:
            schema.ai_session_profiles.create(engine, checkfirst=True)
            schema.ai_scene_members.create(engine, checkfirst=True)

    @contextmanager
    def _reading(self, conn: Connection | None) -> Iterator[Connection]:
        """The caller's connection (one read snapshot across several reads: ``show_facts``), else one of our own."""
        if conn is not None:
            yield conn
        else:
            with self.engine.connect() as own:
                yield own

    def member(self, scene_key: str, user_id: str, conn: Connection | None = None) -> MemberFacts | None:
        t = schema.ai_scene_members
        with self._reading(conn) as conn:
            row = conn.execute(select(t).where(_member_key(scene_key, user_id))).first()
        if row is None:
            return None
        return MemberFacts(platform_role=row.platform_role, card=row.card, title=row.title, muted_until=row.muted_until,
                           updated_at=row.updated_at or 0)

    def members(self, scene_key: str, conn: Connection | None = None) -> dict[str, MemberFacts]:
        t = schema.ai_scene_members
        with self._reading(conn) as conn:
            rows = conn.execute(select(t).where(t.c.scene_key == scene_key).order_by(t.c.user_id)).all()
        return {str(r.user_id): MemberFacts(platform_role=r.platform_role, card=r.card, title=r.title,
                                            muted_until=r.muted_until, updated_at=r.updated_at or 0) for r in rows}

    def put_member(self, scene_key: str, user_id: str, facts: MemberFacts) -> None:
        t = schema.ai_scene_members
        facts = facts.cleaned()
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(_member_key(scene_key, user_id)))
            conn.execute(t.insert().values(platform=platform_of(scene_key), scene_key=scene_key, user_id=user_id,
                                           platform_role=facts.platform_role, card=facts.card, title=facts.title,
                                           muted_until=facts.muted_until, updated_at=facts.updated_at))
            _evict_over_cap(conn, [scene_key], dry_run=False)

    def delete_member(self, scene_key: str, user_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(schema.ai_scene_members.delete().where(_member_key(scene_key, user_id)))

    def scene(self, scene_key: str, conn: Connection | None = None, *, label: str | None = None) -> SceneFactsRow | None:
        """The stored scene facts; ``label`` names the database in the error a malformed ``admins`` gives."""
        p = schema.ai_session_profiles
        with self._reading(conn) as conn:
            row = conn.execute(select(p).where(p.c.session_key == scene_key)).first()
        if row is None or row.facts_updated_at is None:
            return None
        from zhin_cli.core.errors import InputError, at_row
        from zhin_cli.store.payload import check_scene_facts

        where = at_row("ai_session_profiles", scene_key, label)
        try:  # read as zhin trace reads it (store.database._profile): bad JSON, or nested past the recursion limit
            admins = json.loads(row.admins) if row.admins else None
        except (ValueError, TypeError, RecursionError):
            raise InputError("admins is not a JSON array", where=where) from None
        check_scene_facts({"admins": admins}, where)  # JSON, but not a list of user ids
        return SceneFactsRow(title=row.title, owner_id=row.owner_id, admins=None if admins is None else tuple(map(str, admins)),
                             member_count=row.member_count, muted_all=None if row.muted_all is None else bool(row.muted_all),
                             facts_updated_at=row.facts_updated_at)

    def put_scene(self, scene_key: str, facts: SceneFactsRow) -> None:
        facts = facts.cleaned()
        values = {"title": facts.title, "owner_id": facts.owner_id, "member_count": facts.member_count,
                  "admins": None if facts.admins is None else json.dumps(list(facts.admins)),
                  "muted_all": None if facts.muted_all is None else int(facts.muted_all),
                  "facts_updated_at": facts.facts_updated_at}
        self._upsert_profile(scene_key, values)

    def bot_role(self, scene_key: str, conn: Connection | None = None) -> str | None:
        p = schema.ai_session_profiles
        with self._reading(conn) as conn:
            value = conn.execute(select(p.c.bot_role).where(p.c.session_key == scene_key)).scalar()
        return value if isinstance(value, str) else None

    def put_bot_role(self, scene_key: str, role: str | None) -> None:
        self._upsert_profile(scene_key, {"bot_role": clean_text(role)})

    def _upsert_profile(self, scene_key: str, values: dict[str, Any]) -> None:
        p = schema.ai_session_profiles
        with self.engine.begin() as conn:
            exists = conn.execute(select(p.c.session_key).where(p.c.session_key == scene_key)).first()
            if exists:
                conn.execute(p.update().where(p.c.session_key == scene_key).values(**values))
            else:
                conn.execute(p.insert().values(session_key=scene_key, platform=platform_of(scene_key), **values))

    def prune(self, now: int, *, dry_run: bool = False) -> PruneReport:
        return prune(self.engine, now, dry_run=dry_run)


def _member_key(scene_key: str, user_id: str) -> Any:
    t = schema.ai_scene_members
    return and_(t.c.platform == platform_of(scene_key), t.c.scene_key == scene_key, t.c.user_id == user_id)


def _evict_over_cap(conn: Any, scene_keys: Iterable[str], *, dry_run: bool) -> list[tuple[str, str]]:
    """Member rows beyond the newest 2000 of a session (oldest ``updated_at`` first; ties by user id)."""
    t = schema.ai_scene_members
    victims: list[tuple[str, str]] = []
    for scene_key in scene_keys:
        count = conn.execute(select(func.count()).select_from(t).where(t.c.scene_key == scene_key)).scalar_one()
        if count <= MAX_MEMBERS_PER_SESSION:
            continue
        rows = conn.execute(
            select(t.c.platform, t.c.user_id).where(t.c.scene_key == scene_key)
            .order_by(func.coalesce(t.c.updated_at, 0), t.c.user_id).limit(count - MAX_MEMBERS_PER_SESSION)
        ).all()
        for row in rows:
            victims.append((scene_key, str(row.user_id)))
            if not dry_run:
                conn.execute(t.delete().where(and_(t.c.platform == row.platform, t.c.scene_key == scene_key,
                                                   t.c.user_id == row.user_id)))
    return victims


def prune(engine: Engine, now: int, *, dry_run: bool = False) -> PruneReport:
    """Apply the ADR §6 bounds to the stored member rows; with ``dry_run`` only report (nothing is written).

    Order: members who left (a ``member_decrease`` in ``conversation_events`` later than their row), rows not
    updated for 90 days, then the 2000-per-session cap over what is left, then text cleaning."""
    from zhin_cli.store.events import member_leaves  # the conversation_events reader

    report = PruneReport(dry_run=dry_run)
    t = schema.ai_scene_members
    tables = set(_table_names(engine))
    if "ai_scene_members" not in tables:
        return report
    connection = engine.connect()
    try:
        transaction = connection.begin()
        rows = connection.execute(select(t).order_by(t.c.scene_key, t.c.user_id)).all()
        gone: set[tuple[str, str]] = set()
        leaves = member_leaves(connection) if "conversation_events" in tables else {}
        for row in rows:
            key = (str(row.scene_key), str(row.user_id))
            left_at = leaves.get(key)
            if left_at is not None and left_at >= (row.updated_at or 0):
                report.left.append(key)
                gone.add(key)
            elif (row.updated_at or 0) < now - RETENTION_MS:
                report.expired.append(key)
                gone.add(key)
        if gone and not dry_run:
            for scene_key, user_id in gone:
                connection.execute(t.delete().where(_member_key(scene_key, user_id)))
        remaining: dict[str, int] = {}
        for row in rows:
            if (row.scene_key, row.user_id) not in gone:
                remaining[row.scene_key] = remaining.get(row.scene_key, 0) + 1
        over = [k for k, n in remaining.items() if n > MAX_MEMBERS_PER_SESSION]
        if dry_run:
            # what the cap would evict once the rows above are gone
            for scene_key in over:
                kept = sorted((r for r in rows if r.scene_key == scene_key and (r.scene_key, r.user_id) not in gone),
                              key=lambda r: (r.updated_at or 0, r.user_id))
                report.over_cap += [(scene_key, str(r.user_id)) for r in kept[: len(kept) - MAX_MEMBERS_PER_SESSION]]
        else:
            report.over_cap = _evict_over_cap(connection, over, dry_run=False)
        evicted = gone | set(report.over_cap)
        for row in rows:
            key = (str(row.scene_key), str(row.user_id))
            if key in evicted or not any(needs_cleaning(v) for v in (row.platform_role, row.card, row.title)):
                continue
            report.cleaned.append(key)
            if not dry_run:
                connection.execute(t.update().where(_member_key(*key)).values(
                    platform_role=clean_text(row.platform_role), card=clean_text(row.card), title=clean_text(row.title)))
        if dry_run:
            transaction.rollback()
        else:
            transaction.commit()
    finally:
        connection.close()
    return report


def _table_names(engine: Engine) -> list[str]:
    from sqlalchemy import inspect

    return inspect(engine).get_table_names()


# --- L1 + the read path ------------------------------------------------------------------------------------


@dataclass
class _Entry:
    value: Any
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
        if cached is not None:
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
        if cached is not None:
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
            return cached.value if cached is not None else self.store.bot_role(scene_key)
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

    def _l1_put(self, key: tuple[str, ...], value: Any) -> None:
        with self._lock:
            self._l1[key] = _Entry(value, self.clock())

    def _l1_drop(self, key: tuple[str, ...]) -> None:
        with self._lock:
            self._l1.pop(key, None)


# --- replay: facts as stored ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredFacts:
    """Facts for a replayed session, from the L2 rows loaded with it (no platform, no clock): the newest
    snapshot per member at or before a given time."""

    session: Session

    def member(self, user_id: str, at: int | None = None) -> MemberFacts | None:
        best = None
        for snapshot in self.session.members:
            if snapshot.user_id == user_id and (at is None or snapshot.timestamp <= at):
                if best is None or snapshot.timestamp >= best.timestamp:
                    best = snapshot
        if best is None:
            return None
        facts = best.facts
        return MemberFacts(platform_role=facts.get("platform_role"), card=facts.get("card"), title=facts.get("title"),
                           muted_until=facts.get("muted_until"), updated_at=best.timestamp)


def show_facts(db: str, session: str) -> dict[str, Any]:
    """``zhin facts show``: the stored scene facts, bot role and member rows of a session (epoch id or key),
    read in one read-only snapshot (a bot committing meanwhile is seen wholly or not at all)."""
    from zhin_cli.core.errors import SessionNotFound
    from zhin_cli.store.database import SessionDatabase, parse_db

    with SessionDatabase(parse_db(db)) as database, database.snapshot() as conn:
        s = schema.agent_sessions
        key = conn.execute(select(s.c.session_key).where(s.c.session_id == session)).scalar()
        if key is None and conn.execute(select(s.c.session_key).where(s.c.session_key == session)).first() is not None:
            key = session
        if key is None:
            raise SessionNotFound(f"no session {session!r} in {database.ref.label} (try `zhin sessions`)")
        store = FactsStore(database.engine, create=False)
        scene = store.scene(key, conn, label=database.ref.label) if "ai_session_profiles" in database.tables else None
        bot_role = store.bot_role(key, conn) if "ai_session_profiles" in database.tables else None
        members = store.members(key, conn) if "ai_scene_members" in database.tables else {}
    return {
        "version": 1,
        "session_key": key,
        "scene": None if scene is None else {**scene.__dict__, "admins": None if scene.admins is None else list(scene.admins)},
        "bot_role": bot_role,
        "members": [{"user_id": user_id, **facts.__dict__} for user_id, facts in members.items()],
    }


def prune_database(db: str, *, dry_run: bool, now: int | None = None) -> PruneReport:
    """``zhin facts prune``: apply the bounds; ``dry_run`` opens the database read-only and writes nothing."""
    from zhin_cli.core.errors import ZhinError
    from zhin_cli.store.database import SessionDatabase, db_error, parse_db, writable_engine

    ref = parse_db(db)
    now = system_clock() if now is None else now
    with SessionDatabase(ref) as database:  # checks it is a zhin database; read-only
        if dry_run:
            return prune(database.engine, now, dry_run=True)
    engine = writable_engine(ref)
    try:
        return prune(engine, now, dry_run=False)
    except SQLAlchemyError as exc:
        raise ZhinError(f"cannot write database: {db_error(exc)}", where=ref.label) from None
    finally:
        engine.dispose()


__all__ = [
    "FactsCache", "FactsStore", "MemberFacts", "PlatformError", "PlatformSource", "PruneReport", "SceneFactsRow",
    "StoredFacts", "clean_text", "prune", "prune_database", "show_facts",
]

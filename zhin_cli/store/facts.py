"""Member and scene facts: the data types and the L2 store (ADR 0041 §6).

L2 is the database: scene facts in ``ai_session_profiles`` (``owner_id``, ``member_count``, ``facts_updated_at``
besides upstream's ``title`` / ``admins`` / ``muted_all`` / ``bot_role``), member facts in ``ai_scene_members``
keyed by platform + scene_key + user_id. The platform (the bot's adapter) sits behind ``PlatformSource``.

Three modules, one per job, so the data source layer does not depend on the commands or on threads:

* here (``store``): the rows (``MemberFacts``, ``SceneFactsRow``), the L2 ``FactsStore``, the bounds (``prune``)
  and ``StoredFacts`` — the toolkit replays stored sessions, and there facts come from the L2 rows as loaded;
* :mod:`zhin_cli.store.factscache`: ``FactsCache``, the L1 in-process cache and the threaded read path a bot host
  runs (L1 → L2 → platform, background refresh);
* :mod:`zhin_cli.tools.facts.facts`: the library functions of ``zhin facts show`` / ``zhin facts prune``.

Rules of this module, each covered by ``tests/test_facts.py``: 90 days without update → pruned; at most 2000
member rows per session (oldest ``updated_at`` evicted); a leave / kick later than the row deletes it; stored text
stripped of control characters and cut at 128 (:func:`zhin_cli.core.inputfiles.clean_text`, the one rule that
``zhin import`` applies too).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import ColumnElement, Connection, Engine, and_, func, select

import zhin_cli.store.schema as schema
from zhin_cli.core.inputfiles import clean_text, needs_cleaning
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.model import Session

if TYPE_CHECKING:
    from zhin_cli.store.events import MemberEvent  # events imports this module

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

RETENTION_MS = 90 * DAY
MAX_MEMBERS_PER_SESSION = 2000

Clock = Callable[[], int]  # now, ms epoch


def system_clock() -> int:
    return time.time_ns() // 1_000_000


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

    def as_dict(self) -> JSONObject:
        def rows(pairs: list[tuple[str, str]]) -> list[JSON]:
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
        try:  # read as zhin trace reads it (store.db.parse, RowParser._profile): bad JSON, or nested past the recursion limit
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

    def _upsert_profile(self, scene_key: str, values: dict[str, str | int | None]) -> None:
        p = schema.ai_session_profiles
        with self.engine.begin() as conn:
            exists = conn.execute(select(p.c.session_key).where(p.c.session_key == scene_key)).first()
            if exists:
                conn.execute(p.update().where(p.c.session_key == scene_key).values(**values))
            else:
                conn.execute(p.insert().values(session_key=scene_key, platform=platform_of(scene_key), **values))

    def prune(self, now: int, *, dry_run: bool = False) -> PruneReport:
        return prune(self.engine, now, dry_run=dry_run)


def _member_key(scene_key: str, user_id: str) -> ColumnElement[bool]:
    t = schema.ai_scene_members
    return and_(t.c.platform == platform_of(scene_key), t.c.scene_key == scene_key, t.c.user_id == user_id)


def _evict_over_cap(conn: Connection, scene_keys: Iterable[str], *, dry_run: bool) -> list[tuple[str, str]]:
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


# --- rebuilt: what a database without facts tables knows -----------------------------------------------------


@dataclass
class RosterEntry:
    """One member as the rows of a database without facts tables tell it: names and roles from the messages
    (``conversation_events`` actors, ``agent_messages`` actors), joins, leaves, role changes and mutes from the
    member events. ``None``: not known."""

    user_id: str
    name: str | None = None
    platform_role: str | None = None
    roles: tuple[str, ...] = ()  # product roles upstream gives the sender (master …)
    joined_at: int | None = None
    joined_by: str | None = None
    left_at: int | None = None
    left_by: str | None = None  # "self" for a member who left, the operator for a kick
    muted_until: int | None = None  # 0: not muted
    muted_by: str | None = None
    last_seen: int | None = None
    _role_at: int = field(default=-1, repr=False)

    def as_dict(self) -> JSONObject:
        data: JSONObject = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        data["roles"] = [role for role in self.roles]  # a list[JSON], which a list[str] is not
        return data

    def set_role(self, role: str | None, roles: tuple[str, ...] | None, at: int) -> None:
        if at >= self._role_at:  # the newest word wins, a message's roles or a role event
            self._role_at = at
            self.platform_role = role if role is not None else self.platform_role
            self.roles = roles if roles is not None else self.roles


@dataclass
class RebuiltFacts:
    members: dict[str, RosterEntry] = field(default_factory=dict)
    global_mute: list[tuple[int, bool, str | None]] = field(default_factory=list)  # (time, on, operator)
    warnings: list[str] = field(default_factory=list)

    def entry(self, user_id: str) -> RosterEntry:
        return self.members.setdefault(user_id, RosterEntry(user_id))


def rebuild_facts(conn: Connection, session_key: str, tables: set[str], label: str | None = None) -> RebuiltFacts:
    """The roster of ``session_key`` from upstream's own rows (ADR §6's facts, as far as the rows tell them)."""
    from zhin_cli.store.events import read_events
    from zhin_cli.store.keys import session_key_of

    rebuilt = RebuiltFacts()
    if "agent_messages" in tables:
        _senders_of_turns(conn, session_key, rebuilt, label)
    if "conversation_events" in tables:
        t = schema.conversation_events
        rows = [r for r in conn.execute(select(t.c.id, t.c.event_id, t.c.conversation_key, t.c.message_key, t.c.event_json,
                                               t.c.time).order_by(t.c.id)).all()
                if session_key_of(r.conversation_key or "") == session_key]
        _message_authors(rows, rebuilt, label)
        reading = read_events([r for r in rows if not r.message_key], label)
        rebuilt.warnings = reading.warnings
        for event in reading.members:
            _apply_member_event(rebuilt.entry(event.user_id), event)
        rebuilt.global_mute = [(e.time, e.global_mute, e.operator_id) for e in reading.scenes]
    return rebuilt


def _senders_of_turns(conn: Connection, session_key: str, rebuilt: RebuiltFacts, label: str | None) -> None:
    """Each triggering sender's name and roles as upstream stored them with the turn (``actor``)."""
    from zhin_cli.core.errors import at_row
    from zhin_cli.store.events import epoch_ms
    from zhin_cli.store.legacy import split_roles
    from zhin_cli.store.payload import json_column

    m, s = schema.agent_messages, schema.agent_sessions
    rows = conn.execute(select(m.c.id, m.c.payload, m.c.timestamp).join(s, s.c.session_id == m.c.session_id)
                        .where((s.c.session_key == session_key) & (m.c.role == "user")).order_by(m.c.id)).all()
    for row in rows:
        payload = json_column(row.payload, "payload", at_row("agent_messages", row.id, label))
        actor = payload.get("actor") if isinstance(payload, dict) else None
        if not isinstance(actor, dict) or not isinstance(actor.get("subjectId"), (str, int)):
            continue
        entry = rebuilt.entry(str(actor["subjectId"]))
        at = epoch_ms(row.timestamp) or 0  # a bigint column may come back as decimal text
        raw_roles = actor.get("roles")
        if isinstance(raw_roles, list) and actor.get("scope") != "private":
            product, platform = split_roles([str(r) for r in raw_roles])
            entry.set_role(platform, product, at)
        _seen(entry, actor.get("displayName"), at)


def _message_authors(rows: list[Any], rebuilt: RebuiltFacts, label: str | None) -> None:
    """Every member message's author (``message.created``: ``actor.id``, ``displayName``, time); the bot's replies
    have no actor."""
    from zhin_cli.core.errors import at_row
    from zhin_cli.store.payload import json_column

    for row in rows:
        if not row.message_key:
            continue
        data = json_column(row.event_json, "event_json", at_row("conversation_events", row.id, label))
        message = data.get("message") if isinstance(data, dict) else None
        actor = message.get("actor") if isinstance(message, dict) else None
        if isinstance(actor, dict) and isinstance(actor.get("id"), (str, int)) and isinstance(row.time, int):
            _seen(rebuilt.entry(str(actor["id"])), actor.get("displayName"), row.time)


def _seen(entry: RosterEntry, name: JSON, at: int) -> None:
    if entry.last_seen is None or at >= entry.last_seen:
        entry.last_seen = at
        if isinstance(name, str) and name:
            entry.name = name


def _by(operator: str | None, user_id: str) -> str | None:
    """Who did it: ``self`` for the member, the operator's id, or None (not stored)."""
    return "self" if operator == user_id else operator


def _apply_member_event(entry: RosterEntry, event: MemberEvent) -> None:
    by = event.operator_id
    if event.kind == "member_joined":
        entry.joined_at, entry.joined_by, entry.left_at, entry.left_by = event.time, _by(by, event.user_id), None, None
    elif event.kind == "member_left":
        entry.left_at, entry.left_by = event.time, _by(by, event.user_id)
    elif event.field == "role":
        entry.set_role(event.value, None, event.time)
    elif event.field == "mute_time":
        seconds = int(event.value or 0)
        entry.muted_until, entry.muted_by = (event.time + seconds * SECOND if seconds else 0), by


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
        facts = best.facts  # checked when read (payload.check_member_facts): text, and muted_until a number
        return MemberFacts(platform_role=_text(facts.get("platform_role")), card=_text(facts.get("card")),
                           title=_text(facts.get("title")), muted_until=_number(facts.get("muted_until")),
                           updated_at=best.timestamp)


def _text(value: JSON) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: JSON) -> int | None:
    return value if isinstance(value, int) else None


__all__ = [
    "FactsStore", "MemberFacts", "PlatformError", "PlatformSource", "PruneReport", "RebuiltFacts", "RosterEntry",
    "SceneFactsRow", "StoredFacts", "prune", "rebuild_facts",
]

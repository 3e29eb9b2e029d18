"""``zhin facts show`` / ``zhin facts prune`` as library functions (ADR 0041 §6); the CLI only prints them.

A tool, not a data source: each opens a zhin database (read-only for ``show`` and ``prune --dry-run``) and uses
the L2 store of :mod:`zhin_cli.store.facts`.
"""

from __future__ import annotations

import os
from typing import NotRequired, TypedDict

from sqlalchemy import Connection, select, text
from sqlalchemy.exc import SQLAlchemyError

from zhin_cli.core.errors import SessionNotFound, ZhinError
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.timezones import choose_timezone, valid_timezone
from zhin_cli.store import schema
from zhin_cli.store.db import SessionDatabase, db_error, parse_db, writable_engine
from zhin_cli.store.facts import MAX_MEMBERS_PER_SESSION, FactsStore, PruneReport, prune, rebuild_facts, system_clock
from zhin_cli.store.payload import short

FACTS_TABLES = ("ai_session_profiles", "ai_scene_members")


class GlobalMute(TypedDict):
    """A whole-group mute switched ``on`` or off ``at`` (ms epoch) ``by`` an operator (None: not known)."""

    at: int
    on: bool
    by: str | None


# "from" is a keyword: the functional form
RebuiltRoster = TypedDict("RebuiltRoster", {"from": str, "members": "list[JSONObject]", "global_mute": list[GlobalMute]})


class FactsDocument(TypedDict):
    """``zhin facts show --json`` (``version: 1``): ``rebuilt`` only where the roster was rebuilt."""

    version: int
    session_key: str
    timezone: str
    timezone_source: str
    scene: JSONObject | None
    bot_role: str | None
    members: list[JSONObject]
    rebuilt: NotRequired[RebuiltRoster]
    warnings: NotRequired[list[str]]
    nothing: NotRequired[str | None]


def show_facts(db: str, session: str, *, timezone: str | None = None, configured: str | None = None) -> FactsDocument:
    """``zhin facts show``: the stored scene facts, bot role and member rows of a session (epoch id or key),
    read in one read-only snapshot (a bot committing meanwhile is seen wholly or not at all). A database without
    stored member facts (upstream's own: it has no facts tables) gets its roster rebuilt from the rows that tell
    it (``rebuilt``); ``nothing`` says why there is nothing to show. ``timezone`` (the zone its times are shown
    in, and ``timezone_source``) is chosen as trace chooses it: ``timezone`` (--timezone), ``configured``
    (zhin.yaml), the key's stored zone, the zone its data names (upstream's ``[Turn context]``), ``TZ``, UTC."""
    with SessionDatabase(parse_db(db)) as database, database.snapshot() as conn:
        s = schema.agent_sessions
        key = conn.execute(select(s.c.session_key).where(s.c.session_id == session)).scalar()
        if key is None and conn.execute(select(s.c.session_key).where(s.c.session_key == session)).first() is not None:
            key = session
        if key is None:
            raise SessionNotFound(f"no session {short(session)} in {database.ref.label} (try `zhin sessions`)")
        store = FactsStore(database.engine, create=False)
        scene = store.scene(key, conn, label=database.ref.label) if "ai_session_profiles" in database.tables else None
        bot_role = store.bot_role(key, conn) if "ai_session_profiles" in database.tables else None
        members = store.members(key, conn) if "ai_scene_members" in database.tables else {}
        stored = bool(members) or scene is not None or bot_role is not None
        # Rebuilt only where nothing is stored for the key (upstream's own database): an imported epoch with a
        # scene line but no member lines keeps its stored scene facts.
        rebuilt = None if stored else rebuild_facts(conn, key, set(database.tables), database.ref.label)
        zone, source = choose_timezone(timezone, configured, *_session_zone(conn, key, session, set(database.tables)),
                                       os.environ.get("TZ"))
    data: FactsDocument = {
        "version": 1,
        "session_key": key,
        "timezone": zone,
        "timezone_source": source,
        "scene": None if scene is None else {**scene.__dict__, "admins": None if scene.admins is None else list(scene.admins)},
        "bot_role": bot_role,
        "members": [{"user_id": user_id, **facts.__dict__} for user_id, facts in members.items()],
    }
    if rebuilt is not None:
        data["rebuilt"] = {
            "from": "conversation_events and agent_messages",
            "members": [entry.as_dict() for _, entry in sorted(rebuilt.members.items())],
            "global_mute": [{"at": at, "on": on, "by": by} for at, on, by in rebuilt.global_mute],
        }
        data["warnings"] = rebuilt.warnings
    data["nothing"] = nothing_reason(data, database.tables)
    return data


# The newest of a key's (or one session's) turn rows naming upstream's [Turn context] zone: the data's zone.
_SQL_KEY_TURN_CONTEXT = ("SELECT m.payload FROM agent_messages m JOIN agent_sessions s ON s.session_id = m.session_id"
                         " WHERE s.session_key = :key AND (:sid IS NULL OR m.session_id = :sid) AND m.role = 'user'"
                         " AND m.payload LIKE '%[Turn context]%' ORDER BY m.id DESC LIMIT 1")


def _session_zone(conn: Connection, key: str, session: str, tables: set[str]) -> tuple[str | None, str | None]:
    """The zone stored for ``key`` (zhin's profile row: ``session``) or else the one its data names (``data``), as
    a session load reads them (store/database.py); ``session`` given as an epoch id narrows the data to it."""
    from zhin_cli.store.events import turn_context_zone

    if "ai_session_profiles" in tables:
        row = conn.execute(text("SELECT * FROM ai_session_profiles WHERE session_key = :key"), {"key": key}).first()
        stored = row._mapping.get("timezone") if row is not None else None
        if isinstance(stored, str) and valid_timezone(stored):  # a bad one is the load's error (trace names it)
            return stored, "session"
    if "conversation_events" not in tables:  # only upstream's own database names its zone in [Turn context]
        return None, None
    sid = None if session == key else session
    payload = conn.execute(text(_SQL_KEY_TURN_CONTEXT), {"key": key, "sid": sid}).scalar()
    zone = turn_context_zone(payload) if payload is not None else None
    return zone, "data" if zone else None


def nothing_reason(data: FactsDocument, tables: set[str] | list[str]) -> str | None:
    """Why ``facts show`` has nothing to show, in one line; ``None`` when it has something."""
    rebuilt = data.get("rebuilt")
    if data["members"] or data["scene"] or data["bot_role"] or (rebuilt and (rebuilt["members"] or rebuilt["global_mute"])):
        return None
    missing = [t for t in FACTS_TABLES if t not in tables]
    stored = (f"this database has no {' / '.join(missing)} table{'s' if len(missing) > 1 else ''}" if missing
              else "no member or scene facts are stored for it")
    return f"no facts for {data['session_key']}: {stored}, and no message or member event of it names a member"


def prune_database(db: str, *, dry_run: bool, now: int | None = None) -> PruneReport:
    """``zhin facts prune``: apply the bounds; ``dry_run`` opens the database read-only and writes nothing."""
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


def prune_summary(report: PruneReport) -> str:
    """``facts prune``'s one line: what was (or would be) removed and cleaned, each count with its noun."""
    removed, cleaned = ("would remove", "would clean") if report.dry_run else ("removed", "cleaned")
    return (f"{removed} {rows(report.removed)}: {len(report.left):,} left, {len(report.expired):,} not updated for 90 "
            f"days, {len(report.over_cap):,} over {MAX_MEMBERS_PER_SESSION:,} per session; {cleaned} text in "
            f"{rows(len(report.cleaned))}")


def rows(count: int) -> str:
    return f"{count:,} member row{'' if count == 1 else 's'}"

"""``zhin import``: sessions (and, with ``--events``, upstream's member events) written into a zhin database in
upstream's schema, all or nothing."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, CursorResult, select
from sqlalchemy.exc import SQLAlchemyError

import zhin_cli.store.schema as schema
from zhin_cli.core.errors import SessionNotFound, ZhinError
from zhin_cli.core.model import MemberSnapshot, Session
from zhin_cli.store.db.engines import writable_engine
from zhin_cli.store.db.urls import DatabaseRef, db_error, parse_db
from zhin_cli.store.events import EventImport, import_member_events
from zhin_cli.store.jsonl import member_line, message_line, session_header, summary_line


@dataclass
class ImportResult:
    """What ``import_sessions`` wrote: message rows per session id, and the member events (``--events``)."""

    rows: dict[str, int]
    events: EventImport | None


def import_session(session: Session, db: str | Path, *, replace: bool = False) -> int:
    """Write one session into a (new or existing) zhin database; the number of message rows written."""
    return import_sessions([session], db, replace=replace).rows[session.session_id]


def import_sessions(sessions: list[Session], db: str | Path, *, replace: bool = False, events: bool = False) -> ImportResult:
    """Write sessions (and, with ``events``, the member events of ``conversation_events``) into a zhin database —
    an SQLite file or a server URL — in upstream's schema. All or nothing: a new SQLite file is built under a
    temporary name next to it and appears complete or not at all; an existing database gets one transaction
    (on MySQL/MariaDB, where DDL commits by itself, the missing tables are created first, then one transaction
    writes every row). An error, Ctrl-C or SIGTERM part way leaves the database as it was."""
    ref = parse_db(str(db))
    path = ref.sqlite_path
    if path is not None and not path.exists():
        if events and not sessions:
            raise SessionNotFound(f"no such database file: {path}")
        return _import_into_new_file(ref, path, sessions, replace=replace, events=events)
    engine = writable_engine(ref)
    try:
        if engine.dialect.name in ("mysql", "mariadb"):
            schema.metadata.create_all(engine)
        with engine.begin() as conn:
            return _import(conn, ref, sessions, replace=replace, events=events)
    except (SQLAlchemyError, OverflowError) as exc:
        raise _write_error(exc, ref) from None
    finally:
        engine.dispose()


def import_events(db: str) -> EventImport:
    """``zhin import --events --db URL``: one transaction; the database is written only here."""
    result = import_sessions([], db, events=True).events
    assert result is not None
    return result


def _import(conn: Connection, ref: DatabaseRef, sessions: list[Session], *, replace: bool, events: bool) -> ImportResult:
    """Everything ``import_sessions`` writes, on one connection inside one transaction."""
    schema.metadata.create_all(conn)
    rows: dict[str, int] = {}
    for session in sessions:
        exists = conn.execute(select(schema.agent_sessions.c.session_id).where(schema.agent_sessions.c.session_id == session.session_id)).first()
        if exists and not replace:
            raise ZhinError(f"session {session.session_id!r} is already in {ref.label} (use --replace); nothing imported")
        if exists:
            _delete_session(conn, session.session_id)
        _write(conn, session)
        rows[session.session_id] = len(session.messages)
    return ImportResult(rows=rows, events=import_member_events(conn, ref.label) if events else None)


def _delete_session(conn: Connection, session_id: str) -> None:
    """Everything ``zhin import`` wrote of one epoch (``--replace``): its rows, its own lines, the member rows its
    member lines wrote (``ai_scene_members`` is keyed by scene, so rows are found through those lines) and the
    record of member events imported into it (their messages go with its rows, so a later ``--events`` adds them
    again)."""
    key = conn.execute(select(schema.agent_sessions.c.session_key)
                       .where(schema.agent_sessions.c.session_id == session_id)).scalar()
    lines = schema.zhin_lines
    member_ids = {str(json.loads(line).get("user_id")) for (line,) in conn.execute(
        select(lines.c.line).where((lines.c.session_id == session_id) & (lines.c.kind == "member")))}
    members = schema.ai_scene_members
    for user_id in sorted(member_ids):
        conn.execute(members.delete().where((members.c.scene_key == key) & (members.c.user_id == user_id)))
    for table in (schema.agent_messages, schema.agent_summaries, schema.zhin_scene_changes, schema.zhin_lines,
                  schema.zhin_imported_events, schema.agent_sessions):
        conn.execute(table.delete().where(table.c.session_id == session_id))


def _import_into_new_file(ref: DatabaseRef, path: Path, sessions: list[Session], *, replace: bool, events: bool) -> ImportResult:
    """Build the database as a hidden temporary file in the target's folder, then give it its name with a hard
    link (which, unlike a rename, never replaces a file that appeared meanwhile). Until then nothing is at
    ``path``; on any error or interruption the temporary file and its journal are removed."""
    temporary = path.parent / f".{path.name}.{secrets.token_hex(6)}.zhin-import"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask's mode, as sqlite3's
    except OSError as exc:
        raise ZhinError(f"cannot create the database: {exc.strerror}", where=str(path)) from None
    try:
        engine = writable_engine(ref, sqlite_path=temporary)
        try:
            with engine.begin() as conn:
                result = _import(conn, ref, sessions, replace=replace, events=events)
        except (SQLAlchemyError, OverflowError) as exc:
            raise _write_error(exc, ref) from None
        finally:
            engine.dispose()
        try:
            os.link(temporary, path)
        except FileExistsError:
            raise ZhinError("the file appeared while zhin was importing into it; nothing imported, run again",
                            where=str(path)) from None
        except OSError:  # a file system without hard links: a rename (which replaces a file that appeared meanwhile)
            try:
                os.replace(temporary, path)
            except OSError as exc:
                raise ZhinError(f"cannot create the database: {exc.strerror}; nothing imported", where=str(path)) from None
        _sync_folder(path.parent)
        return result
    finally:
        for leftover in (temporary, Path(f"{temporary}-journal")):
            leftover.unlink(missing_ok=True)


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_error(exc: Exception, ref: DatabaseRef) -> ZhinError:
    """A driver's refusal (or Python's sqlite3 refusing an integer past 64 bits) as one line; nothing was written."""
    return ZhinError(f"cannot write database: {db_error(exc)}; nothing imported", where=ref.label)


def _write(conn: Connection, session: Session) -> None:
    new_ids = _write_messages(conn, session)
    times = [m.timestamp for m in session.messages] or [0]
    key = session.session_key or session.session_id.split("#")[0]
    conn.execute(
        schema.agent_sessions.insert().values(
            session_id=session.session_id,
            session_key=key,
            model="",
            status="active",
            active_leaf_message_id=new_ids[session.messages[-1].row_id] if session.messages else None,
            created_at=times[0],
            updated_at=times[-1],
        )
    )
    _write_line(conn, session.session_id, "session", session_header(session))
    for summary in session.summaries:
        anchor = new_ids.get(summary.anchor_row_id, summary.anchor_row_id)
        result = conn.execute(
            schema.agent_summaries.insert().values(
                session_id=session.session_id,
                summary=summary.summary,
                anchor_message_id=anchor,
                created_at=summary.timestamp,
            )
        )
        _write_line(conn, session.session_id, "summary", summary_line(summary), summary_id=inserted_id(result))
    for change in session.scene_changes:
        conn.execute(
            schema.zhin_scene_changes.insert().values(
                session_id=session.session_id,
                timestamp=change.timestamp,
                changes=json.dumps(change.changes, ensure_ascii=False),
            )
        )
    for member in session.members:
        _write_line(conn, session.session_id, "member", member_line(member))
    if _newest_epoch(conn, session.session_id, key, times[0]):  # the key's current facts are its newest epoch's
        _write_profile(conn, session, key, times[0])
        _write_members(conn, session, key)


def _write_messages(conn: Connection, session: Session) -> dict[int, int]:
    """The messages as ``agent_messages`` rows chained by ``parent_id``: the file's row id → the database's.
    Row ids belong to the database, not the file: new rows get new ids, and summaries follow them."""
    parent: int | None = None
    new_ids: dict[int, int] = {}
    for message in session.messages:
        line = dict(message_line(message))
        has_extra, extra = "extra" in line, line.pop("extra", None)
        line.pop("type", None)
        line.pop("id", None)
        result = conn.execute(
            schema.agent_messages.insert().values(
                session_id=session.session_id,
                role=message.role,
                payload=json.dumps(line, ensure_ascii=False, separators=(",", ":")),
                parent_id=parent,
                # "" = no extra (upstream's default); an empty object or null is kept as "{}" / "null"
                extra=json.dumps(extra, ensure_ascii=False) if has_extra else "",
                timestamp=message.timestamp,
            )
        )
        parent = inserted_id(result)
        new_ids[message.row_id] = parent
    return new_ids


def inserted_id(result: CursorResult[Any]) -> int:
    """The row id an INSERT of one row gave."""
    key = result.inserted_primary_key
    assert key is not None  # an INSERT names the key it wrote
    return int(key[0])


def _write_line(conn: Connection, session_id: str, kind: str, line: dict[str, Any], *, summary_id: int | None = None) -> None:
    conn.execute(schema.zhin_lines.insert().values(session_id=session_id, kind=kind, summary_id=summary_id,
                                                   line=json.dumps(line, ensure_ascii=False, separators=(",", ":"))))


def _newest_epoch(conn: Connection, session_id: str, key: str, created_at: int) -> bool:
    """Whether this epoch is its key's newest (the one a load by key picks: created_at, then session id)."""
    t = schema.agent_sessions
    newer = conn.execute(select(t.c.session_id).where(
        (t.c.session_key == key) & (t.c.session_id != session_id)
        & ((t.c.created_at > created_at) | ((t.c.created_at == created_at) & (t.c.session_id > session_id))))).first()
    return newer is None


def _write_profile(conn: Connection, session: Session, key: str, created_at: int) -> None:
    """The epoch's facts as its key's ``ai_session_profiles`` row (upstream's one row per key): the key's current
    facts, so the scene as the epoch's scene changes leave it (a member promoted mid-session is an admin now, as the
    trace of its last turn says) and dated by the last of them."""
    scene = session.scene_at(max((c.timestamp for c in session.scene_changes), default=created_at))
    updated_at = max([created_at, *(c.timestamp for c in session.scene_changes)])
    conn.execute(schema.ai_session_profiles.delete().where(schema.ai_session_profiles.c.session_key == key))
    conn.execute(
        schema.ai_session_profiles.insert().values(
            session_key=key,
            platform=key.split(":")[0],
            scene_id=scene.scene_id,
            scene_type=scene.scene_type,
            title=scene.scene_name,
            admins=None if scene.admins is None else json.dumps(list(scene.admins)),
            muted_all=None if scene.global_mute is None else int(scene.global_mute),
            bot_role=session.bot.platform_role,
            owner_id=scene.owner_id,
            member_count=scene.member_count,
            facts_updated_at=updated_at,
            bot_user_id=session.bot.user_id,
            bot_name=session.bot.name,
            bot_nickname=session.bot.group_nickname,
            timezone=session.timezone,
        )
    )


def _write_members(conn: Connection, session: Session, key: str) -> None:
    """The newest snapshot of each member (``member`` lines) as its ``ai_scene_members`` row."""
    from zhin_cli.core.inputfiles import clean_text  # stored text is bounded the same way as the facts cache's

    newest: dict[str, MemberSnapshot] = {}
    for member in sorted(session.members, key=lambda m: m.timestamp):
        newest[member.user_id] = member
    t = schema.ai_scene_members
    platform = key.split(":")[0]
    for member in newest.values():
        conn.execute(t.delete().where((t.c.platform == platform) & (t.c.scene_key == key) & (t.c.user_id == member.user_id)))
        conn.execute(t.insert().values(
            platform=platform,
            scene_key=key,
            user_id=member.user_id,
            platform_role=clean_text(member.facts.get("platform_role")),
            card=clean_text(member.facts.get("card")),
            title=clean_text(member.facts.get("title")),
            muted_until=member.facts.get("muted_until"),
            updated_at=member.timestamp,
        ))

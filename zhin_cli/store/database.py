"""Sessions in zhin's own database (``.zhin/data.sqlite`` by default), through SQLAlchemy Core.

Reading never writes: SQLite files are opened with ``mode=ro`` and ``PRAGMA query_only``, PostgreSQL connections
with ``default_transaction_read_only``, MySQL/MariaDB sessions with ``SET SESSION TRANSACTION READ ONLY``, so a
trace leaves a production database unchanged. Writing (``zhin import``, ``zhin facts prune``) is a separate,
explicit path through ``writable_engine``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event, func, inspect, literal_column, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from zhin_cli.errors import InputError, SessionNotFound, UsageError, ZhinError, at_row
from zhin_cli.model import BotFacts, MemberSnapshot, Message, SceneChange, SceneFacts, Session, Summary
from zhin_cli.store import schema
from zhin_cli.store.jsonl import message_line
from zhin_cli.store.payload import (
    ToolPairing,
    check_member_facts,
    check_scene_facts,
    check_timestamp,
    check_tool_pairing,
    message_from_payload,
    short,
    valid_timezone,
)

DEFAULT_DB = Path(".zhin") / "data.sqlite"


def discover_database(start: Path) -> Path | None:
    """``.zhin/data.sqlite`` in ``start`` or the nearest parent that has one."""
    for folder in (start, *start.parents):
        candidate = folder / DEFAULT_DB
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class ServerDialect:
    """How one kind of database server is reached: the SQLAlchemy driver and how to keep reads read-only."""

    drivername: str
    read_only_connect_args: dict[str, Any]
    connect_args: dict[str, Any]


POSTGRES = ServerDialect(
    drivername="postgresql+psycopg",
    # Every transaction on a reading connection is READ ONLY: the server itself refuses a write.
    read_only_connect_args={"options": "-c default_transaction_read_only=on"},
    connect_args={"connect_timeout": 10},
)

MYSQL = ServerDialect(
    drivername="mysql+pymysql",
    # Every transaction on a reading connection is READ ONLY: the server refuses a write.
    read_only_connect_args={"init_command": "SET SESSION TRANSACTION READ ONLY"},
    connect_args={"connect_timeout": 10, "charset": "utf8mb4"},
)

# URL scheme → dialect. A new server kind is one entry here (and a pinned driver in pyproject.toml).
SERVER_DIALECTS: dict[str, ServerDialect] = {
    "postgresql": POSTGRES,
    "postgres": POSTGRES,
    "postgresql+psycopg": POSTGRES,
    "mysql": MYSQL,
    "mariadb": MYSQL,
    "mysql+pymysql": MYSQL,
}

@dataclass(frozen=True)
class DatabaseRef:
    url: str
    label: str  # what messages call it (a path, or the URL without password)
    sqlite_path: Path | None
    server: ServerDialect | None = None


def parse_db(value: str) -> DatabaseRef:
    """``sqlite:///path``, a bare file path, or a server URL (``postgresql://``, ``postgres://``, ``mysql://``,
    ``mariadb://``)."""
    if value.startswith("sqlite:///"):
        path = Path(value[len("sqlite:///") :])
        return DatabaseRef(url=value, label=str(path), sqlite_path=path)
    if re.match(r"^[a-z][a-z0-9+]*://", value):
        scheme = value.split("://", 1)[0]
        masked = re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", value)
        server = SERVER_DIALECTS.get(scheme)
        if server is None:
            known = ", ".join(sorted({*SERVER_DIALECTS, "sqlite"}))
            raise UsageError(f"--db {masked}: unknown database URL scheme {scheme!r} (known: {known})")
        try:
            given = make_url(value)
        except ArgumentError:
            raise UsageError(f"--db {masked}: not a database URL") from None
        url = given.set(drivername=server.drivername)
        return DatabaseRef(url=url.render_as_string(hide_password=False), label=given.render_as_string(hide_password=True),
                           sqlite_path=None, server=server)
    path = Path(value)
    return DatabaseRef(url=f"sqlite:///{path}", label=str(path), sqlite_path=path)


def db_error(exc: BaseException) -> str:
    """A driver's error as one line (server messages span several; passwords never appear in them)."""
    original = exc.orig if isinstance(exc, DBAPIError) else exc
    lines = [line.strip() for line in str(original).splitlines() if line.strip()]
    return lines[0] if lines else type(original).__name__


def _read_only_engine(ref: DatabaseRef) -> Engine:
    if ref.sqlite_path is not None:
        path = ref.sqlite_path
        if not path.is_file():
            raise SessionNotFound(f"no such database file: {path}")
        with path.open("rb") as handle:
            header = handle.read(20)
            if header[:16] != b"SQLite format 3\x00":
                raise InputError("not an SQLite database", where=str(path))
        uri = f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true"
        if header[18:20] == b"\x02\x02" and not Path(f"{path}-wal").exists():
            # A WAL-mode database with no writer attached: every committed page is in the file. A read-only
            # connection would still create -wal/-shm files next to it and, unable to checkpoint, leave them
            # behind; `immutable` reads the file as it is and creates nothing.
            uri += "&immutable=1"
        engine = create_engine(uri)

        @event.listens_for(engine, "connect")
        def _query_only(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute("PRAGMA query_only = ON")

        return engine
    assert ref.server is not None
    try:
        return create_engine(
            ref.url,
            connect_args={**ref.server.connect_args, **ref.server.read_only_connect_args},
            execution_options={"postgresql_readonly": True},
            poolclass=NullPool,
        )
    except (SQLAlchemyError, ImportError) as exc:
        raise ZhinError(f"cannot open database: {db_error(exc)}", where=ref.label) from None


def writable_engine(ref: DatabaseRef) -> Engine:
    """For the commands that write when asked (``zhin import``, ``zhin facts prune``) — nothing else."""
    if ref.sqlite_path is not None:
        try:
            ref.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ZhinError(f"cannot create folder: {exc.strerror}", where=str(ref.sqlite_path.parent)) from None
        return create_engine(f"sqlite:///{ref.sqlite_path}", poolclass=NullPool)
    assert ref.server is not None
    try:
        return create_engine(ref.url, connect_args=dict(ref.server.connect_args), poolclass=NullPool)
    except (SQLAlchemyError, ImportError) as exc:
        raise ZhinError(f"cannot open database: {db_error(exc)}", where=ref.label) from None


class SessionDatabase:
    """Read-only access to the sessions in one database."""

    def __init__(self, ref: DatabaseRef) -> None:
        self.ref = ref
        self.engine = _read_only_engine(ref)
        try:
            self.tables = set(inspect(self.engine).get_table_names())
        except DBAPIError as exc:
            raise InputError(f"cannot read database: {db_error(exc)}", where=ref.label) from None
        missing = [t for t in schema.REQUIRED_TABLES if t not in self.tables]
        if missing:
            raise InputError(f"not a zhin database: missing table {', '.join(missing)}", where=ref.label)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> SessionDatabase:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def list_sessions(self) -> list[dict[str, Any]]:
        """Every epoch: id, key, status, message rows, and last activity (ms; the newest message or update)."""
        s = schema.agent_sessions
        m = schema.agent_messages
        counts = (
            select(m.c.session_id, func.count().label("messages"), func.max(m.c.timestamp).label("last_message"))
            .group_by(m.c.session_id)
            .subquery()
        )
        query = (
            select(s.c.session_id, s.c.session_key, s.c.status, s.c.updated_at, counts.c.messages, counts.c.last_message)
            .select_from(s.outerjoin(counts, counts.c.session_id == s.c.session_id))
            .order_by(s.c.session_key, s.c.created_at, s.c.session_id)
        )
        try:
            with self._connect() as conn:
                rows = conn.execute(query).all()
        except DBAPIError as exc:
            raise InputError(f"cannot read database: {db_error(exc)}", where=self.ref.label) from None
        listed = []
        for row in rows:
            times = [t for t in (row.updated_at, row.last_message) if isinstance(t, int)]
            listed.append({
                "session_id": row.session_id,
                "session_key": row.session_key,
                "status": row.status,
                "updated_at": row.updated_at,
                "messages": int(row.messages or 0),
                "last_activity": max(times) if times else None,
            })
        return listed

    def _connect(self) -> Any:
        try:
            return self.engine.connect()
        except DBAPIError as exc:
            raise InputError(f"cannot read database: {db_error(exc)}", where=self.ref.label) from None

    def load(self, ref: str) -> Session:
        """A session by epoch id (``key#time-seq``) or by session key (its newest epoch)."""
        try:
            with self._connect() as conn:
                return self._load(conn, ref)
        except DBAPIError as exc:
            raise InputError(f"cannot read database: {db_error(exc)}", where=self.ref.label) from None

    def _load(self, conn: Any, ref: str) -> Session:
        s = schema.agent_sessions
        row = conn.execute(select(s).where(s.c.session_id == ref)).first()
        if row is None:
            row = conn.execute(
                select(s).where(s.c.session_key == ref).order_by(s.c.created_at.desc(), s.c.session_id.desc())
            ).first()
        if row is None:
            raise SessionNotFound(f"no session {ref!r} in {self.ref.label} (try `zhin sessions`)")
        info = dict(row._mapping)
        session_id = info["session_id"]
        session_key = info.get("session_key") or session_id.split("#")[0]
        messages = self._messages(conn, session_id, info.get("active_leaf_message_id"))
        session = Session(
            session_id=session_id,
            session_key=session_key,
            timezone=None,
            bot=BotFacts(),
            scene=SceneFacts(),
            messages=messages,
            source=self.ref.label,
        )
        self._profile(conn, session)
        session.summaries = self._summaries(conn, session_id)
        session.scene_changes = self._scene_changes(conn, session_id)
        session.members = self._members(conn, session_key)
        return session

    def _messages(self, conn: Any, session_id: str, leaf: int | None) -> list[Message]:
        m = schema.agent_messages
        columns = [m.c.id, m.c.role, m.c.payload, m.c.timestamp]
        cols = {c["name"] for c in inspect(conn).get_columns("agent_messages")}
        has_parent = "parent_id" in cols
        if has_parent:
            columns.append(m.c.parent_id)
        if "extra" in cols:
            columns.append(m.c.extra)
        from zhin_cli.store import max_messages  # the same limit as for JSONL files

        limit = max_messages()
        count = conn.execute(select(func.count()).select_from(m).where(m.c.session_id == session_id)).scalar_one()
        if count > limit:
            raise InputError(
                f"session too large: {count:,} messages (ZHIN_MAX_MESSAGES is {limit:,}); raise the limit",
                where=f"{self.ref.label}: agent_messages",
            )
        rows = conn.execute(select(*columns).where(m.c.session_id == session_id).order_by(m.c.id)).all()
        by_id = {row.id: row for row in rows}
        if leaf is not None and has_parent:
            chain: list[Any] = []
            current: int | None = leaf
            seen: set[int] = set()
            while current is not None:
                if current in seen:
                    raise InputError("parent_id chain has a cycle", where=at_row("agent_messages", current, self.ref.label))
                seen.add(current)
                if current not in by_id:
                    raise InputError(
                        f"active branch names a missing row (parent of row {chain[-1].id if chain else leaf})",
                        where=at_row("agent_messages", current, self.ref.label),
                    )
                chain.append(by_id[current])
                current = by_id[current].parent_id
            rows = list(reversed(chain))
        messages: list[Message] = []
        tools = ToolPairing()
        for row in rows:
            where = at_row("agent_messages", row.id, self.ref.label)
            try:
                payload = json.loads(row.payload)
            except (ValueError, TypeError):  # not JSON, not UTF-8 (a BLOB), NULL
                raise InputError("payload is not JSON", where=where) from None
            extra: dict[str, Any] = {}
            raw_extra = getattr(row, "extra", None)
            if raw_extra:
                try:
                    parsed = json.loads(raw_extra)
                except (ValueError, TypeError):
                    raise InputError("extra is not JSON", where=where) from None
                extra = parsed if isinstance(parsed, dict) else {}
            message = message_from_payload(payload, row_id=row.id, where=where, extra=extra)
            raw = {"type": "message", **payload, "id": row.id}
            if extra:
                raw["extra"] = extra
            message.raw = raw
            check_tool_pairing(message, tools, where)
            messages.append(message)
        return messages

    def _profile(self, conn: Any, session: Session) -> None:
        parts = (session.session_key or "").split(":")
        # session key = <platform>:<endpoint (bot account)>:<kind>:<scene id>
        scene: dict[str, Any] = {}
        if len(parts) >= 4:
            scene = {"scene_type": parts[2], "scene_id": parts[3]}
            session.bot = BotFacts(user_id=parts[1])
        if "ai_session_profiles" in self.tables:
            p = schema.ai_session_profiles
            cols = {c["name"] for c in inspect(conn).get_columns("ai_session_profiles")}
            row = conn.execute(select(*(p.c[c] for c in p.c.keys() if c in cols)).where(p.c.session_key == session.session_key)).first()
            if row is not None:
                data = dict(row._mapping)
                where = at_row("ai_session_profiles", session.session_key, self.ref.label)
                admins = data.get("admins")
                if admins == "":
                    admins = []
                elif admins:
                    try:
                        admins = json.loads(admins)
                    except (ValueError, TypeError):
                        raise InputError("admins is not a JSON array", where=where) from None
                muted_all = data.get("muted_all")
                if muted_all is not None and (not isinstance(muted_all, int) or isinstance(muted_all, bool)):
                    raise InputError(f"muted_all must be 0 or 1, got {short(muted_all)}", where=where)
                for key, value in (
                    ("scene_id", data.get("scene_id")),
                    ("scene_type", data.get("scene_type")),
                    ("scene_name", data.get("title")),
                    ("owner_id", data.get("owner_id")),
                    ("admins", admins),
                    ("member_count", data.get("member_count")),
                    ("global_mute", None if data.get("muted_all") is None else bool(data["muted_all"])),
                ):
                    if value is not None:
                        scene[key] = value
                check_scene_facts(scene, where)
                timezone = data.get("timezone")
                if timezone and (not isinstance(timezone, str) or not valid_timezone(timezone)):
                    raise InputError(f"unknown time zone {short(timezone)}", where=where)
                session.bot = BotFacts(
                    user_id=data.get("bot_user_id") or session.bot.user_id,
                    name=data.get("bot_name"),
                    group_nickname=data.get("bot_nickname"),
                    platform_role=data.get("bot_role"),
                )
                session.timezone = timezone
        session.scene = SceneFacts.from_mapping(scene)

    def _summaries(self, conn: Any, session_id: str) -> list[Summary]:
        if "agent_summaries" not in self.tables:
            return []
        t = schema.agent_summaries
        # upstream's agent_summaries has no id column: SQLite's rowid names the row
        summary_columns = {c["name"] for c in inspect(conn).get_columns("agent_summaries")}
        row_id: Any = (t.c.id if "id" in summary_columns
                       else literal_column("rowid") if self.engine.dialect.name == "sqlite" else literal_column("NULL"))
        rows = conn.execute(
            select(t.c.summary, t.c.anchor_message_id, t.c.created_at, row_id.label("row_id"))
            .where(t.c.session_id == session_id)
            .order_by(t.c.created_at)
        ).all()
        summaries = []
        for number, r in enumerate(rows, start=1):
            where = at_row("agent_summaries", r.row_id if r.row_id is not None else f"#{number} of {session_id}", self.ref.label)
            if not isinstance(r.summary, str):
                raise InputError(f"summary is not text, got {short(r.summary)}", where=where)
            anchor = r.anchor_message_id or 0
            if not isinstance(anchor, int) or isinstance(anchor, bool):
                raise InputError(f"anchor_message_id must be a message row id, got {short(anchor)}", where=where)
            created = check_timestamp(r.created_at or 0, "created_at", where)
            summaries.append(Summary(timestamp=created, summary=r.summary, anchor_row_id=anchor))
        return summaries

    def _scene_changes(self, conn: Any, session_id: str) -> list[SceneChange]:
        if "zhin_scene_changes" not in self.tables:
            return []
        t = schema.zhin_scene_changes
        changes = []
        for r in conn.execute(select(t).where(t.c.session_id == session_id).order_by(t.c.timestamp, t.c.id)).all():
            where = at_row("zhin_scene_changes", r.id, self.ref.label)
            try:
                data = json.loads(r.changes)
            except (ValueError, TypeError):
                raise InputError("changes is not JSON", where=where) from None
            if not isinstance(data, dict):
                raise InputError(f"changes must be a JSON object of scene facts, got {short(data)}", where=where)
            check_timestamp(r.timestamp, "timestamp", where)
            check_scene_facts(data, where)
            changes.append(SceneChange(timestamp=r.timestamp, changes=data, raw={"type": "scene", "timestamp": r.timestamp, **data}))
        return changes

    def _members(self, conn: Any, session_key: str | None) -> list[MemberSnapshot]:
        if "ai_scene_members" not in self.tables or not session_key:
            return []
        t = schema.ai_scene_members
        rows = conn.execute(select(t).where(t.c.scene_key == session_key).order_by(t.c.updated_at, t.c.user_id)).all()
        members = []
        for r in rows:
            where = at_row("ai_scene_members", r.user_id, self.ref.label)
            facts = {k: v for k, v in r._mapping.items() if k not in ("platform", "scene_key", "user_id", "updated_at") and v is not None}
            check_member_facts(facts, where)
            updated = check_timestamp(r.updated_at or 0, "updated_at", where)
            members.append(MemberSnapshot(timestamp=updated, user_id=str(r.user_id), facts=facts))
        return members


def import_session(session: Session, db: str | Path, *, replace: bool = False) -> int:
    """Write a session into a (new or existing) zhin database — an SQLite file or a server URL — in upstream's
    schema. Returns the number of message rows written."""
    ref = parse_db(str(db))
    engine = writable_engine(ref)
    try:
        schema.metadata.create_all(engine)
        with engine.begin() as conn:
            exists = conn.execute(select(schema.agent_sessions.c.session_id).where(schema.agent_sessions.c.session_id == session.session_id)).first()
            if exists and not replace:
                raise ZhinError(f"session {session.session_id!r} is already in {ref.label} (use --replace)")
            if exists:
                for table in (schema.agent_messages, schema.agent_summaries, schema.zhin_scene_changes):
                    conn.execute(table.delete().where(table.c.session_id == session.session_id))
                conn.execute(schema.agent_sessions.delete().where(schema.agent_sessions.c.session_id == session.session_id))
            _write(conn, session)
    except SQLAlchemyError as exc:
        raise ZhinError(f"cannot write database: {db_error(exc)}", where=ref.label) from None
    finally:
        engine.dispose()
    return len(session.messages)


def _write(conn: Any, session: Session) -> None:
    # Row ids belong to the database, not the file: new rows get new ids, and summaries follow them.
    parent: int | None = None
    new_ids: dict[int, int] = {}
    for message in session.messages:
        line = dict(message_line(message))
        extra = line.pop("extra", None)
        line.pop("type", None)
        line.pop("id", None)
        result = conn.execute(
            schema.agent_messages.insert().values(
                session_id=session.session_id,
                role=message.role,
                payload=json.dumps(line, ensure_ascii=False, separators=(",", ":")),
                parent_id=parent,
                extra=json.dumps(extra, ensure_ascii=False) if extra else "",
                timestamp=message.timestamp,
            )
        )
        parent = int(result.inserted_primary_key[0])
        new_ids[message.row_id] = parent
    times = [m.timestamp for m in session.messages] or [0]
    conn.execute(
        schema.agent_sessions.insert().values(
            session_id=session.session_id,
            session_key=session.session_key or session.session_id.split("#")[0],
            model="",
            status="active",
            active_leaf_message_id=parent,
            created_at=times[0],
            updated_at=times[-1],
        )
    )
    for summary in session.summaries:
        conn.execute(
            schema.agent_summaries.insert().values(
                session_id=session.session_id,
                summary=summary.summary,
                anchor_message_id=new_ids.get(summary.anchor_row_id, summary.anchor_row_id),
                created_at=summary.timestamp,
            )
        )
    for change in session.scene_changes:
        conn.execute(
            schema.zhin_scene_changes.insert().values(
                session_id=session.session_id,
                timestamp=change.timestamp,
                changes=json.dumps(change.changes, ensure_ascii=False),
            )
        )
    key = session.session_key or session.session_id
    scene = session.scene
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
            facts_updated_at=times[0],
            bot_user_id=session.bot.user_id,
            bot_name=session.bot.name,
            bot_nickname=session.bot.group_nickname,
            timezone=session.timezone,
        )
    )
    _write_members(conn, session, key)


def _write_members(conn: Any, session: Session, key: str) -> None:
    """The newest snapshot of each member (``member`` lines) as its ``ai_scene_members`` row."""
    from zhin_cli.facts import clean_text  # stored text is bounded the same way as the facts cache's

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

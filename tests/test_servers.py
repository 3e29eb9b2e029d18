"""zhin against real database servers (issue 7 item 1): the same tables, the same requests, read only.

Every case runs once per server in ``SERVERS`` (test ids ``test_…[postgresql]`` and ``test_…[mariadb]``). The
servers come from ``scripts/ci_postgres.sh`` and ``scripts/ci_mariadb.sh`` (``.ci/run`` starts them and exports
``ZHIN_TEST_POSTGRES_URL`` and ``ZHIN_TEST_MYSQL_URL``). Each test gets a database of its own. Without a
server's URL its cases fail under CI and are skipped, visibly, elsewhere — never counted as passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from conftest import FIXTURES, clean_env
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError

from zhin_cli.store.db import SessionDatabase, parse_db, writable_engine

GROUP = "icqq:8596238:group:1048877509"
GROUP_EPOCH = f"{GROUP}#1761699600000-1"


def _connect_postgres(url: URL) -> Any:
    return psycopg.connect(host=url.host, port=url.port or 5432, user=url.username, password=url.password,
                           dbname=url.database, autocommit=True, connect_timeout=10)


def _connect_mariadb(url: URL) -> Any:
    return pymysql.connect(host=url.host, port=url.port or 3306, user=url.username, password=url.password,
                           database=url.database, autocommit=True, connect_timeout=10, charset="utf8mb4")


@dataclass(frozen=True)
class Server:
    """What differs between the servers; every test below is written once against these fields."""

    name: str  # the test id
    url_variable: str
    start_script: str
    connect: Callable[[URL], Any]  # an autocommit DB-API connection with ``%s`` placeholders, through the server's own driver
    quote: Callable[[str], str]  # an identifier for raw SQL
    create_database: str  # ``{name}`` is the quoted database name
    drop_database: str
    list_tables: str
    read_only_probe: str  # a query whose scalar is ``read_only_value`` on a read-only connection
    read_only_value: object
    read_only_refusal: str  # regex of the driver error when a read-only connection writes
    wrong_password_message: str
    scheme_alias: tuple[str, str]  # (the URL's scheme prefix, an alias zhin must accept)
    event_conversation_key: str  # conversation_events.conversation_key as upstream stores it on this server

    def url(self) -> str:
        url = os.environ.get(self.url_variable, "")
        if not url:
            message = f"{self.url_variable} is not set: start a server with `bash {self.start_script}` and export its URL"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
        return url


POSTGRESQL = Server(
    name="postgresql",
    url_variable="ZHIN_TEST_POSTGRES_URL",
    start_script="scripts/ci_postgres.sh",
    connect=_connect_postgres,
    quote=lambda identifier: f'"{identifier}"',
    create_database="CREATE DATABASE {name}",
    drop_database="DROP DATABASE IF EXISTS {name} WITH (FORCE)",
    list_tables="SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
    read_only_probe="SHOW transaction_read_only",
    read_only_value="on",
    read_only_refusal="read-only transaction",
    wrong_password_message="password authentication failed",
    scheme_alias=("postgresql://", "postgres://"),
    event_conversation_key=GROUP,  # PostgreSQL text cannot hold NUL: the session-key form of conversation_key
)

MARIADB = Server(
    name="mariadb",
    url_variable="ZHIN_TEST_MYSQL_URL",
    start_script="scripts/ci_mariadb.sh",
    connect=_connect_mariadb,
    quote=lambda identifier: f"`{identifier}`",
    create_database="CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    drop_database="DROP DATABASE IF EXISTS {name}",
    list_tables="SHOW TABLES",
    read_only_probe="SELECT @@session.tx_read_only",
    read_only_value=1,
    read_only_refusal="READ ONLY transaction",
    wrong_password_message="Access denied",
    scheme_alias=("mysql://", "mariadb://"),
    event_conversation_key="\0".join(["icqq", "8596238", "group", "1048877509", "", "", ""]),  # upstream's NUL-joined form
)

SERVERS = {server.name: server for server in (POSTGRESQL, MARIADB)}


class Admin:
    """An autocommit connection whose ``execute(sql, params)`` returns the cursor, the same for every driver."""

    def __init__(self, server: Server, url: str) -> None:
        self.conn = server.connect(make_url(url))

    def execute(self, sql: str, params: tuple[object, ...] | None = None) -> Any:
        cursor = self.conn.cursor()
        cursor.execute(sql, params)
        return cursor

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.conn.close()


@pytest.fixture(params=list(SERVERS))
def server(request: pytest.FixtureRequest) -> Server:
    return SERVERS[request.param]


@pytest.fixture
def db_url(server: Server) -> Iterator[str]:
    """A fresh, empty database on the test server; dropped afterwards."""
    base = server.url()
    name = f"zhin_{uuid.uuid4().hex[:16]}"
    with Admin(server, base) as admin:
        admin.execute(server.create_database.format(name=server.quote(name)))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with Admin(server, base) as admin:
            admin.execute(server.drop_database.format(name=server.quote(name)))


def zhin(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zhin_cli", *map(str, args)], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, encoding="utf-8", timeout=300, stdin=subprocess.DEVNULL)


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stderr
    return result


def snapshot(server: Server, url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table, in a fixed order: equal snapshots = an unchanged database."""
    with Admin(server, url) as conn:
        tables = [r[0] for r in conn.execute(server.list_tables).fetchall()]
        return {t: sorted(conn.execute(f"SELECT * FROM {server.quote(t)}").fetchall(), key=repr) for t in tables}


def requests_of(trace_json: str) -> str:
    data = json.loads(trace_json)
    assert data["requests"], "no requests: the comparison below would prove nothing"
    return json.dumps(data["requests"], ensure_ascii=False, sort_keys=False)


def test_the_same_session_in_sqlite_and_the_server_traces_to_byte_identical_requests(db_url: str, tmp_path: Path) -> None:
    fixture = FIXTURES / "group-busy.jsonl"
    sqlite = tmp_path / "data.sqlite"
    ok(zhin("import", fixture, "--db", sqlite, cwd=tmp_path))
    ok(zhin("import", fixture, "--db", db_url, cwd=tmp_path))
    from_sqlite = ok(zhin("trace", GROUP, "--all", "--json", "--db", sqlite, cwd=tmp_path)).stdout
    from_server = ok(zhin("trace", GROUP, "--all", "--json", "--db", db_url, cwd=tmp_path)).stdout
    assert len(json.loads(from_sqlite)["requests"]) == 16
    assert requests_of(from_sqlite).encode() == requests_of(from_server).encode()
    # the human view with the request bodies: identical after the header line that names the database
    shown_sqlite = ok(zhin("trace", GROUP, "--turn", 9, "--show-request", "--db", sqlite, cwd=tmp_path)).stdout
    shown_server = ok(zhin("trace", GROUP, "--turn", 9, "--show-request", "--db", db_url, cwd=tmp_path)).stdout
    assert shown_sqlite.split("\n", 1)[1].encode() == shown_server.split("\n", 1)[1].encode()
    assert "***" in shown_server.split("\n", 1)[0] and "zhin_test:zhin_test@" not in shown_server
    # and the export (the interchange format) too
    assert ok(zhin("export", GROUP, "--db", sqlite, cwd=tmp_path)).stdout == ok(zhin("export", GROUP, "--db", db_url, cwd=tmp_path)).stdout


def test_negative_control_a_changed_row_in_the_server_changes_the_requests(server: Server, db_url: str, tmp_path: Path) -> None:
    fixture = FIXTURES / "group-busy.jsonl"
    sqlite = tmp_path / "data.sqlite"
    ok(zhin("import", fixture, "--db", sqlite, cwd=tmp_path))
    ok(zhin("import", fixture, "--db", db_url, cwd=tmp_path))
    with Admin(server, db_url) as conn:
        conn.execute("UPDATE agent_messages SET payload = replace(payload, '明明', '明明!') WHERE id = 5")
    from_sqlite = ok(zhin("trace", GROUP, "--all", "--json", "--db", sqlite, cwd=tmp_path)).stdout
    from_server = ok(zhin("trace", GROUP, "--all", "--json", "--db", db_url, cwd=tmp_path)).stdout
    assert requests_of(from_sqlite) != requests_of(from_server)


def test_sessions_lists_key_epoch_messages_and_last_activity(db_url: str, tmp_path: Path) -> None:
    for name in ("group-busy.jsonl", "private-chat.jsonl"):
        ok(zhin("import", FIXTURES / name, "--db", db_url, cwd=tmp_path))
    listed = json.loads(ok(zhin("sessions", "--json", "--db", db_url, cwd=tmp_path)).stdout)["sessions"]
    group = next(s for s in listed if s["session_key"] == GROUP)
    assert group["session_id"] == GROUP_EPOCH
    assert group["messages"] == 143
    last_line = json.loads((FIXTURES / "group-busy.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert group["last_activity"] == last_line["timestamp"]
    table = ok(zhin("sessions", "--db", db_url, cwd=tmp_path)).stdout
    assert GROUP_EPOCH in table and "143" in table and "2025-10-30 07:40:10" in table


def test_every_read_command_leaves_the_server_unchanged(server: Server, db_url: str, tmp_path: Path) -> None:
    for path in sorted(FIXTURES.glob("*.jsonl")):
        ok(zhin("import", path, "--db", db_url, cwd=tmp_path))
    before = snapshot(server, db_url)
    assert before["agent_messages"], "empty database: nothing to compare"
    for command in (["trace", GROUP, "--all", "--json"], ["export", GROUP], ["sessions", "--json"],
                    ["prefix-diff", "--all", "--json"], ["facts", "show", GROUP, "--json"], ["facts", "prune", "--dry-run"]):
        result = zhin(*command, "--db", db_url, cwd=tmp_path)
        assert result.returncode in (0, 1), (command, result.stderr)
    assert snapshot(server, db_url) == before


def test_reading_connections_are_read_only_on_the_server(server: Server, db_url: str, tmp_path: Path) -> None:
    ok(zhin("import", FIXTURES / "private-chat.jsonl", "--db", db_url, cwd=tmp_path))
    insert = text("INSERT INTO agent_sessions (session_id, session_key) VALUES ('x', 'y')")
    with SessionDatabase(parse_db(db_url)) as database, database.engine.connect() as conn:
        assert conn.execute(text(server.read_only_probe)).scalar() == server.read_only_value
        with pytest.raises(DBAPIError, match=server.read_only_refusal):
            conn.execute(insert)
    # negative control: the same statement through the writing path succeeds, so the refusal above is read-only mode
    engine = writable_engine(parse_db(db_url))
    try:
        with engine.begin() as conn:
            conn.execute(insert)
    finally:
        engine.dispose()


def test_the_server_scheme_alias_and_unsupported_databases(server: Server, db_url: str, tmp_path: Path) -> None:
    ok(zhin("import", FIXTURES / "private-chat.jsonl", "--db", db_url, cwd=tmp_path))
    alias = db_url.replace(*server.scheme_alias, 1)
    assert alias != db_url
    assert json.loads(ok(zhin("sessions", "--json", "--db", alias, cwd=tmp_path)).stdout)["sessions"]
    unknown = zhin("sessions", "--db", "oracle://bot:secret@127.0.0.1/zhin", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1 and "unknown database URL scheme 'oracle'" in unknown.stderr
    assert "secret" not in unknown.stderr


def test_a_wrong_password_is_one_line_without_the_password(server: Server, db_url: str, tmp_path: Path) -> None:
    wrong = make_url(db_url).set(password="not-the-password-7f3a").render_as_string(hide_password=False)
    result = zhin("trace", GROUP, "--db", wrong, cwd=tmp_path)
    assert result.returncode == 3
    assert result.stderr.startswith("zhin: error: ") and result.stderr.count("\n") == 1
    assert server.wrong_password_message in result.stderr and "not-the-password-7f3a" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_session_in_the_server_is_not_found(db_url: str, tmp_path: Path) -> None:
    ok(zhin("import", FIXTURES / "private-chat.jsonl", "--db", db_url, cwd=tmp_path))
    result = zhin("trace", "icqq:1:group:nope", "--db", db_url, cwd=tmp_path)
    assert result.returncode == 3 and "no session" in result.stderr and result.stderr.count("\n") == 1


def _event(server: Server, conn: Admin, event_id: str, kind: str, user: str, operator: str, at: int) -> None:
    conn.execute("INSERT INTO conversation_events (event_id, conversation_key, message_key, event_json, time) VALUES (%s,%s,%s,%s,%s)",
                 (event_id, server.event_conversation_key, "", json.dumps({"type": kind, "user_id": user, "operator_id": operator}), at))


def test_import_events_into_the_server_is_idempotent(server: Server, db_url: str, tmp_path: Path) -> None:
    ok(zhin("import", FIXTURES / "group-busy.jsonl", "--db", db_url, cwd=tmp_path))
    last = 1761810010000
    with Admin(server, db_url) as conn:
        _event(server, conn, "e1", "member_increase", "10011", "10011", last + 60_000)
        _event(server, conn, "e2", "member_decrease", "10004", "10001", last + 120_000)
    first = ok(zhin("import", "--events", "--db", db_url, cwd=tmp_path))
    assert "imported 2 member events" in first.stderr
    again = ok(zhin("import", "--events", "--db", db_url, cwd=tmp_path))
    assert "imported 0 member events" in again.stderr and "2 already there" in again.stderr
    exported = ok(zhin("export", GROUP, "--db", db_url, cwd=tmp_path)).stdout.splitlines()
    events = [json.loads(line) for line in exported if '"role":"event"' in line]
    assert [e["name"] for e in events[-2:]] == ["10011 join 1048877509 on 15:41 by self", "10004 leave 1048877509 on 15:42 by 10001"]
    assert len(exported) == 147 + 2


def test_facts_prune_on_the_server_dry_run_then_for_real(server: Server, db_url: str, tmp_path: Path) -> None:
    ok(zhin("import", FIXTURES / "group-busy.jsonl", "--db", db_url, cwd=tmp_path))
    now = int(time.time() * 1000)
    with Admin(server, db_url) as conn:
        for user, updated in (("fresh", now), ("ancient", now - 91 * 86_400_000)):
            conn.execute("INSERT INTO ai_scene_members (platform, scene_key, user_id, card, updated_at) VALUES ('icqq', %s, %s, %s, %s)",
                         (GROUP, user, "卡\x07片", updated))
    before = snapshot(server, db_url)
    dry = json.loads(ok(zhin("facts", "prune", "--dry-run", "--json", "--db", db_url, cwd=tmp_path)).stdout)
    assert [r["user_id"] for r in dry["expired"]] == ["ancient"] and [r["user_id"] for r in dry["cleaned"]] == ["fresh"]
    assert snapshot(server, db_url) == before
    real = json.loads(ok(zhin("facts", "prune", "--json", "--db", db_url, cwd=tmp_path)).stdout)
    assert real["removed"] == 1
    shown = json.loads(ok(zhin("facts", "show", GROUP, "--json", "--db", db_url, cwd=tmp_path)).stdout)
    assert [(m["user_id"], m["card"]) for m in shown["members"]] == [("fresh", "卡片")]
    assert shown["scene"]["member_count"] == 43 and shown["bot_role"] == "admin"  # the last scene line's (issue 31, as tests/test_facts.py)


# --- one snapshot per read (issue 14 §1): a bot committing between two of zhin's statements is never half seen ---

PRIVATE_EPOCH = "icqq:8596238:private:10002#1761800000000-1"
PRIVATE_KEY = "icqq:8596238:private:10002"


def _bot_write(server: Server, url: str, i: int) -> None:
    """One bot write through the server's own driver and its own session: a message on the active branch, the
    session's leaf, the profile's title and a summary, in one transaction."""
    with Admin(server, url) as conn:
        conn.execute("START TRANSACTION" if server is MARIADB else "BEGIN")
        leaf = conn.execute("SELECT active_leaf_message_id FROM agent_sessions WHERE session_id = %s", (PRIVATE_EPOCH,)).fetchone()[0]
        at = 1_761_900_000_000 + i * 1000
        payload = json.dumps({"role": "user", "content": [{"type": "text", "text": f"live write {i}"}], "timestamp": at,
                              "actor": {"subjectId": "10002", "displayName": "小明", "roles": [], "scope": "private"}})
        insert = ("INSERT INTO agent_messages (session_id, role, payload, parent_id, extra, timestamp) VALUES (%s,%s,%s,%s,'',%s)"
                  + ("" if server is MARIADB else " RETURNING id"))
        cursor = conn.execute(insert, (PRIVATE_EPOCH, "user", payload, leaf, at))
        row = cursor.lastrowid if server is MARIADB else cursor.fetchone()[0]
        conn.execute("UPDATE agent_sessions SET active_leaf_message_id = %s, updated_at = %s WHERE session_id = %s", (row, at, PRIVATE_EPOCH))
        conn.execute("UPDATE ai_session_profiles SET title = %s WHERE session_key = %s", (f"title {i}", PRIVATE_KEY))
        conn.execute("INSERT INTO agent_summaries (session_id, summary, anchor_message_id, created_at) VALUES (%s,%s,%s,%s)",
                     (PRIVATE_EPOCH, f"summary {i}", row, at))
        conn.execute("COMMIT")


def _load(url: str) -> str:
    with SessionDatabase(parse_db(url)) as database:
        session = database.load(PRIVATE_KEY)
    return repr((session.scene, [m.raw for m in session.messages], session.summaries))


def test_a_bot_committing_between_any_two_statements_of_a_load_is_never_half_seen(server: Server, db_url: str,
                                                                                    tmp_path: Path) -> None:
    from sqlalchemy import Engine, event

    ok(zhin("import", FIXTURES / "private-chat.jsonl", "--db", db_url, cwd=tmp_path))
    point, points, wrong = 0, 1, []
    while point < points:
        before = _load(db_url)
        statements: list[str] = []

        def hook(*_args: Any, at: int = point, statements: list[str] = statements) -> None:
            if len(statements) == at:
                _bot_write(server, db_url, at + 1)
            statements.append("")

        event.listen(Engine, "before_cursor_execute", hook)
        try:
            result = _load(db_url)
        finally:
            event.remove(Engine, "before_cursor_execute", hook)
        after = _load(db_url)
        assert after != before and f"live write {point + 1}" in after  # the bot did commit
        if result not in (before, after):
            wrong.append(point)
        points = len(statements)
        point += 1
    assert points >= 6, "too few statements to interleave"
    assert not wrong, f"{len(wrong)} of {points} interleavings read a mix of two snapshots (bot before statements {wrong})"


def test_one_read_snapshot_holds_while_a_bot_commits_and_a_new_one_sees_it(server: Server, db_url: str,
                                                                           tmp_path: Path) -> None:
    from sqlalchemy import func, select

    from zhin_cli.store import schema

    ok(zhin("import", FIXTURES / "private-chat.jsonl", "--db", db_url, cwd=tmp_path))
    count = select(func.count()).select_from(schema.agent_messages)
    with SessionDatabase(parse_db(db_url)) as database:
        with database.snapshot() as conn:
            first = conn.execute(count).scalar()
            _bot_write(server, db_url, 1)
            assert conn.execute(count).scalar() == first  # the same snapshot
        with database.snapshot() as conn:  # negative control: a new read sees the commit
            assert conn.execute(count).scalar() == first + 1

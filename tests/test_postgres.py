"""zhin against a real PostgreSQL server (issue 7 item 1): the same tables, the same requests, read only.

The server comes from ``scripts/ci_postgres.sh`` (``.ci/run`` starts it and exports ``ZHIN_TEST_POSTGRES_URL``).
Each test gets a database of its own. Without the URL these tests fail under CI and are skipped, visibly,
elsewhere — never counted as passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import FIXTURES, clean_env
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from zhin_cli.store.database import SessionDatabase, parse_db, writable_engine

GROUP = "icqq:8596238:group:1048877509"
GROUP_EPOCH = f"{GROUP}#1761699600000-1"


def server_url() -> str:
    url = os.environ.get("ZHIN_TEST_POSTGRES_URL", "")
    if not url:
        message = "ZHIN_TEST_POSTGRES_URL is not set: start a server with `bash scripts/ci_postgres.sh` and export its URL"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return url


def _admin(url: str) -> psycopg.Connection:
    parsed = make_url(url)
    return psycopg.connect(host=parsed.host, port=parsed.port or 5432, user=parsed.username, password=parsed.password,
                           dbname=parsed.database, autocommit=True, connect_timeout=10)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty database on the test server; dropped afterwards."""
    base = server_url()
    name = f"zhin_{uuid.uuid4().hex[:16]}"
    with _admin(base) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with _admin(base) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def zhin(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zhin_cli", *map(str, args)], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, encoding="utf-8", timeout=300, stdin=subprocess.DEVNULL)


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stderr
    return result


def snapshot(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table, in a fixed order: equal snapshots = an unchanged database."""
    with _admin(url) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]
        return {t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}


def requests_of(trace_json: str) -> str:
    data = json.loads(trace_json)
    assert data["requests"], "no requests: the comparison below would prove nothing"
    return json.dumps(data["requests"], ensure_ascii=False, sort_keys=False)


def test_the_same_session_in_sqlite_and_postgres_traces_to_byte_identical_requests(pg_url: str, tmp_path: Path) -> None:
    fixture = FIXTURES / "group-busy.jsonl"
    sqlite = tmp_path / "data.sqlite"
    ok(zhin("import", fixture, "--db", sqlite, cwd=tmp_path))
    ok(zhin("import", fixture, "--db", pg_url, cwd=tmp_path))
    from_sqlite = ok(zhin("trace", GROUP, "--all", "--json", "--db", sqlite, cwd=tmp_path)).stdout
    from_postgres = ok(zhin("trace", GROUP, "--all", "--json", "--db", pg_url, cwd=tmp_path)).stdout
    assert len(json.loads(from_sqlite)["requests"]) == 16
    assert requests_of(from_sqlite).encode() == requests_of(from_postgres).encode()
    # the human view with the request bodies: identical after the header line that names the database
    shown_sqlite = ok(zhin("trace", GROUP, "--turn", 9, "--show-request", "--db", sqlite, cwd=tmp_path)).stdout
    shown_postgres = ok(zhin("trace", GROUP, "--turn", 9, "--show-request", "--db", pg_url, cwd=tmp_path)).stdout
    assert shown_sqlite.split("\n", 1)[1].encode() == shown_postgres.split("\n", 1)[1].encode()
    assert "***" in shown_postgres.split("\n", 1)[0] and "zhin_test:zhin_test@" not in shown_postgres
    # and the export (the interchange format) too
    assert ok(zhin("export", GROUP, "--db", sqlite, cwd=tmp_path)).stdout == ok(zhin("export", GROUP, "--db", pg_url, cwd=tmp_path)).stdout


def test_negative_control_a_changed_row_in_postgres_changes_the_requests(pg_url: str, tmp_path: Path) -> None:
    fixture = FIXTURES / "group-busy.jsonl"
    sqlite = tmp_path / "data.sqlite"
    ok(zhin("import", fixture, "--db", sqlite, cwd=tmp_path))
    ok(zhin("import", fixture, "--db", pg_url, cwd=tmp_path))
    with _admin(pg_url) as conn:
        conn.execute("UPDATE agent_messages SET payload = replace(payload, '明明', '明明!') WHERE id = 5")
    from_sqlite = ok(zhin("trace", GROUP, "--all", "--json", "--db", sqlite, cwd=tmp_path)).stdout
    from_postgres = ok(zhin("trace", GROUP, "--all", "--json", "--db", pg_url, cwd=tmp_path)).stdout
    assert requests_of(from_sqlite) != requests_of(from_postgres)


def test_sessions_lists_key_epoch_messages_and_last_activity(pg_url: str, tmp_path: Path) -> None:
    for name in ("group-busy.jsonl", "private-chat.jsonl"):
        ok(zhin("import", FIXTURES / name, "--db", pg_url, cwd=tmp_path))
    listed = json.loads(ok(zhin("sessions", "--json", "--db", pg_url, cwd=tmp_path)).stdout)["sessions"]
    group = next(s for s in listed if s["session_key"] == GROUP)
    assert group["session_id"] == GROUP_EPOCH
    assert group["messages"] == 143
    last_line = json.loads((FIXTURES / "group-busy.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert group["last_activity"] == last_line["timestamp"]
    table = ok(zhin("sessions", "--db", pg_url, cwd=tmp_path)).stdout
    assert GROUP_EPOCH in table and "143" in table and "2025-10-30 07:40:10" in table


def test_every_read_command_leaves_postgres_unchanged(pg_url: str, tmp_path: Path) -> None:
    for path in sorted(FIXTURES.glob("*.jsonl")):
        ok(zhin("import", path, "--db", pg_url, cwd=tmp_path))
    before = snapshot(pg_url)
    assert before["agent_messages"], "empty database: nothing to compare"
    for command in (["trace", GROUP, "--all", "--json"], ["export", GROUP], ["sessions", "--json"],
                    ["prefix-diff", "--all", "--json"], ["facts", "show", GROUP, "--json"], ["facts", "prune", "--dry-run"]):
        result = zhin(*command, "--db", pg_url, cwd=tmp_path)
        assert result.returncode in (0, 1), (command, result.stderr)
    assert snapshot(pg_url) == before


def test_reading_connections_are_read_only_on_the_server(pg_url: str, tmp_path: Path) -> None:
    ok(zhin("import", FIXTURES / "private-chat.jsonl", "--db", pg_url, cwd=tmp_path))
    insert = text("INSERT INTO agent_sessions (session_id, session_key) VALUES ('x', 'y')")
    with SessionDatabase(parse_db(pg_url)) as database, database.engine.connect() as conn:
        assert conn.execute(text("SHOW transaction_read_only")).scalar() == "on"
        with pytest.raises(DBAPIError, match="read-only transaction"):
            conn.execute(insert)
    # negative control: the same statement through the writing path succeeds, so the refusal above is read-only mode
    engine = writable_engine(parse_db(pg_url))
    try:
        with engine.begin() as conn:
            conn.execute(insert)
    finally:
        engine.dispose()


def test_postgres_scheme_aliases_and_unsupported_databases(pg_url: str, tmp_path: Path) -> None:
    ok(zhin("import", FIXTURES / "private-chat.jsonl", "--db", pg_url, cwd=tmp_path))
    alias = pg_url.replace("postgresql://", "postgres://", 1)
    assert alias != pg_url
    assert json.loads(ok(zhin("sessions", "--json", "--db", alias, cwd=tmp_path)).stdout)["sessions"]
    unknown = zhin("sessions", "--db", "oracle://bot:secret@127.0.0.1/zhin", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1 and "unknown database URL scheme 'oracle'" in unknown.stderr
    assert "secret" not in unknown.stderr


def test_a_wrong_password_is_one_line_without_the_password(pg_url: str, tmp_path: Path) -> None:
    wrong = make_url(pg_url).set(password="not-the-password-7f3a").render_as_string(hide_password=False)
    result = zhin("trace", GROUP, "--db", wrong, cwd=tmp_path)
    assert result.returncode == 3
    assert result.stderr.startswith("zhin: error: ") and result.stderr.count("\n") == 1
    assert "password authentication failed" in result.stderr and "not-the-password-7f3a" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_session_in_postgres_is_not_found(pg_url: str, tmp_path: Path) -> None:
    ok(zhin("import", FIXTURES / "private-chat.jsonl", "--db", pg_url, cwd=tmp_path))
    result = zhin("trace", "icqq:1:group:nope", "--db", pg_url, cwd=tmp_path)
    assert result.returncode == 3 and "no session" in result.stderr and result.stderr.count("\n") == 1


def _event(conn: psycopg.Connection, event_id: str, kind: str, user: str, operator: str, time: int) -> None:
    key = GROUP  # PostgreSQL text cannot hold NUL: the session-key form of conversation_key
    conn.execute("INSERT INTO conversation_events (event_id, conversation_key, message_key, event_json, time) VALUES (%s,%s,%s,%s,%s)",
                 (event_id, key, "", json.dumps({"type": kind, "user_id": user, "operator_id": operator}), time))


def test_import_events_into_postgres_is_idempotent(pg_url: str, tmp_path: Path) -> None:
    ok(zhin("import", FIXTURES / "group-busy.jsonl", "--db", pg_url, cwd=tmp_path))
    last = 1761810010000
    with _admin(pg_url) as conn:
        _event(conn, "e1", "member_increase", "10011", "10011", last + 60_000)
        _event(conn, "e2", "member_decrease", "10004", "10001", last + 120_000)
    first = ok(zhin("import", "--events", "--db", pg_url, cwd=tmp_path))
    assert "imported 2 member events" in first.stderr
    again = ok(zhin("import", "--events", "--db", pg_url, cwd=tmp_path))
    assert "imported 0 member events" in again.stderr and "2 already there" in again.stderr
    exported = ok(zhin("export", GROUP, "--db", pg_url, cwd=tmp_path)).stdout.splitlines()
    events = [json.loads(line) for line in exported if '"role":"event"' in line]
    assert [e["name"] for e in events[-2:]] == ["10011 join 1048877509 on 15:41 by self", "10004 leave 1048877509 on 15:42 by 10001"]
    assert len(exported) == 147 + 2


def test_facts_prune_on_postgres_dry_run_then_for_real(pg_url: str, tmp_path: Path) -> None:
    import time

    ok(zhin("import", FIXTURES / "group-busy.jsonl", "--db", pg_url, cwd=tmp_path))
    now = int(time.time() * 1000)
    with _admin(pg_url) as conn:
        for user, updated in (("fresh", now), ("ancient", now - 91 * 86_400_000)):
            conn.execute("INSERT INTO ai_scene_members (platform, scene_key, user_id, card, updated_at) VALUES ('icqq', %s, %s, %s, %s)",
                         (GROUP, user, "卡\x07片", updated))
    before = snapshot(pg_url)
    dry = json.loads(ok(zhin("facts", "prune", "--dry-run", "--json", "--db", pg_url, cwd=tmp_path)).stdout)
    assert [r["user_id"] for r in dry["expired"]] == ["ancient"] and [r["user_id"] for r in dry["cleaned"]] == ["fresh"]
    assert snapshot(pg_url) == before
    real = json.loads(ok(zhin("facts", "prune", "--json", "--db", pg_url, cwd=tmp_path)).stdout)
    assert real["removed"] == 1
    shown = json.loads(ok(zhin("facts", "show", GROUP, "--json", "--db", pg_url, cwd=tmp_path)).stdout)
    assert [(m["user_id"], m["card"]) for m in shown["members"]] == [("fresh", "卡片")]
    assert shown["scene"]["member_count"] == 42 and shown["bot_role"] == "admin"

"""User data is never written and secrets never printed (issue "Hardening" items 3 and 4)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import httpx2
import pytest
from conftest import clean_env, run_zhin

from zhin_cli.tools.serve.server import running_server

ROOT = Path(__file__).resolve().parent.parent
CANARY = "sk-canary-7f3a9c0e1b2d4f6a8c0e1b2d4f6a8c0e"


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("db")
    db = folder / "data.sqlite"
    run_zhin("import", *(str(p) for p in sorted((ROOT / "fixtures").glob("*.jsonl"))), "--db", str(db), cwd=folder,
             env=clean_env()).check_returncode()
    return db


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


READ_COMMANDS = [
    ["trace", "icqq:8596238:group:1048877509", "--all", "--json"],
    ["trace", "icqq:8596238:private:10002", "--provider", "anthropic", "--model", "claude-sonnet-5", "--show-request"],
    ["export", "icqq:8596238:group:201193925"],
    ["sessions", "--json"],
    ["prefix-diff", "--all", "--json"],
    ["prefix-diff", "icqq:8596238:group:1048877509", "--provider", "gemini", "--model", "gemini-2.5-flash"],
]


CASES = [(command, False) for command in READ_COMMANDS] + [(READ_COMMANDS[0], True), (READ_COMMANDS[3], True)]


@pytest.mark.parametrize(("command", "wal"), CASES, ids=lambda c: " ".join(c[:2]) if isinstance(c, list) else ("wal" if c else "journal"))
def test_every_read_command_leaves_a_database_copy_byte_identical(demo_db: Path, tmp_path: Path, command: list[str], wal: bool) -> None:
    db = tmp_path / "copy.sqlite"
    shutil.copy(demo_db, db)
    if wal:
        with sqlite3.connect(db) as connection:
            connection.execute("PRAGMA journal_mode=WAL")
        for leftover in (tmp_path / "copy.sqlite-wal", tmp_path / "copy.sqlite-shm"):
            leftover.unlink(missing_ok=True)
    before, mtime, listing = digest(db), os.stat(db).st_mtime_ns, sorted(p.name for p in tmp_path.iterdir())
    result = run_zhin(*command, "--db", str(db), cwd=tmp_path, env=clean_env())
    assert result.returncode in (0, 1), result.stderr
    assert digest(db) == before and os.stat(db).st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == listing  # no -wal, -shm or -journal appeared


def test_negative_control_a_writable_open_would_change_the_file(demo_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "copy.sqlite"
    shutil.copy(demo_db, db)
    before = digest(db)
    with sqlite3.connect(db) as connection:  # what a careless tool might do
        connection.execute("CREATE TABLE IF NOT EXISTS zhin_seen (x)")
    assert digest(db) != before


def test_api_key_never_appears_in_any_output(demo_db: Path, tmp_path: Path) -> None:
    env = {**clean_env(), "OPENAI_API_KEY": CANARY, "ANTHROPIC_API_KEY": CANARY}
    outputs = []
    for command in READ_COMMANDS:
        result = run_zhin(*command, "--db", str(demo_db), cwd=tmp_path, env=env)
        outputs += [result.stdout, result.stderr]
    for bad in (["trace", "nope", "--db", str(tmp_path / "missing.sqlite")], ["trace", "x", "--db", f"postgresql://bot:{CANARY}@127.0.0.1:1/zhin"],
                # an unencoded '@' in the password, a password query parameter, a URL that does not parse
                ["sessions", "--db", f"postgresql://bot:p@{CANARY}@127.0.0.1:1/zhin"],
                ["trace", "x", "--db", f"mysql://bot@127.0.0.1:1/zhin?Password={CANARY}"],
                ["trace", "x", "--db", f"postgresql://bot:{CANARY}@[::1:1/zhin"]):
        result = run_zhin(*bad, cwd=tmp_path, env=env)
        assert result.returncode != 0
        outputs += [result.stdout, result.stderr]
    assert not any(CANARY in text for text in outputs)
    assert not any(CANARY in p.read_text(errors="ignore") for p in tmp_path.rglob("*") if p.is_file())


def test_the_conformance_server_never_logs_or_echoes_the_key() -> None:
    lines: list[str] = []
    with running_server(provider="openai", port=0, log=lines.append) as (base_url, _server), httpx2.Client(trust_env=False, timeout=30) as http:
        ok = http.post(f"{base_url}/chat/completions", headers={"Authorization": f"Bearer {CANARY}"},
                       json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
        bad = http.post(f"{base_url}/chat/completions", headers={"Authorization": f"Bearer {CANARY}"},
                        json={"model": "gpt-4o", "messages": [{"role": "tool", "tool_call_id": "x", "content": "y"}]})
    assert ok.status_code == 200 and bad.status_code == 400
    assert lines, "the server logged nothing: the check below would prove nothing"
    assert CANARY not in ok.text + bad.text + "\n".join(lines)

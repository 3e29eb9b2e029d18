"""``zhin import --events`` on a real upstream database (issue 28, review): the trace of a session is the same
before and after (the imported event rows stand where their events happened, not after the bot's last row), and a
bot's own database found upward is not written unless named with ``--db``."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import run_zhin

DATA = Path(__file__).parent / "data" / "upstream-db" / "data.sqlite"
KEYS = ["onebot11:tokyo-ob11:group:856301447", "onebot11:tokyo-ob11:group:613770258",
        "onebot11:tokyo-ob11:private:284100105"]


def requests(db: Path, key: str, cwd: Path) -> list[dict]:
    result = run_zhin("trace", "--db", db, key, "--all", "--show-request", "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return [r["request"] for r in json.loads(result.stdout)["requests"]]


@pytest.mark.parametrize("key", KEYS)
def test_the_trace_is_the_same_after_import_events(tmp_path: Path, key: str) -> None:
    db = tmp_path / "copy.sqlite"
    shutil.copyfile(DATA, db)
    before = requests(db, key, tmp_path)
    result = run_zhin("import", "--events", "--db", db, cwd=tmp_path)
    assert result.returncode == 0 and "imported 10 member events" in result.stderr + result.stdout, result.stderr
    after = requests(db, key, tmp_path)
    assert after == before


def test_the_imported_rows_are_in_the_database(tmp_path: Path) -> None:
    # negative control of the test above: the import did write (the trace is the same *although* rows were added)
    import sqlite3

    db = tmp_path / "copy.sqlite"
    shutil.copyfile(DATA, db)
    assert run_zhin("import", "--events", "--db", db, cwd=tmp_path).returncode == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM agent_messages WHERE role = 'event'").fetchone()[0] == 8


def test_a_bots_database_found_upward_is_not_written(tmp_path: Path) -> None:
    bot = tmp_path / "bot"
    (bot / ".zhin").mkdir(parents=True)
    db = bot / ".zhin" / "data.sqlite"
    shutil.copyfile(DATA, db)
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    result = run_zhin("import", "--events", cwd=bot)
    assert result.returncode == 2, result.stderr
    assert "zhin: error:" in result.stderr and "--db" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in (bot / ".zhin").iterdir()) == ["data.sqlite"]


def test_named_with_db_the_bots_database_is_written(tmp_path: Path) -> None:
    # negative control: the user who names it gets what they asked for
    bot = tmp_path / "bot"
    (bot / ".zhin").mkdir(parents=True)
    shutil.copyfile(DATA, bot / ".zhin" / "data.sqlite")
    result = run_zhin("import", "--events", "--db", ".zhin/data.sqlite", cwd=bot)
    assert result.returncode == 0, result.stderr


def test_a_zhin_made_database_found_upward_is_still_the_default_target(tmp_path: Path) -> None:
    # negative control: the documented default (write the database a read finds) holds for zhin's own databases
    fixtures = Path(__file__).parent.parent / "fixtures"
    assert run_zhin("import", fixtures / "private-chat.jsonl", cwd=tmp_path).returncode == 0
    result = run_zhin("import", "--events", cwd=tmp_path)
    assert result.returncode == 0, result.stderr

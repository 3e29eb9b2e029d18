"""Work that needs no database pays nothing for SQLAlchemy (≈ 0.35 s to import): tracing a ``.jsonl`` file, and
finding which database a command would read (``store.discovery``: the header line, completion, ``import``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import atexit, os, sys
sys.argv = ["zhin", *sys.argv[1:]]
def report():
    os.write(2, ("\\nLOADED " + " ".join(m for m in ("sqlalchemy", "psycopg", "pymysql") if m in sys.modules)).encode())
atexit.register(report)
from zhin_cli.launch import main
main()
"""


def loaded(*args: str, cwd: Path) -> set[str]:
    run = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    last = run.stderr.rstrip().splitlines()[-1]
    assert last.startswith("LOADED"), run.stderr
    return set(last.split()[1:])


def test_tracing_a_jsonl_file_does_not_import_sqlalchemy(tmp_path: Path) -> None:
    assert loaded("trace", str(ROOT / "fixtures" / "private-chat.jsonl"), "--json", cwd=tmp_path) == set()
    assert loaded("trace", str(ROOT / "fixtures" / "private-chat.jsonl"), cwd=tmp_path) == set()  # text: header line


def test_reading_a_database_does_import_it(tmp_path: Path) -> None:
    """Negative control: the probe sees SQLAlchemy when a command really reads a database."""
    (tmp_path / ".zhin").mkdir()
    imported = subprocess.run([sys.executable, "-m", "zhin_cli", "import", str(ROOT / "fixtures" / "private-chat.jsonl"),
                               "--db", str(tmp_path / ".zhin" / "data.sqlite")], capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    assert "sqlalchemy" in loaded("sessions", cwd=tmp_path)


def test_discovery_is_light() -> None:
    code = "import sys, zhin_cli.store.discovery; print('sqlalchemy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_the_database_a_run_reads_is_decided_by_the_sources(tmp_path: Path) -> None:
    """One rule for every header line: the source load_session would ask. A session id reads the database found
    upward; a .jsonl file reads none (control); --db is named as given; --all reads the database."""
    from zhin_cli.store import database_read

    (tmp_path / ".zhin").mkdir()
    (tmp_path / ".zhin" / "data.sqlite").write_bytes(b"")
    file = str(ROOT / "fixtures" / "private-chat.jsonl")
    assert database_read(["icqq:1:group:2"], db=None, cwd=tmp_path) == str(tmp_path / ".zhin" / "data.sqlite")
    assert database_read([file], db=None, cwd=tmp_path) is None
    assert database_read([file, "icqq:1:group:2"], db="x.sqlite", cwd=tmp_path) == "x.sqlite"
    assert database_read([], db=None, cwd=tmp_path, all_sessions=True) == str(tmp_path / ".zhin" / "data.sqlite")

"""``zhin import`` is all or nothing (issue 14 §4): an error, SIGINT or SIGTERM part way leaves no schema-only or
half-written database and no hot journal — a new file does not appear, an existing one is as it was."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, clean_env, default_sigint, run_zhin

PRIVATE = FIXTURES / "private-chat.jsonl"
GROUP = FIXTURES / "group-busy.jsonl"


def zhin(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_zhin(*args, cwd=cwd, env=clean_env())  # in this process (conftest); the signal tests below start one


def dump(db: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def big_session(path: Path, messages: int) -> Path:
    """A session of ``messages`` user messages (a import that takes seconds, to interrupt)."""
    lines = PRIVATE.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["session_id"] = "icqq:8596238:private:10003#1761800000000-1"
    header["session_key"] = "icqq:8596238:private:10003"
    first = json.loads(lines[1])
    out = [json.dumps(header, ensure_ascii=False)]
    for n in range(1, messages + 1):
        out.append(json.dumps({**first, "id": n, "timestamp": first["timestamp"] + n, "messageId": f"p-{n}"}, ensure_ascii=False))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def test_an_error_part_way_into_a_new_file_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "new" / "data.sqlite"
    result = zhin("import", PRIVATE, GROUP, PRIVATE, "--db", target, cwd=tmp_path)  # the third is already there
    assert result.returncode == 3 and "already in" in result.stderr and "nothing imported" in result.stderr
    assert result.stderr.count("\n") == 1
    assert not target.exists()
    assert list(target.parent.iterdir()) == []  # no temporary file, no journal


def test_negative_control_the_same_import_without_the_duplicate_creates_the_file(tmp_path: Path) -> None:
    target = tmp_path / "new" / "data.sqlite"
    assert zhin("import", PRIVATE, GROUP, "--db", target, cwd=tmp_path).returncode == 0
    assert [p.name for p in target.parent.iterdir()] == ["data.sqlite"]
    assert any("INSERT INTO \"agent_messages\"" in line for line in dump(target))


def test_an_error_part_way_into_an_existing_database_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "data.sqlite"
    assert zhin("import", PRIVATE, "--db", db, cwd=tmp_path).returncode == 0
    before = dump(db)
    result = zhin("import", GROUP, PRIVATE, "--db", db, cwd=tmp_path)  # the group session first, then a duplicate
    assert result.returncode == 3 and "already in" in result.stderr
    assert dump(db) == before  # the group session was not written either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.sqlite"]
    # negative control: with --replace the same command writes both
    assert zhin("import", GROUP, PRIVATE, "--db", db, "--replace", cwd=tmp_path).returncode == 0
    assert dump(db) != before


def interrupt_when(proc: subprocess.Popen[str], started: object, signum: int) -> None:
    deadline = time.monotonic() + 120
    while not started():  # type: ignore[operator]
        assert proc.poll() is None, f"import ended before it was interrupted: {proc.communicate()}"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signum)


def interrupted(proc: subprocess.Popen[str], started: object, signum: int) -> str:
    """Interrupt the import once ``started()``; its stderr. It never outlives the test."""
    try:
        interrupt_when(proc, started, signum)
        return str(proc.communicate(timeout=120)[1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_an_import_into_a_new_file_leaves_nothing(tmp_path: Path, signum: int) -> None:
    session = big_session(tmp_path / "big.jsonl", 30_000)
    folder = tmp_path / "db"
    folder.mkdir()
    target = folder / "data.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "zhin_cli", "import", str(session), "--db", str(target)],
                            cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    # writing has begun once anything appears in the folder (the temporary database, or today's target itself)
    err = interrupted(proc, lambda: any(folder.iterdir()) and time.sleep(0.3) is None, signum)
    assert proc.returncode != 0, err
    assert "Traceback" not in err
    assert list(folder.iterdir()) == [], "a schema-only or partial database, or a journal, was left behind"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_an_import_into_an_existing_database_leaves_it_as_it_was(tmp_path: Path, signum: int) -> None:
    db = tmp_path / "data.sqlite"
    assert zhin("import", PRIVATE, "--db", db, cwd=tmp_path).returncode == 0
    before = dump(db)
    session = big_session(tmp_path / "big.jsonl", 30_000)
    journal = Path(f"{db}-journal")
    # the small group session first, then the big one: interrupted in the big one
    proc = subprocess.Popen([sys.executable, "-m", "zhin_cli", "import", str(GROUP), str(session), "--db", str(db)],
                            cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    err = interrupted(proc, lambda: journal.exists() and time.sleep(0.5) is None, signum)
    assert proc.returncode != 0, err
    assert "Traceback" not in err
    assert not journal.exists(), "a hot journal was left behind"
    assert dump(db) == before


def test_a_new_database_that_cannot_be_put_in_place_is_one_error_and_leaves_nothing(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # No hard links on this file system, and the rename fallback fails too (permissions, a full folder): one
    # ZhinError naming the file, no temporary file left, no database.
    import errno
    import os

    from zhin_cli.core.errors import ZhinError
    from zhin_cli.store.db import writer
    from zhin_cli.store.jsonl import read_session

    def refuse(*_args: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    def deny(*_args: object) -> None:
        raise OSError(errno.EACCES, "Permission denied")

    session = read_session(Path(__file__).resolve().parent.parent / "fixtures" / "private-chat.jsonl")
    target = tmp_path / "new.sqlite"
    real_replace = os.replace
    monkeypatch.setattr(writer.os, "link", refuse)
    monkeypatch.setattr(writer.os, "replace", deny)
    with pytest.raises(ZhinError, match="cannot create the database: Permission denied; nothing imported"):
        writer.import_sessions([session], target)
    assert list(tmp_path.iterdir()) == []
    # Negative control: with the rename working, the fallback puts the database in place.
    monkeypatch.setattr(writer.os, "replace", real_replace)
    writer.import_sessions([session], target)
    assert [p.name for p in tmp_path.iterdir()] == ["new.sqlite"]

"""A session argument longer than the file system allows (issue 30 item 6): one line, exit 3, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_zhin

LONG = "x" * 300


@pytest.mark.parametrize("argument", [LONG, LONG + ".jsonl", "a/" * 3000, "st:" + LONG + ".jsonl"])
@pytest.mark.parametrize("command", [("trace",), ("prefix-diff",), ("export",), ("report", "html")])
def test_a_too_long_session_argument_is_one_line(tmp_path: Path, command: tuple[str, ...], argument: str) -> None:
    result = run_zhin(*command, argument, cwd=tmp_path)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zhin: error: "), result.stderr
    assert result.returncode in (2, 3)
    assert len(lines[0]) < 400  # the name is shortened, not printed in full


def test_a_short_missing_file_still_names_it(tmp_path: Path) -> None:
    # negative control: the ordinary error is unchanged
    result = run_zhin("trace", "missing.jsonl", cwd=tmp_path)
    assert result.returncode == 3 and "missing.jsonl" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [("trace",), ("prefix-diff",), ("export",), ("report", "economy"), ("facts", "show")])
def test_a_long_session_id_is_looked_up_in_the_database(tmp_path: Path, command: tuple[str, ...]) -> None:
    # 300 characters cannot name a file, but can name a session: the database answers, not the file system
    db = tmp_path / "data.sqlite"
    assert run_zhin("import", Path(__file__).parent.parent / "fixtures" / "private-chat.jsonl", "--db", db, cwd=tmp_path).returncode == 0
    result = run_zhin(*command, "--db", db, LONG, cwd=tmp_path)
    assert result.returncode in (2, 3) and "no session" in result.stderr and "file name too long" not in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1

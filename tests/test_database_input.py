"""Bad rows in a database are one-line errors, as bad lines in JSONL are (issue 14 §3: a payload nested ~995
deep was a RecursionError traceback from the database and a one-line error from JSONL)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import clean_env

SESSION_ID = "icqq:1:group:2#1-1"
BODY = ('"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":1700000000000,'
        '"actor":{"subjectId":"1","displayName":"A","roles":[],"scope":"group"},"x":')


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def zhin(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zhin_cli", *map(str, args)], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("column", ["payload", "extra"])
def test_a_row_nested_past_the_recursion_limit_is_one_line_naming_the_row(tmp_path: Path, upstream_db: Callable[..., Path],
                                                                          column: str) -> None:
    payload = "{" + BODY + (nested(995) if column == "payload" else "0") + "}"
    extra = nested(995) if column == "extra" else ""
    db = upstream_db(tmp_path / "d.sqlite", SESSION_ID, [{"payload": payload, "extra": extra, "role": "user",
                                                           "timestamp": 1700000000000}])
    for command in (["export", SESSION_ID], ["trace", SESSION_ID, "--json"]):
        result = zhin(*command, "--db", db, cwd=tmp_path)
        assert result.returncode == 3, result.stderr
        assert result.stderr == f"zhin: error: {db}: agent_messages row 1: {column} is nested too deeply\n"
        assert result.stdout == ""


def test_negative_control_moderate_nesting_loads_and_jsonl_refuses_the_same_depth(tmp_path: Path,
                                                                                  upstream_db: Callable[..., Path]) -> None:
    db = upstream_db(tmp_path / "d.sqlite", SESSION_ID, [{"payload": "{" + BODY + nested(100) + "}", "role": "user",
                                                           "timestamp": 1700000000000}])
    assert zhin("export", SESSION_ID, "--db", db, cwd=tmp_path).returncode == 0
    jsonl = tmp_path / "s.jsonl"
    jsonl.write_text(f'{{"type":"session","session_id":"{SESSION_ID}"}}\n{{"type":"message",{BODY}{nested(995)}}}\n',
                     encoding="utf-8")
    result = zhin("export", jsonl, cwd=tmp_path)
    assert result.returncode == 3 and result.stderr == f"zhin: error: {jsonl}:2: invalid JSON: nested too deeply\n"

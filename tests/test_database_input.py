"""Bad rows in a database are one-line errors, as bad lines in JSONL are (issue 14 §3: a payload nested ~995
deep was a RecursionError traceback from the database and a one-line error from JSONL)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import clean_env, run_zhin

SESSION_ID = "icqq:1:group:2#1-1"
BODY = ('"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":1700000000000,'
        '"actor":{"subjectId":"1","displayName":"A","roles":[],"scope":"group"},"x":')


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def zhin(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_zhin(*args, cwd=cwd, env=clean_env())  # in this process (conftest)


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


@pytest.mark.parametrize("command", [["export"], ["trace", "--json"], ["prefix-diff"]])
def test_a_lone_surrogate_in_a_row_is_one_line_naming_the_row(tmp_path: Path, upstream_db: Callable[..., Path],
                                                              command: list[str]) -> None:
    # The same rule as a JSONL line: a \ud800 escape no output can encode is refused where it is read (prefix-diff
    # used to crash with a UnicodeEncodeError traceback, export and trace wrote it through).
    text = BODY.replace('"text":"hi"', '"text":"a\\ud800b"') + "0"
    db = upstream_db(tmp_path / "d.sqlite", SESSION_ID, [{"payload": "{" + text + "}", "role": "user",
                                                           "timestamp": 1700000000000}])
    result = zhin(command[0], SESSION_ID, *command[1:], "--db", db, cwd=tmp_path)
    assert result.returncode == (2 if command[0] == "prefix-diff" else 3), result.stderr  # prefix-diff exits like diff
    assert result.stderr.startswith(f"zhin: error: {db}: agent_messages row 1: ") and "surrogate" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


def test_negative_control_a_surrogate_pair_in_a_row_is_the_character(tmp_path: Path, upstream_db: Callable[..., Path]) -> None:
    text = BODY.replace('"text":"hi"', '"text":"a\\ud83d\\ude00b"') + "0"
    db = upstream_db(tmp_path / "d.sqlite", SESSION_ID, [{"payload": "{" + text + "}", "role": "user",
                                                           "timestamp": 1700000000000}])
    result = zhin("export", SESSION_ID, "--db", db, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "\U0001f600" in result.stdout or "\\ud83d\\ude00" in result.stdout

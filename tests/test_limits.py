"""Limits (issue "Hardening" item 5): oversized sessions are refused with one line before being loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import clean_env, run_zhin

from zhin_cli.core.errors import InputError
from zhin_cli.store import check_jsonl_limits

ROOT = Path(__file__).resolve().parent.parent


def session_file(path: Path, messages: int) -> Path:
    lines = [json.dumps({"type": "session", "session_id": "s#1"})]
    lines += [json.dumps({"type": "message", "role": "user", "content": [{"type": "text", "text": f"m{i}"}],
                          "timestamp": 1_700_000_000_000 + i, "actor": {"subjectId": "1"}}) for i in range(messages)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_session_over_the_limit_is_refused_before_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = session_file(tmp_path / "big.jsonl", 120)
    monkeypatch.setenv("ZHIN_MAX_MESSAGES", "100")
    with pytest.raises(InputError, match=r"big.jsonl: session too large: more than 100 lines"):
        check_jsonl_limits(path)
    monkeypatch.setenv("ZHIN_MAX_MESSAGES", "120")
    check_jsonl_limits(path)  # exactly at the limit: fine (negative control)


def test_the_cli_refuses_with_one_line_and_exit_3(tmp_path: Path) -> None:
    path = session_file(tmp_path / "big.jsonl", 50)
    env = {**clean_env(), "ZHIN_MAX_MESSAGES": "10"}
    result = run_zhin("trace", str(path), env=env, cwd=tmp_path)
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and "session too large" in result.stderr and "Traceback" not in result.stderr


def test_an_overlong_line_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zhin_cli.store.limits as limits

    monkeypatch.setattr(limits, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "wide.jsonl"
    path.write_text('{"type":"session","session_id":"s"}\n{"type":"message","x":"' + "y" * 2000 + '"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"wide.jsonl:2: line longer than"):
        check_jsonl_limits(path)


def test_a_database_session_over_the_limit_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "data.sqlite"
    run_zhin("import", str(ROOT / "fixtures" / "private-chat.jsonl"), "--db", str(db), cwd=tmp_path,
             env=clean_env()).check_returncode()
    over = run_zhin("trace", "icqq:8596238:private:10002", "--db", str(db), env={**clean_env(), "ZHIN_MAX_MESSAGES": "10"},
                    cwd=tmp_path)
    assert over.returncode == 3 and "session too large: 22 messages" in over.stderr and over.stderr.count("\n") == 1
    fine = run_zhin("trace", "icqq:8596238:private:10002", "--db", str(db), env={**clean_env(), "ZHIN_MAX_MESSAGES": "22"},
                    cwd=tmp_path)
    assert fine.returncode == 0, fine.stderr

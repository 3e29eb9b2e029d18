"""The pull-request comment is Markdown, not a terminal (issue 31, F2 findings 4 and 5).

A case id such as ``adr-1-ten-messages.yaml::adr1`` reaches the comment and the step summary as written: the
terminal escaping of ``::`` (a workflow command opener in a CI log) is for the job's log, not for Markdown, which
needs its own escaping (pipes, backticks, HTML, line breaks). A refused comment (a fork's read-only token) is one
warning line, and the step keeps the gates' own status.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from test_ci_action import REPO, TOKEN, FakeGitHub, github, pull_request, run_action_step, run_script, runner_env

from zhin_cli.tools.ci import comment as ci_comment
from zhin_cli.tools.ci.comment import GateRun, cell, comment_body

__all__ = ["github"]  # the fixture, imported to be used here

CASE_ID = "adr-1-ten-messages.yaml::adr1-first-request"


def gate(name: str, code: int, document: dict[str, Any] | None) -> GateRun:
    return GateRun(name, (name,), code, document, "")


def eval_body(case_id: str) -> str:
    return comment_body(gate("eval", 0, {"summary": {"passed": 1}, "cases": [
        {"id": case_id, "status": "passed", "reason": ""}]}), None)


def test_a_case_id_reaches_the_comment_as_written() -> None:
    body = eval_body(CASE_ID)
    assert f"| {CASE_ID} | passed |" in body
    assert "\\u003a" not in body


def test_negative_control_markdown_is_still_escaped() -> None:
    hostile = "a|b `code` <b>x</b>\nnext \\| ::error::y \x1b[31m"
    shown = cell(hostile)
    assert "\n" not in shown and "\x1b" not in shown and "\\u001b" in shown  # controls shown, never acted on
    assert "\\|" in shown and "\\`code\\`" in shown and "&lt;b&gt;" in shown and "<b>" not in shown
    assert "\\\\\\|" in shown  # an input backslash before a pipe cannot un-escape it
    assert "::error::y" in shown  # Markdown has no workflow commands: left as written
    row = next(line for line in eval_body(hostile).splitlines() if line.startswith("| a"))
    assert len(re.findall(r"(?<!\\) \| ", row)) == 2  # three cells: id, status, detail


def test_the_log_copy_is_terminal_safe() -> None:
    body = eval_body("::error::forged")
    assert "| ::error::forged |" in body  # the comment: as written
    log_text = ci_comment.log_text
    logged = log_text(body)
    assert "::error::" not in logged and ":\\u003aerror:\\u003a" in logged  # the job's log: no workflow command
    assert log_text(eval_body("plain-id")) == eval_body("plain-id")  # control: nothing to escape, nothing changed
    assert log_text("a\nb::c\n") == "a\nb:\\u003ac\n"  # its own line breaks kept


def test_prefix_diff_rows_count_requests() -> None:
    body = comment_body(None, gate("prefix-diff", 0, {"mode": "configs", "fail_on": [], "base": "b", "head": "h",
                                                      "sessions": [{"session_id": "s", "turns": 16,
                                                                    "differing_turns": []}]}))
    assert "| requests that differ |" in body and "turns that differ" not in body
    assert "| s | 0/16 |" in body


def test_a_refused_comment_warns_and_keeps_the_gates_status(
        tmp_path: Path, github: tuple[FakeGitHub, str]) -> None:
    api, url = github
    root = tmp_path / "repo"
    root.mkdir()
    base, head = pull_request(root, "群规：请勿刷屏")  # the eval case regresses: the gates say 1
    env = runner_env(tmp_path, url, base, head)
    api.refuse_writes = True  # a fork's read-only token
    refused = run_action_step(root, tmp_path, env, eval="cases", sessions="sessions/")
    assert refused.returncode == 1, refused.stderr  # the gate's own status, not 3
    warnings = [line for line in refused.stderr.splitlines() if line.startswith("zhin: warning:")]
    assert len(warnings) == 1 and "HTTP 403" in warnings[0] and "step summary" in warnings[0]
    assert "zhin: error:" not in refused.stderr and "Traceback" not in refused.stderr and TOKEN not in refused.stderr
    assert "1 regression(s)" in (tmp_path / "summary.md").read_text(encoding="utf-8")  # the summary was kept


def test_negative_control_other_api_failures_still_fail(tmp_path: Path, github: tuple[FakeGitHub, str]) -> None:
    _api, url = github
    root = tmp_path / "repo"
    root.mkdir()
    base, head = pull_request(root, "群规：不要刷屏")
    env = runner_env(tmp_path, url, base, head)
    lost = run_script(root, env, "--repository", "octo/other")  # the fake answers 404 Not Found: not a permission
    assert lost.returncode == 3
    assert lost.stderr.strip().splitlines()[-1].startswith("zhin: error: GitHub API GET /repos/octo/other/")
    assert REPO != "octo/other"


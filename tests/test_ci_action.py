"""The GitHub Action (action.yml → scripts/zhin_ci.py → zhin_cli.tools.ci.comment), run here without GitHub.

A scratch git repository with two commits (a zhin.yaml change between them) stands for the pull request; a loopback
HTTP server stands for the GitHub REST API (it keeps the comments and records every call). The action's own shell text
is run by bash with the runner's variables (only the install step is left out: it needs the network), so what is
tested is what a workflow runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from prompt_repo import CLOCK, RULES

from zhin_cli.tools.ci import comment as ci_comment
from zhin_cli.tools.ci.comment import MARKER, GateRun, comment_body

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "zhin_ci.py"
TOKEN = "ghs_fake-token-0123456789"
REPO = "octo/bot"

CASES = """\
version: 1
cases:
  - id: house.rules-are-sent
    providers: [openai]
    timeline:
      - user: {from: "10002", text: "早"}
      - assistant: {text: "早上好"}
      - user: {from: "10002", text: "在吗"}
    assertions:
      - type: regex
        pattern: "群规：不要刷屏"
"""


# ------------------------------------------------------------------------------------------------- fake GitHub API


@dataclass
class FakeGitHub:
    """Issue comments of one pull request, and every call made."""

    comments: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, str, dict[str, Any] | None]] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)
    refuse_writes: bool = False
    next_id: int = 1000

    def add(self, body: str) -> dict[str, Any]:
        self.next_id += 1
        comment = {"id": self.next_id, "body": body, "html_url": f"https://github.test/{REPO}/pull/7#c{self.next_id}"}
        self.comments.append(comment)
        return comment

    def marked(self) -> list[dict[str, Any]]:
        return [c for c in self.comments if MARKER in c["body"]]


def handler_for(api: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def handle_call(self, method: str) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            payload: dict[str, Any] = json.loads(self.rfile.read(length)) if length else {}
            api.calls.append((method, url.path, payload or None))
            api.authorizations.append(self.headers.get("Authorization", ""))
            if method != "GET" and api.refuse_writes:
                return self.reply(403, {"message": "Resource not accessible by integration"})
            if method == "GET" and url.path == f"/repos/{REPO}/issues/7/comments":
                query = parse_qs(url.query)
                size, page = int(query["per_page"][0]), int(query["page"][0])
                return self.reply(200, api.comments[(page - 1) * size: page * size])
            if method == "POST" and url.path == f"/repos/{REPO}/issues/7/comments":
                return self.reply(201, api.add(payload["body"]))
            match = re.fullmatch(rf"/repos/{REPO}/issues/comments/(\d+)", url.path)
            if method == "PATCH" and match:
                [comment] = [c for c in api.comments if c["id"] == int(match[1])]
                comment["body"] = payload["body"]
                return self.reply(200, comment)
            self.reply(404, {"message": "Not Found"})

        def do_GET(self) -> None:
            self.handle_call("GET")

        def do_POST(self) -> None:
            self.handle_call("POST")

        def do_PATCH(self) -> None:
            self.handle_call("PATCH")

    return Handler


@pytest.fixture
def github() -> Iterator[tuple[FakeGitHub, str]]:
    api = FakeGitHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(api))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------------------------------- the pull request


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
                          cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def pull_request(root: Path, head_rules: str, head_extra: str = "") -> tuple[str, str]:
    """A repository whose base commit sends 群规：不要刷屏 and whose head commit sends ``head_rules`` (its zhin.yaml
    ending in ``head_extra``)."""
    (root / "cases").mkdir()
    (root / "cases" / "house.yaml").write_text(CASES, encoding="utf-8")
    (root / "sessions").mkdir()
    (root / "sessions" / "private-chat.jsonl").write_bytes((ROOT / "fixtures" / "private-chat.jsonl").read_bytes())
    (root / "zhin.yaml").write_text(RULES.format("群规：不要刷屏"), encoding="utf-8")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")
    base = git(root, "rev-parse", "HEAD")
    (root / "zhin.yaml").write_text(RULES.format(head_rules) + head_extra, encoding="utf-8")
    git(root, "commit", "-qam", "head", "--allow-empty")
    return base, git(root, "rev-parse", "HEAD")


def runner_env(tmp_path: Path, api_url: str, base: str, head: str) -> dict[str, str]:
    """What the runner gives a step on a pull_request event."""
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "base": {"sha": base}, "head": {"sha": head}}}))
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8", "GITHUB_ACTIONS": "true",
            "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": api_url, "GITHUB_TOKEN": TOKEN,
            "GITHUB_EVENT_PATH": str(event), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}


def run_script(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--eval", "cases", "--sessions", "sessions/", *args],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def runner_expression(text: str, environ: dict[str, str]) -> str:
    """An input default as the runner evaluates it: ``${{ github.token }}`` and the pull request's shas."""
    event = json.loads(Path(environ["GITHUB_EVENT_PATH"]).read_text())
    context = {"github.token": environ["GITHUB_TOKEN"],
               "github.event.pull_request.base.sha": event["pull_request"]["base"]["sha"],
               "github.event.pull_request.head.sha": event["pull_request"]["head"]["sha"]}
    return re.sub(r"\$\{\{ ([\w.-]+) \}\}", lambda m: context[m[1]], text)


def action_step_env(inputs: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    """The run step's ``env:`` with ``${{ inputs.X }}`` resolved (the given value, else the input's default)."""
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    defaults = {name: runner_expression(str(spec.get("default", "")), environ) for name, spec in action["inputs"].items()}
    [step] = [s for s in action["runs"]["steps"] if "zhin_ci.py" in s.get("run", "")]
    resolved = {}
    for key, value in step["env"].items():
        name = re.fullmatch(r"\$\{\{ inputs\.([\w-]+) \}\}", value)[1]  # type: ignore[index]
        resolved[key] = inputs.get(name, defaults[name])
    return {**environ, **resolved}


def run_action_step(root: Path, tmp_path: Path, environ: dict[str, str], **inputs: str) -> subprocess.CompletedProcess[str]:
    """The action's zhin step as the runner runs it: ``bash -eo pipefail`` on its ``run:`` text, RUNNER_TEMP holding
    the venv the install step made (here: this test's interpreter), GITHUB_ACTION_PATH this checkout."""
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    [step] = [s for s in action["runs"]["steps"] if "zhin_ci.py" in s.get("run", "")]
    venv_bin = tmp_path / "runner-temp" / "zhin-venv" / "bin"
    venv_bin.mkdir(parents=True, exist_ok=True)
    python = venv_bin / "python"  # a wrapper, not a symlink: a symlinked venv python would not find its pyvenv.cfg
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    env = {**action_step_env(inputs, environ), "RUNNER_TEMP": str(tmp_path / "runner-temp"),
           "GITHUB_ACTION_PATH": str(ROOT)}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------------------------------------------- end to end


def test_the_action_comments_what_changed_and_a_regression_fails_the_step(
        tmp_path: Path, github: tuple[FakeGitHub, str]) -> None:
    api, url = github
    root = tmp_path / "repo"
    root.mkdir()
    base, head = pull_request(root, "群规：请勿刷屏")
    env = runner_env(tmp_path, url, base, head)
    result = run_action_step(root, tmp_path, env, eval="cases", sessions="sessions/")
    assert result.returncode == 1, result.stderr  # the eval case regressed: the step fails
    [comment] = api.marked()
    body = comment["body"]
    assert body.startswith(MARKER)
    assert f"base {base[:7]}" in body or f"({base[:7]})" in body
    assert "❌ zhin eval: 1 regression(s)" in body and "passed → failed | regressed" in body
    assert re.search(r"\| 6/6 \| house\.rules \(changed, \+\d+ tokens\) \| turn 1, byte \d+ \(house\.rules\)", body)
    assert all(auth == f"Bearer {TOKEN}" for auth in api.authorizations)
    assert TOKEN not in result.stdout + result.stderr
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert summary.count("## zhin:") == 1 and "### zhin prefix-diff" not in summary  # one summary, not the gates' own
    assert MARKER not in summary and "1 regression(s)" in summary
    assert "::notice file=zhin.yaml" in result.stderr  # the gates' annotations still reach the runner


def test_negative_control_an_unchanged_prompt_passes_and_says_so(
        tmp_path: Path, github: tuple[FakeGitHub, str]) -> None:
    api, url = github
    root = tmp_path / "repo"
    root.mkdir()
    base, head = pull_request(root, "群规：不要刷屏")  # the head commit changes nothing
    result = run_action_step(root, tmp_path, runner_env(tmp_path, url, base, head), eval="cases", sessions="sessions/")
    assert result.returncode == 0, result.stderr
    [comment] = api.marked()
    assert "✅ zhin eval: 0 regression(s)" in comment["body"] and "| same |" in comment["body"]
    assert "changed, +" not in comment["body"] and "| 0/" in comment["body"]


def test_head_plugin_code_runs_only_when_the_workflow_opts_in(tmp_path: Path, github: tuple[FakeGitHub, str]) -> None:
    api, url = github
    root = tmp_path / "repo"
    root.mkdir()
    (root / "clock.py").write_text(CLOCK, encoding="utf-8")  # in both commits; only the head's zhin.yaml loads it
    base, head = pull_request(root, "群规：不要刷屏", "plugins: [clock.py:register]\n")
    env = runner_env(tmp_path, url, base, head)
    refused = run_action_step(root, tmp_path, env, eval="cases", sessions="sessions/")
    assert refused.returncode == 3, refused.stderr  # trouble: the ref's plugin was not run
    assert "not running the plugins of git ref" in api.marked()[0]["body"]
    allowed = run_action_step(root, tmp_path, env, eval="cases", sessions="sessions/", **{"allow-ref-plugins": "true"})
    assert allowed.returncode == 1, allowed.stderr
    [comment] = api.marked()
    assert re.search(r"zhin prefix-diff: [1-9]\d* unexpected cache break", comment["body"])
    assert "system_changed" in comment["body"] and "could not run" not in comment["body"]


def test_posting_twice_updates_the_one_marked_comment(tmp_path: Path, github: tuple[FakeGitHub, str]) -> None:
    api, url = github
    root = tmp_path / "repo"
    root.mkdir()
    base, head = pull_request(root, "群规：请勿刷屏")
    for n in range(120):  # the marked comment lands on the second page; a reviewer quotes zhin without the marker
        api.add(f"review note {n}: zhin says…")
    env = runner_env(tmp_path, url, base, head)
    first = run_script(root, env)
    second = run_script(root, env, "--fail-on", "append,system_changed")
    assert first.returncode == second.returncode == 1, second.stderr
    writes = [(method, path) for method, path, _ in api.calls if method != "GET"]
    [marked] = api.marked()
    assert writes == [("POST", f"/repos/{REPO}/issues/7/comments"),
                      ("PATCH", f"/repos/{REPO}/issues/comments/{marked['id']}")]
    assert "fail on: append, system_changed" in marked["body"]  # the second run's body replaced the first
    assert len(api.comments) == 121 and all(MARKER not in c["body"] for c in api.comments[:120])
    pages = [path for method, path, _ in api.calls if method == "GET"]
    assert len(pages) == 2 + 2  # run 1: pages 1 and 2 (no marker yet); run 2: pages 1 and 2 (found on page 2)


def test_comment_off_posts_nothing_and_a_refused_comment_is_one_warning_line(
        tmp_path: Path, github: tuple[FakeGitHub, str]) -> None:
    api, url = github
    root = tmp_path / "repo"
    root.mkdir()
    base, head = pull_request(root, "群规：不要刷屏")
    env = runner_env(tmp_path, url, base, head)
    quiet = run_action_step(root, tmp_path, env, eval="cases", sessions="sessions/", comment="false")
    assert quiet.returncode == 0 and api.calls == []
    api.refuse_writes = True  # a fork's read-only token
    refused = run_script(root, env)
    assert refused.returncode == 0  # best effort: the gates passed, the step passes (test_ci_comment_markdown.py)
    assert refused.stderr.strip().splitlines()[-1].startswith(
        f"zhin: warning: no pull-request comment (GitHub API POST /repos/{REPO}/issues/7/comments: HTTP 403 Resource "
        "not accessible by integration)")
    assert "Traceback" not in refused.stderr and TOKEN not in refused.stderr


def test_a_gate_that_cannot_run_is_trouble_not_a_regression(tmp_path: Path, github: tuple[FakeGitHub, str]) -> None:
    api, url = github
    root = tmp_path / "repo"
    root.mkdir()
    base, head = pull_request(root, "群规：不要刷屏")
    result = run_script(root, runner_env(tmp_path, url, base, head), "--eval", "no-such-cases")
    assert result.returncode >= 2
    [comment] = api.marked()
    assert "zhin eval: could not run" in comment["body"] and "no-such-cases" in comment["body"]


# ------------------------------------------------------------------------------------------------- pieces


def gate(name: str, code: int, document: dict[str, Any] | None, stderr: str = "") -> GateRun:
    return GateRun(name, (name,), code, document, stderr)


def test_text_from_inputs_cannot_forge_the_marker_or_break_the_table() -> None:
    hostile = "a | b <!-- zhin --> <img src=x>\nrow"
    body = comment_body(gate("eval", 1, {"summary": {"failed": 1}, "cases": [
        {"id": hostile, "status": "failed", "reason": hostile}]}), None)
    assert body.count(MARKER) == 1 and body.startswith(MARKER)
    [row] = [line for line in body.splitlines() if line.startswith("| a")]
    assert row.count(" | ") == 2 + 2 - 2 and "\\|" in row and "&lt;img" in row  # three cells: id, status, detail
    plain = comment_body(gate("eval", 0, {"summary": {"passed": 1}, "cases": [
        {"id": "ok", "status": "passed", "reason": ""}]}), None)
    assert "&lt;" not in plain and "| ok | passed |" in plain  # control: ordinary text passes untouched


def test_long_reports_are_cut_to_rows_and_to_githubs_size(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [{"id": f"c{n}", "status": "failed", "reason": "x" * 30} for n in range(ci_comment.MAX_ROWS + 5)]
    document = {"summary": {"failed": len(cases)}, "cases": cases}
    body = comment_body(gate("eval", 1, document), None)
    assert "… and 5 more row(s)" in body and f"| c{ci_comment.MAX_ROWS - 1} |" in body
    assert f"| c{ci_comment.MAX_ROWS} |" not in body
    assert not body.rstrip().endswith("step summary)")  # control: a body that fits is not cut
    monkeypatch.setattr(ci_comment, "MAX_BODY", 2000)
    cut = comment_body(gate("eval", 1, document), None)
    assert len(cut) <= 2000 and cut.rstrip().endswith("(cut: the full report is in the job's step summary)")
    assert cut.startswith(MARKER) and "\n| c" in cut  # cut at a line: whole rows only


@pytest.mark.parametrize("codes, expected", [
    ((0, 0), 0), ((1, 0), 1), ((0, 1), 1), ((1, 3), 3), ((4, 1), 4), ((2, 0), 2)])
def test_the_step_status_puts_trouble_before_findings(codes: tuple[int, int], expected: int) -> None:
    ran: dict[str, Any] = {"cases": []}
    assert ci_comment.ci_exit_code([gate("eval", codes[0], ran), gate("prefix-diff", codes[1], ran)]) == expected


def test_a_gate_that_crashed_is_trouble_even_with_exit_1() -> None:
    crashed = gate("eval", 1, None, "Traceback (most recent call last):\nModuleNotFoundError: No module named 'x'\n")
    assert ci_comment.ci_exit_code([crashed]) == 3
    assert "💥 zhin eval: could not run (exit 1)" in comment_body(crashed, None)
    assert "ModuleNotFoundError: No module named 'x'" in comment_body(crashed, None)
    found = gate("eval", 1, {"summary": {"failed": 1}, "cases": []})  # control: exit 1 with its document is a finding
    assert ci_comment.ci_exit_code([found]) == 1 and "❌ zhin eval" in comment_body(found, None)


def test_the_action_never_pastes_an_input_into_shell_text() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    runs = [step["run"] for step in action["runs"]["steps"] if "run" in step]
    assert runs and not any("${{" in text for text in runs)
    install = next(text for text in runs if "pip install" in text)
    assert '"$GITHUB_ACTION_PATH"' in install  # the action's own checkout: the ref the workflow wrote
    # control: the check does see an expression when one is there
    assert "${{" in yaml.safe_dump(action["runs"]["steps"][0])

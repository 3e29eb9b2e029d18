"""Captured-request diff: ``zhin serve --capture`` + ``zhin request-diff`` (issue 10 §3)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.tools.diff.request import diff_requests, ignore_pattern, load_side
from zhin_cli.tools.serve.server import running_server

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SECRET = "sk-test-never-written-0123456789"


def send(base_url: str, body: dict[str, Any]) -> None:
    """Through the real ``openai`` client over real HTTP, as a bot would."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=SECRET, max_retries=0, timeout=30,
                           http_client=openai.DefaultHttpxClient(trust_env=False, timeout=30))
    client.chat.completions.create(**body)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """``zhin trace --show-request --json`` of turn 4 of the busy fixture, as a file and as its body."""
    import subprocess
    import sys

    from conftest import clean_env

    folder = tmp_path_factory.mktemp("trace")
    result = subprocess.run([sys.executable, "-m", "zhin_cli", "trace", str(FIXTURES / "group-busy.jsonl"), "--turn", "4",
                             "--show-request", "--json"], capture_output=True, text=True, env=clean_env(), check=True)
    path = folder / "trace.json"
    path.write_text(result.stdout, encoding="utf-8")
    return path, json.loads(result.stdout)["requests"][0]["request"]


def capture(tmp_path: Path, *bodies: dict[str, Any]) -> list[Path]:
    folder = tmp_path / "captured"
    with running_server("openai", capture=folder) as (url, _server):
        for body in bodies:
            send(url, body)
    return sorted(p for p in folder.iterdir() if not p.name.endswith(".exchange.json"))  # the bodies, not the records


def test_a_request_captured_from_the_real_client_diffs_cleanly_against_the_trace(zhin: Any, tmp_path: Path,
                                                                                  traced: tuple[Path, dict[str, Any]]) -> None:
    trace_file, body = traced
    [captured] = capture(tmp_path, body)
    assert captured.name == "00001-chat-completions.json"
    result = zhin("request-diff", captured, trace_file)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "same request" in result.stdout
    assert SECRET.encode() not in captured.read_bytes()  # headers (the key) are never captured


def test_a_one_field_change_is_reported_at_its_path_and_byte(zhin: Any, tmp_path: Path, traced: tuple[Path, dict[str, Any]]) -> None:
    trace_file, body = traced
    changed = copy.deepcopy(body)
    index = next(i for i, m in enumerate(changed["messages"]) if m["role"] == "user" and i > 1)
    original = changed["messages"][index]["content"]
    changed["messages"][index]["content"] = original[:10] + "!" + original[10:]
    [captured] = capture(tmp_path, changed)
    result = zhin("request-diff", trace_file, captured, "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert [d["path"] for d in report["differences"]] == [f"messages[{index}].content"]
    assert report["differences"][0]["byte_offset"] == len(original[:10].encode("utf-8"))
    text = zhin("request-diff", trace_file, captured)
    assert text.returncode == 1 and f"messages[{index}].content  changed at byte" in text.stdout


def test_ignored_paths_drop_noise_and_only_that(tmp_path: Path) -> None:
    a = {"model": "m", "user": "u1", "messages": [{"role": "assistant", "content": None,
                                                   "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}
    b = copy.deepcopy(a)
    b["user"] = "u2"
    b["messages"][0]["tool_calls"][0]["id"] = "call_9"
    (tmp_path / "a.json").write_text(json.dumps(a), encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps(b, indent=2), encoding="utf-8")
    side_a, side_b = load_side(tmp_path / "a.json"), load_side(tmp_path / "b.json")
    assert {d.path for d in diff_requests(side_a, side_b).differences} == {"user", "messages[0].tool_calls[0].id"}
    only_ids = diff_requests(side_a, side_b, ["messages[*].tool_calls[*].id"])
    assert [d.path for d in only_ids.differences] == ["user"]
    quiet = diff_requests(side_a, side_b, ["messages[*].tool_calls[*].id", "user"])
    assert quiet.same and not quiet.byte_identical  # same JSON, different spacing
    # an ignore path matches whole keys only: "use" does not hide "user"
    assert [d.path for d in diff_requests(side_a, side_b, ["use", "messages[*].tool_calls[*].id"]).differences] == ["user"]


def test_ignore_path_syntax() -> None:
    import re

    assert re.match(ignore_pattern("messages[*].content"), "root['messages'][12]['content']")
    assert not re.match(ignore_pattern("messages[*].content"), "root['messages'][12]['content_x']")
    assert re.match(ignore_pattern("$.metadata.*"), "root['metadata']['trace']")
    assert re.match(ignore_pattern("messages[2]"), "root['messages'][2]")
    assert not re.match(ignore_pattern("messages[2]"), "root['messages'][21]")


def test_capture_numbers_continue_and_every_body_is_kept_as_sent(tmp_path: Path) -> None:
    folder = tmp_path / "captured"
    with running_server("openai", capture=folder) as (url, _server):
        send(url, {"model": "gpt-4o", "messages": [{"role": "user", "content": "one"}]})
    with running_server("openai", capture=folder) as (url, _server):
        send(url, {"model": "gpt-4o", "messages": [{"role": "user", "content": "二"}]})
        import urllib.request

        request = urllib.request.Request(url + "/chat/completions", data=b"{not json", method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(request, timeout=10)
    names = sorted(p.name for p in folder.iterdir() if not p.name.endswith(".exchange.json"))
    assert names == ["00001-chat-completions.json", "00002-chat-completions.json", "00003-chat-completions.json"]
    assert json.loads((folder / names[1]).read_text(encoding="utf-8"))["messages"][0]["content"] == "二"
    assert (folder / names[2]).read_bytes() == b"{not json"  # captured before any check, bytes as received


def test_bad_input_is_one_line_and_exit_2(zhin: Any, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"model": "m",\n "messages": [}', encoding="utf-8")
    (tmp_path / "ok.json").write_text('{"model": "m", "messages": []}', encoding="utf-8")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    for args, expected in [
        (("bad.json", "ok.json"), "bad.json:2: request file is not valid JSON"),
        (("deep.json", "ok.json"), "deep.json: request file is not valid JSON: nested too deeply"),
        (("missing.json", "ok.json"), "no such request file: missing.json"),
        (("ok.json", "ok.json", "--ignore", "messages[x]"), "--ignore 'messages[x]'"),
    ]:
        result = zhin("request-diff", *args)
        assert result.returncode == 2, result.stderr
        assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    same = zhin("request-diff", "ok.json", "ok.json")
    assert same.returncode == 0 and "byte-identical" in same.stdout

"""Issue 28, findings 8 and 9: every figure says what it is, and the bytes zhin renders are bytes a client sends.

* Tool-call ``arguments`` stored as an object are rendered as the OpenAI-compatible clients write them (the AI
  SDK's ``JSON.stringify(part.input)``: no spaces, non-ASCII kept); stored as a string, they are sent as stored.
  The ground truth is what upstream zhin really sent: ``tests/data/upstream-db/captured-tool-calls.json``, the
  tool calls of the captured request bodies of ``shared/reference/upstream-db`` (whose database
  ``tests/data/upstream-db/data.sqlite`` is a byte-identical copy).
* ``trace`` names the layout that produced a request and shows the usage the bot stored for that request beside
  zhin's own figures — the same numbers ``stats cache`` reads, never mixed into ``prompt_tokens``.
* ``prompt_cache_key``: rendered when configured, and the cache simulator keeps requests of different keys apart.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import SEC, T0, History, request_for_next

Run = Callable[..., subprocess.CompletedProcess[str]]
DATA = Path(__file__).parent / "data" / "upstream-db"
GROUP_A = "onebot11:tokyo-ob11:group:856301447"


@pytest.fixture
def upstream_copy(tmp_path: Path) -> Path:
    """A private copy of the real upstream database (commands never touch the checked-in file)."""
    copy = tmp_path / ".zhin" / "data.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(DATA / "data.sqlite", copy)
    return copy


def captured_calls() -> dict[str, str]:
    """call id → the arguments string upstream sent for it."""
    document = json.loads((DATA / "captured-tool-calls.json").read_text(encoding="utf-8"))
    return {call["id"]: call["arguments"] for call in document["calls"]}


def rendered_calls(requests: list[dict[str, Any]]) -> dict[str, str]:
    """call id → the arguments string of zhin's requests (``trace --json``'s ``requests``)."""
    return {call["id"]: call["function"]["arguments"]
            for request in requests for message in request["request"]["messages"]
            for call in message.get("tool_calls") or []}


def trace_json(zhin: Run, cwd: Path, *args: object) -> dict[str, Any]:
    result = zhin("trace", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


# --- finding 9: tool-call arguments ------------------------------------------------------------------------


def test_tool_call_arguments_are_the_bytes_upstream_sent(zhin: Run, upstream_copy: Path) -> None:
    document = trace_json(zhin, upstream_copy.parent.parent, GROUP_A, "--all", "--json", "--db", upstream_copy,
                          "--provider", "openai")
    captured, rendered = captured_calls(), rendered_calls(document["requests"])
    assert sorted(captured) == sorted(rendered)  # the six calls of the run, no more
    for call_id, sent in captured.items():
        assert rendered[call_id].encode() == sent.encode(), call_id
        # negative control: the old rendering (json.dumps's ", " and ": ") is caught by the same comparison
        spaced = json.dumps(json.loads(sent), ensure_ascii=False)
        assert spaced.encode() != sent.encode(), call_id


def tool_request(arguments: Any) -> dict[str, Any]:
    """The OpenAI body of a tool loop whose one call stored ``arguments``."""
    history = History()
    history.user(T0, "10007", "@bot weather?")
    call = history.assistant(T0 + 2 * SEC, "", calls=[("call_1", "weather")])
    call.content[0]["arguments"] = arguments
    history.result(T0 + 3 * SEC, "call_1", "rain")
    request = request_for_next(history, T0 + 4 * SEC, provider="openai", model="gpt-4o")
    body: dict[str, Any] = request.request
    return body


def the_arguments(body: dict[str, Any]) -> str:
    calls = [call for message in body["messages"] for call in message.get("tool_calls") or []]
    assert len(calls) == 1
    arguments: str = calls[0]["function"]["arguments"]
    return arguments


def test_arguments_stored_as_a_string_are_sent_byte_for_byte() -> None:
    stored = '{ "city" : "上海",\n  "days": 2 }'
    assert the_arguments(tool_request(stored)) == stored
    # negative control: the same value stored as an object is written compactly, so the two are told apart
    assert the_arguments(tool_request(json.loads(stored))) == '{"city":"上海","days":2}'


def test_compact_arguments_follow_json_stringify() -> None:
    from zhin_cli.pipeline.providers.openai import client_arguments

    assert client_arguments({"a": [1, {"b": None}], "é": "东京 🌧"}) == '{"a":[1,{"b":null}],"é":"东京 🌧"}'
    # a lone surrogate (valid in a JSON string, not in UTF-8) is escaped as JSON.stringify escapes it, so the
    # body can be written; a paired one (an emoji) stays as it is (negative control above: 🌧 is not escaped)
    assert client_arguments({"q": "x\ud800y"}) == '{"q":"x\\ud800y"}'
    assert client_arguments({"q": "x\ud800y"}).encode("utf-8")
    assert client_arguments("kept \ud800 as stored") == "kept \ud800 as stored"

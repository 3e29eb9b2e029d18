"""``zhin serve --upstream`` in front of the live tier's real llama.cpp server (issue 29 item 1).

The recorder runs in this process (``running_server``) and forwards to the server ``make eval-live`` started
(``OPENAI_BASE_URL`` without its ``/v1``). Asserted: the body the client sent is the body captured (bytes), the
answer the client gets is the server's (its usage, streamed text), the exchange record holds the server's own usage
object, and a key the client sends is written nowhere. Control: the recorded usage has llama.cpp's shape (no
``prompt_tokens_details``, no cache fields), which zhin's simulator never writes — so it is the server's, not zhin's.

**Finding** (llama-cpp-python 0.3.36): its stream sends no usage chunk even with ``stream_options.include_usage``,
so a streamed request through the recorder is recorded with ``"usage": null`` (never an invented zero) and logged
``no usage``; the usage-from-the-final-chunk path is tested offline (tests/test_serve_upstream.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from zhin_cli.tools.serve.server import running_server

TIMEOUT = 120.0
CANARY = "sk-live-canary-5d1e"
MESSAGES: list[Any] = [
    {"role": "system", "content": "You are Zhin, a helpful assistant. Answer briefly."},
    {"role": "user", "content": "Name three colours."},
]


def exchange(body_file: Path) -> dict[str, Any]:
    """A body's exchange record: a relayed stream's is written once the stream has ended, which may be just after
    the client read its last event, so it is waited for (at most 10 s)."""
    path = body_file.with_name(body_file.name.removesuffix(".json") + ".exchange.json")
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def bodies(folder: Path) -> list[Path]:
    """The captured request bodies: not their exchange records, nor the temporary file an exchange record is being
    written to (``.capture-*.tmp``, there for a moment after a relayed stream ends)."""
    return sorted(p for p in folder.iterdir() if p.name[:1].isdigit() and p.name.endswith(".json")
                  and not p.name.endswith(".exchange.json"))


@pytest.fixture
def recorded(base_url: str, tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    lines: list[str] = []
    folder = tmp_path / "recorded"
    with running_server(capture=folder, upstream=base_url.removesuffix("/").removesuffix("/v1"), log=lines.append) as (url, _):
        yield url, folder, lines


def test_the_recorder_forwards_to_llama_cpp_byte_for_byte_and_records_its_usage(
        recorded: tuple[str, Path, list[str]], model_name: str) -> None:
    url, folder, lines = recorded
    sent = json.dumps({"model": model_name, "messages": MESSAGES, "max_tokens": 16, "temperature": 0, "seed": 1},
                      ensure_ascii=False, indent=1).encode()  # indented: a re-serialising proxy would change it
    with httpx2.Client(trust_env=False, timeout=TIMEOUT) as http:
        answer = http.post(url + "/chat/completions", content=sent,
                           headers={"Content-Type": "application/json", "Authorization": f"Bearer {CANARY}"})
    assert answer.status_code == 200, answer.text
    [captured] = bodies(folder)
    assert captured.read_bytes() == sent
    record = exchange(captured)
    usage = answer.json()["usage"]
    assert usage["prompt_tokens"] > 0 and record["usage"] == usage and record["response"] == answer.json()
    assert record["status"] == 200 and record["stream"] is False
    assert set(usage) == {"prompt_tokens", "completion_tokens", "total_tokens"}  # llama.cpp's shape, not the simulator's
    deadline = time.monotonic() + 10  # the log line follows the answer
    while not lines and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lines == [f"POST /v1/chat/completions 200 upstream {model_name} prompt={usage['prompt_tokens']} read=- written=-"]
    assert CANARY.encode() not in b"".join(p.read_bytes() for p in folder.iterdir()) and CANARY not in "".join(lines)


def test_a_llama_cpp_stream_passes_through_and_is_recorded_without_usage_as_it_sends_none(
        recorded: tuple[str, Path, list[str]], model_name: str) -> None:
    url, folder, _lines = recorded
    with openai.OpenAI(base_url=url, api_key=CANARY, max_retries=0, timeout=TIMEOUT,
                       http_client=openai.DefaultHttpxClient(trust_env=False, timeout=TIMEOUT)) as api:
        chunks = list(api.chat.completions.create(model=model_name, messages=MESSAGES, max_tokens=16, temperature=0,
                                                  seed=1, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    [captured] = bodies(folder)
    record = exchange(captured)
    assert record["stream"] is True and record["status"] == 200
    assert record["response"]["choices"][0]["message"]["content"] == text  # reassembled from the relayed chunks
    assert [c.usage for c in chunks if c.usage is not None] == []  # the finding above: the server sends no usage chunk
    assert record["usage"] is None  # and none is invented
    assert CANARY.encode() not in b"".join(p.read_bytes() for p in folder.iterdir())

"""``LiveModel`` against the real llama.cpp server: answers, usage, the response cache, one-line errors."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerLog

from zhin_cli.tools.eval.live import LiveModel, LiveModelError

BODY: dict[str, Any] = {
    "model": "ignored-by-override",
    "messages": [{"role": "system", "content": "Answer in one short sentence."},
                 {"role": "user", "content": "What colour is the sky on a clear day?"}],
    "temperature": 0,
    "max_tokens": 24,
}


def live(base_url: str, model_name: str, tmp_path: Path, **kwargs: Any) -> LiveModel:
    return LiveModel(base_url=base_url, model=model_name, cache_dir=tmp_path / "cache", timeout=120, **kwargs)


def test_complete_returns_text_and_usage(base_url: str, model_name: str, tmp_path: Path) -> None:
    reply = live(base_url, model_name, tmp_path).complete(BODY, seed=1)
    assert reply.text.strip() and not reply.cached and reply.latency_ms > 0
    assert reply.usage is not None
    assert reply.usage["total_tokens"] == reply.usage["prompt_tokens"] + reply.usage["completion_tokens"]
    assert 1 <= reply.usage["completion_tokens"] <= 24


def test_second_identical_call_is_served_from_the_cache(base_url: str, model_name: str, tmp_path: Path,
                                                         server_log: ServerLog) -> None:
    before = server_log.chat_requests()
    first = live(base_url, model_name, tmp_path).complete(BODY, seed=3)
    after_first = server_log.chat_requests()
    again = live(base_url, model_name, tmp_path).complete(BODY, seed=3)
    assert after_first == before + 1  # control: the server's log does count our requests
    assert server_log.chat_requests() == after_first  # the second call never reached the server
    assert again.cached and (again.text, again.usage) == (first.text, first.usage)
    assert again.latency_ms < first.latency_ms


def test_use_cache_false_calls_the_server(base_url: str, model_name: str, tmp_path: Path, server_log: ServerLog) -> None:
    live(base_url, model_name, tmp_path).complete(BODY, seed=4)
    before = server_log.chat_requests()
    fresh = live(base_url, model_name, tmp_path, use_cache=False).complete(BODY, seed=4)
    assert not fresh.cached
    assert server_log.chat_requests() == before + 1


def test_a_request_the_server_rejects_is_one_line(base_url: str, model_name: str, tmp_path: Path) -> None:
    # llama-cpp-python's server validates roles with pydantic and answers an unknown role with an error status
    body = {**BODY, "messages": [{"role": "narrator", "content": "Once upon a time"}]}
    with pytest.raises(LiveModelError) as caught:
        live(base_url, model_name, tmp_path, max_retries=0).complete(body)
    message = str(caught.value)
    assert message.startswith(f"live model at {base_url}: HTTP ")
    assert "\n" not in message and len(message) < 500


def test_nothing_listening_is_one_line(model_name: str, tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    with pytest.raises(LiveModelError, match=r"cannot connect"):
        live(url, model_name, tmp_path, max_retries=0).complete(BODY)

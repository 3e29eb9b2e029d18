"""The live tier: tests against a real llama.cpp server with SmolLM2-135M-Instruct on 127.0.0.1.

Run only by ``make eval-live`` (``scripts/live_server.py run`` starts the server and sets ``OPENAI_BASE_URL``
and ``ZHIN_LIVE_MODEL``); ``make test`` does not collect this folder (``norecursedirs`` in pyproject.toml).
Without a server these tests fail with a clear message: they are never skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from zhin_cli.tools.eval.live import is_loopback_url

TIMEOUT = 120.0


def live_base_url() -> str:
    url = os.environ.get("OPENAI_BASE_URL", "")
    if not url or not is_loopback_url(url):
        pytest.fail("the live tier needs a local model server: run `make eval-live` "
                    f"(OPENAI_BASE_URL is {url!r}, expected http://127.0.0.1:PORT/v1)", pytrace=False)
    return url


@pytest.fixture(scope="session")
def base_url() -> str:
    return live_base_url()


@pytest.fixture(scope="session")
def model_name() -> str:
    return os.environ.get("ZHIN_LIVE_MODEL") or "smollm2-135m"


@pytest.fixture(scope="session")
def api(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="local", max_retries=0, timeout=TIMEOUT,
                       http_client=openai.DefaultHttpxClient(trust_env=False, timeout=TIMEOUT)) as client:
        yield client


class ServerLog:
    """The llama.cpp server's log (uvicorn's access lines): how many chat requests really reached it."""

    def __init__(self) -> None:
        path = os.environ.get("ZHIN_LIVE_SERVER_LOG")
        if not path:
            pytest.fail("ZHIN_LIVE_SERVER_LOG is not set: run the live tier through scripts/live_server.py", pytrace=False)
        self.path = Path(path)

    def chat_requests(self) -> int:
        text = self.path.read_text(encoding="utf-8", errors="replace")
        return len(re.findall(r'"POST /v1/chat/completions HTTP/1\.1" \d{3}', text))


@pytest.fixture
def server_log() -> ServerLog:
    return ServerLog()

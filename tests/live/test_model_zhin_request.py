"""Requests zhin assembles from the fixture sessions, sent unchanged to the real server.

``trace`` replays the fixtures with the ``openai-compatible`` profile (a generic OpenAI-shaped server: system
messages where state changes, plain string content); each wire body goes to the model through ``LiveModel``
with the cache off. The server's own prompt token count must agree with zhin's estimate to an order of
magnitude (different tokenizers: zhin counts with tiktoken, the server with SmolLM2's BPE, which spends more
tokens on Chinese).

Finding (llama-cpp-python 0.3.36): its server validates messages with pydantic, and an assistant message that
only calls tools must have string content: ``"content": null`` (what OpenAI documents and what
``openai-compatible`` sends) is answered with HTTP 500 "7 validation errors". A profile with
``null_content="empty"`` (as the Qwen3/Gemma template families use) is accepted. The test registers such a
profile the way a user's plugin would; docs/live.md records the recommendation.

Turns are chosen to keep the tier within minutes on 2 CPU cores: all of private-chat and legacy-upstream, and
the group-busy turns around its first tool loop (consecutive turns share their prefix, which the server
reuses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.providers import PROFILES
from zhin_cli.tools.eval.live import LiveModel, LiveModelError
from zhin_cli.tools.trace.trace import trace

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LLAMA_PROFILE = "llama-cpp"
TURNS: dict[str, list[int] | None] = {"private-chat.jsonl": None, "legacy-upstream.jsonl": None, "group-busy.jsonl": [4, 5, 6]}


def requests(name: str, model: str, provider: str) -> list[AssembledRequest]:
    found = trace(str(FIXTURES / name), provider=provider, model=model, all_turns=True, cwd=FIXTURES).requests
    wanted = TURNS[name]
    return [r for r in found if wanted is None or r.turn in wanted]


def has_null_content(body: dict[str, Any]) -> bool:
    return any(m.get("role") == "assistant" and m.get("content") is None for m in body["messages"])


@pytest.fixture(scope="module")
def llama_profile() -> str:
    """The shipped profile for this server (zhin_cli/pipeline/providers/local.py): tool-call messages with "" content."""
    assert PROFILES[LLAMA_PROFILE].null_content == "empty"
    return LLAMA_PROFILE


@pytest.mark.parametrize("fixture", list(TURNS))
def test_every_assembled_turn_is_accepted(base_url: str, model_name: str, tmp_path: Path, fixture: str,
                                          llama_profile: str) -> None:
    assembled = requests(fixture, model_name, llama_profile)
    assert len(assembled) == len(TURNS[fixture] or assembled) >= 3, fixture
    live = LiveModel(base_url=base_url, cache_dir=tmp_path, use_cache=False, timeout=600, max_retries=0)
    for request in assembled:
        assert request.verdict.ok, (request.turn, request.verdict.as_dict())
        assert not has_null_content(request.request)
        reply = live.complete({**request.request, "max_tokens": 8, "temperature": 0}, seed=0)
        assert reply.usage is not None, request.turn
        served = reply.usage["prompt_tokens"]
        assert request.prompt_tokens / 3 <= served <= request.prompt_tokens * 4, (request.turn, request.prompt_tokens, served)
        assert 1 <= reply.usage["completion_tokens"] <= 8


def test_null_content_after_a_tool_call_is_rejected(base_url: str, model_name: str, tmp_path: Path) -> None:
    # the smallest zhin request with a tool loop in its history, as openai-compatible renders it
    with_tools = [r for r in requests("private-chat.jsonl", model_name, "openai-compatible") if has_null_content(r.request)]
    assert with_tools, "private-chat has a tool call"
    live = LiveModel(base_url=base_url, cache_dir=tmp_path, use_cache=False, timeout=600, max_retries=0)
    with pytest.raises(LiveModelError) as caught:
        live.complete({**with_tools[0].request, "max_tokens": 8})
    assert "HTTP 500" in str(caught.value) and "validation error" in str(caught.value)
    # control: the same turn with "" instead of null is accepted
    body = {**with_tools[0].request, "max_tokens": 8,
            "messages": [{**m, "content": "" if m.get("content") is None else m["content"]} for m in with_tools[0].request["messages"]]}
    assert live.complete(body).usage is not None

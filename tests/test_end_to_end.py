"""The assembler's real requests, sent with the real clients to the loopback conformance server.

Every turn of the busy group fixture (bursts, events, a join during a tool call, compaction) is replayed,
rendered for a provider, and POSTed over HTTP; the server validates each one and accounts prompt-cache
hits from its own prefix cache under the provider's rules.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import openai
import pytest
from builders import replay

from zhin_cli.store.jsonl import read_session
from zhin_cli.tools.serve.server import running_server

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize(("provider", "model"), [("openai", "gpt-4o"), ("deepseek", "deepseek-chat")])
def test_every_turn_is_accepted_over_http_and_the_stable_prefix_is_cached(provider: str, model: str) -> None:
    requests = replay(read_session(FIXTURES / "group-busy.jsonl"), provider=provider, model=model)
    cached: list[int] = []
    prompt: list[int] = []
    with running_server(provider=provider, port=0) as (base_url, _server), openai.OpenAI(
        base_url=base_url, api_key="test-key", max_retries=0, timeout=30
    ) as client:
        for request in requests:
            body = request.request
            reply = client.chat.completions.create(model=body["model"], messages=body["messages"])
            assert reply.choices[0].message.content
            assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
            cached.append(reply.usage.prompt_tokens_details.cached_tokens or 0)
            prompt.append(reply.usage.prompt_tokens)
    assert [c > 0 for c in cached] == expected_hits(requests, prompt, minimum=1024 if provider == "openai" else 64)


def expected_hits(requests, prompt: list[int], minimum: int) -> list[bool]:  # type: ignore[no-untyped-def]
    """While the window stays put (no compaction, no tail cut), a turn hits exactly when the previous
    request was long enough to be cached. When the window moves, only the system prompt is still shared:
    a hit then depends on whether the system prompt alone reaches the provider's minimum."""
    hits = [False]
    for previous, current, previous_tokens in zip(requests, requests[1:], prompt, strict=False):
        moved = (previous.window.dropped, previous.window.summary_anchor) != (
            current.window.dropped, current.window.summary_anchor)
        system = sum(s.tokens for s in current.segments if s.kind in ("system", "environment", "role_rules", "platform"))
        hits.append(system >= minimum if moved else previous_tokens >= minimum)
    return hits


def test_a_request_with_the_join_inside_the_tool_group_is_refused_over_http() -> None:
    requests = replay(read_session(FIXTURES / "group-busy.jsonl"))
    with_tool = next(r for r in requests if any(m.get("tool_calls") for m in r.request["messages"]))
    messages = list(with_tool.request["messages"])
    call = next(i for i, m in enumerate(messages) if m.get("tool_calls"))
    messages.insert(call + 1, {"role": "system", "content": "[state change] 10010 join 1048877509 on 10:31 by 10003"})
    with running_server(provider="openai", port=0) as (base_url, _server), openai.OpenAI(
        base_url=base_url, api_key="test-key", max_retries=0, timeout=30
    ) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="gpt-4o", messages=messages)
    assert caught.value.status_code == 400
    assert "must be followed by tool messages responding to each 'tool_call_id'" in str(caught.value)


def test_anthropic_requests_are_accepted_and_read_the_cache_after_the_first() -> None:
    requests = replay(read_session(FIXTURES / "group-busy.jsonl"), provider="anthropic", model="claude-sonnet-5")
    read: list[int] = []
    prompt: list[int] = []
    with running_server(provider="openai", port=0) as (base_url, _server), httpx2.Client(trust_env=False, timeout=30) as http:
        for request in requests:
            response = http.post(f"{base_url}/messages", json=request.request)
            assert response.status_code == 200, response.text
            usage = response.json()["usage"]
            read.append(usage["cache_read_input_tokens"])
            prompt.append(usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"])
    assert [r > 0 for r in read] == expected_hits(requests, prompt, minimum=1024)

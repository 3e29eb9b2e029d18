"""One prompt_tokens, one cache simulator: for every turn of every fixture under OpenAI, Anthropic, DeepSeek and
Gemini, ``zhin serve``'s usage (over real HTTP, read back with the usage normaliser) equals what prefix-diff
reports and what trace reports as ``prompt_tokens``; ``zhin report economy``'s simulation equals serve's answer
for the same requests with the cache cold at each cache group (``answer`` in process, a fresh cache per group).
cached ≤ prompt on every turn. Negative control: a server that serialises differently (serve's old canonical-JSON
blocks) is caught by the same comparison."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from zhin_cli.cache import PrefixCache, PrefixPlan
from zhin_cli.cache.diff import diff_turns
from zhin_cli.cache.usage import normalize_usage
from zhin_cli.core.tokens import counter, encoding_for_model
from zhin_cli.pipeline.assemble import AssembledRequest, Assembler
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.providers import resolve_profile
from zhin_cli.store import load_session
from zhin_cli.tools.report.economy import ProviderCase, simulate
from zhin_cli.tools.serve.server import answer, running_server

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures").glob("*.jsonl"))
MODELS = {"openai": "gpt-4o", "anthropic": "claude-sonnet-5", "deepseek": "deepseek-chat", "gemini": "gemini-2.5-flash"}
TIMEOUT = 30.0
Usage = tuple[int, int]  # (prompt tokens, cached tokens)


def replay(fixture: Path, provider: str) -> list[AssembledRequest]:
    session = load_session(str(fixture), db=None, cwd=ROOT)
    registry, generations = Config().registry()
    try:
        return list(Assembler(registry, Config(), provider=provider, model=MODELS[provider]).replay(session))
    finally:
        for generation in generations:
            generation.release()


def route(provider: str, model: str) -> str:
    if provider == "anthropic":
        return "/v1/messages"
    if provider == "gemini":
        return f"/v1beta/models/{model}:generateContent"
    return "/v1/chat/completions"


def usage_of(provider: str, reply: dict[str, Any]) -> Usage:
    kind = {"anthropic": "anthropic-messages", "gemini": "gemini-generate"}.get(provider, "openai-chat")
    usage = normalize_usage(kind, reply["usage"] if "usage" in reply else reply)
    assert usage.total_prompt is not None
    return usage.total_prompt, usage.cache_read or 0


def served_over_http(provider: str, requests: list[AssembledRequest]) -> list[Usage]:
    """Every request POSTed in order to one real server (the openai client for Chat Completions)."""
    server_provider = provider if provider in ("openai", "deepseek") else "openai"
    out: list[Usage] = []
    with running_server(provider=server_provider) as (base_url, _server):
        root = base_url.removesuffix("/v1")
        if provider in ("openai", "deepseek"):
            api = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0, timeout=TIMEOUT,
                                http_client=openai.DefaultHttpxClient(trust_env=False, timeout=TIMEOUT))
            with api:
                for request in requests:
                    body = dict(request.request)
                    reply = api.chat.completions.create(**body)
                    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
                    out.append((reply.usage.prompt_tokens, reply.usage.prompt_tokens_details.cached_tokens or 0))
            return out
        with httpx2.Client(trust_env=False, timeout=TIMEOUT) as web:
            for request in requests:
                response = web.post(root + route(provider, request.model), json=request.request)
                assert response.status_code == 200, response.text
                out.append(usage_of(provider, response.json()))
    return out


def served_in_process(provider: str, requests: list[AssembledRequest], cold: list[bool],
                      plan_of: Any = None) -> list[Usage]:
    """``serve.answer`` for each request; a fresh cache where ``cold`` says a cache group starts. ``plan_of``: the
    negative control's own serialisation (a PrefixPlan per body) instead of the server's."""
    server_provider = provider if provider in ("openai", "deepseek") else "openai"
    cache = PrefixCache()
    out: list[Usage] = []
    for request, first in zip(requests, cold, strict=True):
        if first:
            cache = PrefixCache()
        if plan_of is not None:
            profile = resolve_profile(provider, request.model)
            outcome = cache.account((profile.name, request.model), plan_of(request.request),
                                                  counter(encoding_for_model(request.model)), profile.cache)
            out.append((outcome.prompt_tokens, outcome.read))
            continue
        reply = answer(route(provider, request.model), json.dumps(request.request).encode(), provider=server_provider,
                       cache=cache)
        assert reply.status == 200 and reply.body is not None, reply.body
        out.append(usage_of(provider, reply.body))
    return out


def prefix_diff_usage(requests: list[AssembledRequest]) -> list[Usage]:
    """prefix-diff's figures per turn; the first turn (no pair) by trace's prompt_tokens and an empty cache."""
    diff = diff_turns(requests[0].session_id, iter(requests))
    return [(requests[0].prompt_tokens, 0)] + [(p.prompt_tokens, p.cached_tokens) for p in diff.pairs]


def mismatches(expected: list[Usage], got: list[Usage], turns: list[int]) -> list[str]:
    return [f"turn {turn}: expected prompt/cached {a}, got {b}" for turn, a, b in zip(turns, expected, got, strict=True)
            if a != b]


CASES = [pytest.param(fixture, provider, id=f"{fixture.stem}-{provider}") for fixture in FIXTURES for provider in MODELS]


@pytest.fixture(scope="module")
def requests_by_case() -> Iterator[dict[tuple[Path, str], list[AssembledRequest]]]:
    yield {}


def requests_for(cache: dict[tuple[Path, str], list[AssembledRequest]], fixture: Path, provider: str) -> list[AssembledRequest]:
    if (fixture, provider) not in cache:
        cache[(fixture, provider)] = replay(fixture, provider)
    return cache[(fixture, provider)]


@pytest.mark.parametrize(("fixture", "provider"), CASES)
def test_serve_prefix_diff_trace_and_economy_agree_on_every_turn(
        fixture: Path, provider: str, requests_by_case: dict[tuple[Path, str], list[AssembledRequest]]) -> None:
    requests = requests_for(requests_by_case, fixture, provider)
    assert requests and all(r.verdict.ok for r in requests)
    turns = [r.turn for r in requests]
    served = served_over_http(provider, requests)
    assert mismatches(prefix_diff_usage(requests), served, turns) == []
    assert [r.prompt_tokens for r in requests] == [prompt for prompt, _ in served]  # trace's figure
    assert all(0 <= cached <= prompt for prompt, cached in served)
    model = MODELS[provider]
    economy = simulate(load_session(str(fixture), db=None, cwd=ROOT), Config(), ProviderCase(provider, model),
                       encoding=encoding_for_model(model))
    cold = [r.first for r in economy.requests]
    assert [r.turn for r in economy.requests] == turns
    simulated = [(r.adr_prompt, r.adr_cached) for r in economy.requests]
    assert mismatches(simulated, served_in_process(provider, requests, cold), turns) == []


def test_the_comparison_sees_hits() -> None:
    """The agreement is not vacuous: the busy fixture has cache hits under every provider."""
    busy = ROOT / "fixtures" / "group-busy.jsonl"
    for provider in MODELS:
        requests = replay(busy, provider)
        assert any(cached > 0 for _, cached in prefix_diff_usage(requests)), provider


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _json_blocks(body: dict[str, Any]) -> PrefixPlan:
    """serve's serialisation before the one wire model: each tool and message as one canonical JSON block."""
    return PrefixPlan([f"tool {_canonical(t)}" for t in body.get("tools", [])]
                      + [f"message {_canonical(m)}" for m in body.get("messages") or body.get("contents") or []])


@pytest.mark.parametrize("provider", ["openai", "deepseek"])
def test_negative_control_a_different_serialisation_is_caught(provider: str) -> None:
    busy = ROOT / "fixtures" / "group-busy.jsonl"
    requests = replay(busy, provider)
    turns = [r.turn for r in requests]
    cold = [False] * len(requests)
    cold[0] = True
    expected = prefix_diff_usage(requests)
    assert mismatches(expected, served_in_process(provider, requests, cold), turns) == []  # the real server agrees
    other = served_in_process(provider, requests, cold, plan_of=_json_blocks)
    assert len(mismatches(expected, other, turns)) == len(turns)  # every turn's prompt tokens differ

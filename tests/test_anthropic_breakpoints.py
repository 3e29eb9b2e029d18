"""Anthropic breakpoint placement (issue 18 §4; docs/design-notes.md "Anthropic breakpoint placement").

The renderer marks the system prompt, the block before the runtime tail, and — new — the last block before the
newest assistant message, where the request that produced that message put its tail breakpoint: the next request
reads that entry however many member messages came since (the 20-block look-back missed it past 20 blocks).
Negative controls: no mark after the tail breakpoint (a tool loop's results), never on the tail itself, never more
than 4; and the placement never costs more than the old one on any request of a session.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from builders import SEC, T0, History, replay, reply_gap

from zhin_cli.cache.cost import Cost
from zhin_cli.cache.replay import replay_cache
from zhin_cli.core.model import Session
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.providers import anthropic
from zhin_cli.pipeline.validate import validate
from zhin_cli.store.jsonl import read_session
from zhin_cli.tools.fixtures.synth import SynthOptions, synthesize
from zhin_cli.tools.report.economy import CASES, simulate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MODEL = "claude-sonnet-5"


def marks(body: dict[str, Any]) -> list[tuple[int, int]]:
    """(message, block) of every cache_control in the messages; the system's as (-1, block)."""
    out = [(-1, j) for j, b in enumerate(body["system"]) if "cache_control" in b]
    for i, message in enumerate(body["messages"]):
        out.extend((i, j) for j, b in enumerate(message["content"]) if "cache_control" in b)
    return out


@pytest.fixture
def placement() -> Iterator[None]:
    kept = anthropic.PLACEMENT
    yield
    anthropic.PLACEMENT = kept


def test_the_chosen_placement_marks_the_previous_turns_breakpoint() -> None:
    assert anthropic.PLACEMENT == "tail+previous"
    first, second = replay(reply_gap(25).session(), provider="anthropic", model=MODEL)
    body = second.request
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    last = len(body["messages"][2]["content"]) - 1
    assert body["messages"][2]["content"][last]["text"].startswith("[scene_id:")  # the runtime tail, unmarked
    # system; the block the first request marked before its tail (its last history block); before the tail
    assert marks(body) == [(-1, 0), (0, 0), (2, last - 1)] and len(marks(body)) <= anthropic.MAX_BREAKPOINTS
    assert marks(first.request) == [(-1, 0), (0, 0)]  # the first request: the same block, before its tail
    assert [b.label for b in second.cache_breakpoints] == ["after system", "after previous turn", "before tail"]
    assert [b.message_index for b in second.cache_breakpoints] == [-1, 0, 2]
    verdict = validate(second.profile.validator, body, MODEL)
    assert verdict.ok, verdict.message


def test_a_tool_loop_gets_no_mark_after_the_tail_breakpoint() -> None:
    """Negative control: the newest assistant message follows the tail (a tool loop): its block before is the tail
    or a tool result — marking it would write 1.25× what stays uncached today. Still 2 breakpoints."""
    h = History()
    h.user(T0, "10007", "@bot weather?")
    h.assistant(T0 + 2 * SEC, "let me check", calls=[("call_1", "weather")])
    h.result(T0 + 3 * SEC, "call_1", "sunny")
    h.assistant(T0 + 4 * SEC, "sunny", calls=[("call_2", "air")])
    h.result(T0 + 5 * SEC, "call_2", "good")
    h.assistant(T0 + 6 * SEC, "sunny and good air")
    last = replay(h.session(), provider="anthropic", model=MODEL)[-1]
    body = last.request
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert marks(body) == [(-1, 0), (0, 0)]  # the tail is (0, 1); nothing later is marked
    assert validate(last.profile.validator, body, MODEL).ok


def test_the_previous_turns_entry_is_read_past_the_look_back(placement: None) -> None:
    """25 member messages (26 blocks) after the old breakpoint: the old placement reads the system prompt only,
    the chosen one the whole prefix up to that breakpoint (what the first request wrote); 10 messages: both."""
    case = replace(CASES["anthropic"], min_tokens=1)
    chosen = {n: simulate(reply_gap(n).session(), Config(), case).requests for n in (10, 25)}
    anthropic.PLACEMENT = "tail"
    old = {n: simulate(reply_gap(n).session(), Config(), case).requests for n in (10, 25)}
    system_only = old[10][1].flat_cached
    written_first = chosen[25][0].adr.written  # the first request's entry (system + 早), read whole
    assert old[25][1].adr_cached == system_only < written_first == chosen[25][1].adr_cached
    assert old[10][1].adr_cached == chosen[10][1].adr_cached > system_only  # within the look-back: no change


def per_request_costs(session: Session) -> list[float]:
    case = CASES["anthropic"]
    choice = Config().price_table().choose(case.provider, case.model)
    assert choice is not None
    with Pipeline.open(Config(), provider=case.provider, model=case.model) as pipeline:
        return [Cost.of(r.outcome, choice.price).usd
                for r in replay_cache(session, pipeline, "o200k_base", min_tokens=case.min_tokens, limit=False)]


def test_the_placement_never_costs_more_than_the_old_one(placement: None) -> None:
    """Its breakpoints are a superset of the old ones, all at or before the last: each request reads at least as
    much and writes no more. Checked per request on group-busy and a busy synthetic session (4× faster clock)."""
    sessions = [read_session(FIXTURES / "group-busy.jsonl")]
    squeezed = synthesize(SynthOptions(members=40, messages=600, seed=5))
    start = squeezed.messages[0].timestamp
    for message in squeezed.messages:
        message.timestamp = start + (message.timestamp - start) // 4
    sessions.append(dataclasses.replace(squeezed, summaries=[replace(s, timestamp=start + (s.timestamp - start) // 4)
                                                             for s in squeezed.summaries]))
    for session in sessions:
        chosen = per_request_costs(session)
        anthropic.PLACEMENT = "tail"
        old = per_request_costs(session)
        anthropic.PLACEMENT = "tail+previous"
        assert len(chosen) == len(old) > 5
        assert all(c <= o + 1e-12 for c, o in zip(chosen, old, strict=True))
    assert sum(chosen) < sum(old)  # the busy one: some request reads what the old placement missed


def test_each_claude_model_caches_from_its_own_minimum(zhin: Any) -> None:
    """providers.md §2.5: Haiku 4.5 caches nothing below 4,096 tokens, Opus 5 from 512; group-busy's prompts are
    ~2,000 tokens. Control: Sonnet 5 (1,024) reads and writes on the same session."""
    from conftest import FIXTURES

    def policy(model: str) -> dict[str, Any]:
        result = zhin("report", "window", FIXTURES / "group-busy.jsonl", "-p", "anthropic", "--model", model, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["default"]

    haiku, sonnet = policy("claude-haiku-4-5"), policy("claude-sonnet-5")
    assert haiku["cost"]["cached_tokens"] == haiku["cost"]["cache_write_tokens"] == 0
    assert sonnet["cost"]["cached_tokens"] > 0 and sonnet["cost"]["cache_write_tokens"] > 0

"""``zhin stats cache``: hit rates from logged usage, first of group vs later (issue 6 §6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from builders import SEC, T0, History

from zhin_cli.core.model import AssistantMessage
from zhin_cli.store.jsonl import read_session
from zhin_cli.tools.stats.cache import cache_stats

BUSY = Path(__file__).resolve().parent.parent / "fixtures" / "group-busy.jsonl"


def logged(h: History, ts: int, provider: str, model: str, usage: dict[str, Any] | None) -> None:
    h.user(ts - SEC, "10002", "q")
    message = h.assistant(ts, "a")
    message.provider, message.model, message.usage = provider, model, usage


def openai_usage(prompt: int, cached: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": cached}}


def anthropic_usage(uncached: int, write: int, read: int) -> dict[str, Any]:
    return {"input_tokens": uncached, "cache_creation_input_tokens": write, "cache_read_input_tokens": read, "output_tokens": 5}


def openai_history() -> History:
    # OpenAI keeps a prefix 600 s: requests at 0, 60, 120 s form one group, 2000 s starts another.
    h = History()
    for offset, prompt, cached in [(0, 2000, 0), (60, 2100, 1920), (120, 2200, 2048), (2000, 2300, 0), (2060, 2400, 2304)]:
        logged(h, T0 + offset * SEC, "openai", "gpt-4o", openai_usage(prompt, cached))
    return h


def anthropic_history() -> History:
    # Anthropic keeps a prefix 300 s: 600 s is 400 s after 200 s, so it starts a new group.
    h = History()
    for offset, usage in [
        (0, anthropic_usage(50, 3000, 0)),
        (200, anthropic_usage(60, 100, 3000)),
        (600, anthropic_usage(40, 3200, 0)),
        (700, anthropic_usage(30, 0, 3200)),
        (750, {"output_tokens": 5}),  # no prompt counts at all: unreported, not a miss
    ]:
        logged(h, T0 + offset * SEC, "anthropic", "claude-sonnet-4-5", usage)
    return h


def rows(histories: list[History], **options: Any) -> dict[str, dict[str, Any]]:
    data = cache_stats([h.session() for h in histories], **options).as_dict()
    return {row["provider"]: row for row in data["models"]}


def test_openai_shaped_usage_reproduces_hand_computed_rates() -> None:
    row = rows([openai_history()])["openai"]
    assert row["groups"] == 2 and row["cache_lifetime_seconds"] == 600
    assert row["first"] == {"requests": 2, "unreported": 0, "prompt_tokens": 4300, "cache_read_tokens": 0,
                            "requests_with_hits": 0, "hit_rate": 0.0}
    assert row["later"]["prompt_tokens"] == 6700 and row["later"]["cache_read_tokens"] == 6272
    assert row["later"]["hit_rate"] == pytest.approx(6272 / 6700)


def test_anthropic_shaped_usage_reproduces_hand_computed_rates() -> None:
    row = rows([anthropic_history()])["anthropic"]
    assert row["groups"] == 2 and row["cache_lifetime_seconds"] == 300
    # disjoint counts: total prompt = input + cache writes + cache reads
    assert row["first"]["prompt_tokens"] == 3050 + 3240 and row["first"]["hit_rate"] == 0.0
    assert row["later"]["prompt_tokens"] == 3160 + 3230 and row["later"]["cache_read_tokens"] == 6200
    assert row["later"]["hit_rate"] == pytest.approx(6200 / 6390)
    assert row["later"]["unreported"] == 1 and row["later"]["requests"] == 2


def test_the_cache_lifetime_decides_the_groups() -> None:
    # Negative control: with a 1-hour lifetime every Anthropic request after the first is "later".
    row = rows([anthropic_history()], lifetime_seconds=3600)["anthropic"]
    assert row["groups"] == 1 and row["first"]["requests"] == 1 and row["later"]["requests"] == 3
    assert row["later"]["hit_rate"] == pytest.approx(6200 / (3160 + 3240 + 3230))


def test_period_counts_requests_but_keeps_groups_that_began_before_it() -> None:
    # Only requests from 100 s on: the 120 s request is still "later" (its group began at 0 s).
    row = rows([openai_history()], since=T0 + 100 * SEC)["openai"]
    assert row["first"]["requests"] == 1 and row["later"]["requests"] == 2
    assert row["later"]["prompt_tokens"] == 2200 + 2400


def test_stored_upstream_usage_is_read_inclusively() -> None:
    session = read_session(BUSY)
    usages = [m.usage for m in session.messages if isinstance(m, AssistantMessage) and m.usage]
    row = cache_stats([session]).as_dict()["models"][0]
    total = row["first"]["prompt_tokens"] + row["later"]["prompt_tokens"]
    assert total == sum(u["input"] for u in usages)  # upstream's input already contains the cached part
    assert row["first"]["cache_read_tokens"] + row["later"]["cache_read_tokens"] == sum(u["cacheRead"] for u in usages)


def test_cli_json_and_table(zhin: Any, tmp_path: Path) -> None:
    files = []
    for name, history in [("a", openai_history()), ("b", anthropic_history())]:
        path = tmp_path / f"{name}.jsonl"
        lines: list[dict[str, Any]] = [{"type": "session", "session_id": f"s#{name}", "timezone": "UTC"}]
        for message in history.messages:
            line: dict[str, Any] = {"type": "message", "content": [{"type": "text", "text": message.text}],
                                    "timestamp": message.timestamp, "id": message.row_id}
            if isinstance(message, AssistantMessage):
                line.update(role="assistant", provider=message.provider, model=message.model, usage=message.usage)
            else:
                line.update(role="user", actor={"subjectId": "10002", "displayName": "小明"})
            lines.append(line)
        path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
        files.append(str(path))
    result = zhin("stats", "cache", *files, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["sessions"] == 2
    by_provider = {row["provider"]: row for row in data["models"]}
    assert by_provider["openai"]["later"]["hit_rate"] == pytest.approx(6272 / 6700)
    assert by_provider["anthropic"]["later"]["hit_rate"] == pytest.approx(6200 / 6390)
    table = zhin("stats", "cache", *files)
    assert table.returncode == 0 and "93.6%" in table.stdout and "97.0%" in table.stdout
    # --days before --until: a period that ends before every request counts nothing
    empty = json.loads(zhin("stats", "cache", *files, "--days", "1", "--until", "2020-01-01", "--json").stdout)
    assert all(row["first"]["requests"] == row["later"]["requests"] == 0 for row in empty["models"])
    # a period reaching back before year 1 is simply "everything up to --until", not an overflow
    everything = zhin("stats", "cache", *files, "--days", "99999999", "--json")
    assert everything.returncode == 0, everything.stderr
    assert {r["provider"]: r["later"]["requests"] for r in json.loads(everything.stdout)["models"]} == {"openai": 3, "anthropic": 2}


def test_cli_errors_are_one_line(zhin: Any, tmp_path: Path) -> None:
    result = zhin("stats", "cache", BUSY, "--until", "yesterday")
    assert result.returncode == 2 and result.stderr.startswith("zhin: error: --until") and "Traceback" not in result.stderr
    missing = zhin("stats", "cache", str(tmp_path / "nope.jsonl"))
    assert missing.returncode != 0 and "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def test_usage_without_cache_counts_is_unreported_not_a_miss() -> None:
    h = openai_history()
    logged(h, T0 + 2100 * 1000, "openai", "gpt-4o", {"prompt_tokens": 5000, "completion_tokens": 5})  # no details
    row = rows([h])["openai"]
    assert row["later"]["unreported"] == 1 and row["later"]["prompt_tokens"] == 6700

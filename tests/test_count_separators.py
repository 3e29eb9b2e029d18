"""Issue 31 §3: counts written one way across commands — ``stats cache``, ``budget check``, ``facts show`` and
``facts prune`` write a count of 1,000 or more with thousands separators (as trace and prefix-diff do), never an
id (user ids, owner, admins stay as stored)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from zhin_cli.store.facts import PruneReport
from zhin_cli.tools.stats.cache import Bucket, CacheStats, ModelStats

ROOT = Path(__file__).resolve().parent.parent
UNSEPARATED = re.compile(r"(?<![\w.,:/-])\d{4,}(?![\w,:/-])")  # 1234 standing alone: a count written plainly


def test_the_unseparated_pattern_tells_the_two_ways_apart() -> None:  # negative control of every check below
    assert UNSEPARATED.findall("groups 1234 │ 12000s │ +1500") == ["1234", "1500"]
    assert UNSEPARATED.findall("groups 1,234 │ 12,000s │ +1,500 │ 2026-10-18 │ gpt-4.1 │ 10:42") == []


def printed(monkeypatch: Any, module: Any, function: str, *args: Any) -> str:
    """What ``module.function(*args)`` prints on a wide stdout console."""
    console = Console(width=250, record=True, no_color=True, highlight=False)
    monkeypatch.setattr(module, "stdout_console", lambda: console)
    with console.capture() as captured:
        getattr(module, function)(*args)
    return captured.get()


def big_stats() -> CacheStats:
    row = ModelStats("anthropic", "claude-sonnet-5", 3600, groups=1234,
                     first=Bucket(requests=1234, unreported=1000, prompt_tokens=5_000_000, cache_read_tokens=1_000_000),
                     later=Bucket(requests=56789, unreported=1, prompt_tokens=9_000_000, cache_read_tokens=8_000_000))
    return CacheStats(sessions=4321, models={("anthropic", "claude-sonnet-5"): row})


def test_stats_cache_writes_counts_with_separators(monkeypatch: Any) -> None:
    from zhin_cli._cli import stats

    text = printed(monkeypatch, stats, "print_stats", big_stats())
    for figure in ("3,600 s", "1,234", "56,789", "1,001", "4,321 session(s)", "59,024 request(s) in it"):
        assert figure in text, (figure, text)
    assert UNSEPARATED.findall(text) == [], text


def write_budget(folder: Path, budget: int) -> Path:
    source = yaml.safe_load((ROOT / "prompt-budget.yaml").read_text(encoding="utf-8"))
    source["sessions"] = [str(ROOT / s) for s in source["sessions"]]
    source["profiles"] = [p for p in source["profiles"] if p["provider"] == "openai"]
    source["profiles"][0]["parts"]["total"] = budget  # measured 223: far under a budget of thousands
    path = folder / "budget.yaml"
    path.write_text(yaml.safe_dump(source), encoding="utf-8")
    return path


def test_budget_check_writes_budget_and_delta_with_separators(zhin: Any, tmp_path: Path) -> None:
    result = zhin("budget", "check", "--file", write_budget(tmp_path, 12_345))
    assert result.returncode == 0, result.stderr
    total = next(line for line in result.stdout.splitlines() if " total " in line)
    assert "12,345" in total and "-12,122" in total, total  # 223 measured
    assert UNSEPARATED.findall(result.stdout.replace(str(tmp_path), "")) == [], result.stdout


def test_facts_show_writes_the_member_count_with_separators_and_ids_as_stored() -> None:
    from zhin_cli._cli.facts import human_value

    assert human_value("member_count", 12345) == "12,345"
    assert human_value("member_count", 12) == "12"
    # ids are names, not counts: never separated (trace's scene line writes admins:10002,10003)
    assert human_value("owner_id", 10003) == "10003" and human_value("admins", [10002, 10003]) == "10002, 10003"
    assert human_value("user_id", "284100101") == "284100101"


def test_facts_prune_writes_its_counts_and_the_cap_with_separators() -> None:
    from zhin_cli.tools.facts.facts import prune_summary

    pairs = [("onebot11:x:group:1", str(n)) for n in range(1234)]
    text = prune_summary(PruneReport(dry_run=True, left=pairs, expired=pairs[:1000], cleaned=pairs[:5]))
    assert text == ("would remove 2,234 member rows: 1,234 left, 1,000 not updated for 90 days, 0 over 2,000 per "
                    "session; would clean text in 5 member rows")
    assert UNSEPARATED.findall(text) == []

"""One number, one definition: where the commands' cache assumptions coincide, every command bills every request
the same (docs/economy.md "Where the cost shows").

`report economy` and `report window` let a prefix go cold after the provider's cache lifetime and count every
provider's tokens with one tokenizer; `prefix-diff` and `trace` feed their requests to one warm cache in the
provider's own tokenizer. On a session whose requests all fall in one cache group, billed at OpenAI (whose
tokenizer is the one economy uses), those assumptions are the same — so must the figures be, to the micro-dollar.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import FIXTURES


def _compressed(tmp_path: Path, spacing_ms: int) -> Path:
    """fixtures/group-busy.jsonl with its messages ``spacing_ms`` apart (same rows, same order)."""
    lines = []
    for number, line in enumerate((FIXTURES / "group-busy.jsonl").read_text(encoding="utf-8").splitlines()):
        row = json.loads(line)
        if "timestamp" in row:
            row["timestamp"] = 1_761_699_600_000 + number * spacing_ms
        lines.append(json.dumps(row, ensure_ascii=False))
    path = tmp_path / "busy.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _figures(zhin: Callable[..., Any], session: Path) -> dict[str, list[float]]:
    def run(*args: Any) -> dict[str, Any]:
        result = zhin(*args)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    economy = run("report", "economy", session, "-p", "openai", "--json", "--per-request")
    rows = economy["sessions"][0]["cache"]["openai"]["per_request"]
    diff = run("prefix-diff", session, "-p", "openai", "--json")["sessions"][0]
    trace = run("trace", session, "-p", "openai", "--all", "--json")["requests"]
    window = run("report", "window", session, "-p", "openai", "--json", "-j", "1")
    return {"economy": [r["adr"]["usd"] for r in rows], "trace": [r["cost"]["usd"] for r in trace],
            # prefix-diff bills each pair's newer request; its summary adds the first request's
            "prefix-diff": [round(diff["summary"]["cost"]["total"] - sum(p["cost"]["usd"] for p in diff["pairs"]), 8)]
            + [p["cost"]["usd"] for p in diff["pairs"]],
            "first_of_group": [r["first_of_group"] for r in rows],
            "totals": [round(sum(r["adr"]["usd"] for r in rows), 8), economy["sessions"][0]["cache"]["openai"]["cost"]["adr"]["total"],
                       diff["summary"]["cost"]["total"], window["default"]["cost"]["total"]]}


def test_one_cache_group_every_command_bills_each_request_alike(zhin: Callable[..., Any], tmp_path: Path) -> None:
    figures = _figures(zhin, _compressed(tmp_path, 1000))
    assert figures["first_of_group"] == [True] + [False] * (len(figures["first_of_group"]) - 1)
    assert figures["economy"] == figures["trace"] == figures["prefix-diff"]
    totals = figures["totals"]
    assert max(totals) - min(totals) < 1e-7, totals


def test_a_cold_cache_after_the_lifetime_is_where_economy_and_prefix_diff_part(zhin: Callable[..., Any], tmp_path: Path) -> None:
    """Negative control: the same rows 20 minutes apart — every request starts a cache group, economy bills each
    one cold, prefix-diff (one warm cache, no clock) still bills the later ones at the cached price."""
    figures = _figures(zhin, _compressed(tmp_path, 1_200_000))
    assert all(figures["first_of_group"])
    assert sum(figures["economy"]) > sum(figures["prefix-diff"])

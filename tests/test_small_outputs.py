"""Issue 31, finding 4: small wrong outputs, each with a test that failed before the fix and a negative control.

* ``facts prune --dry-run`` ended ``would clean text in 0`` (no noun);
* ``facts show`` said ``admins: 10003`` where trace's scene line said ``admins:10002,10003`` (the import stored the
  session's first scene facts; the fixture promotes 10002 mid-session, so the later facts are right);
* ``eval --base/--head`` drew an empty bordered table and wrapped its title;
* ``budget check``'s ``model`` column was empty;
* ``prefix-diff --base/--head`` printed its ``base … → head …`` line on stderr and stdout;
* ``report window``'s legend listed ``D default`` with no D drawn;
* ``stats cache --days 3`` on older data said "no usage" without how to see it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from subprocess import CompletedProcess
from types import SimpleNamespace
from typing import Any, cast

from rich.console import Console

from zhin_cli._cli.eval import print_comparison
from zhin_cli.store.facts import PruneReport
from zhin_cli.tools.budget.budget import check_budget, load_budget
from zhin_cli.tools.eval.compare import compare_results, comparison_rows
from zhin_cli.tools.facts.facts import prune_summary
from zhin_cli.tools.report.window import WindowReport, role_legend
from zhin_cli.tools.stats.cache import CacheStats

Zhin = Callable[..., CompletedProcess[str]]
KEY = "icqq:8596238:group:1048877509"


# --- facts prune ---------------------------------------------------------------------------------------------


def test_prune_summary_names_what_it_cleans() -> None:
    dry = prune_summary(PruneReport(dry_run=True))
    assert dry.endswith("; would clean text in 0 member rows"), dry
    one = PruneReport(dry_run=False, cleaned=[(KEY, "10002")])
    assert prune_summary(one).endswith("; cleaned text in 1 member row")  # control: the real run, singular
    assert prune_summary(one).startswith("removed 0 member rows:")


def test_facts_prune_dry_run_line(zhin: Zhin, fixtures_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "mine.sqlite"
    assert zhin("import", fixtures_dir / "group-busy.jsonl", "--db", db).returncode == 0
    result = zhin("facts", "prune", "--dry-run", "--db", db)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("would clean text in 0 member rows"), result.stdout


# --- facts show agrees with trace ------------------------------------------------------------------------------


def scene_field(trace_stdout: str, name: str) -> str:
    found = re.findall(rf"\[scene_id:[^\]]*?;{name}:([^;]*);", trace_stdout)
    assert found, trace_stdout[:300]
    return found[-1]


def test_facts_show_admins_are_the_traces(zhin: Zhin, fixtures_dir: Path, tmp_path: Path) -> None:
    source = fixtures_dir / "group-busy.jsonl"
    db = tmp_path / "mine.sqlite"
    assert zhin("import", source, "--db", db).returncode == 0
    shown = json.loads(zhin("facts", "show", KEY, "--db", db, "--json").stdout)["scene"]
    traced = zhin("trace", KEY, "--db", db, "--show-request").stdout  # the last turn, as the bot would see it now
    assert shown["admins"] == scene_field(traced, "admins").split(",") == ["10002", "10003"]
    assert str(shown["member_count"]) == scene_field(traced, "member_count")
    text = zhin("facts", "show", KEY, "--db", db).stdout
    assert "admins: 10002, 10003" in text
    # control: the session's opening facts differ, so the comparison above can fail
    header = json.loads(source.read_text(encoding="utf-8").splitlines()[0])["scene"]
    assert header["admins"] == ["10003"] and header["member_count"] != shown["member_count"]


def test_facts_show_without_scene_changes_keeps_the_opening_facts(zhin: Zhin, fixtures_dir: Path, tmp_path: Path) -> None:
    lines = (fixtures_dir / "group-busy.jsonl").read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if json.loads(line).get("type") != "scene"]  # the control: no promotion line
    assert len(kept) == len(lines) - 2
    source = tmp_path / "no-changes.jsonl"
    source.write_text("\n".join(kept) + "\n", encoding="utf-8")
    db = tmp_path / "mine.sqlite"
    assert zhin("import", source, "--db", db).returncode == 0
    shown = json.loads(zhin("facts", "show", KEY, "--db", db, "--json").stdout)["scene"]
    assert shown["admins"] == ["10003"] and shown["member_count"] == 42
    assert shown["facts_updated_at"] == json.loads(kept[1])["timestamp"]


# --- eval before/after -----------------------------------------------------------------------------------------


def run_result(*statuses: str) -> dict[str, Any]:
    return {"cases": [{"file": "a.yaml", "id": f"c{n}", "status": status, "metrics": []} for n, status in enumerate(statuses)]}


def rendered(comparison: Any, width: int) -> str:
    out = StringIO()
    print_comparison(Console(file=out, width=width, color_system=None), comparison)
    return out.getvalue()


LONG = "main (7a07fc0, zhin.yaml and its plugins) "


def test_eval_before_after_without_changes_draws_no_table() -> None:
    comparison = compare_results(run_result("passed", "passed"), run_result("passed", "passed"), LONG + "base", LONG + "head")
    assert comparison_rows(comparison) == []
    text = rendered(comparison, 80)
    assert "┏" not in text and "└" not in text, text
    assert "no case changed" in text and "2 same · 0 regression(s)" in text
    words = set((f"eval before/after: {LONG}base → {LONG}head").split())
    lines = text.splitlines()
    title = [line for line in lines[:3] if "→" in line or line.startswith(("eval", " "))]
    assert all(word in words for line in title for word in line.split()), title  # wrapped between words only


def test_eval_before_after_with_a_regression_draws_its_row() -> None:  # the control
    comparison = compare_results(run_result("passed", "passed"), run_result("passed", "failed"), "main", "HEAD")
    rows = comparison_rows(comparison)
    assert [(r.case, r.change, r.verdicts) for r in rows] == [("a.yaml::c1", "regressed", "passed → failed")]
    text = rendered(comparison, 200)
    assert "┏" in text and "a.yaml:" in text and "c1 " in text and "regressed" in text


# --- budget check's model column -------------------------------------------------------------------------------


def test_budget_check_names_the_model_each_profile_measured(tmp_path: Path, fixtures_dir: Path) -> None:
    budget = tmp_path / "prompt-budget.yaml"
    budget.write_text(f"version: 1\nsessions:\n- {fixtures_dir / 'group-busy.jsonl'}\nprofiles:\n"
                      "- provider: openai\n  parts: {}\n- provider: deepseek\n  parts: {}\n"
                      "- provider: anthropic\n  model: claude-haiku-4-5\n  parts: {}\n", encoding="utf-8")
    report = check_budget(load_budget(budget), cwd=tmp_path)
    models = {r.provider: r.model for r in report.results}
    assert models == {"openai": "gpt-4o", "deepseek": "deepseek-chat", "anthropic": "claude-haiku-4-5"}
    assert all(r.model for r in report.results)


def test_budget_check_table_shows_the_model(zhin: Zhin, tmp_path: Path, fixtures_dir: Path) -> None:
    (tmp_path / "prompt-budget.yaml").write_text(
        f"version: 1\nsessions:\n- {fixtures_dir / 'group-busy.jsonl'}\nprofiles:\n- provider: deepseek\n  parts: {{}}\n",
        encoding="utf-8")
    result = zhin("budget", "check", "--json")
    parts = json.loads(result.stdout)["parts"]
    assert parts and {p["model"] for p in parts} == {"deepseek-chat"}, result.stdout
    text = zhin("budget", "check", env={"COLUMNS": "120"})
    assert "deepseek-chat" in text.stdout
    assert "zhin: note:" not in text.stderr  # the column says which model: no note besides


# --- prefix-diff --base/--head ---------------------------------------------------------------------------------


def test_prefix_diff_names_base_and_head_once(zhin: Zhin, tmp_path: Path, fixtures_dir: Path) -> None:
    (tmp_path / "a.yaml").write_text("provider: openai\n", encoding="utf-8")
    (tmp_path / "b.yaml").write_text("provider: openai\n", encoding="utf-8")
    result = zhin("prefix-diff", fixtures_dir / "group-busy.jsonl", "--base", "a.yaml", "--head", "b.yaml")
    assert result.returncode == 0, result.stderr
    both = result.stdout + result.stderr
    assert both.count("a.yaml → head b.yaml") == 1, both[:500]
    assert result.stdout.startswith("base a.yaml → head b.yaml")


def test_prefix_diff_with_a_database_still_names_it(zhin: Zhin, tmp_path: Path, fixtures_dir: Path) -> None:  # control
    db = tmp_path / "mine.sqlite"
    assert zhin("import", fixtures_dir / "group-busy.jsonl", "--db", db).returncode == 0
    (tmp_path / "a.yaml").write_text("provider: openai\n", encoding="utf-8")
    result = zhin("prefix-diff", KEY, "--db", db, "--base", "a.yaml", "--head", "a.yaml")
    assert result.returncode == 0, result.stderr
    assert "db: mine.sqlite" in result.stderr and "a.yaml → head a.yaml" not in result.stderr
    assert (result.stdout + result.stderr).count("a.yaml → head a.yaml") == 1


# --- report window's legend ------------------------------------------------------------------------------------


def figures(name: str) -> Any:
    return SimpleNamespace(policy=SimpleNamespace(name=name))


def test_window_legend_lists_only_marks_it_draws() -> None:
    shared = figures("default")
    report = cast(WindowReport, SimpleNamespace(recommended=shared, default=shared, sliding=figures("sliding 80→79")))
    legend = role_legend(report, {"R": "R", "D": "R", "S": "S"})
    assert legend == ["R recommended, default: default", "S sliding: sliding 80→79"]
    assert not any(line.startswith("D ") for line in legend)


def test_window_legend_names_each_mark_of_three_policies() -> None:  # the control: D is drawn, so it is listed
    report = cast(WindowReport, SimpleNamespace(recommended=figures("blocks 8→2"), default=figures("default"),
                                                sliding=figures("sliding 80→79")))
    assert role_legend(report, {"R": "R", "D": "D", "S": "R"}) == [
        "R recommended: blocks 8→2", "D default: default", "S sliding: sliding 80→79 (drawn under R: the same point)"]


def test_report_window_draws_every_mark_its_legend_names(zhin: Zhin, fixtures_dir: Path) -> None:
    result = zhin("report", "window", fixtures_dir / "group-busy.jsonl", "-p", "anthropic")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("cost per request against mean context"))
    legend = lines.index("● Pareto frontier  · dominated")
    plot = "\n".join(lines[start + 1:legend])
    marks = [line[0] for line in lines[legend + 1:] if re.match(r"^[RDS] ", line)]
    assert marks and all(mark in plot for mark in marks), (marks, plot)


# --- stats cache on older data ---------------------------------------------------------------------------------

NEWEST = 1_792_331_220_000  # 2026-10-18 ~13:47 UTC


def test_stats_period_line_says_how_to_see_older_usage() -> None:
    stats = CacheStats(sessions=3, since=NEWEST + 40 * 86_400_000, until=NEWEST + 43 * 86_400_000, newest=NEWEST,
                       oldest=NEWEST - 2 * 86_400_000)
    line = stats.period_line(3)
    assert "no usage in the last 3 days; newest " in line
    assert "to see it: --until 2026-10-18 --days 3" in line, line


def test_stats_cache_hint_is_a_period_that_holds_the_usage(zhin: Zhin, fixtures_dir: Path) -> None:
    source = fixtures_dir / "group-busy.jsonl"
    empty = zhin("stats", "cache", source, "--days", "3")
    hint = re.search(r"to see it: (--until \S+ --days 3)", empty.stdout)
    assert hint, empty.stdout
    shown = zhin("stats", "cache", source, *hint.group(1).split())  # the hint, followed
    assert re.search(r"· \d+ request\(s\) in it", shown.stdout), shown.stdout
    assert "to see it" not in shown.stdout  # control: usage in the period, no hint

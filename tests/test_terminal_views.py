"""Issue 31 (reviewer's findings on the terminal views): stats cache and budget check laid out to fit with ids and
figures whole, trace --all's footer and its segments column, trace's --model help, one share and lifetime format."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import clean_env, run_zhin
from rich.cells import cell_len

ROOT = Path(__file__).resolve().parent.parent
BUSY = ROOT / "fixtures" / "group-busy.jsonl"
DEMO_DB = ROOT / "tests" / "data" / "upstream-db" / "data.sqlite"


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("views")
    shutil.copyfile(DEMO_DB, folder / "demo.sqlite")  # a copy: the checked-in database stays as it is
    return folder


def output(args: list[str], width: int, cwd: Path) -> str:
    result = run_zhin(*args, cwd=cwd, env={**clean_env(), "COLUMNS": str(width)})
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("width", [60, 80, 100])
def test_stats_cache_shows_the_model_id_the_figures_and_the_lifetime_whole(width: int, demo_dir: Path) -> None:
    text = output(["stats", "cache", "--db", "demo.sqlite"], width, demo_dir)
    assert "gpt-4.1-mini" in text and "76.9%" in text and "83.9%" in text and "600 s" in text
    assert "…" not in text and "600s" not in text
    assert all(cell_len(line) <= width for line in text.splitlines())


def test_negative_control_the_cut_table_of_before_fails_the_stats_checks() -> None:
    before = "│ openai │ gpt-4… │ 600s   │ 7      │ 7      │ 76.9%  │ 20    │ 83.9%  │ 0     │"
    assert "gpt-4.1-mini" not in before and "…" in before and "600s" in before


@pytest.mark.parametrize("width", [60, 80])
def test_budget_check_is_a_line_per_part_not_a_card(width: int, demo_dir: Path) -> None:
    text = output(["budget", "check", "--file", str(ROOT / "prompt-budget.yaml")], width, demo_dir)
    lines = text.splitlines()
    parts = [line for line in lines if re.search(r"\bcore\.environment\b.*\b\d+\b.*\b\d+\b.*[+-]\d+.*\bok\b", line)]
    assert len(parts) == 4  # four profiles: each part a row holding its figures and status
    assert not any(line.lstrip().startswith(("budget:", "measured:", "status:")) for line in lines)  # no card fields
    assert len(lines) < 60 and all(cell_len(line) <= width for line in lines)


def test_budget_check_at_80_columns_is_one_table_naming_the_model_on_every_row(demo_dir: Path) -> None:
    text = output(["budget", "check", "--file", str(ROOT / "prompt-budget.yaml")], 80, demo_dir)
    rows = [line for line in text.splitlines() if line.startswith(("openai ", "anthropic ", "gemini ", "deepseek "))]
    assert len(rows) == 20 and all(re.match(r"\S+ +\S+ +\S+ +\d+ +\d+ +[+-]\d+ +\w+", row) for row in rows)


def test_negative_control_a_card_is_told_from_a_row() -> None:
    card = ["openai", "  model: gpt-4o", "  part: core.environment", "  budget: 24", "  measured: 24", "  status: ok"]
    assert any(line.lstrip().startswith("budget:") for line in card)
    assert not [line for line in card if re.search(r"\bcore\.environment\b.*\b\d+\b.*\b\d+\b.*[+-]\d+.*\bok\b", line)]


def test_trace_all_footer_names_the_warm_cached_share_with_one_decimal(demo_dir: Path) -> None:
    text = output(["trace", str(BUSY), "--all"], 200, demo_dir)
    assert re.search(r"warm cached share \d+\.\d% \(requests after the first", text)
    assert "cached share after the first" not in text and not re.search(r"share \d+%", text)


@pytest.mark.parametrize("width", [60, 80, 90])
def test_trace_all_has_no_column_holding_only_an_ellipsis(width: int, demo_dir: Path) -> None:
    text = output(["trace", str(BUSY), "--all"], width, demo_dir)
    rows = [line for line in text.splitlines() if re.match(r"^\s*\d+\s+[\d,]+\s+[\d,]+\s.*[✓✗]", line)]
    assert len(rows) == 16 and not any(line.rstrip().endswith("…") and not re.search(r"\d, …$", line.rstrip())
                                       for line in rows)
    assert "largest segments (tokens): --detail, or at least" in text  # says where the segments went


def test_negative_control_a_row_ending_in_a_lone_ellipsis_is_seen() -> None:
    row = "  1    868      0 $0.002170 ░░░      none-needed ✓  …"
    assert row.rstrip().endswith("…") and not re.search(r"\d, …$", row)


def test_trace_help_says_request_and_the_provider_default_rule(demo_dir: Path) -> None:
    text = re.sub(r"[\s│]+", " ", output(["trace", "--help"], 200, demo_dir))
    assert "the model stored with each request" in text and "provider's default model" in text
    assert "stored with each turn" not in text


def test_prefix_diff_writes_the_cached_share_with_one_decimal(demo_dir: Path) -> None:
    text = output(["prefix-diff", str(BUSY)], 200, demo_dir)
    assert re.search(r"cached share \d+\.\d%", text) and not re.search(r"cached share \d+%", text)


def test_trace_segment_table_at_60_columns_keeps_ids_and_kinds_whole(demo_dir: Path) -> None:
    text = output(["trace", str(BUSY), "--turn", "16"], 60, demo_dir)
    assert re.search(r"^core\.environment +environment +", text, re.M) and re.search(r"^core\.persona +role_rules ", text, re.M)
    assert "weight: --json, or a terminal of at least" in text  # the dropped column is named


@pytest.mark.parametrize(("value", "shown"), [(0.734, "73.4%"), (0.6911, "69.1%"), (1.0, "100.0%"), (0, "0.0%"), (None, "—")])
def test_a_share_is_written_with_one_decimal(value: float | None, shown: str) -> None:
    from zhin_cli.cache.cost import format_share

    assert format_share(value) == shown


def printed_at(monkeypatch: pytest.MonkeyPatch, width: int, stats: object) -> str:
    """What ``print_stats`` prints on a ``width``-column console."""
    from rich.console import Console

    from zhin_cli._cli import stats as module

    console = Console(width=width, record=True, no_color=True, highlight=False)
    monkeypatch.setattr(module, "stdout_console", lambda: console)
    with console.capture() as captured:
        module.print_stats(stats)  # type: ignore[arg-type]
    return captured.get()


LONG_MODEL = "qwen3-coder-480b-a35b-instruct-2507-fp8"


@pytest.mark.parametrize("width", [60, 80, 120, 250])
def test_stats_cache_keeps_a_long_model_id_and_its_figures_whole(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    from zhin_cli.tools.stats.cache import Bucket, CacheStats, ModelStats

    row = ModelStats("openai-compatible", LONG_MODEL, 300, groups=1234,
                     first=Bucket(requests=1234, prompt_tokens=5_000, cache_read_tokens=1_234),
                     later=Bucket(requests=56789, unreported=7, prompt_tokens=9_000, cache_read_tokens=8_123))
    text = printed_at(monkeypatch, width, CacheStats(sessions=2, models={("openai-compatible", LONG_MODEL): row}))
    for figure in (LONG_MODEL, "openai-compatible", "300 s", "1,234", "56,789", "24.7%", "90.3%"):
        assert figure in text, (figure, text)
    assert "…" not in text and all(cell_len(line) <= width for line in text.splitlines())
    # the table needs 115 columns here: at 60 and 80 a block per model, at 120 unboxed, at 250 boxed
    assert ("  first of group: 1,234 requests, hit rate 24.7%" in text) == (width <= 80)
    assert ("┃ provider" in text) == (width == 250)

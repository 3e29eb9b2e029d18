"""Issue 31 §3: ``report window`` laid out for the console — the frontier picture drawn to the console's width (at
most 80 columns), the policies' table unboxed when its boxed form would cut a header or a figure."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env
from rich.cells import cell_len
from rich.console import Console

from zhin_cli._cli.report_window import _table
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.prices import builtin_prices
from zhin_cli.store.jsonl import read_session
from zhin_cli.tools.report.window import WindowReport, frontier_picture, sweep, table_rows

BUSY = Path(__file__).resolve().parent.parent / "fixtures" / "group-busy.jsonl"


@pytest.fixture(scope="module")
def busy_report() -> WindowReport:
    return sweep([read_session(BUSY)], Config(), provider="openai", prices=builtin_prices())


@pytest.mark.parametrize("width", [40, 60, 79])
def test_the_picture_fits_the_width_it_is_drawn_for(busy_report: WindowReport, width: int) -> None:
    picture = frontier_picture(busy_report, width)
    assert [line for line in picture if cell_len(line) > width] == []
    plot = "\n".join(picture[:picture.index("● Pareto frontier  · dominated")])
    assert "R" in plot and "●" in plot  # every mark still drawn, at 40 columns too
    assert picture[0].startswith("cost per request against mean context")


def test_the_picture_is_never_wider_than_80_columns_and_at_80_as_before(busy_report: WindowReport) -> None:
    at_80 = frontier_picture(busy_report)
    assert frontier_picture(busy_report, 200) == at_80 == frontier_picture(busy_report, 80)
    assert max(cell_len(line) for line in at_80) == 67  # the 56-column plot of before, its $ labels beside it
    # negative control: the 80-column picture does not fit 60 columns, so the check above can fail
    assert any(cell_len(line) > 60 for line in at_80)


def test_the_title_and_legend_wrap_between_words_the_legend_indented(busy_report: WindowReport) -> None:
    picture = frontier_picture(busy_report, 20)
    legend = picture[picture.index("● Pareto frontier  · dominated") + 1:]
    assert legend == ["R recommended,", "  default: default", "S sliding: sliding", "  80→79"]
    assert picture[:4] == ["cost per request", "against mean context", "(messages), openai", "gpt-4o"]


def render(table: Any, width: int) -> str:
    console = Console(width=width, record=True, no_color=True, highlight=False)
    with console.capture() as captured:
        console.print(table)
    return captured.get()


def test_the_compact_table_keeps_every_header_word_and_figure_whole_at_60(busy_report: WindowReport) -> None:
    rows = table_rows(busy_report)
    text = render(_table(rows, compact=True), 60)
    assert "…" not in text and all(cell_len(line) <= 60 for line in text.splitlines())
    for word in ("policy", "request", "sliding", "later", "hit", "limit", "context", "mean/min", "frontier"):
        assert re.search(rf"(^|\s){re.escape(word)}(\s|$)", text, re.M), word
    assert all(cost in text for _, cost, *_ in rows)
    # negative control: the boxed table at 60 columns cuts its headers ("cost/req…", "fro")
    boxed = render(_table(rows, compact=False), 60)
    assert "…" in boxed or not re.search(r"\bfrontier\b", boxed)


def test_the_cli_draws_the_boxed_table_only_when_it_fits(zhin: Any) -> None:
    narrow = zhin("report", "window", BUSY, "-j", "1", env={**clean_env(), "COLUMNS": "60"})
    assert narrow.returncode == 0, narrow.stderr
    assert "┏" not in narrow.stdout and "…" not in narrow.stdout
    assert all(cell_len(line) <= 60 for line in narrow.stdout.splitlines())
    wide = zhin("report", "window", BUSY, "-j", "1", env={**clean_env(), "COLUMNS": "160"})
    assert "┏" in wide.stdout and "cost/request" in wide.stdout  # control: room enough, the boxed table

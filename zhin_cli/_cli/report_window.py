"""``zhin report window``: the window sweep (library: ``zhin_cli.tools.report.window``). Registered on ``report_app``
when ``zhin_cli._cli.report`` is imported."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zhin_cli._cli import (
    ConfigOption,
    DbOption,
    PricesOption,
    check_options,
    command_context,
    freeze_loaded,
    handles_errors,
    print_json,
    replay_progress,
    stdout_console,
)
from zhin_cli._cli.report_group import report_app
from zhin_cli.core.errors import UsageError
from zhin_cli.core.parallel import MAX_JOBS
from zhin_cli.core.terminaltext import markup_safe, terminal_safe
from zhin_cli.tools.report.window import CACHE_MODEL, WindowReport, frontier_picture, recommendation_line, table_rows

if TYPE_CHECKING:
    from rich.table import Table


@report_app.command("window")
@handles_errors
def window_command(
    sessions: Annotated[list[str], typer.Argument(metavar="SESSION...", help="Sessions: .jsonl files, folders of them, or session ids / keys in the database.")],
    provider: Annotated[str | None, typer.Option("--provider", "-p", help="Provider whose cache rules and prices apply: any registered provider (see `zhin providers`; default: zhin.yaml's provider, else openai).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model billed (default: as report economy: each session's stored model where it is the provider's, else the provider's own).")] = None,
    min_context: Annotated[float | None, typer.Option("--min-context", metavar="N", help="Mean messages of context the recommended window must keep (default: the default window's mean).")] = None,
    prices: PricesOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One versioned JSON document on stdout.")] = False,
    db: DbOption = None,
    config: ConfigOption = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help=f"(policy, session) replays at once, in worker processes (default: the number of cores; 1: in this process; at most {MAX_JOBS}); the report is the same for every value.")] = None,
) -> None:
    """The cheapest window for your sessions: replay them under ~20 window policies and compare the bill with the context kept.

    Policies: max_messages/cut_to pairs, max_blocks/cut_blocks_to pairs, no cap, upstream's sliding window and your zhin.yaml window ("default"). Per policy: input cost per request (uncached, cached and cache-write tokens at the provider's prices), later-request hit rate, the physical limit, mean and minimum messages of context, and whether it is on the cost/context Pareto frontier. Recommended: the cheapest policy whose mean context is at least --min-context. Definitions: docs/economy.md.
    """
    from zhin_cli.tools.report.window import run_window

    if min_context is not None and not (math.isfinite(min_context) and min_context >= 0):
        raise UsageError(f"--min-context: a mean number of messages, 0 or more, got {min_context:g}")

    check_options(provider)  # a provider of the config's plugins: they load first (the run context)
    with replay_progress("windows replayed", loading="reading the sessions") as progress:
        report = run_window(sessions, cwd=Path.cwd(), db=db, config_path=config, prices_file=prices, provider=provider,
                            model=model, min_context=min_context, jobs=jobs, after_load=freeze_loaded,
                            progress=progress, context=command_context(db=db, prices_file=prices))
    for note in report.notes:
        typer.echo(f"zhin: note: {terminal_safe(note)}", err=True)
    if as_json:
        print_json(report.as_dict())
    else:
        _print(report)


def _print(report: WindowReport) -> None:
    from rich.markup import escape
    from rich.measure import Measurement

    console = stdout_console()
    console.print(markup_safe(f"{report.provider} {report.model} · {len(report.sessions)} session(s) · "
                              f"{report.recommended.requests} requests per policy · tokens: {report.encoding} · "
                              f"cache: {CACHE_MODEL} (cold at each cache group's first request, warm after it)"))
    rows = table_rows(report)
    table = _table(rows, compact=False)
    if Measurement.get(console, console.options.update_width(10_000), table).maximum > console.width:
        table = _table(rows, compact=True)  # no borders between columns: at 60 columns every cell fits whole
    console.print(table)
    for line in frontier_picture(report, console.width):  # drawn to the console's width (≤ 80 columns)
        console.print(escape(line), soft_wrap=True)
    console.print(escape(recommendation_line(report)))  # wrapped between words by rich, never inside a figure


def _table(rows: list[tuple[str, ...]], *, compact: bool) -> Table:
    """The policies' table: boxed, or (``compact``) unboxed, one space between columns and headers that wrap
    between words — every cell whole at 60 columns."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    headers = ("policy", "cost per request" if compact else "cost/request", "× sliding", "later hit", "limit",
               "context mean/min", "frontier")
    title = "window policies (input cost; token-weighted hit rates)"
    if compact:
        table = Table(*headers, title=title, title_justify="left", box=None, padding=(0, 1), collapse_padding=True,
                      pad_edge=False)
    else:
        table = Table(*headers, title=title, title_justify="left", box=box.HEAVY_HEAD)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    # figures are never cut to "$0.004…" nor headers to "frontie": each numeric column keeps room for its longest
    # cell and its header's longest word (names wrap first)
    for column, header in zip(table.columns[1:], headers[1:], strict=True):
        column.min_width = max(max(map(len, header.split())), *(len(row[column._index]) for row in rows))
        if compact:
            column.max_width = column.min_width  # headers wrap between words: the room left goes to the names
    return table

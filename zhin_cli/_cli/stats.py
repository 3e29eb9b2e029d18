"""``zhin stats cache``: prompt-cache hit rates from logged usage (library: ``zhin_cli.tools.stats.cache``)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Annotated

import typer

from zhin_cli._cli import (
    DbOption,
    app,
    database_or_discovered,
    handles_errors,
    print_json,
    print_sources,
    stdout_console,
)
from zhin_cli._cli.tables import figures_table, fits
from zhin_cli.cache.cost import format_share
from zhin_cli.core.errors import UsageError
from zhin_cli.core.parallel import JOBS_HELP
from zhin_cli.core.terminaltext import terminal_safe
from zhin_cli.tools.stats.cache import CacheStats, run_cache_stats

stats_app = typer.Typer(help="Statistics over stored sessions.", no_args_is_help=True)
app.add_typer(stats_app, name="stats")


def parse_until(value: str | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    try:
        if len(value) == 10:  # a date: the end of that day (UTC)
            return datetime.combine(datetime.fromisoformat(value).date(), time.max, tzinfo=UTC)
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"--until: expected a date (2026-11-29) or an ISO 8601 time, got {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


STATS_HEADERS = ("provider", "model", "lifetime", "groups", "first: requests", "first: hit rate", "later: requests",
                 "later: hit rate", "unreported")
STATS_TITLE = "prompt-cache hits (cache-read ÷ prompt tokens)"


def stats_rows(stats: CacheStats) -> list[list[str]]:
    """One row of cells per provider/model with requests in the period (none: no row of zeros), escaped."""
    rows = []
    for key in sorted(stats.models):
        row = stats.models[key]
        if not (row.first.requests + row.first.unreported + row.later.requests + row.later.unreported):
            continue
        rows.append([terminal_safe(row.provider), terminal_safe(row.model), f"{row.lifetime_seconds:,} s",
                     f"{row.groups:,}", f"{row.first.requests:,}", format_share(row.first.hit_rate),
                     f"{row.later.requests:,}", format_share(row.later.hit_rate),
                     f"{row.first.unreported + row.later.unreported:,}"])
    return rows


def stats_blocks(rows: list[list[str]]) -> list[str]:
    """The rows as blocks of lines for a terminal too narrow for the table: ids and figures whole."""
    lines = []
    for provider, model, lifetime, groups, first, first_rate, later, later_rate, unreported in rows:
        lines += [f"{provider} {model}", f"  cache lifetime {lifetime} · {groups} groups · {unreported} unreported",
                  f"  first of group: {first} requests, hit rate {first_rate}",
                  f"  later: {later} requests, hit rate {later_rate}"]
    return lines


def print_stats(stats: CacheStats, days: int | None = None) -> None:
    console = stdout_console()
    console.print(terminal_safe(stats.period_line(days)), markup=False)
    rows = stats_rows(stats)
    if rows and fits(STATS_HEADERS, rows, console.width):
        console.print(figures_table(STATS_HEADERS, rows, console.width, title=STATS_TITLE, numeric=range(2, 9)))
    elif rows:  # one block per model: the model id and the figures are never cut to fit
        console.print(STATS_TITLE, markup=False)
        for line in stats_blocks(rows):
            console.print(line, markup=False, soft_wrap=True)
    if not stats.counted:  # the period line said there was nothing: no summary of groups that were not there
        return
    console.print(f"{stats.sessions:,} session(s). First of group = the first request of a session to a model after "
                  "more than its cache lifetime without one.")


@stats_app.command("cache")
@handles_errors
def cache_command(
    sessions: Annotated[list[str] | None, typer.Argument(help="Session ids/keys or .jsonl files (default: every session in the database).")] = None,
    db: DbOption = None,
    days: Annotated[int | None, typer.Option("--days", min=1, help="Only requests of the last N days before --until.")] = None,
    until: Annotated[str | None, typer.Option("--until", help="End of the period: a date (its end, UTC) or an ISO time. Default: now.")] = None,
    lifetime: Annotated[int | None, typer.Option("--lifetime", min=1, help="Cache lifetime in seconds for every provider (default: each provider's).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help=JOBS_HELP)] = None,
) -> None:
    """Prompt-cache hit rates from the usage logged on assistant messages: first request of a group vs later."""
    end = parse_until(until)
    since = None
    if days is not None:
        try:
            since = int((end - timedelta(days=days)).timestamp() * 1000)
        except OverflowError:  # before year 1: the period starts at the beginning of time
            since = int(datetime.min.replace(tzinfo=UTC).timestamp() * 1000)
    until_ms = int(end.timestamp() * 1000) if (until is not None or days is not None) else None
    refs = list(sessions or [])
    source = db if refs else database_or_discovered(db)
    stats = run_cache_stats(refs, db=source, cwd=Path.cwd(), since=since, until=until_ms, lifetime_seconds=lifetime,
                            jobs=jobs)
    if as_json:
        print_json(stats.as_dict())
    else:
        from zhin_cli.store import database_read

        print_sources(None, database_read(refs, db=source, cwd=Path.cwd(), all_sessions=not refs))
        print_stats(stats, days)

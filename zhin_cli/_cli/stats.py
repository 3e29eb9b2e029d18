"""``zhin stats cache``: prompt-cache hit rates from logged usage (library: ``zhin_cli.tools.stats.cache``)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from zhin_cli._cli import (
    DbOption,
    app,
    database_or_discovered,
    handles_errors,
    print_json,
    print_sources,
    stdout_console,
)
from zhin_cli.core.errors import UsageError
from zhin_cli.core.parallel import JOBS_HELP
from zhin_cli.core.terminaltext import markup_safe, terminal_safe
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


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def print_stats(stats: CacheStats, days: int | None = None) -> None:
    table = Table("provider", "model", "lifetime", "groups", "first: requests", "first: hit rate",
                  "later: requests", "later: hit rate", "unreported", title="prompt-cache hits (cache-read ÷ prompt tokens)")
    shown = [key for key in sorted(stats.models) if stats.models[key].first.requests + stats.models[key].first.unreported
             + stats.models[key].later.requests + stats.models[key].later.unreported]  # a model with none in the period: no row of zeros
    for key in shown:
        row = stats.models[key]
        table.add_row(markup_safe(row.provider), markup_safe(row.model), f"{row.lifetime_seconds:,}s", f"{row.groups:,}",
                      f"{row.first.requests:,}", percent(row.first.hit_rate), f"{row.later.requests:,}",
                      percent(row.later.hit_rate), f"{row.first.unreported + row.later.unreported:,}")
    console = stdout_console()
    console.print(terminal_safe(stats.period_line(days)), markup=False)
    if shown:
        console.print(table)
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

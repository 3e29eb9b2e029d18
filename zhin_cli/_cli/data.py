"""``zhin import`` / ``export`` / ``sessions`` / ``completion``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from zhin_cli._cli import DbOption, app, database_or_discovered, handles_errors, print_json, stdout_console, write_jsonl_output
from zhin_cli.core.errors import UsageError
from zhin_cli.store import load_session
from zhin_cli.store.database import DEFAULT_DB, SessionDatabase, import_sessions, parse_db
from zhin_cli.store.jsonl import read_session


@app.command("import")
@handles_errors
def import_command(
    files: Annotated[list[Path] | None, typer.Argument(help="Session .jsonl files.")] = None,
    db: Annotated[str, typer.Option("--db", help="Database to write (tables created in upstream zhin's schema): an SQLite file, or a postgresql:// or mysql:// URL.")] = str(DEFAULT_DB),
    replace: Annotated[bool, typer.Option("--replace", help="Replace a session that is already there.")] = False,
    events: Annotated[bool, typer.Option("--events", help="Also turn conversation_events member_increase / member_decrease rows into event messages (once each).")] = False,
) -> None:
    """Load session JSONL files into a zhin database (default .zhin/data.sqlite); with --events, import join/leave events.
    All or nothing: on an error or an interruption the database is as it was (a new one does not appear)."""
    if not files and not events:
        raise UsageError("nothing to import: give session .jsonl files, or --events")
    sessions = [read_session(f) for f in files or []]  # all parsed before anything is written
    label = parse_db(db).label
    result = import_sessions(sessions, db, replace=replace, events=events)  # all or nothing
    for session in sessions:
        typer.echo(f"imported {session.session_id} ({result.rows[session.session_id]} messages) into {label}", err=True)
    if result.events is not None:
        added = result.events
        typer.echo(f"imported {len(added.added)} member events into {label} ({added.already} already there, "
                   f"{len(added.no_session)} for sessions not in the database)", err=True)


@app.command("export")
@handles_errors
def export_command(
    session: Annotated[str, typer.Argument(help="Session id or key (or a .jsonl file to normalise).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    db: DbOption = None,
) -> None:
    """Write a stored session as JSONL (the interchange format)."""
    count = write_jsonl_output(load_session(session, db=db, cwd=Path.cwd()), output)
    if count is None:
        return
    typer.echo(f"wrote {count} lines to {output}", err=True)


@app.command("sessions")
@handles_errors
def sessions_command(
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """List the sessions in a database (to find the id to trace)."""
    with SessionDatabase(parse_db(database_or_discovered(db))) as database:
        rows = database.list_sessions()
    if as_json:
        print_json({"version": 1, "sessions": rows})
        return
    table = Table("session_key", "session_id (epoch)", "messages", "last activity (UTC)")
    for row in rows:
        table.add_row(str(row["session_key"] or ""), str(row["session_id"]), str(row["messages"]), format_ms(row["last_activity"]))
    stdout_console().print(table)


def format_ms(value: int | None) -> str:
    if value is None:
        return ""
    return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


@app.command("completion")
def completion_command(
    shell: Annotated[str, typer.Argument(help="bash, zsh or fish.")],
) -> None:
    """Print a shell completion script."""
    # typer vendors click as ``typer._click``: there is no top-level ``click`` module to import.
    from typer._click.shell_completion import get_completion_class

    from zhin_cli._cli import app as application

    cls = get_completion_class(shell)
    if cls is None:
        typer.echo(f"zhin: error: unsupported shell {shell!r} (bash, zsh, fish)", err=True)
        raise typer.Exit(2)
    command = typer.main.get_command(application)
    typer.echo(cls(command, {}, "zhin", "_ZHIN_COMPLETE").source())

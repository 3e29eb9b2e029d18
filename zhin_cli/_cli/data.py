"""``zhin import`` / ``export`` / ``sessions`` / ``completion``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from zhin_cli._cli import DbOption, app, handles_errors, print_json, stdout_console
from zhin_cli.errors import UsageError, ZhinError
from zhin_cli.store import load_session
from zhin_cli.store.database import DEFAULT_DB, SessionDatabase, discover_database, import_session, parse_db
from zhin_cli.store.jsonl import read_session, write_session


@app.command("import")
@handles_errors
def import_command(
    files: Annotated[list[Path], typer.Argument(help="Session .jsonl files.")],
    db: Annotated[Path, typer.Option("--db", help="SQLite file to write (created in upstream zhin's schema).")] = DEFAULT_DB,
    replace: Annotated[bool, typer.Option("--replace", help="Replace a session that is already there.")] = False,
) -> None:
    """Load session JSONL files into a zhin SQLite database (default .zhin/data.sqlite)."""
    sessions = [read_session(f) for f in files]  # all parsed before anything is written
    for session in sessions:
        rows = import_session(session, db, replace=replace)
        typer.echo(f"imported {session.session_id} ({rows} messages) into {db}", err=True)


@app.command("export")
@handles_errors
def export_command(
    session: Annotated[str, typer.Argument(help="Session id or key (or a .jsonl file to normalise).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    db: DbOption = None,
) -> None:
    """Write a stored session as JSONL (the interchange format)."""
    loaded = load_session(session, db=db, cwd=Path.cwd())
    if output is None:
        write_session(loaded, sys.stdout)
        return
    try:
        handle = output.open("w", encoding="utf-8")
    except OSError as exc:
        raise ZhinError(f"cannot write: {exc.strerror}", where=str(output)) from None
    with handle:
        count = write_session(loaded, handle)
    typer.echo(f"wrote {count} lines to {output}", err=True)


@app.command("sessions")
@handles_errors
def sessions_command(
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """List the sessions in a database (to find the id to trace)."""
    if db is None:
        found = discover_database(Path.cwd())
        if found is None:
            raise UsageError("no .zhin/data.sqlite found from here upward; pass --db")
        db = str(found)
    with SessionDatabase(parse_db(db)) as database:
        rows = database.list_sessions()
    if as_json:
        print_json({"version": 1, "sessions": rows})
        return
    table = Table("session_id", "session_key", "status", "updated_at")
    for row in rows:
        table.add_row(*(str(row.get(k) or "") for k in ("session_id", "session_key", "status", "updated_at")))
    stdout_console().print(table)


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

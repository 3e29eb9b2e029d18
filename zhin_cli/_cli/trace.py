"""``zhin trace``: per request, the segments table, state rendering, headers, cache breakpoints, body."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from zhin_cli._cli import (
    ConfigOption,
    DbOption,
    PresetOption,
    app,
    check_options,
    freeze_loaded,
    handles_errors,
    print_json,
    replay_progress,
    stdout_console,
)
from zhin_cli.core.errors import EXIT_FOUND, UsageError
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.tools.trace import trace


@app.command("trace")
@handles_errors
def trace_command(
    session: Annotated[str, typer.Argument(help="A session .jsonl file, or a session id / key in the database.")],
    turn: Annotated[int | None, typer.Option("--turn", "-t", help="Turn to show (1-based; -1 = last). Default: last. The greeting's turn has no request: a note, exit 0.")] = None,
    all_turns: Annotated[bool, typer.Option("--all", help="Show every turn.")] = False,
    provider: Annotated[str | None, typer.Option("--provider", "-p", envvar="ZHIN_PROVIDER", help="Provider profile (openai, openai-reasoning, deepseek, …).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", envvar="ZHIN_MODEL", help="Model id (default: the model stored with each turn, else gpt-4o).")] = None,
    timezone: Annotated[str | None, typer.Option("--timezone", envvar="ZHIN_TIMEZONE", help="Instance time zone for header times (default: the session's).")] = None,
    show_request: Annotated[bool, typer.Option("--show-request", help="Print the exact wire body.")] = False,
    validate: Annotated[bool, typer.Option("--validate", help="Exit 1 if the offline validator rejects any shown request (its verdict is always shown).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One versioned JSON document on stdout.")] = False,
    preset: PresetOption = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Replay a stored conversation and show what each request sent to the model.

    Exit status: 0 ok, 1 a request was rejected (with --validate), 2 usage, 3 cannot run (bad input, database).
    """
    if turn is not None and all_turns:
        raise UsageError("use either --turn or --all")
    check_options(provider, timezone)
    with replay_progress("replaying") as progress:
        result = trace(session, db=db, config_path=config, provider=provider, model=model, timezone=timezone,
                       preset=preset, turn=turn, all_turns=all_turns, cwd=Path.cwd(), after_load=freeze_loaded,
                       progress=progress)
    if as_json:
        print_json(result.as_dict())
    else:
        console = stdout_console()
        console.print(f"[bold]{escape(result.session_id)}[/] · {escape(result.source)} · {result.turns} turns")
        for note in result.notes:
            console.print(f"note: {escape(note)}")
        for request in result.requests:
            _print_request(console, request, show_request)
    if validate and any(not r.verdict.ok for r in result.requests):
        raise typer.Exit(EXIT_FOUND)


def _print_request(console, request: AssembledRequest, show_request: bool) -> None:  # type: ignore[no-untyped-def]
    table = Table(title=f"turn {request.turn} · {request.provider} · {request.model} · {request.prompt_tokens} prompt tokens ({request.encoding})",
                  title_justify="left")
    for column, justify in (("segment", "left"), ("kind", "left"), ("weight", "right"), ("msgs", "right"),
                            ("chars", "right"), ("tokens", "right"), ("trimmed", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for segment in request.segments:
        table.add_row(escape(segment.id), segment.kind, f"{segment.weight:g}",
                      "" if segment.messages is None else str(segment.messages),
                      str(segment.chars), str(segment.tokens), str(segment.trimmed) if segment.trimmed else "")
    console.print(table)
    breakpoints = ", ".join(
        f"{b.label} @ message {b.message_index}" + ("" if b.explicit else " (implicit)") for b in request.cache_breakpoints
    )
    console.print(f"state changes rendered as: [bold]{request.state_rendering}[/]   "
                  f"headers: {request.full_headers} full, {request.short_headers} short   "
                  f"window: {request.window.messages} messages ({request.window.dropped} before it)")
    console.print(f"cache breakpoints: {breakpoints or 'none'}")
    verdict = request.verdict
    if verdict.ok:
        console.print("validator: [green]accepted[/]")
    else:
        console.print(f"validator: [red]{verdict.status}[/] {escape(verdict.message)}")
    for warning in request.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    if show_request:
        body = json.dumps(request.request, ensure_ascii=False, indent=2)
        if console.is_terminal:
            from rich.syntax import Syntax  # pygments: only for a highlighted body on a terminal

            console.print(Syntax(body, "json", word_wrap=True))
        else:  # piped: the exact text, never cropped to a terminal width
            console.file.write(body + "\n")
    console.print()

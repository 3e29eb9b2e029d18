"""``zhin view``: the page of ``zhin report html``, served on loopback for a browser (library:
``zhin_cli.tools.report.html``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from zhin_cli._cli import (
    ConfigOption,
    DbOption,
    PresetOption,
    app,
    check_options,
    command_context,
    freeze_loaded,
    handles_errors,
    print_sources,
    replay_progress,
)
from zhin_cli.core.parallel import JOBS_HELP


@app.command("view")
@handles_errors
def view_command(
    sessions: Annotated[list[str], typer.Argument(metavar="SESSION...", help="Sessions: .jsonl files, folders of them, or session ids / keys in the database.")],
    port: Annotated[int, typer.Option("--port", metavar="INT", help="Port to listen on (0 = pick a free port).")] = 0,
    host: Annotated[str, typer.Option("--host", metavar="HOST", help="Loopback address to listen on (127.0.0.1, ::1 or localhost only).")] = "127.0.0.1",
    provider: Annotated[str | None, typer.Option("--provider", "-p", envvar="ZHIN_PROVIDER", help="Provider profile (see `zhin providers`).")] = None,
    preset: PresetOption = None,
    economy: Annotated[bool, typer.Option("--economy/--no-economy", help="Include the economy summary (one more replay of each session).")] = True,
    db: DbOption = None,
    config: ConfigOption = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help=JOBS_HELP)] = None,
) -> None:
    """Serve the `zhin report html` page of SESSION… on 127.0.0.1 and print its URL; Ctrl-C stops it.

    Loopback only: the page shows whole conversations. A connection silent for 10 s, or whose request is not whole 30 s after it connected, is closed; at most 32 are served at once (more are answered 503). Exit status: 0 stopped with Ctrl-C or SIGTERM, 2 usage (a non-loopback --host), 3 cannot run (port in use, bad input).
    """
    from zhin_cli.core.loopback import loopback_host
    from zhin_cli.tools.report.html import build_report, render_template, serve_page

    check_options(provider)
    loopback_host(host, "zhin view")  # a bad --host is refused before the sessions are replayed
    with replay_progress("replaying") as progress:
        report = build_report(sessions, cwd=Path.cwd(), db=db, config_path=config, provider=provider, preset=preset,
                              economy=economy, after_load=freeze_loaded, progress=progress, jobs=jobs,
                              context=command_context(db=db))
    page = render_template(report)
    print_sources(report.config_path, report.db)

    def ready(url: str) -> None:
        sys.stderr.write(f"zhin view: serving {len(report.sessions)} session(s) on {url} ; Ctrl-C to stop\n")
        sys.stderr.flush()

    serve_page(page, host=host, port=port, on_ready=ready)

"""``zhin prefix-diff``: every prompt-cache break, across turns or between two configurations."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from zhin_cli._cli import (
    ConfigOption,
    DbOption,
    PresetOption,
    app,
    check_options,
    freeze_loaded,
    handles_errors_like_diff,
    print_json,
    replay_progress,
    stdout_console,
)
from zhin_cli.core.errors import EXIT_FOUND
from zhin_cli.core.parallel import JOBS_HELP
from zhin_cli.tools.prefixdiff import (
    CAUSES,
    DEFAULT_FAIL_ON,
    EXPECTED,
    ConfigDiff,
    PrefixDiffResult,
    SessionDiff,
    run_prefix_diff,
)


@app.command("prefix-diff")
@handles_errors_like_diff
def prefix_diff_command(
    sessions: Annotated[list[str] | None, typer.Argument(help="Sessions: .jsonl files, folders of them, or session ids / keys in the database.")] = None,
    provider: Annotated[str | None, typer.Option("--provider", "-p", envvar="ZHIN_PROVIDER", help="Provider profile (see `zhin providers`).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", envvar="ZHIN_MODEL", help="Model id (default: the model stored with each turn).")] = None,
    base: Annotated[str | None, typer.Option("--base", help="Compare two prompt configurations: a zhin.yaml file or a git ref (main, HEAD~1, a commit).")] = None,
    head: Annotated[str | None, typer.Option("--head", help="The configuration to compare against --base (file or git ref).")] = None,
    all_sessions: Annotated[bool, typer.Option("--all", help="Every session in the database.")] = False,
    fail_on: Annotated[str | None, typer.Option("--fail-on", help=f"Comma-separated causes that count as a break (default: all but {', '.join(sorted(EXPECTED))}). Causes: {', '.join(CAUSES)}.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One versioned JSON document on stdout.")] = False,
    preset: PresetOption = None,
    db: DbOption = None,
    config: ConfigOption = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help=JOBS_HELP)] = None,
) -> None:
    """Diff consecutive requests byte by byte: where the cached prefix breaks, why, and what still hits.

    Exit status like diff: 0 no unexpected break, 1 an unexpected break, 2 trouble.
    """
    check_options(provider)
    chosen = [c.strip() for c in fail_on.split(",") if c.strip()] if fail_on is not None else list(DEFAULT_FAIL_ON)
    with replay_progress("diffing") as progress:
        result = run_prefix_diff(sessions or [], cwd=Path.cwd(), db=db, config_path=config, provider=provider, model=model,
                                 base=base, head=head, all_sessions=all_sessions, fail_on=chosen, preset=preset,
                                 after_load=freeze_loaded, progress=progress, jobs=jobs)
    if as_json:
        print_json(result.as_dict())
    else:
        _print(stdout_console(), result)
    if result.unexpected:
        raise typer.Exit(EXIT_FOUND)


def _print(console: Console, result: PrefixDiffResult) -> None:
    if result.mode == "turns":
        for session in result.sessions:
            _print_session(console, session, result.fail_on)
    else:
        console.print(f"base [bold]{escape(result.base_label or '')}[/] → head [bold]{escape(result.head_label or '')}[/]")
        for comparison in result.comparisons:
            _print_comparison(console, comparison, result.fail_on)
    console.print(f"{result.unexpected} unexpected break(s) (fail on: {', '.join(result.fail_on) or 'nothing'})")


def _print_session(console: Console, session: SessionDiff, fail_on: list[str]) -> None:
    table = Table(title=f"{session.session_id} · {session.provider} · {session.model} · {session.turns} turns", title_justify="left")
    for column in ("turns", "cause", "common bytes", "common tokens", "diverges at", "cached", "share"):
        table.add_column(column, justify="right" if "common" in column or column in ("cached", "share") else "left")
    for pair in session.pairs:
        style = "red" if pair.cause in fail_on else ("yellow" if pair.cause == "window_shift" else "")
        where = "end" if pair.cause == "append" else f"msg {pair.message_index} · {pair.segment or '?'}"
        table.add_row(f"{pair.from_turn}→{pair.to_turn}", f"[{style}]{pair.cause}[/]" if style else pair.cause,
                      str(pair.common_prefix_bytes), str(pair.common_prefix_tokens), escape(where),
                      f"{pair.cached_tokens}/{pair.prompt_tokens}", f"{pair.cached_share:.0%}")
    console.print(table)
    for pair in session.unexpected(fail_on):
        console.print(f"[red]{pair.from_turn}→{pair.to_turn} {pair.cause}[/] at byte {pair.common_prefix_bytes} "
                      f"({escape(pair.segment or '?')}) {escape(pair.detail)}")
        console.print(f"  before: …{escape(pair.before)}…", soft_wrap=True)
        console.print(f"  after:  …{escape(pair.after)}…", soft_wrap=True)
    for hint in session.hints.values():
        if hint.kind == "tail_limit":
            console.print(f"[yellow]hint:[/] the window's tail limit moved the history on consecutive turns "
                          f"({len(hint.turns)} time(s)): each move is a cache miss; lower window.cut_to so the window "
                          "moves once per window.max_messages - cut_to messages (hysteresis), or compact")
            continue
        console.print(f"[yellow]hint:[/] segment {escape(hint.segment)} changes between turns ({hint.kind}) "
                      f"in {len(hint.turns)} turn(s): it breaks the cached prefix every time")
    summary = session.summary()
    causes = ", ".join(f"{k} {v}" for k, v in summary["causes"].items())
    console.print(f"{summary['pairs']} pairs: {causes or 'none'}; cache hits {summary['cache_hits']}/{summary['pairs']}, "
                  f"cached share {summary['cached_share']:.0%}")
    console.print()


def _print_comparison(console: Console, comparison: ConfigDiff, fail_on: list[str]) -> None:
    console.print(f"[bold]{escape(comparison.session_id)}[/]: {len(comparison.differing_turns)}/{comparison.turns} turns differ")
    if comparison.segments:
        table = Table("segment", "kind", "status", "Δ chars", "Δ tokens")
        for delta in comparison.segments.values():
            table.add_row(escape(delta.id), delta.kind, delta.status, f"{delta.chars:+d}", f"{delta.tokens:+d}")
        console.print(table)
    if comparison.first_divergence:
        first = comparison.first_divergence
        console.print(f"first divergence: turn {first['turn']}, byte {first['offset']} ({escape(str(first['segment']))})")
    if comparison.head_stability:
        unexpected = comparison.head_stability.unexpected(fail_on)
        verdict = "[green]stable across turns[/]" if not unexpected else f"[red]{len(unexpected)} unexpected break(s) across turns[/]"
        console.print(f"head configuration: {verdict}")
        for hint in comparison.head_stability.hints.values():
            console.print(f"[yellow]hint:[/] segment {escape(hint.segment)} changes between turns ({hint.kind})")
    console.print()

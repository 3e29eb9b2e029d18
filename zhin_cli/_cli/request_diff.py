"""``zhin request-diff``: two request bodies, structurally and by bytes (library: ``zhin_cli.tools.diff.request``).

Excerpts are shown on one line, escaped and marked as prefix-diff shows its own; under GitHub Actions every
difference is also an annotation at its field's line, and the step summary lists them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zhin_cli._cli import app, handles_errors_like_diff, print_json, stdout_console
from zhin_cli.core.terminaltext import MARK, markup_safe
from zhin_cli.core.textdiff import readable
from zhin_cli.tools.diff.request import describe, diff_requests, github_annotations, github_summary, load_side, short

if TYPE_CHECKING:
    from rich.console import Console

    from zhin_cli.tools.diff.request import FieldDifference


@app.command("request-diff")
@handles_errors_like_diff
def request_diff_command(
    a: Annotated[Path, typer.Argument(help="A request body (.json, e.g. captured by `zhin serve --capture`) or a `zhin trace --json` document.")],
    b: Annotated[Path, typer.Argument(help="The other side, in either form.")],
    ignore: Annotated[list[str] | None, typer.Option("--ignore", "-i", help="A field to leave out, e.g. 'messages[*].tool_calls[*].id' or 'metadata' (repeatable; * = any index or key).")] = None,
    turn: Annotated[int | None, typer.Option("--turn", help="Which request of a trace document (default: its last).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Compare two chat request bodies: which message and field differ, and at which byte of a text.

    Exit status like diff: 0 the same (after --ignore), 1 different, 2 trouble (unreadable file, bad path).
    """
    from zhin_cli.core.ghactions import enabled, publish

    result = diff_requests(load_side(a, turn), load_side(b, turn), ignore)
    if as_json:
        print_json(result.as_dict())
    else:
        console = stdout_console()
        for difference in result.differences:
            print_difference(console, difference)
        if result.same:
            detail = "byte-identical" if result.byte_identical else "same JSON, serialised differently"
            ignoring = f"; ignoring {markup_safe(', '.join(result.ignored))}" if result.ignored else ""
            console.print(f"same request ({detail}{ignoring})")
        else:
            console.print(f"{len(result.differences)} difference(s) between {markup_safe(result.a)} and {markup_safe(result.b)}",
                          soft_wrap=True)
    if enabled():  # under GitHub Actions only: built only for a reader
        publish(github_annotations(result), github_summary(result))
    if not result.same:
        raise typer.Exit(1)


def print_difference(console: Console, difference: FieldDifference) -> None:
    """The field's path and change, then each side: a text's excerpt on one line, escaped (a newline as ``\\n``)
    and marked where the two start to differ (reverse video on a terminal), or the value as short JSON."""
    from rich.text import Text

    console.print(f"[bold]{markup_safe(difference.path)}[/]  {describe(difference)}", soft_wrap=True)
    if difference.byte_offset is not None:
        index = difference.excerpt_index
        for name, excerpt in (("a", difference.excerpt_before), ("b", difference.excerpt_after)):
            # data, not markup: a Text, so no character of the request is read as a rich tag
            console.print(Text.assemble(f"  {name}: …", readable(excerpt[:index]), (MARK, "reverse"),
                                        readable(excerpt[index:]), "…"), soft_wrap=True)
        return
    if difference.kind != "added":
        console.print(Text(f"  a: {short(difference.before)}"), soft_wrap=True)
    if difference.kind != "removed":
        console.print(Text(f"  b: {short(difference.after)}"), soft_wrap=True)

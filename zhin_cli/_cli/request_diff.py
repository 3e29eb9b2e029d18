"""``zhin request-diff``: two request bodies, structurally and by bytes (library: ``zhin_cli.tools.requestdiff``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from zhin_cli._cli import app, handles_errors_like_diff, print_json, stdout_console
from zhin_cli.tools.requestdiff import diff_requests, load_side


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
    result = diff_requests(load_side(a, turn), load_side(b, turn), ignore)
    if as_json:
        print_json(result.as_dict())
    else:
        console = stdout_console()
        for difference in result.differences:
            where = f" at byte {difference.byte_offset}" if difference.byte_offset is not None else ""
            console.print(f"[bold]{escape(difference.path)}[/]  {difference.kind}{where}")
            if difference.byte_offset is not None:
                console.print(f"  a: …{escape(difference.excerpt_before)}…", soft_wrap=True)
                console.print(f"  b: …{escape(difference.excerpt_after)}…", soft_wrap=True)
            else:
                if difference.kind != "added":
                    console.print(f"  a: {escape(_short(difference.before))}", soft_wrap=True)
                if difference.kind != "removed":
                    console.print(f"  b: {escape(_short(difference.after))}", soft_wrap=True)
        if result.same:
            detail = "byte-identical" if result.byte_identical else "same JSON, serialised differently"
            console.print(f"same request ({detail}{'; ignoring ' + ', '.join(result.ignored) if result.ignored else ''})")
        else:
            console.print(f"{len(result.differences)} difference(s) between {escape(result.a)} and {escape(result.b)}")
    if not result.same:
        raise typer.Exit(1)

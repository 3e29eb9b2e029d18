"""``zhin fixtures synth``: write a synthetic, realistic group-chat session (library: ``zhin_cli.tools.fixtures.synth``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zhin_cli._cli import app, handles_errors
from zhin_cli.core.terminaltext import terminal_safe
from zhin_cli.tools.fixtures.synth import SynthOptions, synthesize_lines

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSONObject

fixtures_app = typer.Typer(help="Session fixtures: synthetic group chats for tests and economy reports.", no_args_is_help=True)
app.add_typer(fixtures_app, name="fixtures")

_DEFAULTS = SynthOptions()


@fixtures_app.command("synth")
@handles_errors
def synth_command(
    members: Annotated[int, typer.Option("--members", help="Members in the group at the start.")] = _DEFAULTS.members,
    messages: Annotated[int, typer.Option("--messages", help="Message rows to write (member, bot, tool result and event rows).")] = _DEFAULTS.messages,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: the same seed writes the same file.")] = _DEFAULTS.seed,
    bot_rate: Annotated[float, typer.Option("--bot-rate", help="Share of member messages that @-mention the bot (0–1).")] = _DEFAULTS.bot_rate,
    tool_rate: Annotated[float, typer.Option("--tool-rate", help="Share of bot turns that run a tool loop first (0–1).")] = _DEFAULTS.tool_rate,
    event_rate: Annotated[float, typer.Option("--event-rate", help="Chance of a member change (join, leave, card, role, mute, title) after a member message (0–1).")] = _DEFAULTS.event_rate,
    compact_every: Annotated[int, typer.Option("--compact-every", help="Compact (write a summary) once this many rows have passed since the last one.")] = _DEFAULTS.compact_every,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
) -> None:
    """Write a synthetic, seeded group-chat session as JSONL.

    Bursty speakers and a long tail of rare ones, replies, bot turns with tool loops, joins, leaves, card, role, title and mute changes, day boundaries and compactions.

    The same options write the same bytes. Distributions: docs/economy.md.
    """
    from zhin_cli.core.outputfiles import atomic_output
    from zhin_cli.store.jsonl import write_lines

    # streamed: each line is written as it is made (a 150k-message file starts at once, and is never in memory whole)
    lines = synthesize_lines(SynthOptions(members=members, messages=messages, seed=seed, bot_rate=bot_rate,
                                          tool_rate=tool_rate, event_rate=event_rate, compact_every=compact_every))
    if output is None:
        write_lines(lines, sys.stdout)
        return
    message_lines = 0

    def counted() -> Iterator[JSONObject]:
        nonlocal message_lines
        for line in lines:
            message_lines += line["type"] == "message"
            yield line

    with atomic_output(output) as handle:  # a full disk or a signal leaves no half-written file (and the old one intact)
        count = write_lines(counted(), handle)
    typer.echo(terminal_safe(f"wrote {count} lines ({message_lines} messages) to {output}"), err=True)

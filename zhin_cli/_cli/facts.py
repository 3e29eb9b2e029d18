"""``zhin facts show`` / ``zhin facts prune``: the stored member and scene facts (ADR 0041 §6)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from zhin_cli._cli import (
    ConfigOption,
    DbOption,
    app,
    check_options,
    database_or_discovered,
    handles_errors,
    print_json,
    print_records,
    print_sources,
    stdout_console,
)
from zhin_cli.core.terminaltext import terminal_safe
from zhin_cli.tools.facts.facts import RebuiltRoster, prune_database, prune_summary, show_facts

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rich.console import Console
from zhin_cli.tools.trace.trace import timezone_note

facts_app = typer.Typer(help="Stored member and scene facts (ADR 0041 §6): show them, prune them to their bounds.",
                        no_args_is_help=True)
app.add_typer(facts_app, name="facts")




@facts_app.command("show")
@handles_errors
def show_command(
    session: Annotated[str, typer.Argument(help="Session id or key.")],
    db: DbOption = None,
    config: ConfigOption = None,
    timezone: Annotated[str | None, typer.Option("--timezone", envvar="ZHIN_TIMEZONE", help="Time zone of the times shown (default: zhin.yaml's, the session's, the one its data names, TZ, UTC; the output says which).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Show the stored scene facts, bot role and member rows of a session (read only); a database without stored facts (upstream's own) shows the roster its messages and member events tell. Times are local, in the zone trace uses."""
    from zhin_cli.pipeline.config import load_config

    check_options(None, timezone)
    source = database_or_discovered(db)
    loaded = load_config(config)  # zhin.yaml's timezone: only read, its plugins never run here
    data = show_facts(source, session, timezone=timezone, configured=loaded.timezone)
    if as_json:
        from zhin_cli.core.timezones import with_iso_times

        print_json(with_iso_times(data))
        return
    print_sources(loaded.path, source)
    for warning in data.get("warnings", []):  # a row zhin cannot read is named, never misread
        typer.echo(f"zhin: warning: {terminal_safe(warning)}", err=True)
    console = stdout_console()
    console.print(terminal_safe(f"session key: {data['session_key']}"), markup=False)
    nothing = data.get("nothing")
    if nothing:
        console.print(terminal_safe(nothing), markup=False)
        return
    zone = data["timezone"]
    console.print(terminal_safe(timezone_note(zone, data["timezone_source"])), markup=False)
    if "rebuilt" in data:
        print_rebuilt(console, data["rebuilt"], zone)
        return
    scene = data["scene"] or {}
    for name in ("title", "owner_id", "admins", "member_count", "muted_all", "facts_updated_at"):
        if scene.get(name) is not None:
            console.print(terminal_safe(f"{name}: {human_value(name, scene[name], zone)}"), markup=False)
    console.print(terminal_safe(f"bot_role: {data['bot_role'] or '-'}"), markup=False)
    columns = ("user_id", "platform_role", "card", "title", "muted_until", "updated_at")
    print_records(console, list(columns),
                  [[human_value(k, member[k], zone) for k in columns] for member in data["members"]])


ROSTER_COLUMNS = ("user_id", "name", "platform_role", "roles", "joined_at", "joined_by", "left_at", "left_by",
                  "muted_until", "muted_by", "last_seen")


def print_rebuilt(console: Console, rebuilt: RebuiltRoster, zone: str) -> None:
    """The roster a database without stored facts tells (upstream's own), saying where it comes from."""
    console.print(f"no stored facts: rebuilt from {rebuilt['from']} (names and roles as the messages carry them; "
                  "joins, leaves, role changes and mutes from the member events)", markup=False)
    for change in rebuilt["global_mute"]:
        state = "on" if change["on"] else "off"
        at = human_value("at", change["at"], zone)
        console.print(terminal_safe(f"whole-group mute {state} at {at} by {change['by'] or '?'}"), markup=False)
    print_records(console, list(ROSTER_COLUMNS),
                  [[roster_value(k, member, zone) for k in ROSTER_COLUMNS] for member in rebuilt["members"]])


def roster_value(name: str, member: Mapping[str, object], zone: str) -> str:
    """A rebuilt member's cell. ``muted_by`` is whoever changed the member's mute last: once the mute was lifted
    (``muted_until`` 0: "not muted") that is who lifted it, not who muted, so it is not shown."""
    if name == "muted_by" and member.get("muted_until") == 0:
        return ""
    return human_value(name, member[name], zone)


COUNTS = frozenset({"member_count"})  # the facts that count things, written 1,234 as other commands write counts;
# every other number (user, owner and admin ids) is a name, written as stored


def human_value(name: str, value: object, zone: str = "UTC") -> str:
    """A stored fact as people read it: lists joined, yes/no, ms epochs (``*_at``, ``*_until``) as ``zone``'s
    local times, the zone named."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(item) for item in value) or "-"
    if value == 0 and name == "muted_until":
        return "not muted"
    if isinstance(value, int) and (name.endswith(("_at", "_until", "_seen")) or name == "at"):  # (at: always an int)
        from zhin_cli.core.timezones import human_ms

        return human_ms(value, zone=zone)
    if isinstance(value, int) and name in COUNTS:
        return f"{value:,}"
    return str(value)



@facts_app.command("prune")
@handles_errors
def prune_command(
    db: DbOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would be removed; change nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Apply the facts bounds: members who left, rows not updated for 90 days, over 2,000 rows per session, long text."""
    source = database_or_discovered(db)
    report = prune_database(source, dry_run=dry_run)
    if as_json:
        print_json(report.as_dict())
        return
    print_sources(None, source)
    console = stdout_console()
    console.print(prune_summary(report), markup=False)
    for label, rows in (("left", report.left), ("expired", report.expired), ("over cap", report.over_cap),
                        ("cleaned", report.cleaned)):
        for scene_key, user_id in rows:
            console.print(terminal_safe(f"  {label}: {scene_key} {user_id}"), markup=False)

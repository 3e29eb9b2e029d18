"""``zhin import`` / ``export`` / ``sessions`` / ``completion``, and the completers of session, provider and preset
values.

This module imports nothing heavy at its top (no SQLAlchemy, no rich): a shell's TAB runs ``zhin`` with
``_ZHIN_COMPLETE`` set and ``zhin_cli._cli`` answers the common cases from here (``quick_completion``) without
loading any other command, so the answer comes in well under 0.3 s (benchmarks/startup.py measures it)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import quote

import typer

from zhin_cli._cli import (
    COMMAND_MODULES,
    DbOption,
    app,
    database_or_discovered,
    handles_errors,
    print_json,
    print_records,
    print_sources,
    stdout_console,
    write_jsonl_output,
)
from zhin_cli.core.errors import UsageError, ZhinError
from zhin_cli.core.terminaltext import terminal_safe  # a session id, a file name: input text (issue 27 item 5)

if TYPE_CHECKING:
    from collections.abc import Callable

    from typer._click.core import Context, Parameter
    from typer._click.shell_completion import CompletionItem

@app.command("import")
@handles_errors
def import_command(
    files: Annotated[list[Path] | None, typer.Argument(help="Session .jsonl files (with --from sillytavern: SillyTavern chat files).")] = None,
    db: Annotated[str | None, typer.Option("--db", envvar="ZHIN_DB", help="Database to write (tables created in upstream zhin's schema): an SQLite file, or a postgresql:// or mysql:// URL. Default: the .zhin/data.sqlite a read finds from here upward, else a new ./.zhin/data.sqlite.")] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Replace a session (epoch) that is already there: everything of it, its member rows included.")] = False,
    events: Annotated[bool, typer.Option("--events", help="Also turn conversation_events member events (upstream's member.joined / member.left / member.muted / member.unmuted / member.role_changed; member_increase / member_decrease) into event messages, a whole-group mute into a scene change (once each).")] = False,
    source_format: Annotated[str, typer.Option("--from", metavar="zhin|sillytavern", help="What the files are: zhin session JSONL (zhin), or SillyTavern chat files (sillytavern: one chat each; hidden messages left out, as ST leaves them out of the prompt; in a group chat each character is its own assistant actor).")] = "zhin",
    card: Annotated[Path | None, typer.Option("--card", help="With --from sillytavern: the character card (JSON or PNG) whose name the bot takes (in a group chat: which member is the bot, default the first to speak; the other characters get origin peer_bot; a character not in the group is refused).")] = None,
) -> None:
    """Load session JSONL files (or SillyTavern chats, --from sillytavern) into a zhin database; with --events, also its join/leave events.

    Without --db it writes into the database every read command would find: the .zhin/data.sqlite in this folder or the nearest parent, and only when there is none a new ./.zhin/data.sqlite (docs/storage.md). All or nothing: on an error or an interruption the database is as it was (a new one does not appear)."""
    from zhin_cli.store.db import import_sessions, parse_db
    from zhin_cli.store.discovery import import_target
    from zhin_cli.store.jsonl import read_session

    if source_format not in ("zhin", "sillytavern"):
        raise UsageError(f"--from must be zhin or sillytavern, not {source_format!r}")
    if card is not None and source_format != "sillytavern":
        raise UsageError("--card is for --from sillytavern (a zhin session names its bot itself)")
    if not files and not events:
        raise UsageError("nothing to import: give session .jsonl files, or --events")
    if source_format == "sillytavern":
        from zhin_cli.store.sillytavern import read_card, read_chat

        character = read_card(card).name if card is not None else None
        chats = [read_chat(f, character=character) for f in files or []]  # all parsed first
        sessions = [c.session for c in chats]
        for st_chat in chats:
            if len(st_chat.characters) > 1:  # a group chat: say who is who, rather than import it silently
                typer.echo(terminal_safe(f"{st_chat.path}: a group chat of {', '.join(st_chat.characters)}: each "
                                         f"character is its own assistant actor; the bot is {st_chat.character_name}"),
                           err=True)
    else:
        from zhin_cli.core.errors import InputError
        from zhin_cli.store.sillytavern import is_sillytavern_chat

        for f in files or []:
            if is_sillytavern_chat(f):  # `trace` reads it as is; an import says which format it writes from
                raise InputError("a SillyTavern chat file, not a zhin session: import it with --from sillytavern",
                                 where=f"{f}:1")
        sessions = [read_session(f) for f in files or []]  # all parsed before anything is written
    target = import_target(db, Path.cwd(), events_only=not sessions)
    label = parse_db(target).label
    result = import_sessions(sessions, target, replace=replace, events=events)  # all or nothing
    print_sources(None, target)
    for session in sessions:
        typer.echo(terminal_safe(f"imported {session.session_id} ({result.rows[session.session_id]} messages) into {label}"), err=True)
    if result.events is not None:
        added = result.events
        for warning in added.warnings:  # a row zhin cannot read is named, never misread
            typer.echo(f"zhin: warning: {terminal_safe(warning)}", err=True)
        mutes = f"; {len(added.scenes)} whole-group mutes as scene changes" if added.scenes else ""
        typer.echo(terminal_safe(f"imported {added.imported} member events into {label} ({added.already} already there, "
                                 f"{len(added.no_session)} for sessions not in the database{mutes})"), err=True)


@app.command("export")
@handles_errors
def export_command(
    session: Annotated[str, typer.Argument(help="Session id or key (or a .jsonl file to normalise).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    db: DbOption = None,
) -> None:
    """Write a stored session as JSONL (the interchange format)."""
    from zhin_cli.store import load_session

    loaded = load_session(session, db=db, cwd=Path.cwd())
    from zhin_cli.store import database_read

    read = database_read([session], db=db, cwd=Path.cwd())
    if read is not None:  # read from a database: name it (a file names itself)
        print_sources(None, read)
    count = write_jsonl_output(loaded, output)
    if count is None:
        return
    typer.echo(terminal_safe(f"wrote {count} lines to {output}"), err=True)


@app.command("sessions")
@handles_errors
def sessions_command(
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """List the sessions in a database (to find the id to trace)."""
    from zhin_cli.store.db import SessionDatabase, parse_db

    source = database_or_discovered(db)
    with SessionDatabase(parse_db(source)) as database:
        rows = database.list_sessions()
    if as_json:
        from zhin_cli.core.timezones import with_iso_times

        print_json({"version": 1, "sessions": with_iso_times(rows)})
        return
    print_sources(None, source)
    print_records(stdout_console(), ["session_id (epoch)", "session_key", "messages", "last activity (UTC)"],
                  [[str(row["session_id"]), str(row["session_key"] or ""), str(row["messages"]),
                    format_ms(row["last_activity"])] for row in rows])


def format_ms(value: int | None) -> str:
    from zhin_cli.core.timezones import human_ms

    return "" if value is None else human_ms(value, seconds=True)


COMPLETION_HELP = """Print a shell completion script: command names, options, session ids and keys from the database found upward (and .jsonl files), provider names for --provider, .json files for --preset.

Install it once (then open a new shell):

bash:  echo 'eval "$(zhin completion bash)"' >> ~/.bashrc

zsh:   echo 'eval "$(zhin completion zsh)"' >> ~/.zshrc

fish:  zhin completion fish > ~/.config/fish/completions/zhin.fish
"""


@app.command("completion", help=COMPLETION_HELP)
def completion_command(
    shell: Annotated[str, typer.Argument(help="bash, zsh or fish.")],
) -> None:
    # typer vendors click as ``typer._click``: there is no top-level ``click`` module to import.
    from typer._click.shell_completion import get_completion_class

    from zhin_cli._cli import app as application

    cls = get_completion_class(shell)
    if cls is None:
        typer.echo(f"zhin: error: unsupported shell {shell!r} (bash, zsh, fish)", err=True)
        raise typer.Exit(2)
    command = typer.main.get_command(application)
    typer.echo(cls(command, {}, "zhin", "_ZHIN_COMPLETE").source())


# Commands whose arguments are sessions (ids, keys or .jsonl files); tests/test_completion.py checks it against
# every command's SESSION arguments.
SESSION_COMMANDS = frozenset({"export", "trace", "prefix-diff", "facts show", "stats cache", "report economy",
                              "report html", "report window", "view"})
PROVIDER_OPTIONS = ("--provider", "-p")
SESSION_OPTIONS = ("--session", "-s")
PRESET_OPTIONS = ("--preset",)
ROOT_FLAGS = ("--allow-plugins", "--allow-ref-plugins")


def _item(value: str, kind: str = "plain", help: str | None = None) -> CompletionItem:
    from typer._click.shell_completion import CompletionItem

    return CompletionItem(value, type=kind, help=help)


def complete_providers(incomplete: str, extra: tuple[str, ...] = ()) -> list[CompletionItem]:
    """The registered providers' names (``extra``: a trusted config's plugin providers) that start with ``incomplete``.
    The provider table is light (specs as data, no renderer or assembler): tests/test_completion.py checks it."""
    from zhin_cli.pipeline.providers.spec import provider_names

    return [_item(name) for name in provider_names(extra) if name.startswith(incomplete)]


def complete_files(incomplete: str, suffixes: tuple[str, ...]) -> list[CompletionItem]:
    """Files ending in ``suffixes`` and folders (to descend into) whose path starts with ``incomplete``."""
    folder, _, prefix = incomplete.rpartition("/")
    base = Path(folder or ".") if folder or not incomplete.startswith("/") else Path("/")
    shown = f"{folder}/" if folder or incomplete.startswith("/") else ""
    items: list[CompletionItem] = []
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(prefix) or (entry.name.startswith(".") and not prefix.startswith(".")):
            continue
        if entry.is_dir():
            items.append(_item(f"{shown}{entry.name}/", "dir"))
        elif entry.name.endswith(suffixes):
            items.append(_item(f"{shown}{entry.name}", "file"))
    return items


def _open_for_reading(database: Path) -> sqlite3.Connection:
    """A read-only connection to ``database`` that no bot's write waits for: a rollback-journal file is read
    through the lock-free private copy every other reader uses (store/sqlite_snapshot.py), because a SHARED lock
    of a TAB's would refuse a busy-timeout-0 bot's COMMIT (issue 28); a WAL file in place (its readers never
    block a writer)."""
    from zhin_cli.store.sqlite_snapshot import COPIES, is_wal  # standard library only: no SQLAlchemy for a TAB

    path = database.resolve()
    with path.open("rb") as handle:
        header = handle.read(20)
    if is_wal(header):
        return sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=0.2)

    def connect(copy: Path) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{quote(str(copy))}?mode=ro&immutable=1", uri=True)

    return COPIES.open(path, lambda: ZhinError("a hot journal", where=str(path)), connect)


def _stored_sessions(database: Path) -> Iterator[tuple[str, str | None]]:
    """``(session_id, session_key)`` of an SQLite database, read only with the standard library (a TAB must not
    wait for SQLAlchemy); nothing if the file is not one."""
    try:
        with closing(_open_for_reading(database)) as connection:
            yield from connection.execute("SELECT session_id, session_key FROM agent_sessions ORDER BY session_id")
    except (sqlite3.Error, OSError, ZhinError):
        return


def complete_sessions(incomplete: str, db: str | None = None) -> list[CompletionItem]:
    """Session keys and ids of the database (``--db`` if it names an SQLite file, else ``ZHIN_DB``, else the one
    found upward), then the .jsonl files, whose text starts with ``incomplete``."""
    given = db or os.environ.get("ZHIN_DB")
    database: Path | None
    if given and "://" not in given:
        database = Path(given)
    elif given and given.startswith("sqlite:///"):
        database = Path(given[len("sqlite:///"):])
    elif given:
        database = None  # a server: connecting is no job for a TAB
    else:
        from zhin_cli.store.discovery import discover_database  # no SQLAlchemy: a TAB must not wait for it

        database = discover_database(Path.cwd())
    values: dict[str, str] = {}
    if database is not None:
        for session_id, key in _stored_sessions(database):
            if key:
                values.setdefault(str(key), "session key")
            values.setdefault(str(session_id), "session id")
    items = [_item(value, help=kind) for value, kind in values.items() if value.startswith(incomplete)]
    return items + complete_files(incomplete, (".jsonl", ".ndjson"))


def _given_config_providers(args: list[str]) -> tuple[str, ...]:
    """The plugin providers of the config the command line names (``--config``/``-c``, ``ZHIN_CONFIG``): naming it
    lets its plugins run (docs/safety.md); a config only found upward runs nothing on a TAB."""
    config = os.environ.get("ZHIN_CONFIG") or None
    for index, word in enumerate(args):
        if word in ("--config", "-c") and index + 1 < len(args):
            config = args[index + 1]
        elif word.startswith("--config="):
            config = word[len("--config="):]
    if not config:
        return ()
    from zhin_cli.pipeline.context import plugin_provider_names

    return plugin_provider_names(Path(config))


def _db_in(args: list[str]) -> str | None:
    for index, word in enumerate(args):
        if word == "--db" and index + 1 < len(args):
            return args[index + 1]
        if word.startswith("--db="):
            return word[len("--db="):]
    return None


def quick_items(args: list[str], incomplete: str) -> list[CompletionItem] | None:
    """What a TAB after ``zhin ARGS… INCOMPLETE`` offers, for the cases that need no command loaded — a value of
    --provider, --preset or --session, a session argument, a command name — or ``None`` (typer's full completion
    answers the rest: option names, a group's commands, other values)."""
    previous = args[-1] if args else None
    if previous in PROVIDER_OPTIONS:
        return complete_providers(incomplete, _given_config_providers(args))
    if previous in PRESET_OPTIONS:
        return complete_files(incomplete, (".json",))
    if previous in SESSION_OPTIONS:
        return complete_sessions(incomplete, _db_in(args))
    if incomplete.startswith("-"):
        return None
    words = [word for word in args if word not in ROOT_FLAGS]
    if not words:
        return [_item(name) for name in COMMAND_MODULES if name.startswith(incomplete)]
    if any(word.startswith("-") for word in words[1:]) and previous is not None and previous.startswith("-"):
        return None  # the word may be an option's value: only the command's own parameters know
    path = " ".join(words[:2]) if " ".join(words[:2]) in SESSION_COMMANDS else words[0]
    if path in SESSION_COMMANDS:
        return complete_sessions(incomplete, _db_in(args))
    return None


def quick_completion(instruction: str) -> str | None:
    """The answer to ``_ZHIN_COMPLETE=complete_<shell>`` when ``quick_items`` knows it, formatted by typer's own
    class for that shell (the script ``zhin completion`` printed reads it); ``None`` to let typer answer."""
    from typer._click.shell_completion import get_completion_class

    _, _, shell = instruction.partition("_")
    cls = get_completion_class(shell)
    if not instruction.startswith("complete_") or cls is None:
        return None
    completer = cls(None, {}, "zhin", "_ZHIN_COMPLETE")  # type: ignore[arg-type]
    args, incomplete = completer.get_completion_args()
    items = quick_items(args, incomplete)
    if items is None:
        return None
    completer.get_completions = lambda args, incomplete: items  # type: ignore[method-assign]  # our answer
    return completer.complete()


def shell_completer(kind: str) -> Callable[[Context | None, Parameter, str], list[CompletionItem]]:
    """The ``shell_complete`` callback of a parameter (typer's full completion: after an option the quick path does
    not know) — the same answers as ``quick_items``."""

    def complete(ctx: Context | None, param: Parameter, incomplete: str) -> list[CompletionItem]:
        if kind == "provider":
            return complete_providers(incomplete)
        if kind == "preset":
            return complete_files(incomplete, (".json",))
        return complete_sessions(incomplete, ctx.params.get("db") if ctx is not None else None)

    return complete

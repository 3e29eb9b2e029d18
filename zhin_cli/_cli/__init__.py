"""The command line: thin typer commands over library functions that return data."""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from zhin_cli import __version__
from zhin_cli.errors import EXIT_CANNOT_RUN, EXIT_USAGE, UsageError, ZhinError

app = typer.Typer(
    name="zhin",
    help="Show, test and gate what a group-chat LLM bot sends to its model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

F = TypeVar("F", bound=Callable[..., Any])


def stdout_console() -> Console:
    # Piped output is read by people and scripts alike: never crop it to an 80-column default.
    width = None if sys.stdout.isatty() else max(int(os.environ.get("COLUMNS") or 0), 200)
    return Console(no_color=bool(os.environ.get("NO_COLOR")) or None, highlight=False, width=width)


def stderr_console() -> Console:
    return Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")) or None, highlight=False)


def fail(message: str, code: int) -> None:
    stderr_console().print(f"zhin: error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def handles_errors(function: F, *, trouble: int | None = None) -> F:
    """A user-caused problem becomes one line on stderr and its documented exit code, never a traceback.

    ``trouble`` replaces every error's code (``diff``-like commands exit 2 for any trouble)."""

    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except ZhinError as error:
            fail(str(error).replace("\n", " "), trouble if trouble is not None else error.exit_code)
        except BrokenPipeError:
            sys.stderr.close()
            raise typer.Exit(0) from None
        except MemoryError:
            fail("out of memory", trouble if trouble is not None else EXIT_CANNOT_RUN)
        return None

    return wrapper  # type: ignore[return-value]


def handles_errors_like_diff(function: F) -> F:
    """Exit status like ``diff``: 0 same, 1 different, 2 trouble (any error)."""
    return handles_errors(function, trouble=EXIT_USAGE)


def check_options(provider: str | None, timezone: str | None = None) -> None:
    """Option values typer cannot check: a bad ``--provider`` or ``--timezone`` is usage (exit 2), like any
    bad option, not a config problem."""
    from zhin_cli.providers import PROFILES
    from zhin_cli.store.payload import valid_timezone

    if provider and provider not in PROFILES:
        raise UsageError(f"--provider: unknown provider {provider!r} (known: {', '.join(sorted(PROFILES))})")
    if timezone and not valid_timezone(timezone):
        raise UsageError(f"--timezone: unknown time zone {timezone!r} (expected an IANA name such as Asia/Shanghai)")


@contextmanager
def replay_progress(label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr for long replays; off when stdout is not a terminal (DESIGN §4)."""
    if not sys.stdout.isatty() or os.environ.get("ZHIN_NO_PROGRESS"):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=stderr_console(),
                  transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(turn: int, total: int) -> None:
            bar.update(task, completed=turn, total=total)

        yield update


def freeze_loaded() -> None:
    """Sessions once loaded live until the command ends: move them out of the cyclic GC's reach, or every
    collection during a long replay rescans them (superlinear time on 10⁴-message sessions)."""
    gc.collect()
    gc.freeze()


def database_or_discovered(db: str | None) -> str:
    """``--db`` as given, else the ``.zhin/data.sqlite`` found from the current directory upward (usage error if none)."""
    from zhin_cli.store.database import discover_database

    if db is not None:
        return db
    found = discover_database(Path.cwd())
    if found is None:
        raise UsageError("no .zhin/data.sqlite found from here upward; pass --db")
    return str(found)


def write_jsonl_output(session: Any, output: Path | None) -> int | None:
    """A session as JSONL on stdout, or into ``output`` (one-line error if it cannot be written); lines written."""
    from zhin_cli.store.jsonl import write_session

    if output is None:
        write_session(session, sys.stdout)
        return None
    try:
        handle = output.open("w", encoding="utf-8")
    except OSError as exc:
        raise ZhinError(f"cannot write: {exc.strerror}", where=str(output)) from None
    with handle:
        return write_session(session, handle)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


DbOption = Annotated[
    str | None,
    typer.Option("--db", envvar="ZHIN_DB", help="Database: a file path, sqlite:///path, postgresql://user:password@host/db or mysql://…. Default: .zhin/data.sqlite found upward."),
]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", envvar="ZHIN_CONFIG", help="zhin.yaml to use (default: found upward).")
]
PresetOption = Annotated[
    Path | None,
    typer.Option("--preset", envvar="ZHIN_PRESET", help="A SillyTavern chat-completion preset (.json) as the message skeleton "
                 "(default: zhin.yaml's preset:, else the built-in ADR 0041 layout)."),
]


def version_callback(value: bool) -> None:
    if value:
        print(f"zhin {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")] = False,
) -> None:
    """Show, test and gate what a group-chat LLM bot sends to its model."""


from zhin_cli._cli import budget as _budget  # noqa: E402,F401
from zhin_cli._cli import data as _data  # noqa: E402,F401
from zhin_cli._cli import eval as _eval  # noqa: E402,F401
from zhin_cli._cli import facts as _facts  # noqa: E402,F401
from zhin_cli._cli import fixtures as _fixtures  # noqa: E402,F401
from zhin_cli._cli import prefix_diff as _prefix_diff  # noqa: E402,F401
from zhin_cli._cli import preset as _preset  # noqa: E402,F401
from zhin_cli._cli import providers as _providers  # noqa: E402,F401
from zhin_cli._cli import report as _report  # noqa: E402,F401
from zhin_cli._cli import request_diff as _request_diff  # noqa: E402,F401
from zhin_cli._cli import serve as _serve  # noqa: E402,F401
from zhin_cli._cli import stats as _stats  # noqa: E402,F401
from zhin_cli._cli import trace as _trace  # noqa: E402,F401


def main() -> None:
    # add_completion=False keeps typer's --install-completion options off every command, but then typer never
    # registers its shell classes: register them so `zhin completion SHELL` scripts (which call back with
    # _ZHIN_COMPLETE=complete_<shell>) and the command itself find them.
    from typer._completion_classes import completion_init

    completion_init()
    app(prog_name="zhin")

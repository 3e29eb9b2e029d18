"""The command line: thin typer commands over library functions that return data."""

from __future__ import annotations

import errno
import gc
import importlib
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from functools import cache, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO, TypeVar

import typer
from typer._click import Command, Context
from typer.core import TyperGroup
from typer.main import get_command_from_info, get_command_name, get_group_from_info

from zhin_cli import __version__
from zhin_cli.core.errors import (
    EXIT_CANNOT_RUN,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    OutputError,
    UsageError,
    ZhinError,
)
from zhin_cli.core.inputfiles import SURROGATE
from zhin_cli.core.redact import redact_text
from zhin_cli.core.terminaltext import terminal_safe, terminal_safe_lines
from zhin_cli.signals import SIGNALLED, install_signal_handlers, terminated_by_sigterm

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer
    from rich.console import Console
    from rich.progress import TaskID
    from typer._click.formatting import HelpFormatter

    from zhin_cli.core.model import Session
    from zhin_cli.pipeline.config import Config
    from zhin_cli.pipeline.context import RunContext

# Every command, in the order ``zhin --help`` lists them (typer's: the plain commands as their modules register them,
# then the groups), and the module of zhin_cli._cli that defines it. A command's module — and the library it calls
# (SQLAlchemy, deepdiff, openai's pydantic…) — is imported only when that command runs or its help is shown, so
# ``zhin --version`` and a one-command run pay for nothing else. tests/test_cli.py checks this table against the
# modules' own registrations.
COMMAND_MODULES: dict[str, str] = {
    "import": "data",
    "export": "data",
    "sessions": "data",
    "completion": "data",
    "eval": "eval",
    "prefix-diff": "prefix_diff",
    "providers": "providers",
    "request-diff": "request_diff",
    "serve": "serve",
    "trace": "trace",
    "trust": "trust",
    "view": "view",
    "budget": "budget",
    "schema": "eval",
    "facts": "facts",
    "fixtures": "fixtures",
    "preset": "preset",
    "report": "report",
    "stats": "stats",
}


class LazyCommands(TyperGroup):
    """The root group: a command's click object is built when the command is looked up, after its module is imported.

    ``commands`` (click's full mapping, read by typer's typo suggestions and by anything that walks the tree) loads
    every module first, so it is always complete; looking one command up loads only that command's module. Built on
    typer's own converters (``get_command_from_info``, ``get_group_from_info``), so a lazily built command is the
    object typer would have built eagerly: the same options, help and panels."""

    def __init__(self, *, commands: dict[str, Command] | None = None, **attrs: Any) -> None:  # passed on to click, which takes any keyword
        self.loaded: dict[str, Command] = {}
        super().__init__(commands=commands, **attrs)
        if self.loaded:  # built by typer from modules imported before (an embedding caller, the in-process tests)
            from zhin_cli._cli import examples

            for name, command in self.loaded.items():
                examples.apply_conventions(command, name)

    @property
    def commands(self) -> dict[str, Command]:
        for name in COMMAND_MODULES:
            self._load(name)
        return self.loaded

    @commands.setter
    def commands(self, value: MutableMapping[str, Command]) -> None:
        self.loaded = dict(value)

    def add_command(self, cmd: Command, name: str | None = None) -> None:
        self.loaded[name or cmd.name or ""] = cmd

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMAND_MODULES) + [name for name in self.loaded if name not in COMMAND_MODULES]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        self._load(cmd_name)
        return self.loaded.get(cmd_name)

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        from zhin_cli._cli.examples import apply_conventions  # here, not at start: `zhin --version` needs none of it

        apply_conventions(self, "", subcommands=False)  # the root's own options; each command gets its own on load
        super().format_help(ctx, formatter)

    def make_context(self, info_name: str | None, args: list[str], parent: Context | None = None,
                     **extra: object) -> Context:
        with one_line_usage_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Context) -> object:
        with one_line_usage_errors():
            return super().invoke(ctx)

    def _load(self, name: str) -> None:
        """Import the module of command ``name`` (if it is one of ours and not built yet) and build the click
        objects of everything it registered on ``app``."""
        if name in self.loaded or name not in COMMAND_MODULES:
            return
        importlib.import_module(f"zhin_cli._cli.{COMMAND_MODULES[name]}")
        from zhin_cli._cli import examples  # the examples and metavars of every command (tests/test_cli_conventions.py)

        for command_info in app.registered_commands:
            callback_name = command_info.callback.__name__ if command_info.callback else ""
            if (command_info.name or get_command_name(callback_name)) in self.loaded:
                continue
            command = get_command_from_info(command_info, pretty_exceptions_short=app.pretty_exceptions_short,
                                            rich_markup_mode=app.rich_markup_mode)
            examples.apply_conventions(command, command.name or "")
            self.loaded.setdefault(command.name or "", command)
        for group_info in app.registered_groups:
            if group_info.name in self.loaded:
                continue
            group = get_group_from_info(group_info, pretty_exceptions_short=app.pretty_exceptions_short,
                                        rich_markup_mode=app.rich_markup_mode, suggest_commands=app.suggest_commands)
            examples.apply_conventions(group, group.name or "")
            self.loaded.setdefault(group.name or "", group)


@contextmanager
def one_line_usage_errors() -> Iterator[None]:
    """A click usage error (unknown command or option, missing or bad argument — also one a command raises as
    ``typer.BadParameter``) becomes one ``zhin: error:`` line on stderr and its exit status (2), like every other
    zhin error, instead of typer's usage block and boxed message. ``zhin`` or a group with no arguments still
    prints its help."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError

    try:
        yield
    except NoArgsIsHelpError:
        raise
    except ClickException as error:
        report_error(usage_error_line(error))
        raise typer.Exit(error.exit_code) from None


def usage_error_line(error: Exception) -> str:
    """``trace: no such option: --bogus (zhin trace -h for help)`` — click's message (with its "Did you mean"
    suggestion) on one line, led by the command it concerns."""
    format_message = getattr(error, "format_message", None)
    message = " ".join((format_message() if callable(format_message) else str(error)).split()).rstrip(".")
    message = message[:1].lower() + message[1:]
    ctx = getattr(error, "ctx", None)
    if ctx is None:
        return message
    path = ctx.command_path
    command = path.partition(" ")[2]
    return f"{command + ': ' if command else ''}{message} ({path} -h for help)"


app = typer.Typer(
    cls=LazyCommands,
    name="zhin",
    help="Show, test and gate what a group-chat LLM bot sends to its model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # also examples.HELP_OPTION_NAMES
)

F = TypeVar("F", bound=Callable[..., object])


def stdout_console() -> Console:
    """A rich console on stdout whose broken pipe (``zhin trace … | head``) ends the command quietly with 0 (rich's
    default exits 1, which is trace's "rejected" status and fails ``set -o pipefail`` steps). rich is imported here,
    by the commands that print, not by every start of ``zhin``."""
    return _stdout_console_class()(no_color=bool(os.environ.get("NO_COLOR")) or None, highlight=False,
                                   width=None if sys.stdout.isatty() else piped_width())


# Below this a COLUMNS value is taken for a mistake (a table needs some room): piped output stays wide.
MIN_COLUMNS = 20
PIPED_WIDTH = 200


def piped_width() -> int:
    """The width of output that goes to a pipe or a file: ``COLUMNS`` when it is set (a person who pipes into
    ``less`` or a test at COLUMNS=60 asked for that width), else wide — a script reading the output never gets text
    cropped to an 80-column default."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) >= MIN_COLUMNS:
        return int(columns)
    return PIPED_WIDTH


@cache
def _stdout_console_class() -> type[Console]:
    from rich.console import Console

    class StdoutConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            _silence_stdout()
            raise SystemExit(0)

    return StdoutConsole


def print_records(console: Console, headers: list[str], rows: list[list[str]], *, title: str | None = None) -> None:
    """Rows as a table when it fits the console's width with every cell whole; else one block per row — its first
    cell (the identifier) alone on a line, then ``header: value`` lines — so no identifier is ever cut at a narrow
    COLUMNS (issue 17 §3). A header may wrap at its spaces; cells never do in the table."""
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text

    rows = [[terminal_safe(cell) for cell in row] for row in rows]  # cells come from inputs: ids, names, keys
    title = None if title is None else terminal_safe(title)
    widths = [max([max((cell_len(word) for word in header.split()), default=0)] + [cell_len(row[i]) for row in rows])
              for i, header in enumerate(headers)]
    if sum(widths) + 3 * len(headers) + 1 <= console.width:
        table = Table(*headers, title=None if title is None else Text(title, style="table.title"))
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))  # Text: a cell's "[bold]" is shown, not read as markup
        console.print(table)
        return
    if title:
        console.print(title, markup=False)
    for row in rows:
        console.print(row[0], markup=False, soft_wrap=True)
        for header, cell in zip(headers[1:], row[1:], strict=True):
            if cell:
                console.print(f"  {header}: {cell}", markup=False)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")) or None, highlight=False)


def report_error(message: str) -> None:
    """``zhin: error: message`` as one line on stderr (nothing if stderr itself cannot be written). Every message
    passes through ``redact_text`` on its way out: a credential a driver or a library echoes is never shown; and
    through ``terminal_safe``: a message quotes inputs (a file name, a bad key), whose controls and workflow
    commands must not act on the terminal or a CI log."""
    try:
        stderr_console().print(f"zhin: error: {terminal_safe(redact_text(message))}", markup=False, highlight=False, soft_wrap=True)
    except (OSError, ValueError):  # stderr closed or on a full disk: the exit status still tells
        pass


def fail(message: str, code: int) -> None:
    report_error(message)
    raise typer.Exit(code)


def handles_errors(function: F, *, trouble: int | None = None) -> F:
    """A user-caused problem becomes one line on stderr and its documented exit code, never a traceback.

    ``trouble`` replaces every error's code (``diff``-like commands exit 2 for any trouble)."""

    @wraps(function)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return function(*args, **kwargs)
        except ZhinError as error:
            fail(str(error).replace("\n", " "), trouble if trouble is not None else error.exit_code)
        except BrokenPipeError:  # the reader of stdout went away (`| head`): quietly 0
            _silence_stdout()
            raise typer.Exit(0) from None
        except MemoryError:
            fail("out of memory", trouble if trouble is not None else EXIT_CANNOT_RUN)
        except OSError as error:
            if error.errno != errno.ENAMETOOLONG:
                raise
            # An argument is a file name only when it can be one: a session id or path past the file system's
            # limit is the user's input, named short (it may be kilobytes long).
            name = str(error.filename or "")
            shown = name if len(name) <= 80 else f"{name[:40]}…{name[-20:]} ({len(name)} characters)"
            fail(f"{shown}: file name too long", trouble if trouble is not None else EXIT_CANNOT_RUN)
        return None

    return wrapper  # type: ignore[return-value]


def handles_errors_like_diff(function: F) -> F:
    """Exit status like ``diff``: 0 same, 1 different, 2 trouble (any error)."""
    return handles_errors(function, trouble=EXIT_USAGE)


def check_options(provider: str | None, timezone: str | None = None) -> None:
    """Option values typer cannot check: a bad ``--provider`` or ``--timezone`` is usage (exit 2), like any
    bad option, not a config problem.

    A provider no built-in has may come from a plugin of the command's config (``--config``, or the zhin.yaml found
    upward — whose plugins run only if trusted, else exit 3): the config and its plugins are loaded first
    (``RunContext``), kept for the whole command, and the provider is checked after."""
    from zhin_cli.core.timezones import valid_timezone
    from zhin_cli.pipeline.providers import PROVIDERS, unknown_provider

    if provider and provider not in PROVIDERS and not _plugin_provider(provider):
        raise UsageError(f"--provider: {unknown_provider(provider)}")
    if timezone and not valid_timezone(timezone):
        raise UsageError(f"--timezone: unknown time zone {timezone!r} (expected an IANA name such as Asia/Shanghai)")
    _open_plugins_that_may_run()


def _open_plugins_that_may_run() -> None:
    """Run the command's config's plugins before anything reads a session, when they may run anyway (a config the
    user named, or a found one that is trusted): a plugin's data source, JSONL line kind or wire format then serves
    the command's own arguments. An untrusted found config is left to the stage that needs its plugins, which
    refuses it there as before (exit 3) — nothing is refused here that would not be refused later."""
    from typer._click.globals import get_current_context

    from zhin_cli.core.trust import plugins_allowed, status
    from zhin_cli.pipeline.config import load_config

    click_context = get_current_context(silent=True)
    if click_context is None or RUN_CONTEXT in click_context.meta or "config" not in click_context.params:
        return
    if click_context.params.get("base") or click_context.params.get("head"):
        return  # the configs are the git refs', each under its own trust rule, not the working tree's
    from zhin_cli.pipeline.context import RunContext

    given = click_context.params.get("config")
    config = load_config(Path(given) if given is not None else None, cwd=Path.cwd())
    source = config.source
    runs = bool(config.plugins) and source.kind in ("given", "found") and (
        source.kind == "given" or plugins_allowed() or (source.file is not None and status(source.file, config.plugins) is None))
    if runs:
        open_command_context(config)
    else:  # the config read once all the same: the command's tools take it from here (``command_context``)
        click_context.meta[RUN_CONTEXT] = RunContext.for_config(config, cwd=Path.cwd())


def _plugin_provider(name: str) -> bool:
    """Load the running command's config and its plugins for the rest of the command (released when it ends); True
    when one of them registered the provider ``name``."""
    from typer._click.globals import get_current_context

    from zhin_cli.pipeline.providers import PROVIDERS

    click_context = get_current_context(silent=True)
    if click_context is None:
        return False
    config = click_context.params.get("config")
    open_command_context(Path(config) if config is not None else None)
    return name in PROVIDERS


def open_command_context(config: Path | Config | None) -> RunContext:
    """Load ``config`` (None: the zhin.yaml found upward, whose plugins run only if trusted) and run its plugins
    for the rest of the running command (released when it ends); ``command_context()`` hands it to tools."""
    from typer._click.globals import get_current_context

    from zhin_cli.pipeline.context import RunContext

    context = RunContext.open(config, cwd=Path.cwd())
    click_context = get_current_context(silent=True)
    if click_context is not None:
        click_context.call_on_close(context.close)
        click_context.meta[RUN_CONTEXT] = context
    return context


RUN_CONTEXT = "zhin.run_context"


def command_context(*, db: str | None = None, prices_file: Path | None = None) -> RunContext | None:
    """The run context ``check_options`` opened for this command (a plugin's provider), with the command's ``--db``
    and ``--prices``: a tool handed it reads the config (and runs its plugins) no second time. None when the
    command needed none (its tools open their own)."""
    from typer._click.globals import get_current_context

    click_context = get_current_context(silent=True)
    context: RunContext | None = click_context.meta.get(RUN_CONTEXT) if click_context is not None else None
    if context is not None:
        context.use_inputs(db=db, prices_file=prices_file)
    return context


def progress_wanted() -> bool:
    """Progress is drawn where a person watches it: on stderr, when stderr is a terminal — whatever stdout is
    (``zhin trace --json > out.json`` still shows it) — unless ``ZHIN_NO_PROGRESS`` is set (DESIGN §4)."""
    if os.environ.get("ZHIN_NO_PROGRESS"):
        return False
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError, OSError):
        return False


@contextmanager
def replay_progress(label: str, *, loading: str = "loading") -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr for long work, or ``None`` when no one watches (``progress_wanted``).

    From the start it shows ``loading`` (reading the config and the session, which can take seconds); the bar
    itself appears with the first ``update(done, total)``, so its first frame has its total — a caller that knows
    the total before its first step calls ``update(0, total)``. Every command can use it: ``with replay_progress(
    "economy") as progress: run(…, progress=progress)``; ``update`` takes cumulative counts."""
    if not progress_wanted():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn

    # redirect_*=False: rich would otherwise route whatever the command writes to sys.stdout meanwhile (a streamed
    # --jsonl line) through the stderr console while the bar is live
    waiting = Progress(SpinnerColumn(), TextColumn(f"{loading}…"), console=stderr_console(), transient=True,
                       redirect_stdout=False, redirect_stderr=False)
    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=stderr_console(),
                   transient=True, redirect_stdout=False, redirect_stderr=False)
    task: list[TaskID] = []  # the bar's task once it started
    waiting.add_task(loading, total=None)
    waiting.start()
    try:

        def update(done: int, total: int) -> None:
            if not task:
                waiting.stop()
                task.append(bar.add_task(label, total=total, completed=done))
                bar.start()
            bar.update(task[0], completed=done, total=total)

        yield update
    finally:
        waiting.stop()
        bar.stop()


def freeze_loaded() -> None:
    """Sessions once loaded live until the command ends: move them out of the cyclic GC's reach, or every
    collection during a long replay rescans them (superlinear time on 10⁴-message sessions)."""
    gc.collect()
    gc.freeze()


def database_or_discovered(db: str | None) -> str:
    """``--db`` as given, else the ``.zhin/data.sqlite`` found from the current directory upward (exit 3 if none:
    ``zhin_cli.store.discovery.find_database``, the one rule every command shares)."""
    from zhin_cli.store.discovery import find_database

    return find_database(db, Path.cwd())


def write_jsonl_output(session: Session, output: Path | None) -> int | None:
    """A session as JSONL on stdout, or into ``output`` (one-line error if it cannot be written); lines written."""
    from zhin_cli.core.outputfiles import atomic_output
    from zhin_cli.store.jsonl import write_session

    if output is None:  # a terminal or a CI log: escaped like print_json (each line parses to the same value)
        text = io.StringIO()
        write_session(session, text)
        sys.stdout.write(terminal_safe_lines(text.getvalue()))
        return None
    with atomic_output(output) as handle:  # a full disk leaves no half-written file (and the old one intact)
        return write_session(session, handle)


def sources_line(config: Path | str | None, db: str | Path | None, *, config_label: str | None = None) -> str:
    """The one header line naming what a command read: ``config: zhin.yaml · db: ../.zhin/data.sqlite``.

    Paths are shown relative to the working directory (``../`` for a parent's), a database URL with its password
    redacted; a part that was not used says so (``config: none (built-in defaults)``, no ``db`` part for a file).
    ``config_label`` names configurations that are not one path (``base main → head HEAD``)."""

    def shown(value: Path | str) -> str:
        text = str(value)
        if "://" in text:
            return redact_text(text)
        try:
            return os.path.relpath(Path(text).resolve(), Path.cwd().resolve())
        except (OSError, ValueError):
            return text

    if config_label is not None:
        parts = [f"config: {config_label}"]
    else:
        parts = [f"config: {shown(config)}" if config is not None else "config: none (built-in defaults)"]
    if db is not None:
        parts.append(f"db: {shown(db)}")
    return " · ".join(parts)


def print_sources(config: Path | str | None, db: str | Path | None, *, config_label: str | None = None) -> None:
    """``sources_line`` on stderr (stdout stays the command's output, for pipes and ``--json``)."""
    try:
        stderr_console().print(terminal_safe(sources_line(config, db, config_label=config_label)), markup=False, highlight=False, soft_wrap=True)
    except (OSError, ValueError):
        pass


def print_json(data: object) -> None:
    from zhin_cli.core.outputfiles import escape_surrogates

    # terminal_safe_lines: a string of the document holds input text; escaped, it still parses to the same value
    sys.stdout.write(terminal_safe_lines(escape_surrogates(json.dumps(data, ensure_ascii=False, indent=2))) + "\n")


def write_json_line_safely(data: object, out: TextIO) -> None:
    """``data`` as one JSON line by the one JSONL writer, escaped like ``print_json`` (a ``##[`` in a string would
    open a workflow command anywhere in a CI log line), flushed at once for a reader that streams."""
    from zhin_cli.core.outputfiles import write_json_line

    line = io.StringIO()
    write_json_line(data, line)
    out.write(terminal_safe_lines(line.getvalue()))
    out.flush()


DbOption = Annotated[
    str | None,
    typer.Option("--db", envvar="ZHIN_DB", help="Database: a file path, sqlite:///path, postgresql://user:password@host/db or mysql://…. Default: .zhin/data.sqlite found upward."),
]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", envvar="ZHIN_CONFIG", help="zhin.yaml to use (default: found upward).")
]
PricesOption = Annotated[
    Path | None,
    typer.Option("--prices", metavar="FILE", help="Price rows over the built-in table and zhin.yaml prices: (JSON or YAML, the shape of zhin_cli/pipeline/prices.json)."),
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
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")] = False,
    allow_plugins: Annotated[bool, typer.Option(
        "--allow-plugins", envvar="ZHIN_ALLOW_PLUGINS",
        help="Run the plugins of a zhin.yaml found upward and of eval case files without `zhin trust` (your own checkout, its CI).")] = False,
    allow_ref_plugins: Annotated[bool, typer.Option(
        "--allow-ref-plugins", envvar="ZHIN_ALLOW_REF_PLUGINS",
        help="Run the plugin code of --base/--head git refs (on a pull request: the pull request's code).")] = False,
) -> None:
    """Show, test and gate what a group-chat LLM bot sends to its model."""
    from zhin_cli.core.trust import set_allowed

    set_allowed(plugins=allow_plugins, ref_plugins=allow_ref_plugins)  # for this command only (docs/safety.md "Plugins and trust")
    ctx.call_on_close(set_allowed)
    from zhin_cli.core.notes import show_notes_on_stderr

    show_notes_on_stderr()  # a choice the library made for the user (a substituted model): one `zhin: note:` line




class _StdoutRaw(io.RawIOBase):
    """fd 1 for ``sys.stdout``: a write that fails ends the command with one line (OutputError, exit 3) or, for a
    reader that went away (EPIPE), quietly with 0 — wherever it happens, inside a command or at the final flush.
    After a failure the rest is discarded, so the interpreter's own flush at exit cannot fail again."""

    def __init__(self, closed: bool) -> None:
        super().__init__()
        self.closed_at_start = closed
        self.failed = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 1

    def isatty(self) -> bool:
        return not self.closed_at_start and os.isatty(1)

    def write(self, data: ReadableBuffer) -> int:
        size = len(memoryview(data))
        if self.failed:
            return size
        if self.closed_at_start:
            self.failed = True
            raise OutputError("cannot write to stdout: it is closed")
        try:
            return os.write(1, data)
        except BrokenPipeError:
            self.failed = True
            _silence_stdout()
            raise SystemExit(0) from None
        except OSError as exc:
            self.failed = True
            _silence_stdout()
            raise OutputError(f"cannot write to stdout: {exc.strerror or exc}") from None


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null: later writes (ours, the interpreter's final flush) succeed and go nowhere."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def _guard_standard_streams() -> None:
    """A closed fd 0/1/2 is given /dev/null (so no file the command opens becomes "stdout"), and ``sys.stdout``
    becomes a stream over :class:`_StdoutRaw`. A stdout that pytest or a caller replaced is left alone."""
    closed = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
            closed.add(fd)
    current = sys.stdout
    try:
        ours = current is None or current.fileno() == 1
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        ours = False
    if not ours:
        return
    if current is not None:
        try:
            current.flush()
        except (OSError, ValueError):
            pass
    raw = _StdoutRaw(closed=1 in closed)
    encoding = getattr(current, "encoding", None) or "utf-8"
    # backslashreplace: a lone surrogate that reaches stdout despite the readers is written as its JSON escape
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors="backslashreplace",
                                  line_buffering=raw.isatty())
    if 2 in closed or sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process


def _finish(code: int) -> int:
    """Flush stdout inside the contract: a failure is one line and exit 3 (if nothing failed before), EPIPE is 0."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OutputError as error:
        if code == 0:
            report_error(str(error))
            code = error.exit_code
    except SystemExit as exc:  # EPIPE at the last write
        code = exc.code if isinstance(exc.code, int) else 0
    except (OSError, ValueError):
        code = code or EXIT_CANNOT_RUN
    return code


def _argument_not_text(arguments: list[str]) -> str | None:
    """An argument holding bytes that are not UTF-8 (Python carries them as lone surrogates) names no session id,
    ref or option value: a usage error, unless it is the name of a file that exists (file names may be any bytes)."""
    for index, argument in enumerate(arguments, start=1):
        if SURROGATE.search(argument) is None:
            continue
        value = argument.partition("=")[2] if argument.startswith("--") and "=" in argument else argument
        if os.path.lexists(value):
            continue
        raw = os.fsencode(argument)
        shown = repr(raw[:60])[2:-1] + ("…" if len(raw) > 60 else "")
        return f"argument {index} is not UTF-8 text: {shown} (ids and values must be text; a file name may be any bytes if the file exists)"
    return None




def main() -> None:
    """The ``zhin`` entry point. Exit status beyond each command's own: SIGINT 130, SIGTERM 143 (cleanup ran, quiet;
    a command that handles the interrupt itself, like ``serve``, keeps its status); a stdout that cannot be written 3
    (one line); a reader of stdout that went away (EPIPE) 0. docs/use.md "Exit status"."""
    install_signal_handlers()  # zhin_cli.launch did it already; an embedding caller of main() gets them here
    try:
        code = _run(sys.argv[1:])
    except KeyboardInterrupt:  # outside the command: while the streams were set up or the output flushed
        code = EXIT_INTERRUPTED
    if SIGNALLED and code == EXIT_INTERRUPTED:  # the interrupt ended the command (one that handles it, serve, keeps its 0)
        code = EXIT_TERMINATED if terminated_by_sigterm() else EXIT_INTERRUPTED
    sys.exit(code)


def _run(arguments: list[str]) -> int:
    """Run the command line ``arguments``; the exit status."""
    _guard_standard_streams()
    bad = _argument_not_text(arguments)
    if bad is not None:
        report_error(bad)
        return EXIT_USAGE
    code: int = 0
    instruction = os.environ.get("_ZHIN_COMPLETE")
    if instruction:  # a shell's TAB: answer the common cases before any command loads (< 0.3 s)
        from typer._completion_classes import completion_init

        from zhin_cli._cli.data import quick_completion

        completion_init()
        try:
            answer = quick_completion(instruction)
        except SystemExit as exc:  # fish's "is-args" answers with the status
            return _finish(exc.code if isinstance(exc.code, int) else 0)
        if answer is not None:
            sys.stdout.write(answer + ("\n" if answer else ""))
            return _finish(0)
    try:
        # add_completion=False keeps typer's --install-completion options off every command, but then typer never
        # registers its shell classes: register them so `zhin completion SHELL` scripts (which call back with
        # _ZHIN_COMPLETE=complete_<shell>) and the command itself find them.
        from typer._completion_classes import completion_init

        completion_init()
        app(args=arguments, prog_name="zhin")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            report_error(str(exc.code))
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except ZhinError as error:  # raised outside a command (an OutputError while typer prints help or usage)
        report_error(str(error).replace("\n", " "))
        code = error.exit_code
    return _finish(code)

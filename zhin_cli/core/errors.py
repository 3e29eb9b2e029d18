"""Errors the toolkit reports as one line, each with the exit code the CLI contract documents.

Every failure a user can cause (bad file, bad row, missing session, bad config) is a ``ZhinError``;
the CLI catches exactly this class and prints ``str(error)``. Anything else is a bug.
"""

from __future__ import annotations

from pathlib import Path

# Exit codes (DESIGN.md §4). Shared by every command so scripts can rely on them.
EXIT_OK = 0
EXIT_FOUND = 1  # prefix-diff found a break, eval had failures
EXIT_USAGE = 2
EXIT_CANNOT_RUN = 3
EXIT_INVALID_CASE = 4


class ZhinError(Exception):
    """A user-facing error: one line, a documented exit code."""

    exit_code = EXIT_CANNOT_RUN

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class InputError(ZhinError):
    """Bad input data: names the file and line (JSONL) or table and row (database)."""


class SessionNotFound(ZhinError):
    """The session id / key / path names nothing we can read."""


class AssemblyError(ZhinError):
    """History that cannot be assembled into a valid request (e.g. an orphan tool result)."""


class ConfigError(ZhinError):
    """A broken ``zhin.yaml`` or plugin."""


class UsageError(ZhinError):
    """Bad command-line usage that typer itself cannot see (e.g. conflicting options)."""

    exit_code = EXIT_USAGE


def at_line(path: Path | str, line: int) -> str:
    return f"{path}:{line}"


def at_row(table: str, row_id: object, db: str | None = None) -> str:
    prefix = f"{db}: " if db else ""
    return f"{prefix}{table} row {row_id}"


# Ended by a signal (after cleanup ran): 128 + the signal number, as a shell reports a process a signal killed.
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C)
EXIT_TERMINATED = 143  # SIGTERM


class OutputError(ZhinError):
    """Output that cannot be written: stdout on a full disk or closed, ``--output`` on a full disk (nothing is left
    half-written there: output files are written to a temporary name and renamed when complete)."""

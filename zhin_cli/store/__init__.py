"""Stage 1 — where sessions come from. Data sources are a registry: a new source is one object."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from zhin_cli.core.errors import InputError, SessionNotFound
from zhin_cli.core.inputfiles import names_a_file, open_regular
from zhin_cli.core.model import Session
from zhin_cli.core.registry import Registry


class SessionSource(Protocol):
    name: str

    def claims(self, ref: str) -> bool: ...

    def load(self, ref: str, *, db: str | None, cwd: Path) -> Session: ...


# Every data source by name (a duplicate name is an error unless replace=True: zhin_cli.core.registry). The
# fallbacks (FALLBACKS: names) claim broadly and are asked after all the others, each group in registration order.
SOURCES: Registry[SessionSource] = Registry("data source")
FALLBACKS: set[str] = set()

# ≈ 1 GB resident when a session is loaded whole (read_session, export, --all); a request of a lazy source
# (load_session) holds the outline and its window instead (benchmarks/memory.py, benchmarks/trace_scale.py)
DEFAULT_MAX_MESSAGES = 200_000
MAX_LINE_BYTES = 64 * 2**20


def max_messages() -> int:
    value = os.environ.get("ZHIN_MAX_MESSAGES", "")
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_MAX_MESSAGES


def check_jsonl_limits(path: Path) -> None:
    """Refuse, before loading anything, a file with more lines than ``ZHIN_MAX_MESSAGES`` (a loaded session
    costs memory in proportion to its length) or with a line over 64 MiB. Scans in 1 MiB blocks: constant
    memory, about a second per GB."""
    limit = max_messages()
    lines = 0
    line_start = 0
    offset = 0
    try:
        with open_regular(path, InputError, "session file") as handle:
            while block := handle.read(2**20):
                newline = block.find(b"\n")
                while newline >= 0:
                    lines += 1
                    if offset + newline - line_start > MAX_LINE_BYTES:
                        raise InputError(f"line longer than {MAX_LINE_BYTES // 2**20} MiB", where=f"{path}:{lines}")
                    line_start = offset + newline + 1
                    newline = block.find(b"\n", newline + 1)
                offset += len(block)
                if offset - line_start > MAX_LINE_BYTES:
                    raise InputError(f"line longer than {MAX_LINE_BYTES // 2**20} MiB", where=f"{path}:{lines + 1}")
                if lines > limit + 1:  # the session line, then at most `limit` others
                    raise InputError(
                        f"session too large: more than {limit:,} lines (ZHIN_MAX_MESSAGES); split it or raise the limit",
                        where=str(path),
                    )
    except FileNotFoundError:
        raise SessionNotFound(f"no such file: {path}") from None
    except IsADirectoryError:
        raise InputError("is a folder, not a session file", where=str(path)) from None
    except PermissionError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from None


def register_source(source: SessionSource, *, fallback: bool = False, replace: bool = False) -> SessionSource:
    """Add a data source. ``load_session`` asks every registered source (in registration order) before the
    *fallbacks*, which claim broadly: any existing file is read as JSONL, and anything else is a session id
    in a database. So a source for ``*.csv`` is reached although the database lookup would claim its
    reference too (the fallbacks are the built-in catch-alls; a plug-in rarely needs ``fallback=True``)."""
    SOURCES.add(source.name, source, replace=replace)
    if fallback:
        FALLBACKS.add(source.name)
    else:
        FALLBACKS.discard(source.name)  # a replacement that is no longer a catch-all
    return source


def asking_order() -> list[SessionSource]:
    """The sources in the order ``load_session`` asks them: the registered ones, then the fallbacks."""
    return [s for n, s in SOURCES.items() if n not in FALLBACKS] + [s for n, s in SOURCES.items() if n in FALLBACKS]


def short(value: str) -> str:
    """An argument as an error message quotes it: never kilobytes long (``store.payload.short``, imported when
    needed: this module is on every command's start-up path)."""
    from zhin_cli.store.payload import short as short_repr

    return short_repr(value)


@dataclass
class JsonlSource:
    """A ``.jsonl`` / ``.ndjson`` file (``any_file``: any other existing file that is not a database file)."""

    name: str = "jsonl"
    any_file: bool = False

    def claims(self, ref: str) -> bool:
        if self.any_file:
            return names_a_file(ref) and not ref.endswith((".sqlite", ".db"))
        return ref.endswith((".jsonl", ".ndjson"))

    def load(self, ref: str, *, db: str | None, cwd: Path) -> Session:
        from zhin_cli.store.jsonl import open_session

        check_jsonl_limits(Path(ref))
        return open_session(Path(ref))  # messages parsed when read: a request parses its window


ST_PREFIX = "st:"


def _starts_as_sillytavern_chat(path: Path) -> bool:
    from zhin_cli.store.sillytavern import is_sillytavern_chat  # light: no database code

    return is_sillytavern_chat(path)


@dataclass
class SillyTavernSource:
    """A SillyTavern chat file: ``st:PATH``, or a ``.jsonl`` whose first line is ST's chat header (only that line
    is read to decide; a zhin session line is never one, so zhin sessions still reach ``JsonlSource``)."""

    name: str = "sillytavern"

    def claims(self, ref: str) -> bool:
        if ref.startswith(ST_PREFIX):
            return True
        return ref.endswith(".jsonl") and names_a_file(ref) and _starts_as_sillytavern_chat(Path(ref))

    def load(self, ref: str, *, db: str | None, cwd: Path) -> Session:
        from zhin_cli.store.sillytavern import read_chat

        return read_chat(Path(ref.removeprefix(ST_PREFIX))).session


@dataclass
class DatabaseSource:
    """Anything else is a session id or key in a database (``--db`` or the discovered one)."""

    name: str = "database"

    def claims(self, ref: str) -> bool:
        return True

    def load(self, ref: str, *, db: str | None, cwd: Path) -> Session:
        from zhin_cli.store.database import SessionDatabase, parse_db
        from zhin_cli.store.discovery import DatabaseNotFound, find_database

        if db is None:
            try:
                db = find_database(None, cwd)
            except DatabaseNotFound as missing:
                raise DatabaseNotFound(f"{short(ref)} is not a .jsonl file, and {missing}") from None
        with SessionDatabase(parse_db(db)) as database:
            return database.load(ref, lazy=True)  # rows parsed when read: a request parses its window


register_source(SillyTavernSource())  # before "jsonl": an ST chat is a .jsonl file too
register_source(JsonlSource())
register_source(JsonlSource(name="jsonl-file", any_file=True), fallback=True)
register_source(DatabaseSource(), fallback=True)


def database_read(refs: Iterable[str], *, db: str | None, cwd: Path, all_sessions: bool = False) -> str | None:
    """The database a run over ``refs`` reads (for the header line): ``--db`` or the one found upward, when some
    ref is read from a database as ``load_session`` decides (the first source that claims it) — None when every
    ref is a file. The one rule trace, prefix-diff, report html, export and stats cache name their source by."""
    if not all_sessions and not any(isinstance(next((s for s in asking_order() if s.claims(ref)), None), DatabaseSource)
                                    for ref in refs):
        return None
    if db is not None:
        return db
    from zhin_cli.store.discovery import discover_database

    found = discover_database(cwd)
    return str(found) if found is not None else None


def load_session(ref: str, *, db: str | None = None, cwd: Path | None = None) -> Session:
    cwd = cwd or Path.cwd()
    for source in asking_order():
        if source.claims(ref):
            return source.load(ref, db=db, cwd=cwd)
    raise SessionNotFound(f"nothing can read {short(ref)}")

"""The built-in data sources (registered by ``zhin_cli.store``, which asks them): JSONL files, SillyTavern chats,
and a session id in a database. Each imports its reader when it loads, so deciding which source claims a
reference costs no SQLAlchemy; nothing here imports ``zhin_cli.store`` back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zhin_cli.core.inputfiles import names_a_file
from zhin_cli.core.model import Session
from zhin_cli.store.limits import check_jsonl_limits


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
        from zhin_cli.store.db.reader import SessionDatabase
        from zhin_cli.store.db.urls import parse_db
        from zhin_cli.store.discovery import DatabaseNotFound, find_database

        if db is None:
            try:
                db = find_database(None, cwd)
            except DatabaseNotFound as missing:
                raise DatabaseNotFound(f"{short(ref)} is not a .jsonl file, and {missing}") from None
        with SessionDatabase(parse_db(db)) as database:
            return database.load(ref, lazy=True)  # rows parsed when read: a request parses its window

"""Stage 1 — where sessions come from. Data sources are a registry: a new source is one object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from zhin_cli.errors import SessionNotFound
from zhin_cli.model import Session


class SessionSource(Protocol):
    name: str

    def claims(self, ref: str) -> bool: ...

    def load(self, ref: str, *, db: str | None, cwd: Path) -> Session: ...


SOURCES: list[SessionSource] = []


def register_source(source: SessionSource) -> SessionSource:
    SOURCES.append(source)
    return source


@dataclass
class JsonlSource:
    name: str = "jsonl"

    def claims(self, ref: str) -> bool:
        return ref.endswith((".jsonl", ".ndjson")) or (Path(ref).is_file() and not ref.endswith((".sqlite", ".db")))

    def load(self, ref: str, *, db: str | None, cwd: Path) -> Session:
        from zhin_cli.store.jsonl import read_session

        return read_session(Path(ref))


@dataclass
class DatabaseSource:
    """Anything else is a session id or key in a database (``--db`` or the discovered one)."""

    name: str = "database"

    def claims(self, ref: str) -> bool:
        return True

    def load(self, ref: str, *, db: str | None, cwd: Path) -> Session:
        from zhin_cli.store.database import SessionDatabase, discover_database, parse_db

        if db is None:
            found = discover_database(cwd)
            if found is None:
                raise SessionNotFound(
                    f"{ref!r} is not a .jsonl file and no .zhin/data.sqlite was found from {cwd} upward (pass --db)"
                )
            db = str(found)
        with SessionDatabase(parse_db(db)) as database:
            return database.load(ref)


register_source(JsonlSource())
register_source(DatabaseSource())


def load_session(ref: str, *, db: str | None = None, cwd: Path | None = None) -> Session:
    cwd = cwd or Path.cwd()
    for source in SOURCES:
        if source.claims(ref):
            return source.load(ref, db=db, cwd=cwd)
    raise SessionNotFound(f"nothing can read {ref!r}")

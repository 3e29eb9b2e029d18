"""Stage 1 — where sessions come from. Data sources are a registry: a new source is one object."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from zhin_cli.core.errors import SessionNotFound
from zhin_cli.core.model import Session
from zhin_cli.core.registry import Registry
from zhin_cli.store.limits import DEFAULT_MAX_MESSAGES, MAX_LINE_BYTES, check_jsonl_limits, max_messages
from zhin_cli.store.sources import ST_PREFIX, DatabaseSource, JsonlSource, SillyTavernSource, short


class SessionSource(Protocol):
    name: str

    def claims(self, ref: str) -> bool: ...

    def load(self, ref: str, *, db: str | None, cwd: Path) -> Session: ...


# Every data source by name (a duplicate name is an error unless replace=True: zhin_cli.core.registry). The
# fallbacks (FALLBACKS: names) claim broadly and are asked after all the others, each group in registration order.
SOURCES: Registry[SessionSource] = Registry("data source")
FALLBACKS: set[str] = set()

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


__all__ = [
    "DEFAULT_MAX_MESSAGES", "FALLBACKS", "MAX_LINE_BYTES", "SOURCES", "ST_PREFIX", "DatabaseSource", "JsonlSource",
    "SessionSource", "SillyTavernSource", "asking_order", "check_jsonl_limits", "database_read", "load_session",
    "max_messages", "register_source", "short",
]

# The built-in sources, registered here by the registry's user (load_session); sources.py imports nothing back.
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

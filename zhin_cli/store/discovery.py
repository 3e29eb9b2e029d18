"""Where the database is: ``.zhin/data.sqlite`` found upward, the one rule every command shares.

Kept apart from ``store.database`` (which imports SQLAlchemy, about 0.35 s) so that a command that only needs to
know *which* database — a trace of a ``.jsonl`` file naming none, shell completion, the header line — pays nothing
for the driver stack.
"""

from __future__ import annotations

from pathlib import Path

from zhin_cli.core.errors import SessionNotFound

DEFAULT_DB = Path(".zhin") / "data.sqlite"


def discover_database(start: Path) -> Path | None:
    """``.zhin/data.sqlite`` in ``start`` or the nearest parent that has one."""
    for folder in (start, *start.parents):
        candidate = folder / DEFAULT_DB
        if candidate.is_file():
            return candidate
    return None


class DatabaseNotFound(SessionNotFound):
    """No ``--db`` and no ``.zhin/data.sqlite`` from the working directory upward: "cannot run" (exit 3) for every
    command, whether it reads one session or lists them all (README "Exit status")."""


def find_database(db: str | None, cwd: Path) -> str:
    """``db`` as given, else the ``.zhin/data.sqlite`` found from ``cwd`` upward; ``DatabaseNotFound`` if none.
    The one place this condition is decided, so every command reports it with the same words and exit code."""
    if db is not None:
        return db
    found = discover_database(cwd)
    if found is None:
        raise DatabaseNotFound(f"no .zhin/data.sqlite found from {cwd} upward; pass --db (or run `zhin import` first)")
    return str(found)


def import_target(db: str | None, cwd: Path, *, events_only: bool = False) -> str:
    """Where ``zhin import`` writes without ``--db``: the database a read from ``cwd`` would find (this folder's
    ``.zhin/data.sqlite`` or the nearest parent's), so ``zhin import`` then ``zhin sessions`` always meet; only when
    there is none, a new ``.zhin/data.sqlite`` here. Never a new file below a parent's database, which would hide
    it from every later read in this folder (docs/storage.md). Events alone need an existing database."""
    if db is not None:
        return db
    found = discover_database(cwd)
    if found is not None:
        return str(found)
    if events_only:
        return find_database(None, cwd)  # raises: events are added to sessions already stored
    return str(DEFAULT_DB)

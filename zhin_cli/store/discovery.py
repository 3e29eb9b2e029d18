"""Where the database is: ``.zhin/data.sqlite`` found upward, the one rule every command shares.

Kept apart from ``store.db`` (which imports SQLAlchemy, about 0.35 s) so that a command that only needs to
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
    command, whether it reads one session or lists them all (docs/use.md "Exit status")."""


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
        _refuse_a_bots_own(found)
        return str(found)
    if events_only:
        return find_database(None, cwd)  # raises: events are added to sessions already stored
    return str(DEFAULT_DB)


def _refuse_a_bots_own(found: Path) -> None:
    """A database a bot writes (upstream's ``conversation_events`` is there) is written only when the user names
    it: an import's transaction would lock the bot out of its own file (its writes fail at once: no busy wait),
    and its rows would be the bot's history. Read lock-free (``SessionDatabase``), like every read of it."""
    from sqlalchemy import text

    from zhin_cli.core.errors import UsageError
    from zhin_cli.store.db.reader import SessionDatabase
    from zhin_cli.store.db.urls import parse_db

    with SessionDatabase(parse_db(str(found))) as database:
        # zhin creates the table empty and its own zhin_* tables; a bot fills the one and never makes the others
        if "conversation_events" not in database.tables or any(t.startswith("zhin_") for t in database.tables):
            return
        with database.snapshot() as conn:
            if conn.execute(text("SELECT 1 FROM conversation_events LIMIT 1")).first() is None:
                return
    raise UsageError(f"{found} is a bot's own database (it has conversation_events): zhin writes it only when named "
                     f"with --db; to keep the bot's file as it is, import into a copy (cp {found} copy.sqlite; "
                     "zhin import --events --db copy.sqlite)")

"""Sessions in zhin's own database (``.zhin/data.sqlite`` by default), through SQLAlchemy Core.

Reading never writes: SQLite files are opened with ``mode=ro`` and ``PRAGMA query_only``, PostgreSQL connections
with ``default_transaction_read_only``, MySQL/MariaDB sessions with ``SET SESSION TRANSACTION READ ONLY``, so a
trace leaves a production database unchanged. Reading is correct beside a bot that writes: each load is one read
transaction (one snapshot); a rollback-journal file is read through a private copy taken without any lock
(store/sqlite_snapshot.py), so a bot with busy timeout 0 never has a write refused. Writing (``zhin import``,
``zhin facts prune``) is a separate, explicit path through ``writable_engine``; ``zhin import`` is all or nothing.

The modules, by role (each imports only those above it):

* ``urls``: ``--db`` as a ``DatabaseRef`` (SQLite path or server URL), the server dialects, ``db_error``;
* ``engines``: read-only and writable engines, the hot-journal error, ``-wal``/``-shm`` clean-up;
* ``rows``: what a load fetched inside its transaction (``SessionRows``) and the rows made of it after;
* ``sql``: the statements of a load and the helpers that run them;
* ``parse``: rows made into a session after the transaction (``RowParser``), each row checked as it is parsed;
* ``fetch``: what a load reads inside its transaction (``RowFetcher``), a lazy load's outline scan;
* ``reader``: ``SessionDatabase``, one read transaction per load (fetch), rows parsed after it (parse);
* ``writer``: ``import_sessions`` (``zhin import``).

This package's ``__init__`` gathers the public names; ``zhin_cli.store.database`` is the old module path, kept
as a re-export for one release.
"""

from __future__ import annotations

from zhin_cli.store.db.engines import hot_journal_error, require_driver, writable_engine
from zhin_cli.store.db.reader import SessionDatabase, SessionListing
from zhin_cli.store.db.urls import MYSQL, POSTGRES, SERVER_DIALECTS, DatabaseRef, ServerDialect, db_error, parse_db
from zhin_cli.store.db.writer import ImportResult, import_events, import_session, import_sessions

__all__ = [
    "MYSQL", "POSTGRES", "SERVER_DIALECTS", "DatabaseRef", "ImportResult", "ServerDialect", "SessionDatabase", "SessionListing",
    "db_error", "hot_journal_error", "import_events", "import_session", "import_sessions", "parse_db",
    "require_driver", "writable_engine",
]

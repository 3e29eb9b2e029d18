"""The old path of the database module: its code is the package ``zhin_cli.store.db`` now (split by role:
urls, engines, rows, sql, reader, writer). This re-export stays for one release; import from
``zhin_cli.store.db``."""

from __future__ import annotations

import warnings

from zhin_cli.store.db import (
    MYSQL,
    POSTGRES,
    SERVER_DIALECTS,
    DatabaseRef,
    ImportResult,
    ServerDialect,
    SessionDatabase,
    db_error,
    hot_journal_error,
    import_events,
    import_session,
    import_sessions,
    parse_db,
    require_driver,
    writable_engine,
)
from zhin_cli.store.payload import with_placeholders

__all__ = [
    "MYSQL", "POSTGRES", "SERVER_DIALECTS", "DatabaseRef", "ImportResult", "ServerDialect", "SessionDatabase",
    "db_error", "hot_journal_error", "import_events", "import_session", "import_sessions", "parse_db",
    "require_driver", "with_placeholders", "writable_engine",
]

warnings.warn("zhin_cli.store.database moved to zhin_cli.store.db; the old path goes in the next release",
              DeprecationWarning, stacklevel=2)

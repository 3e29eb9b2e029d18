"""Shared test helpers: paths, a clean subprocess runner for the CLI, and an upstream-shaped SQLite builder.

Everything here works in ``tmp_path`` and keeps no state between tests, so the suite runs under pytest-xdist.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CORPUS = Path(__file__).resolve().parent / "corpus"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def corpus_dir() -> Path:
    return CORPUS


def clean_env() -> dict[str, str]:
    """The current environment without ``ZHIN_*`` options (they would change what the CLI does)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZHIN_")}
    env["NO_COLOR"] = "1"
    env.pop("COLUMNS", None)
    return env


@pytest.fixture
def zhin(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m zhin_cli ARGS…`` in ``tmp_path`` (or ``cwd=``) with a clean environment."""

    def run(*args: object, cwd: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "zhin_cli", *map(str, args)],
            cwd=cwd or tmp_path,
            env=clean_env(),
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    return run


# Upstream zhin's agent tables as its SQLite dialect creates them (reference/zhin-upstream.md §2.1–2.2):
# `text` → TEXT, `integer` → INTEGER, `primary: true` → PRIMARY KEY, CREATE TABLE IF NOT EXISTS. No foreign keys,
# no indexes we rely on, and agent_summaries has no id column.
UPSTREAM_DDL = """
CREATE TABLE IF NOT EXISTS agent_sessions (
  session_id TEXT, session_key TEXT, model TEXT DEFAULT '', status TEXT,
  active_leaf_message_id INTEGER, created_at INTEGER, updated_at INTEGER
);
CREATE TABLE IF NOT EXISTS agent_messages (
  id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, role TEXT NOT NULL, payload TEXT NOT NULL,
  parent_id INTEGER, extra TEXT DEFAULT '', timestamp INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS agent_summaries (
  session_id TEXT, summary TEXT, anchor_message_id INTEGER, branch_anchor_message_id INTEGER, created_at INTEGER
);
"""

LINEAR = object()


def js(value: Any) -> str:
    """``JSON.stringify``: compact, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def write_upstream_db(
    path: Path,
    session_id: str,
    rows: Sequence[dict[str, Any]],
    *,
    session_key: str | None = None,
    active_leaf: Any = LINEAR,
    summaries: Sequence[dict[str, Any]] = (),
) -> Path:
    """Write one session the way upstream stores it, with plain ``sqlite3``.

    Each row is ``{"payload": dict | str, "parent_id"?: int | None, "extra"?: dict | str, "role"?, "timestamp"?}``;
    a dict payload is stored as ``JSON.stringify`` would. Without ``parent_id`` a row's parent is the row before
    it. ``active_leaf`` defaults to the last row (pass ``None`` for a pre-branching database).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    try:
        connection.executescript(UPSTREAM_DDL)
        last: int | None = None
        for row in rows:
            payload = row["payload"]
            text = payload if isinstance(payload, str) else js(payload)
            role = row.get("role") or (payload.get("role") if isinstance(payload, dict) else "user")
            timestamp = row.get("timestamp") or (payload.get("timestamp") if isinstance(payload, dict) else 0)
            extra = row.get("extra", "")
            cursor = connection.execute(
                "INSERT INTO agent_messages (session_id, role, payload, parent_id, extra, timestamp) VALUES (?,?,?,?,?,?)",
                (session_id, role, text, row.get("parent_id", last), extra if isinstance(extra, str) else js(extra), timestamp),
            )
            last = cursor.lastrowid
        connection.execute(
            "INSERT INTO agent_sessions (session_id, session_key, model, status, active_leaf_message_id, created_at, updated_at)"
            " VALUES (?,?,?,?,?,?,?)",
            (session_id, session_key or session_id.split("#")[0], "", "active",
             last if active_leaf is LINEAR else active_leaf, 0, 0),
        )
        for summary in summaries:
            connection.execute(
                "INSERT INTO agent_summaries (session_id, summary, anchor_message_id, branch_anchor_message_id, created_at)"
                " VALUES (?,?,?,?,?)",
                (session_id, summary["summary"], summary["anchor_message_id"], None, summary.get("created_at", 0)),
            )
        connection.commit()
    finally:
        connection.close()
    return path


@pytest.fixture
def upstream_db() -> Callable[..., Path]:
    """``upstream_db(path, session_id, rows, **options)`` — see ``write_upstream_db``."""
    return write_upstream_db

"""What the session arguments of a command name: folders expanded to their ``.jsonl`` files,
``--all`` to every stored session, and captured bodies (a capture folder, a JSONL of request bodies) told apart
from sessions. Shared by ``prefix-diff``, ``trace``, ``report economy``/``window``/``html`` (moved out of
tools/diff/prefix.py, issue 32)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def session_refs(refs: list[str], *, all_sessions: bool, db: str | None, cwd: Any) -> list[str]:
    """Expand folders to their .jsonl files and ``--all`` to every session of the database."""
    from pathlib import Path

    from zhin_cli.core.errors import UsageError
    from zhin_cli.core.inputfiles import names_a_folder

    out: list[str] = []
    for ref in refs:
        path = Path(ref)
        if names_a_folder(path):
            files = sorted(str(p) for p in path.glob("*.jsonl"))
            if not files:
                raise UsageError(f"{ref}: no .jsonl files in this folder")
            out.extend(files)
        else:
            out.append(ref)
    if all_sessions:
        from zhin_cli.store.db import SessionDatabase, parse_db
        from zhin_cli.store.discovery import find_database

        with SessionDatabase(parse_db(find_database(db, cwd))) as database:
            out.extend(row["session_id"] for row in database.list_sessions())
    if not out:
        raise UsageError("name at least one session (a .jsonl file, a folder of them, or a session id), or pass --all")
    return out


def split_capture_refs(refs: list[str], cwd: Any) -> tuple[list[Path], list[str]]:
    """The refs that are captured bodies (a folder of ``NNNNN-<route>.json``, a JSONL of request bodies), and the rest."""
    from zhin_cli.store.captures import is_body_jsonl, is_capture_folder

    here = Path(cwd).resolve() == Path.cwd().resolve()  # name the files as the user did
    captured: list[Path] = []
    rest: list[str] = []
    for ref in refs:
        path = Path(cwd) / ref
        if is_capture_folder(path) or is_body_jsonl(path):
            captured.append(Path(ref) if here else path)
        else:
            rest.append(ref)
    return captured, rest

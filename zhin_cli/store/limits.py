"""The limits a session file is checked against before anything is loaded (``ZHIN_MAX_MESSAGES``, the longest
line); a database load checks the same message limit (``store.db.reader``)."""

from __future__ import annotations

import os
from pathlib import Path

from zhin_cli.core.errors import InputError, SessionNotFound
from zhin_cli.core.inputfiles import open_regular

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

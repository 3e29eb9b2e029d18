"""Output files written whole or not at all (issue 14 §3): ``--output`` onto a full disk leaves nothing half-written.

:func:`atomic_output` writes into a temporary file beside the target (exclusive creation, the target's mode kept)
and renames it over the target only when everything was written, flushed and synced; on any error — ENOSPC, EFBIG,
an interrupt, a bug — the temporary file is removed and the target is untouched. A target that is not a regular
file (``/dev/null``, ``/dev/stdout``, a FIFO) is written directly: it cannot be replaced, and nothing is left in it.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from zhin_cli.core.errors import OutputError
from zhin_cli.core.inputfiles import SURROGATE


def escape_surrogates(text: str) -> str:
    """JSON text with any lone surrogate written as its ``\\udXXX`` escape (what JavaScript's ``JSON.stringify``
    writes): valid JSON that UTF-8 can encode. Readers refuse lone surrogates, so this is a last line of defence."""
    if SURROGATE.search(text) is None:
        return text
    return SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def write_json_line(data: object, out: IO[str], *, compact: bool = False, flush: bool = False) -> None:
    """``data`` as one JSON line (UTF-8 as is, any lone surrogate escaped); ``flush``: at once, for a reader that
    streams (``--jsonl | head -1``). The one JSONL writer: session files, trace and prefix-diff ``--jsonl``."""
    import json

    text = json.dumps(data, ensure_ascii=False, separators=(",", ":") if compact else None)
    out.write(escape_surrogates(text) + "\n")
    if flush:
        out.flush()


@contextmanager
def atomic_output(path: Path, encoding: str = "utf-8") -> Iterator[IO[str]]:
    """A text handle whose contents replace ``path`` only once complete (see the module docstring)."""
    target = path.resolve() if path.is_symlink() else path
    try:
        info = os.stat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror}", where=str(path)) from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise OutputError("cannot write: Is a directory", where=str(path))
    if info is not None and not stat.S_ISREG(info.st_mode):
        try:
            direct = open(target, "w", encoding=encoding, errors="backslashreplace")  # noqa: SIM115
        except OSError as exc:
            raise OutputError(f"cannot write: {exc.strerror}", where=str(path)) from None
        try:
            with direct:
                yield direct
        except OSError as exc:
            raise OutputError(f"cannot write: {exc.strerror}", where=str(path)) from None
        return
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror}", where=str(path)) from None
    handle = None
    try:
        if info is not None:
            os.chmod(temporary, stat.S_IMODE(info.st_mode))
        handle = os.fdopen(fd, "w", encoding=encoding, errors="backslashreplace")
        yield handle
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
        os.replace(temporary, target)
    except BaseException as exc:
        if handle is not None:
            with suppress(OSError):
                handle.close()
        else:
            with suppress(OSError):
                os.close(fd)
        with suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write: {exc.strerror or exc} (nothing written)", where=str(path)) from None
        raise

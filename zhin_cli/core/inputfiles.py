"""Hostile-input guards shared by every reader (issue 14 §3): files that are not files, text that is not text.

* **Only regular files are read.** A FIFO, a character device (``/dev/zero``, ``/dev/stdin``) or a socket given as
  a session file, ``--config``, ``--preset``, a case file or a ``request-diff`` side would block forever or never
  end; :func:`open_regular` opens without blocking (``O_NONBLOCK``), checks what it opened with ``fstat`` (no race
  between the check and the read) and refuses anything but a regular file with one line.
* **Lone surrogates are refused where they are read.** JSON and YAML escapes can spell ``\\ud800``, half of a UTF-16
  pair that names no character: UTF-8 cannot encode it, so no request, export or database row containing it can
  be written. Decision (documented in docs/storage.md): such a string is bad input, reported at ``file:line`` (or
  ``table row N``) when it is read, so nothing downstream — renderers, tokenizers, writers — ever sees one and
  nothing is half-written. A proper pair (``\\ud83d\\ude00``) is one character (😀) and is fine. As a last line of
  defence the CLI's stdout writes any surrogate that still reaches it as the JSON escape ``\\udXXX`` (what a
  JavaScript bot's ``JSON.stringify`` sends), never a traceback.
* **Stored member text is bounded** (:func:`clean_text`): no control characters, at most 128 characters.
* **Integers have a digit limit.** Python refuses to convert integers of more than 4,300 digits (CVE-2020-10735);
  the readers turn that ``ValueError`` into an "invalid JSON" line.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import unicodedata
from pathlib import Path
from typing import IO, TypeVar, cast, overload

from zhin_cli.core.errors import InputError, ZhinError

T = TypeVar("T")

# A JSON string escape of a surrogate that is not half of a proper pair; escaped backslashes are consumed first
# so `\\ud800` (a backslash, then the letters) is not mistaken for one.
_JSON_ESCAPES = re.compile(
    r"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"
)
MAYBE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]|\\U0000[dD][89a-fA-F]")
SURROGATE = re.compile("[\ud800-\udfff]")


def kind_of(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def names_a_file(path: Path | str) -> bool:
    """``Path.is_file`` that answers no for a name the file system cannot hold (``ENAMETOOLONG``): an argument of
    256+ characters may still be a session id, looked up elsewhere, not refused as a file name."""
    try:
        return Path(path).is_file()
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return False
        raise


def names_a_folder(path: Path | str) -> bool:
    """``Path.is_dir`` with the same rule as ``names_a_file``."""
    try:
        return Path(path).is_dir()
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return False
        raise


def open_regular(path: Path, error: type[ZhinError] = InputError, what: str = "file") -> IO[bytes]:
    """``path`` opened for reading in binary mode, if it is a regular file; else one ``error`` line (before a byte
    is read, and without blocking on a FIFO that has no writer). ``FileNotFoundError`` is left to the caller."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise error(f"{what} is a directory, not a file: {path}") from None
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket (or a FIFO opened for writing): nothing to read
            raise error(f"{what} is not a regular file (a socket): {path}", where=str(path)) from None
        raise error(f"cannot read {what}: {exc.strerror or exc}", where=str(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = kind_of(mode)
            if stat.S_ISDIR(mode):
                raise error(f"{what} is a directory, not a file: {path}")
            raise error(f"{what} is {kind}, not a regular file: refused before reading", where=str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: Path, error: type[ZhinError] = InputError, what: str = "file") -> bytes:
    with open_regular(path, error, what) as handle:
        return handle.read()


def lone_surrogate_in_json(text: str) -> int | None:
    """Offset in JSON ``text`` of the first escape spelling a lone surrogate (``None``: there is none).

    About 0.3 µs for a typical line that has none (one regex search); the exact scan runs only when it may."""
    if MAYBE_SURROGATE.search(text) is None:
        return None
    for match in _JSON_ESCAPES.finditer(text):
        if match.group(1):
            return match.start(1)
    return None


def surrogate_message(escape: str) -> str:
    return (f"lone surrogate {escape} in a string: half of a UTF-16 pair, not a character "
            "(UTF-8 cannot encode it; write the whole character or its pair of escapes)")


def first_surrogate(value: object) -> str | None:
    """The first lone surrogate in any string (key or value) of a parsed JSON/YAML value, as ``\\udXXX``."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = SURROGATE.search(item)
            if found:
                return f"\\u{ord(found.group()):04x}"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def join_surrogate_pairs(value: T) -> T:
    """YAML's ``\\u`` escapes are code points, so ``"\\ud83d\\ude00"`` loads as two surrogates: join proper pairs
    into their character (as JSON does), leave lone ones for :func:`first_surrogate` to report."""
    joined: object = value
    if isinstance(value, str) and SURROGATE.search(value) is not None:
        joined = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    elif isinstance(value, dict):
        joined = {join_surrogate_pairs(k): join_surrogate_pairs(v) for k, v in value.items()}
    elif isinstance(value, list):
        joined = [join_surrogate_pairs(v) for v in value]
    return cast(T, joined)  # the same shape: a string for a string, a dict for a dict, a list for a list


_ESCAPE = re.compile(r"\\(?:u|U0000)([dD][89a-fA-F][0-9a-fA-F]{2})")


def surrogate_line(text: str, escape: str) -> int:
    """The line of YAML ``text`` where the lone surrogate ``escape`` (``\\udXXX``) is spelled (1 if not found)."""
    matches = list(_ESCAPE.finditer(text))
    for index, match in enumerate(matches):
        code = int(match.group(1), 16)
        if f"\\u{code:04x}" != escape:
            continue
        after = matches[index + 1] if index + 1 < len(matches) else None
        before = matches[index - 1] if index else None
        paired = (code < 0xDC00 and after is not None and after.start() == match.end() and int(after.group(1), 16) >= 0xDC00) or (
            code >= 0xDC00 and before is not None and before.end() == match.start() and int(before.group(1), 16) < 0xDC00)
        if not paired:
            return text.count("\n", 0, match.start()) + 1
    return 1


def is_digit_limit(exc: ValueError) -> bool:
    """The ``ValueError`` Python raises for an integer past ``sys.get_int_max_str_digits()``."""
    return "integer string conversion" in str(exc)


DIGIT_LIMIT_MESSAGE = "an integer with more than 4,300 digits (Python's limit for integers read from text)"


# Stored member-controlled text (a group card, a title, a role name): what a bot writes into the facts tables and
# what ``zhin import`` writes from ``member`` lines. One bound for both, so a card imported from JSONL and the same
# card cached from the platform are stored alike.
MAX_TEXT_CHARS = 128


@overload
def clean_text(value: str) -> str: ...


@overload
def clean_text(value: T) -> T: ...


def clean_text(value: object) -> object:
    """Stored member-controlled text: control characters (Unicode category Cc) removed, cut at
    :data:`MAX_TEXT_CHARS` characters. Anything that is not a string passes through unchanged."""
    if not isinstance(value, str):
        return value
    stripped = "".join(ch for ch in value if unicodedata.category(ch) != "Cc")
    return stripped[:MAX_TEXT_CHARS]


def needs_cleaning(value: object) -> bool:
    """``value`` is a string that :func:`clean_text` would change."""
    return isinstance(value, str) and clean_text(value) != value

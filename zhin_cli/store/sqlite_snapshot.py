"""A consistent private copy of a rollback-journal SQLite file, made without taking any SQLite lock.

Why: a bot in rollback-journal (DELETE/TRUNCATE/PERSIST) mode with busy timeout 0 — upstream's ``node:sqlite``
default — has its COMMIT refused ("database is locked") whenever any reader holds a SHARED lock at that moment;
the chat message is lost. So zhin does not read such a file through SQLite: it copies the bytes with plain reads
and proves the copy is one committed state of the database (docs/storage.md, "Reading beside a live bot"):

1. read the 100-byte header (file change counter, bytes 24..27; page count) with the file's size and mtime;
2. no process holds SQLite's PENDING or EXCLUSIVE lock (tested with ``F_OFD_GETLK``, which takes no lock): SQLite
   writes database pages only under EXCLUSIVE, so no transaction is half-written into the file now; and no hot
   journal (a ``-journal`` with a non-zero first byte whose writer holds no RESERVED lock: a crashed writer);
3. copy the file;
4. again no PENDING/EXCLUSIVE holder, then the header, size and mtime unchanged.

A writer that wrote pages during step 3 either still holds EXCLUSIVE at step 4 or has committed, and every commit
in rollback-journal mode rewrites page 1 with the change counter incremented: the copy is retried (bounded; then
one line, exit 3). The copy lives in a private temporary folder (mode 0700) on disk — not in memory, so a large
database costs its size in temporary disk space, not RAM — and is reused while the header says the file is
unchanged; it is removed when the process exits. SQLite opens the copy with ``immutable=1``: it is private, nobody
else writes it.

WAL databases are not copied: their readers never block a writer (database.py reads them in place).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import random
import shutil
import struct
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TypeVar

from zhin_cli.core.errors import InputError

HEADER_SIZE = 100
_MAGIC = b"SQLite format 3\x00"
# The lock bytes of SQLite's unix VFS (sqlite3.c: PENDING_BYTE, RESERVED_BYTE, SHARED_FIRST, SHARED_SIZE).
PENDING_BYTE = 0x40000000
RESERVED_BYTE = PENDING_BYTE + 1
SHARED_FIRST = PENDING_BYTE + 2
SHARED_SIZE = 510
# How long a snapshot waits for a writer mid-commit, or for a file that changes during every copy (s).
CHANGING_BUDGET_S = 10.0
# A journal that looks hot is looked at again for about a second (a writer may be deleting it just then).
HOT_CONFIRMATIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
_BACKOFF_CAP_S = 0.05
_COPY_CHUNK = 1 << 20
# Database files with a descriptor and a copy kept at once; the least recently read beyond this is let go (its
# descriptor closed, its copy removed): a process reads one or two files, a test run or `zhin view` may see many.
KEPT_FILES = 8
_Opened = TypeVar("_Opened")


def is_wal(header: bytes) -> bool:
    """The header's file-format version bytes (18, 19) say WAL."""
    return len(header) >= 20 and (header[18] == 2 or header[19] == 2)


@dataclass(frozen=True)
class FileState:
    """What must be equal before and after a copy for the copy to be one committed state."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    header: bytes


class Writer(Enum):
    QUIET = "quiet"  # the file holds one committed state (a writer may hold RESERVED: it has not written pages)
    WRITING = "writing"  # a writer holds PENDING/EXCLUSIVE: pages may be half-written
    HOT_JOURNAL = "hot journal"  # a crashed writer's journal: the file holds a half-written transaction


class ChangingDatabase(InputError):
    """The file changed during every copy for the whole budget."""


def _lock_held(fd: int, kind: int, start: int, length: int) -> bool:
    """Whether another lock owner holds a lock conflicting with ``kind`` on the range — asked with F_OFD_GETLK,
    which places no lock (and sees this process's own POSIX locks too, as F_GETLK would not)."""
    query = struct.pack("hhqqi4x", kind, os.SEEK_SET, start, length, 0)
    command = getattr(fcntl, "F_OFD_GETLK", fcntl.F_GETLK)
    answer = fcntl.fcntl(fd, command, query)
    held: int = struct.unpack("hhqqi4x", answer)[0]  # the lock kind the answer names (F_UNLCK: none)
    return held != fcntl.F_UNLCK


def writer_state(fd: int, path: Path) -> Writer:
    """SQLite's own rules (sqlite3.c ``unixCheckReservedLock``, ``hasHotJournal``), asked without locking."""
    if _lock_held(fd, fcntl.F_RDLCK, PENDING_BYTE, 1) or _lock_held(fd, fcntl.F_RDLCK, SHARED_FIRST, SHARED_SIZE):
        return Writer.WRITING
    journal = Path(f"{path}-journal")
    if not journal.exists() or _lock_held(fd, fcntl.F_WRLCK, RESERVED_BYTE, 1):
        return Writer.QUIET  # no journal, or its writer is alive and has not reached EXCLUSIVE
    try:
        with journal.open("rb") as handle:  # never the database file: closing it would drop this process's locks
            first = handle.read(1)
    except OSError:
        return Writer.QUIET  # deleted just now: the writer committed
    return Writer.HOT_JOURNAL if first not in (b"", b"\x00") else Writer.QUIET


def file_state(fd: int) -> FileState:
    st = os.fstat(fd)
    return FileState(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, os.pread(fd, HEADER_SIZE, 0))


def _copy(fd: int, target: Path) -> None:
    """Every byte of ``fd`` into ``target`` (kernel-side where the platform can; read() otherwise)."""
    with target.open("wb") as out:
        offset = 0
        try:
            while True:
                done = os.copy_file_range(fd, out.fileno(), _COPY_CHUNK, offset, offset)
                if done == 0:
                    return
                offset += done
        except (AttributeError, OSError):
            out.seek(0)
            out.truncate()
        offset = 0
        while chunk := os.pread(fd, _COPY_CHUNK, offset):
            out.write(chunk)
            offset += len(chunk)


@dataclass
class _Copy:
    path: Path
    state: FileState


class SnapshotCopies:
    """The process's private copies, one per database file (by device and inode), and the descriptors they are
    read through. A descriptor stays open while its file is among the ``KEPT_FILES`` most recently read, because
    closing any descriptor of a file drops every POSIX lock the process holds on it (a bot in this process); zhin
    itself holds no SQLite connection to a rollback-journal file it reads, so closing an evicted one is safe for it."""

    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self._fds: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._copies: dict[tuple[int, int], _Copy] = {}
        self._folder: Path | None = None
        self._sleep = sleep
        self.copies_made = 0  # for tests and benchmarks: how many times a file was copied
        self.retries = 0  # attempts that found a writer mid-commit or a changed file
        self._lock = threading.Lock()  # `zhin view` reads in threads: a copy is replaced only once nobody is opening it

    def open(self, path: Path, on_hot_journal: Callable[[], BaseException], opener: Callable[[Path], _Opened]) -> _Opened:
        """``opener(copy)`` on the current copy, under the lock: another thread cannot remove that copy before it is
        open (an open file stays readable after its name is removed)."""
        with self._lock:
            return opener(self.snapshot(path, on_hot_journal))

    def _fd(self, path: Path) -> tuple[int, tuple[int, int]]:
        st = os.stat(path)
        key = (st.st_dev, st.st_ino)
        if key not in self._fds:
            fd = os.open(path, os.O_RDONLY)
            fst = os.fstat(fd)
            if (fst.st_dev, fst.st_ino) != key:  # replaced in between: use what was opened
                key = (fst.st_dev, fst.st_ino)
                if key in self._fds:
                    os.close(fd)  # a second descriptor of the same file: never close the first (see above)
                    return self._fds[key], key
            self._fds[key] = fd
            self._let_go_beyond(KEPT_FILES)
        self._fds.move_to_end(key)
        return self._fds[key], key

    def _let_go_beyond(self, kept: int) -> None:
        while len(self._fds) > kept:
            key, fd = self._fds.popitem(last=False)
            os.close(fd)
            copy = self._copies.pop(key, None)
            if copy is not None:
                copy.path.unlink(missing_ok=True)

    def _new_path(self) -> Path:
        if self._folder is None or not self._folder.is_dir():
            self._folder = Path(tempfile.mkdtemp(prefix="zhin-snapshot-"))
            atexit.register(shutil.rmtree, self._folder, ignore_errors=True)
        handle, name = tempfile.mkstemp(suffix=".sqlite", dir=self._folder)
        os.close(handle)
        return Path(name)

    def snapshot(self, path: Path, on_hot_journal: Callable[[], BaseException]) -> Path:
        """A private file holding one committed state of ``path`` at a moment during this call."""
        fd, key = self._fd(path)
        deadline = time.monotonic() + CHANGING_BUDGET_S
        hot_seen = 0
        attempt = 0
        while True:
            before = file_state(fd)
            state = writer_state(fd, path)
            if state is Writer.HOT_JOURNAL:
                if hot_seen == len(HOT_CONFIRMATIONS):
                    raise on_hot_journal()
                self._sleep(HOT_CONFIRMATIONS[hot_seen])
                hot_seen += 1
                continue
            hot_seen = 0
            if state is Writer.QUIET:
                kept = self._copies.get(key)
                if kept is not None and kept.state == before and kept.path.exists():
                    return kept.path
                if before.header[:16] != _MAGIC:
                    raise InputError("not an SQLite database", where=str(path))
                copied = self._attempt(fd, path, before)
                if copied is not None:
                    return self._keep(key, copied, before)
            self.retries += 1
            if time.monotonic() >= deadline:
                raise ChangingDatabase(
                    f"the database changed during every copy for {CHANGING_BUDGET_S:g} s (a writer commits more"
                    f" often than zhin can copy {before.size / 2**20:.1f} MiB); run again", where=str(path))
            attempt += 1
            self._sleep(random.uniform(0, min(_BACKOFF_CAP_S, 0.001 * 2**attempt)))

    def _attempt(self, fd: int, path: Path, before: FileState) -> Path | None:
        target = self._new_path()
        _copy(fd, target)
        self.copies_made += 1
        if writer_state(fd, path) is Writer.QUIET and file_state(fd) == before:
            return target
        target.unlink(missing_ok=True)
        return None

    def _keep(self, key: tuple[int, int], copied: Path, state: FileState) -> Path:
        old = self._copies.get(key)
        self._copies[key] = _Copy(copied, state)
        if old is not None:
            old.path.unlink(missing_ok=True)  # a connection still reading it keeps its open file (POSIX)
        return copied

    def forget(self) -> None:
        """Remove every copy and close every descriptor (tests)."""
        self._let_go_beyond(0)


COPIES = SnapshotCopies()

"""No test leaves a process behind (issue 27 item 12): a pytest plugin, registered by tests/conftest.py.

A session-scoped autouse fixture lists the processes descended from this pytest process when the session's first
test starts and again after its last test: any process that is new and still running fails the run (an error at the
teardown of the last test, which pytest-xdist reports from each worker like any other) — named with its command
line and the test that was running when it started — and is then killed with all of its own descendants.

The pytest process makes itself a child subreaper (Linux ``prctl``), so a grandchild whose parent died — the pool
workers of a killed ``zhin -j`` command, a server a shell started with ``&`` — is reparented to it, not to init, and
is still found. The process table comes from ``/proc``, or ``ps`` where there is none.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
GRACE_SECONDS = 3.0  # a process a test has just signalled may still be exiting: it gets this long before it counts
# Helpers of the interpreter itself that live as long as it does (started once, ended by the parent's exit).
INTERPRETER_HELPERS = ("from multiprocessing.resource_tracker import main", "from multiprocessing.forkserver import main")


@dataclass(frozen=True)
class Process:
    pid: int
    parent: int
    state: str
    command: str
    started: float | None  # seconds since boot, where /proc tells


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _from_proc() -> dict[int, Process]:
    table: dict[int, Process] = {}
    ticks = _clock_ticks()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8", errors="replace")
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:  # ended while the table was read
            continue
        # "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after its last ")"
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = Process(int(entry.name), int(fields[1]), fields[0], command or stat.split()[1],
                                         int(fields[19]) / ticks)
    return table


def _from_ps() -> dict[int, Process]:
    listing = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "stat=", "-o", "args="],
                             capture_output=True, text=True, check=True).stdout
    table: dict[int, Process] = {}
    for line in listing.splitlines():
        pid, parent, state, *command = line.split(None, 3)
        table[int(pid)] = Process(int(pid), int(parent), state[0], command[0] if command else "", None)
    return table


def process_table() -> dict[int, Process]:
    return _from_proc() if Path("/proc/self/stat").exists() else _from_ps()


def descendants(root: int, table: dict[int, Process]) -> list[Process]:
    """Every process below ``root``, parents before their children."""
    children: dict[int, list[Process]] = {}
    for process in table.values():
        children.setdefault(process.parent, []).append(process)
    found, frontier = [], [root]
    while frontier:
        below = [child for pid in frontier for child in children.get(pid, [])]
        found += below
        frontier = [child.pid for child in below]
    return found


def running_descendants(exclude: frozenset[int] = frozenset()) -> list[Process]:
    """Live descendants of this process (zombies have ended: only their exit status is left to collect)."""
    return [p for p in descendants(os.getpid(), process_table())
            if p.pid not in exclude and p.state not in "ZX" and not any(h in p.command for h in INTERPRETER_HELPERS)]


def become_subreaper() -> bool:
    """Orphaned descendants are reparented to this process instead of init (Linux only; False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def boot_clock() -> float | None:
    """Seconds since boot on the clock ``/proc/PID/stat`` start times use (None where there is none)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else None


TESTS_STARTED: list[tuple[float, str]] = []  # (boot clock, test id) of each test of this process, in order


def pytest_runtest_setup(item: pytest.Item) -> None:
    now = boot_clock()
    if now is not None:
        TESTS_STARTED.append((now, item.nodeid))


def started_during(process: Process) -> str:
    if process.started is None:
        return "an unknown test"
    # the start time has clock-tick resolution: a process started within a tick of its test may look earlier
    earlier = [nodeid for at, nodeid in TESTS_STARTED if at <= process.started + 0.02]
    return earlier[-1] if earlier else "the session's set-up"


def kill_all(processes: list[Process]) -> None:
    for process in processes:
        try:
            os.kill(process.pid, signal.SIGKILL)
        except OSError:  # ended meanwhile
            pass
    for process in processes:  # our children (and adopted orphans): collect them, leave no zombie either
        try:
            os.waitpid(process.pid, 0)
        except ChildProcessError:
            pass


def leftovers_after_grace(before: frozenset[int]) -> list[Process]:
    deadline = time.monotonic() + GRACE_SECONDS
    while (left := running_descendants(before)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def describe(left: list[Process]) -> str:
    lines = [f"{len(left)} process(es) started by the tests were still running at the end (now killed):"]
    lines += [f"  pid {p.pid} (parent {p.parent}), started during {started_during(p)}: {p.command[:300]}" for p in left]
    return "\n".join(lines)


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind() -> Iterator[None]:
    become_subreaper()
    before = frozenset(p.pid for p in running_descendants())
    yield
    left = leftovers_after_grace(before)
    if left:
        # everything below a leftover goes too (a server's workers), then the report
        table = process_table()
        kill_all(left + [d for p in left for d in descendants(p.pid, table) if d not in left])
        pytest.fail(describe(left), pytrace=False)

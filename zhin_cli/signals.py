"""SIGINT and SIGTERM for the ``zhin`` command, installed before anything heavy is imported.

A process manager (systemd, a CI runner, ``timeout``) ends a command with SIGTERM; zhin treats it like Ctrl-C:
the signal is raised in the main thread as an exception, so every ``finally``, ``with`` and
``except BaseException`` cleanup runs (temporary files, half-built databases, extracted git trees), and the
command exits 143 (SIGINT: 130) without a traceback. The handlers are installed by ``zhin_cli.launch`` first
thing, because loading the commands takes about a second — on a busy machine several — and a signal in that
second would otherwise kill the process with no status of its own (docs/use.md "Exit status").

Importing this module has no effect; only ``install_signal_handlers`` changes the process's handlers, so a
library user's own handlers stay theirs.
"""

from __future__ import annotations

import os
import signal

# Nothing else is imported here (not even typing): this module loads before the handlers exist, and every import in
# that window is time in which a Ctrl-C still prints the interpreter's traceback.


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like SIGINT's KeyboardInterrupt."""


SIGNALLED: list[int] = []  # the first signal received, if any


def _on_signal(signum: int, frame: object) -> None:
    if SIGNALLED:  # a second signal while cleaning up: end at once, as if no handler were installed
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    SIGNALLED.append(signum)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def install_signal_handlers() -> None:
    """Idempotent; an ignored signal (nohup, a background job) stays ignored; outside the main thread (an
    embedding caller) signals are left alone."""
    for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        try:
            if signal.getsignal(signum) is default:
                signal.signal(signum, _on_signal)
        except ValueError:
            return


def terminated_by_sigterm() -> bool:
    return bool(SIGNALLED) and SIGNALLED[0] == signal.SIGTERM


def interrupted_status() -> int:
    """The exit status of a command the signal ended: 128 + its number, the shell's convention (SIGINT 130, SIGTERM
    143 — ``EXIT_INTERRUPTED`` / ``EXIT_TERMINATED`` in zhin_cli.core.errors, which this module must not import:
    it runs before the handlers, see the top)."""
    return 128 + (SIGNALLED[0] if SIGNALLED else signal.SIGINT)

"""Notes: something the library chose for the user that they should hear about once (a model it substituted).

A note is a Python warning of category ``ZhinNote``: a library caller sees it (or filters it) as any warning; the
CLI shows each one once as ``zhin: note: …`` on stderr (``show_notes_on_stderr``, installed for every command),
its text made terminal-safe. Python's warning registry already says each distinct message once per place.
"""

from __future__ import annotations

import sys
import warnings
from typing import TextIO

from zhin_cli.core.terminaltext import terminal_safe


class ZhinNote(UserWarning):
    """A choice zhin made that the user did not spell out."""


def note(message: str) -> None:
    """Say ``message`` once (per distinct text) as a ``ZhinNote``."""
    warnings.warn(message, ZhinNote, stacklevel=2)


def show_notes_on_stderr(stream: TextIO | None = None) -> None:
    """From now on, print ``ZhinNote`` warnings as ``zhin: note: …`` lines (other warnings as before), each distinct
    text once from this call on (a new filter resets Python's registry of warnings already shown). Idempotent."""
    warnings.simplefilter("default", ZhinNote)  # once per text and place, whatever -W said of UserWarning
    previous = warnings.showwarning
    if getattr(previous, "zhin_notes", False):
        return

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
             line: str | None = None) -> None:
        if not issubclass(category, ZhinNote):
            previous(message, category, filename, lineno, file, line)
            return
        out = stream if stream is not None else sys.stderr
        try:
            out.write(f"zhin: note: {terminal_safe(str(message))}\n")
            out.flush()
        except (OSError, ValueError):  # stderr gone: a note is never worth a failure
            pass

    show.__dict__["zhin_notes"] = True  # a function's attribute: how a second call knows it is installed
    warnings.showwarning = show

"""GitHub Actions output for every gate: workflow-command annotations and the Markdown step summary.

One module so that ``eval``, ``prefix-diff``, ``budget check``, ``request-diff`` and ``preset lint`` escape alike and
publish under the same condition (``GITHUB_ACTIONS=true``). Text in an annotation comes from inputs: it passes
through ``terminal_safe`` (no control character, no ``::`` that could open a second command, core/terminaltext.py)
before the runner's own %-escaping; a message's line breaks are kept (the runner shows them in the annotation).
Annotations go to stderr — the runner reads both streams, and ``--json`` keeps stdout clean; the summary is appended
to ``$GITHUB_STEP_SUMMARY`` when it is set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from zhin_cli.core.terminaltext import terminal_safe, terminal_safe_lines

Level = Literal["error", "warning", "notice"]


@dataclass(frozen=True)
class Annotation:
    """One ``::error file=…,line=…,title=…::message`` line. ``file`` is shown relative to the working directory
    when it lies inside it (GitHub resolves annotation paths against the checkout)."""

    level: Level
    message: str
    title: str | None = None
    file: str | Path | None = None
    line: int | None = None

    def command(self) -> str:
        properties = []
        if self.file is not None:
            properties.append(f"file={escape_property(terminal_safe(relative_file(self.file)))}")
            if self.line is not None:
                properties.append(f"line={self.line}")
        if self.title:
            properties.append(f"title={escape_property(terminal_safe(self.title))}")
        head = f"::{self.level}" + (" " + ",".join(properties) if properties else "")
        return f"{head}::{escape_data(terminal_safe_lines(self.message))}"


def escape_data(text: str) -> str:
    """Workflow-command escaping of a message (the runner's own rules: %, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """… and of a property value, where ``:`` and ``,`` separate properties."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def relative_file(file: str | Path) -> str:
    path = Path(file)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(file)


def summary_cell(text: str, limit: int = 300) -> str:
    """Text for one Markdown table cell: pipes escaped, newlines folded, long text cut with an ellipsis."""
    cell = terminal_safe(text.replace("|", "\\|").replace("\r", " ").replace("\n", " "))
    return cell if len(cell) <= limit else cell[: limit - 1] + "…"


def enabled() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def publish(annotations: Iterable[Annotation], summary: str | None = None, *, stream: TextIO | None = None) -> None:
    """When running under GitHub Actions: every annotation on stderr and ``summary`` (Markdown) appended to the step
    summary. Elsewhere nothing. A step summary file that cannot be written is skipped: the gate's own exit status is
    what fails the step, not its decoration."""
    if not enabled():
        return
    out = stream if stream is not None else sys.stderr
    for annotation in annotations:
        out.write(annotation.command() + "\n")
    out.flush()
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and path:
        try:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(summary if summary.endswith("\n") else summary + "\n")
        except OSError:
            pass

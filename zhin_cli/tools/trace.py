"""``zhin trace`` as a library call: replay a session and return the requests as data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zhin_cli.core.errors import UsageError
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.config import load_config
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.preset.model import Preset
from zhin_cli.store import load_session

TRACE_VERSION = 1


@dataclass
class TraceResult:
    session_id: str
    source: str
    turns: int
    requests: list[AssembledRequest]
    greeting_turn: int | None = None  # the greeting's turn: it has no request (``assemble.greeting_position``)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": TRACE_VERSION,
            "session_id": self.session_id,
            "source": self.source,
            "turns": self.turns,
            "greeting_turn": self.greeting_turn,
            "notes": self.notes,
            "requests": [r.as_dict() for r in self.requests],
        }


CARD_GREETING_NOTE = ("the session stored no greeting: the preset's card greeting (option greeting) opens the history "
                      "of every request, as SillyTavern's chat has it; it is not a stored message and has no turn")


def greeting_note(turn: int) -> str:
    return (f"turn {turn} is the greeting: it opens the chat with no member input before it (as SillyTavern writes "
            "the card's first_mes), so no request was made for it; it stays in the history of later requests")


def trace(
    ref: str,
    *,
    db: str | None = None,
    config_path: Path | None = None,
    provider: str | None = None,
    model: str | None = None,
    timezone: str | None = None,
    preset: Preset | Path | None = None,
    turn: int | None = None,
    all_turns: bool = False,
    cwd: Path | None = None,
    after_load: Callable[[], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TraceResult:
    """Replay ``ref`` (a .jsonl path, or a session id/key in the database) and return the chosen requests.

    Default: the last turn (``turn=-1``). Turn numbers are 1-based; negative numbers count from the end. The
    greeting's turn has no request: choosing it gives no request and a note (``greeting_note``). One turn costs
    its window (``Pipeline.request``), not the turns before it; ``--all`` replays incrementally. ``preset``
    replaces the config's ``preset:`` file (keeping its options).
    """
    config = load_config(config_path, cwd=cwd)
    session = load_session(ref, db=db, cwd=cwd)
    if after_load is not None:
        after_load()
    with Pipeline.open(config, provider=provider, model=model, timezone=timezone, preset=preset) as pipeline:
        plan = pipeline.turns(session)
        total = plan.total
        if total == 0:
            raise UsageError(f"session {session.session_id!r} has no assistant message, so no request to replay")
        # A turn without a request (the greeting) is a note, never an error — also when it is the last turn, so
        # the default (last) is always ``--turn -1``: a session holding only its greeting shows the note, exit 0.
        greeting = plan.greeting_turn
        wanted: int | None = None
        if not all_turns:
            wanted = total if turn is None else (turn if turn > 0 else total + 1 + turn)
            if not 1 <= wanted <= total:
                raise UsageError(f"--turn {turn} is out of range: the session has {total} turns (1..{total})")
        notes = [greeting_note(greeting)] if greeting is not None and wanted in (None, greeting) else []
        if plan.card_greeting:
            notes.append(CARD_GREETING_NOTE)
        requests: list[AssembledRequest] = []
        if wanted is None:
            for request in pipeline.replay(session):
                if progress is not None:
                    progress(request.turn, total)
                requests.append(request)
        elif wanted != greeting:
            requests.append(pipeline.request(session, turn=wanted))
            if progress is not None:
                progress(wanted, wanted)
    return TraceResult(session.session_id, session.source, total, requests, greeting, notes)

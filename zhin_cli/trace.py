"""``zhin trace`` as a library call: replay a session and return the requests as data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zhin_cli.assemble import AssembledRequest, Assembler
from zhin_cli.config import load_config
from zhin_cli.errors import UsageError
from zhin_cli.model import AssistantMessage
from zhin_cli.store import load_session

TRACE_VERSION = 1


@dataclass
class TraceResult:
    session_id: str
    source: str
    turns: int
    requests: list[AssembledRequest]

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": TRACE_VERSION,
            "session_id": self.session_id,
            "source": self.source,
            "turns": self.turns,
            "requests": [r.as_dict() for r in self.requests],
        }


def trace(
    ref: str,
    *,
    db: str | None = None,
    config_path: Path | None = None,
    provider: str | None = None,
    model: str | None = None,
    timezone: str | None = None,
    turn: int | None = None,
    all_turns: bool = False,
    cwd: Path | None = None,
    after_load: Callable[[], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TraceResult:
    """Replay ``ref`` (a .jsonl path, or a session id/key in the database) and return the chosen requests.

    Default: the last turn. Turn numbers are 1-based; negative numbers count from the end.
    """
    config = load_config(config_path, cwd=cwd)
    session = load_session(ref, db=db, cwd=cwd)
    if after_load is not None:
        after_load()
    registry, generations = config.registry()
    try:
        assembler = Assembler(registry, config, provider=provider, model=model, timezone=timezone)
        total = sum(1 for m in session.messages if isinstance(m, AssistantMessage))
        if total == 0:
            raise UsageError(f"session {session.session_id!r} has no assistant message, so no request to replay")
        wanted: int | None = None
        if not all_turns:
            wanted = total if turn is None else (turn if turn > 0 else total + 1 + turn)
            if not 1 <= wanted <= total:
                raise UsageError(f"--turn {turn} is out of range: the session has {total} turns (1..{total})")
        requests = []
        last = total if wanted is None else wanted
        for request in assembler.replay(session):
            if progress is not None:
                progress(request.turn, last)
            if wanted is None or request.turn == wanted:
                requests.append(request)
            if wanted is not None and request.turn >= wanted:
                break
    finally:
        for generation in generations:
            generation.release()
    return TraceResult(session.session_id, session.source, total, requests)

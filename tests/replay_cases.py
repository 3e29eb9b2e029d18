"""What the replay-equivalence properties share (tests/test_turn_equivalence.py, tests/test_incremental.py).

Both compare a request made one way with the same request made another, over generated sessions: the case they
draw is the same four things, made with the same tool loop, and the text they compare is one definition — the request's whole record as
``trace --json`` prints it, key-sorted — so "equal" means the same in both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from builders import SEC, History

from zhin_cli.core.model import Session
from zhin_cli.pipeline.assemble import AssembledRequest


@dataclass
class Case:
    """A generated session and what it is replayed with."""

    session: Session
    config: dict[str, Any]
    provider: str
    model: str


def request_record(request: AssembledRequest) -> str:
    """What ``trace --json`` prints for the request (its whole record, not only the wire body), key-sorted."""
    return json.dumps(request.as_dict(), ensure_ascii=False, sort_keys=True)


def tool_loop(h: History, t: int, call_ids: list[str], reply: str) -> None:
    """An assistant message calling one tool per id at ``t``, each answered a millisecond after the last, then
    the assistant's ``reply`` five seconds later."""
    h.assistant(t, "", calls=[(call_id, "search") for call_id in call_ids])
    for offset, call_id in enumerate(call_ids, start=1):
        h.result(t + offset, call_id)
    h.assistant(t + 5 * SEC, reply)

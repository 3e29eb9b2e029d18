"""What the replay-equivalence properties share (tests/test_turn_equivalence.py, tests/test_incremental.py).

Both compare a request made one way with the same request made another, over generated sessions: the case they
draw is the same four things, and the text they compare is one definition — the request's whole record as
``trace --json`` prints it, key-sorted — so "equal" means the same in both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

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

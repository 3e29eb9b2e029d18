"""What one case cost under one provider, for ``zhin eval --base/--head`` and ``zhin eval compare``.

Per provider run: request tokens (every turn's prompt estimate, summed), header tokens (the ``[id:m…;…;]``
headers on the wire, tokenized), the turns whose prefix broke for a reason a cache cannot forgive (a cause
outside ``prefixdiff.EXPECTED``), and the turns the offline validator rejected. Saved in ``zhin eval --json``
so two saved results can be compared later without re-running anything.
"""

from __future__ import annotations

from zhin_cli.cache.diff import EXPECTED, diff_turns
from zhin_cli.core.tokens import counter as shared_counter
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.format import parse_header
from zhin_cli.tools.eval.result import RunMetrics


def header_texts(request: AssembledRequest, *, members_only: bool = True) -> list[str]:
    """The headers at the start of message text lines on the wire: member and assistant headers
    (``[id:m12;…;]``), or with ``members_only=False`` every header (host-only event headers too)."""
    headers = []
    for part in request.parts:
        if part.segment_id in ("system", "tail"):
            continue
        for line in part.text.splitlines():
            pairs = parse_header(line)
            if pairs is None or (members_only and not (pairs and pairs[0][0] == "id" and pairs[0][1].startswith("m"))):
                continue
            headers.append(line[: line.find(";]") + 2])
    return headers


def run_metrics(provider: str, requests: list[AssembledRequest]) -> RunMetrics:
    if not requests:
        return {"provider": provider, "turns": 0, "prompt_tokens": 0, "header_tokens": 0, "unexpected_breaks": [],
                "rejected": []}
    counter = shared_counter(requests[0].encoding)
    stability = diff_turns(requests[0].session_id, iter(requests))
    return {
        "provider": provider,
        "turns": len(requests),
        "prompt_tokens": sum(r.prompt_tokens for r in requests),
        "header_tokens": sum(counter.count(h) for r in requests for h in header_texts(r)),
        "unexpected_breaks": [{"turn": p.to_turn, "cause": p.cause, "segment": p.segment}
                              for p in stability.pairs if p.cause not in EXPECTED],
        "rejected": [{"turn": number, "status": r.verdict.status, "message": r.verdict.message}
                     for number, r in enumerate(requests, start=1) if not r.verdict.ok],
    }

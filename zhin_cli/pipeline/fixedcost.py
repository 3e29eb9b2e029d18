"""The fixed prompt cost of an assembled request: the tokens of each system segment
(kinds 1–4) and of the tool schemas as the request carries them, and their total. What ``zhin budget`` gates and
eval's ``budget`` assertion checks (moved out of tools/budget/, issue 32)."""

from __future__ import annotations

import json

from zhin_cli.core.tokens import counter as shared_counter
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.segments import SYSTEM_PROMPT_KINDS

TOOLS = "tools"
TOTAL = "total"


def fixed_parts(request: AssembledRequest) -> dict[str, int]:
    """Tokens of each system segment (kinds 1–4) and of the tool schemas as the request carries them."""
    parts = {s.id: s.tokens for s in request.segments if s.kind in SYSTEM_PROMPT_KINDS and s.tokens}
    tools = request.request.get("tools")
    if tools:
        # The schemas as sent (each provider's shape), compact JSON: what the tokenizer sees of them.
        parts[TOOLS] = shared_counter(request.encoding).count(json.dumps(tools, ensure_ascii=False, separators=(",", ":")))
    parts[TOTAL] = sum(parts.values())
    return parts

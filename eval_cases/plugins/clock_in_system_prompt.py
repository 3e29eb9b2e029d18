"""A deliberately cache-hostile plugin for negative controls: the current time in the system prompt.

ADR 0041 §5 keeps the system prompt stable across turns (time lives in message headers). This plugin does
what it forbids — an environment line with the time of the newest message — so every turn rewrites the
system prompt and the cached prefix breaks.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo


class ClockLine:
    # Plain class attributes: plugin files are loaded outside sys.modules, where @dataclass cannot run.
    id = "plugin.clock"
    kind = "environment"
    weight = 0.0
    retention = "preferred"

    def inject(self, input: Any) -> str | None:
        if not input.history:
            return None
        newest = max(m.timestamp for m in input.history)
        now = datetime.fromtimestamp(newest / 1000, ZoneInfo(input.runtime.timezone))
        return f"Current time: {now:%Y-%m-%d %H:%M:%S}"


def register(generation: Any) -> None:
    generation.register(ClockLine())

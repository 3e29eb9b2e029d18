"""A deliberately naive plugin for negative controls: it pastes member facts into the system prompt raw.

This is what the upstream's ephemeral ``[Scene events]`` block did before ADR 0041: member-controlled text
(nicknames) reaches the prompt unquoted, uncut, with its line breaks. Cases use it to show that their
assertions catch an injection that the fixed ``[state change]`` template prevents.
"""

from __future__ import annotations

from typing import Any


class RawSceneEvents:
    # Plain class attributes: plugin files are loaded outside sys.modules, where @dataclass cannot run.
    id = "plugin.naive-scene-events"
    kind = "platform"
    weight = 0.0
    retention = "preferred"

    def inject(self, input: Any) -> str | None:
        lines = []
        for message in input.history:
            actor = getattr(message, "actor", None)
            if actor is not None and actor.card:
                lines.append(f"{actor.subject_id} set group nickname to {actor.card}")
        return "[Scene events]\n" + "\n".join(lines) if lines else None


def register(generation: Any) -> None:
    generation.register(RawSceneEvents())

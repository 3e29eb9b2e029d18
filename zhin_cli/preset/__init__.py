"""Stage 6 — the message skeleton. Today: the built-in default layout of ADR 0041 (+0045).

system prompt (segments 1–4) → history → current input, with the runtime tail (scene line, kind 5)
after the current message's text. SillyTavern-style presets (preset-message-skeleton) will declare other
skeletons here; the assembler calls ``layout`` and never arranges messages itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from zhin_cli.headers import Projected

TAIL_SEPARATOR = "\n\n"


@dataclass
class Layout:
    system: str
    messages: list[Projected]
    tail: str | None
    # The current input (newest member message) carries the tail. Within a tool loop it keeps carrying
    # it, so continuation requests only append. ``None``: no member message, the tail travels alone.
    tail_index: int | None

    def text_of(self, index: int) -> str:
        message = self.messages[index]
        if index == self.tail_index and self.tail:
            return message.text + TAIL_SEPARATOR + self.tail
        return message.text


def default_layout(system: str, messages: list[Projected], tail: str | None) -> Layout:
    tail_index = None
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            tail_index = index
            break
    return Layout(system=system, messages=messages, tail=tail, tail_index=tail_index)

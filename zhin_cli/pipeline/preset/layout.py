"""What the preset stage hands to the provider renderers: the arranged message skeleton."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from zhin_cli.pipeline.headers import Projected

TAIL_SEPARATOR = "\n\n"
SYSTEM_SEGMENT = "system"  # attribution of zhin's system prompt (the worldBookBefore hole)
TAIL_SEGMENT = "tail"  # attribution of the runtime tail (the postTurn hole)


def speaker_prefix(speaker: str, text: str) -> str:
    """``"speaker: "`` for a text that says who speaks by its first words, unless it already starts so (as ST
    checks, space included): a named example turn on a wire without ``name`` and a user/assistant part of
    ``single`` post-processing (preset/shaping.py)."""
    prefix = f"{speaker}: "
    return "" if text.startswith(prefix) else prefix


@dataclass
class PresetMessage:
    """A message the preset itself contributes: a fixed entry, a marker's content, an in-chat injection.

    ``pieces`` attribute each stretch of the text to the entry it came from (``preset:<identifier>``;
    ``system`` for zhin's system prompt, ``tail`` for the runtime tail); squash and merge concatenate
    pieces, so trace and prefix-diff can still name every part.
    """

    role: Literal["system", "user", "assistant"]
    pieces: list[tuple[str, str]]
    name: str | None = None  # OpenAI ``name`` field (ST example dialogues: example_user / example_assistant)
    speaker: str | None = None  # who speaks, for wires without ``name``: the text is prefixed "speaker: "
    exempt: bool = False  # never squashed (ST: newMainChat, newChat)
    in_history: bool = False  # part of the chatHistory block: an in-chat entry, a separator, or history text folded in

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.pieces)

    @property
    def segment_id(self) -> str:
        return next((segment for segment, _ in self.pieces if segment), "preset")

    def spoken_text(self) -> str:
        """The text for a wire without the ``name`` field: named example turns say who speaks."""
        return self._spoken_prefix() + self.text

    def spoken_pieces(self) -> list[tuple[str, str]]:
        prefix = self._spoken_prefix()
        return ([(self.segment_id, prefix)] if prefix else []) + list(self.pieces)

    def _spoken_prefix(self) -> str:
        return speaker_prefix(self.speaker, self.text) if self.name and self.speaker else ""


Item = Projected | PresetMessage


@dataclass
class Layout:
    system: str
    messages: list[Item]
    tail: str | None
    # The current input (newest member message) carries the tail. Within a tool loop it keeps carrying
    # it, so continuation requests only append. ``None``: no member message, the tail travels alone.
    tail_index: int | None
    # Leading system messages (top-level system / systemInstruction on Anthropic and Gemini). ``None``:
    # one block holding ``system`` (the ADR 0041 layout).
    system_blocks: list[PresetMessage] | None = field(default=None)

    @property
    def leading(self) -> list[PresetMessage]:
        if self.system_blocks is not None:
            return self.system_blocks
        return [PresetMessage("system", [(SYSTEM_SEGMENT, self.system)])] if self.system else []

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
    return Layout(system=system, messages=list(messages), tail=tail, tail_index=tail_index)

"""SillyTavern's own files as zhin input: a chat file (``.jsonl``), a character card (V1/V2/V3 JSON or PNG) and a
World Info book. A user moving a preset from SillyTavern to a zhin bot has these, not a zhin session: reading them
directly is what lets ``zhin preset check-capture`` compare ST's captured requests with zhin's for the same turns.

(The readers are being written; the dataclasses below are the interface the comparison builds on.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zhin_cli.core.model import Session


@dataclass(frozen=True)
class ChatTurn:
    """One user message that is sent to the model, and the bot reply after it."""

    number: int  # 1-based: the k-th user message of the chat
    user_position: int  # index of that user message in ``session.messages``
    reply_position: int | None  # index of the bot reply right after it (None: none follows)
    user_text: str  # ``mes`` as ST stored it (the selected swipe)
    reply_text: str | None


@dataclass(frozen=True)
class SillyTavernChat:
    path: Path
    session: Session  # a private chat: the persona is the member, the character the bot; the greeting kept
    persona_name: str
    character_name: str
    turns: list[ChatTurn]
    metadata: dict[str, Any] = field(default_factory=dict)  # line 1's ``chat_metadata`` as found
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Card:
    path: Path
    name: str
    description: str
    personality: str
    scenario: str
    first_mes: str
    mes_example: str
    spec: str  # "chara_card_v3", "chara_card_v2", "v1"

    def card_options(self) -> dict[str, str]:
        """The card as zhin's preset card options (``pipeline.preset.model.CardOptions``)."""
        return {"char": self.name, "description": self.description, "personality": self.personality,
                "scenario": self.scenario, "examples": self.mes_example, "greeting": self.first_mes}


@dataclass(frozen=True)
class Lore:
    path: Path
    after: str  # constant, enabled entries at "after character definitions", joined as ST joins them
    notes: list[str] = field(default_factory=list)  # what is not simulated, one line each

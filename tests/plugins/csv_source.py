"""A data source zhin does not ship, defined by a plugin through ``zhin_cli.api`` only: a chat exported as CSV rows
(time in ms, speaker id, speaker name, text; speaker "bot" is the bot's reply). Named in a zhin.yaml, ``zhin trace
chat.csv`` reads it (tests/test_plugin_source_cli.py)."""

import csv
from pathlib import Path

from zhin_cli.api import Actor, AssistantMessage, BotFacts, SceneFacts, Session, UserMessage, register_source


class CsvSource:
    name = "csv"

    def claims(self, ref: str) -> bool:
        return ref.endswith(".csv")

    def load(self, ref: str, *, db: str | None, cwd: Path) -> Session:
        messages: list[UserMessage | AssistantMessage] = []
        with open(cwd / ref, newline="", encoding="utf-8") as file:
            for row_id, (time_ms, speaker, name, text) in enumerate(csv.reader(file), 1):
                content = [{"type": "text", "text": text}]
                if speaker == "bot":
                    messages.append(AssistantMessage(content, int(time_ms), row_id))
                else:
                    messages.append(UserMessage(content, int(time_ms), Actor(speaker, name), row_id))
        return Session(session_id=ref, session_key=None, timezone="UTC", bot=BotFacts(name="bot"),
                       scene=SceneFacts(), messages=messages, source=ref)


def register(plugin):
    register_source(CsvSource())

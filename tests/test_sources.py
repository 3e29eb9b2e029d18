"""The data-source registry (issue 16 item 9): a registered source is reached before the catch-all lookups."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from zhin_cli.core.errors import SessionNotFound
from zhin_cli.core.model import BotFacts, SceneFacts, Session
from zhin_cli.store import SOURCES, load_session, register_source


@dataclass
class CsvSource:
    """A toy third-party source: ``*.csv`` names a session whose id is the file's stem."""

    name: str = "csv"

    def claims(self, ref: str) -> bool:
        return ref.endswith(".csv")

    def load(self, ref: str, *, db: str | None, cwd: Path) -> Session:
        return Session(Path(ref).stem, None, None, BotFacts(), SceneFacts(), [], source=f"csv:{ref}")


@pytest.fixture
def csv_source():
    source = register_source(CsvSource())
    try:
        yield source
    finally:
        SOURCES.remove(source.name)


def test_registered_source_is_reached_for_a_missing_file(tmp_path: Path, csv_source: CsvSource) -> None:
    # before the fix: the database source claimed every reference ("no .zhin/data.sqlite was found")
    session = load_session("chat.csv", cwd=tmp_path)
    assert session.session_id == "chat" and session.source == "csv:chat.csv"


def test_registered_source_is_reached_for_an_existing_file(tmp_path: Path, csv_source: CsvSource) -> None:
    # an existing file that is neither .jsonl nor a database was read as JSONL before the registered source
    path = tmp_path / "chat.csv"
    path.write_text("who,what\n", encoding="utf-8")
    assert load_session(str(path), cwd=tmp_path).source == f"csv:{path}"


def test_without_the_source_the_reference_is_a_database_lookup(tmp_path: Path) -> None:
    # negative control: nothing registered for .csv, so the catch-all database lookup answers (and finds none)
    with pytest.raises(SessionNotFound, match="no .zhin/data.sqlite"):
        load_session("chat.csv", cwd=tmp_path)


def test_builtin_claims_still_answer(tmp_path: Path, csv_source: CsvSource) -> None:
    # a .jsonl path and any other existing file are still JSONL; anything else is still a database reference
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "private-chat.jsonl"
    assert load_session(str(fixture)).messages
    copy = tmp_path / "chat.txt"
    copy.write_bytes(fixture.read_bytes())
    assert load_session(str(copy)).session_id == load_session(str(fixture)).session_id
    with pytest.raises(SessionNotFound, match="no .zhin/data.sqlite"):
        load_session("icqq:1:group:2", cwd=tmp_path)

"""Upstream's turn rows and the bot's replies get their platform message ids, so quotes resolve (issue 28, findings
1 and 12). A triggered member message and the bot's reply are ``message.created`` rows of ``conversation_events``
(the reply: no actor, one markdown segment); the ``agent_messages`` rows do not store the id, so each row is
matched to its event (same conversation, same sender, text equal after upstream's trigger clean-up, time close).
Over a copy of the real database; the expected ids are scenario.json's (tests/data/upstream-db/scenario-replies.json:
per reply, the triggering message's id and the reply's, without text)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from zhin_cli.core.model import AssistantMessage, Session, SessionOutline, UserMessage
from zhin_cli.pipeline.headers import Aliases
from zhin_cli.store.db import SessionDatabase, parse_db
from zhin_cli.store.upstream import CreatedMessage, StoredRow, match_rows, same_text

DATA = Path(__file__).parent / "data" / "upstream-db"
KEYS = ("onebot11:tokyo-ob11:group:856301447", "onebot11:tokyo-ob11:group:613770258",
        "onebot11:tokyo-ob11:private:284100105")
REPLIES = json.loads((DATA / "scenario-replies.json").read_text(encoding="utf-8"))["replies"]
GROUP_A = KEYS[0]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "data.sqlite"
    shutil.copyfile(DATA / "data.sqlite", copy)
    return copy


def load(db: Path, key: str, *, lazy: bool = False) -> Session:
    with SessionDatabase(parse_db(str(db))) as database:
        session = database.load(key, lazy=lazy)
        list(session.messages)  # a lazy load reads its rows while the database is open
        return session


def conversation(key: str) -> str:
    return key.split(":", 2)[2]


def turn_ids(session: Session) -> list[str | None]:
    """The platform ids of the stored user rows (the turn rows; block lines have no stored row: negative ids)."""
    return [m.message_id for m in session.messages if isinstance(m, UserMessage) and m.row_id > 0]


def reply_ids(session: Session) -> list[str | None]:
    return [m.message_id for m in session.messages if isinstance(m, AssistantMessage) and m.text]


def by_row(session: Session, row_id: int) -> UserMessage | AssistantMessage:
    message = next(m for m in session.messages if m.row_id == row_id)
    assert isinstance(message, (UserMessage, AssistantMessage))
    return message


# --- every turn row and every reply of the real database ---------------------------------------------------------

@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("key", KEYS)
def test_every_turn_row_gets_its_platform_id(db: Path, key: str, lazy: bool) -> None:
    expected = [r["turn_message_id"] for r in REPLIES if r["conversation"] == conversation(key)]
    assert expected and turn_ids(load(db, key, lazy=lazy)) == expected


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("key", KEYS)
def test_every_reply_gets_its_platform_id(db: Path, key: str, lazy: bool) -> None:
    expected = [r["reply_message_id"] for r in REPLIES if r["conversation"] == conversation(key)]
    assert expected and reply_ids(load(db, key, lazy=lazy)) == expected


def test_all_21_turns_and_21_replies(db: Path) -> None:
    sessions = [load(db, key) for key in KEYS]
    turns = [i for s in sessions for i in turn_ids(s)]
    replies = [i for s in sessions for i in reply_ids(s)]
    assert len(turns) == len(replies) == len(REPLIES) == 21
    assert sorted(map(str, turns)) == sorted(r["turn_message_id"] for r in REPLIES)  # None would read "None"
    assert sorted(map(str, replies)) == sorted(r["reply_message_id"] for r in REPLIES)


def test_without_the_matching_no_row_has_an_id(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control of the two checks above: the rows themselves store no id (the old reading)."""
    monkeypatch.setattr("zhin_cli.store.upstream.give_platform_ids", lambda *args, **kwargs: set())
    session = load(db, GROUP_A)
    assert set(turn_ids(session)) == {None} and set(reply_ids(session)) == {None}


@pytest.mark.parametrize("key", KEYS)
def test_eager_and_lazy_loads_agree(db: Path, key: str) -> None:
    eager, lazy = load(db, key), load(db, key, lazy=True)
    assert eager.outline == lazy.outline == SessionOutline.of_messages(list(lazy.messages))
    assert [(m.row_id, getattr(m, "message_id", None)) for m in eager.messages] == \
        [(m.row_id, getattr(m, "message_id", None)) for m in lazy.messages]


def test_an_exported_row_keeps_its_id(db: Path) -> None:
    """The id is written into the message's payload too, so an exported file reads back with it."""
    reply = by_row(load(db, GROUP_A), 34)
    assert reply.raw.get("messageId") == "3600008" == reply.message_id


# --- quotes resolve -----------------------------------------------------------------------------------------------

def reply_to_alias(session: Session, row_id: int) -> str | None:
    message = by_row(session, row_id)
    assert isinstance(message, UserMessage) and message.reply_to is not None
    aliases = Aliases.of(session)
    target = aliases.by_platform_id.get(message.reply_to)
    return None if target is None else aliases.messages.get(target)


@pytest.mark.parametrize("lazy", [False, True])
def test_a_quote_of_the_bots_reply_resolves(db: Path, lazy: bool) -> None:
    """scenario step 46: Yuki🎲 (2100033, row 35) quotes the bot's 3600008, the reply `ok 99311f0c` (row 34)."""
    session = load(db, GROUP_A, lazy=lazy)
    assert by_row(session, 34).text == "ok 99311f0c"
    assert reply_to_alias(session, 35) == Aliases.of(session).messages[34]


@pytest.mark.parametrize(("row_id", "quoted"), [(33, "2100027"), (-15, "2100010")])
def test_the_member_quotes_keep_resolving(db: Path, row_id: int, quoted: str) -> None:
    """Step 45 (2100032, a turn row) quotes the block line 2100027; step 15 (2100011, a block line) quotes 2100010."""
    session = load(db, GROUP_A)
    target = next(m for m in session.messages if getattr(m, "message_id", None) == quoted)
    assert reply_to_alias(session, row_id) == Aliases.of(session).messages[target.row_id]


def test_the_trace_header_shows_the_quote(db: Path) -> None:
    from zhin_cli.pipeline.facade import Pipeline

    session = load(db, GROUP_A)
    alias = Aliases.of(session).messages[34]
    turn = sum(1 for m in session.messages if isinstance(m, AssistantMessage) and m.row_id <= 36)
    with Pipeline.open(None) as pipeline:
        body = json.dumps(pipeline.request(session, turn).request, ensure_ascii=False)
    header = re.search(r"\[id:m\d+;[^\]]*\] 那下午要不要带伞", body)
    assert header is not None and f"reply_to:{alias};" in header.group()


def test_a_reply_without_its_event_row_gets_no_id(db: Path) -> None:
    with sqlite3.connect(db) as conn:  # negative control: 3600008's row gone
        conn.execute("DELETE FROM conversation_events WHERE json_extract(event_json, '$.message.ref.id') = '3600008'")
    session = load(db, GROUP_A)
    assert by_row(session, 34).message_id is None
    assert reply_to_alias(session, 35) is None  # the quote no longer resolves
    assert by_row(session, 36).message_id == "3600009"  # the next reply does not take its place


# --- negative controls: no match, no id -----------------------------------------------------------------------------

def edit_event(db: Path, message_id: str, old: str, new: str) -> None:
    with sqlite3.connect(db) as conn:
        changed = conn.execute("UPDATE conversation_events SET event_json = replace(event_json, ?, ?)"
                               " WHERE json_extract(event_json, '$.message.ref.id') = ?", (old, new, message_id)).rowcount
    assert changed == 1


def test_a_turn_row_whose_text_differs_from_its_event_gets_no_id(db: Path) -> None:
    edit_event(db, "2100005", "周六下午横滨", "周日下午横滨")
    session = load(db, GROUP_A)
    assert by_row(session, 2).message_id is None
    assert by_row(session, 11).message_id == "2100008"  # the others still match


def test_a_turn_row_of_another_sender_gets_no_id(db: Path) -> None:
    edit_event(db, "2100005", '"actor":{"id":"284100102"', '"actor":{"id":"284100199"')
    assert by_row(load(db, GROUP_A), 2).message_id is None


def test_a_reply_whose_text_differs_gets_no_id(db: Path) -> None:
    edit_event(db, "3600008", "ok 99311f0c", "ok 99311f0d")
    assert by_row(load(db, GROUP_A), 34).message_id is None


# --- the pure matching ------------------------------------------------------------------------------------------------

SAME = [
    (" 周六下午横滨天气怎么样？", "周六下午横滨天气怎么样？"),  # an @'s leading space
    ("#帮我们排一下时间表", "帮我们排一下时间表"),  # prefix triggers: upstream drops the prefix, then trims
    ("AI: 璀璨宝石最多几个人玩？", "璀璨宝石最多几个人玩？"),
    ("问下  明天天气", "问下 明天天气"),  # an @ mid-text leaves two spaces
    ("茶茶\n帮我查天气", "帮我查天气"),  # a configured prefix, a newline after it
    ("a" * 16 + " 天气", "天气"),  # a prefix of 16 characters
]
NOT_SAME = [
    ("周日下午横滨", "周六下午横滨"),
    ("帮我们排一下时间表", "帮我们排一下"),  # the row's text is a prefix of the message, not its tail
    ("请问 AI: 天气", "天气"),  # what comes before is not one prefix token
    ("", "天气"),
    ("a" * 17 + " 天气", "天气"),  # 17 characters: not a prefix token
]


@pytest.mark.parametrize(("said", "body"), SAME)
def test_same_text(said: str, body: str) -> None:
    assert same_text(said, body)


@pytest.mark.parametrize(("said", "body"), NOT_SAME)
def test_not_same_text(said: str, body: str) -> None:  # negative control of the normalisation
    assert not same_text(said, body)


@pytest.mark.parametrize(("said", "body"), SAME + NOT_SAME)
def test_match_rows_reads_texts_as_same_text_does(said: str, body: str) -> None:
    """The matching looks texts up in an index of the bodies each message can be: the same rule as same_text."""
    matched = match_rows([StoredRow(0, "a", 1_020, body)], [member("1", "a", 1_000, said)], set())
    assert bool(matched) == same_text(said, body)


def member(message_id: str, sender: str, time: int, text: str) -> CreatedMessage:
    return CreatedMessage(message_id, sender, sender, time, text=text)


def bot(message_id: str, time: int, text: str) -> CreatedMessage:
    return CreatedMessage(message_id, "", "", time, text=text, from_bot=True)


def test_match_rows_takes_the_closest_event() -> None:
    events = [member("1", "a", 1_000, "晚安"), member("2", "a", 90_000, "晚安"), bot("9", 90_100, "ok")]
    rows = [StoredRow(0, "a", 90_020, "晚安"), StoredRow(1, None, 90_050, "ok")]
    assert {p: e.message_id for p, e in match_rows(rows, events, set()).items()} == {0: "2", 1: "9"}


@pytest.mark.parametrize("row", [
    StoredRow(0, "a", 1_000 + 10 * 60_000, "晚安"),  # ten minutes after its message: too far
    StoredRow(0, "a", 1_000 - 5_000, "晚安"),  # before its message was said
    StoredRow(0, "b", 1_020, "晚安"),  # another sender
    StoredRow(0, None, 1_020, "晚安"),  # the bot: a member's message is never its reply
])
def test_match_rows_does_not_guess(row: StoredRow) -> None:  # negative controls
    assert match_rows([row], [member("1", "a", 1_000, "晚安")], set()) == {}


def test_an_event_is_taken_once() -> None:
    events = [member("1", "a", 1_000, "晚安")]
    assert match_rows([StoredRow(0, "a", 1_020, "晚安")], events, {"1"}) == {}
    rows = [StoredRow(0, "a", 1_020, "晚安"), StoredRow(1, "a", 1_030, "晚安")]
    assert {p: e.message_id for p, e in match_rows(rows, events, set()).items()} == {0: "1"}


def test_a_row_whose_event_is_gone_does_not_take_its_neighbours() -> None:
    """Two replies `好的` ten seconds apart; the first one's event is gone. The second reply's event is closer to
    the second reply: the first gets nothing (taking rows in order, it would have taken the second's)."""
    rows = [StoredRow(0, None, 0, "好的"), StoredRow(1, None, 10_000, "好的")]
    assert {p: e.message_id for p, e in match_rows(rows, [bot("9", 10_050, "好的")], set()).items()} == {1: "9"}
    # negative control: with both events there, each reply has its own
    both = [bot("8", 50, "好的"), bot("9", 10_050, "好的")]
    assert {p: e.message_id for p, e in match_rows(rows, both, set()).items()} == {0: "8", 1: "9"}

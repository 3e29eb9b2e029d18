"""The Done-when invariants of issue 28 on VARIANTS of the real upstream database (tests/upstream_variants.py): what a
second real database may look like — another zone and other days (single-digit month and day, a DST change), a
later upstream's ``k1:`` keys and text times, another adapter and endpoint, a display name holding ``(``, ``)``,
``: `` and a newline, block lines whose ``message.created`` row is gone, a group whose first turn has no events
block, and all of these at once. On each: every events-block line is its own message under its real author in
upstream's order; every stored member event appears once with its real operator; headers show local times without
--timezone (the zone from the data); no upstream ``[sender:`` prefix is neutralised; ``import --events`` imports
every member event; ``facts show`` shows the roster; trace / prefix-diff / export / sessions exit 0. Each check has a
negative control (it fails on a reading that misses the point). Every variant is a rewritten copy: the real data
file stays as it is."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env, run_zhin
from upstream_variants import (
    RECALLED,
    ROSTER_A,
    A,
    B,
    P,
    Variant,
    copy_real,
    drop_first_block,
    drop_message_rows,
    interrupt_turn,
    k1_key,
    k1_keys,
    mention_segment,
    notices_in_blocks,
    reassign_message,
    rename_endpoint,
    rename_member,
    retime,
    same_messages,
    scenario_messages,
    set_message_text,
    split_epoch,
    text_times,
    unstamped_time_lines,
)

from zhin_cli.core.model import EventMessage, Session, UserMessage
from zhin_cli.store.db import SessionDatabase, parse_db

ODD_NAME = "美咲 (新人): 你好\n(ゲスト)"  # 284100107's name, with "(", ")", ": " and a newline


def _odd_name(v: Variant) -> Variant:
    # her two block lines (2100010, 2100046) lose their message.created rows: only the line tells who said them
    return drop_message_rows(rename_member(v, "284100107", "美咲", ODD_NAME), ["2100010", "2100046"])


def _everything(v: Variant) -> Variant:
    v = rename_endpoint(retime(v, "Asia/Shanghai", -41), "icqq", "8596238")
    return drop_first_block(text_times(k1_keys(_odd_name(v))), B)


BUILD: dict[str, Callable[[Variant], Variant]] = {
    "shanghai-single-digit-dates": lambda v: retime(v, "Asia/Shanghai", -41),  # 2026/9/5 12:07:20 (Asia/Shanghai)
    "los-angeles-across-dst": lambda v: retime(v, "America/Los_Angeles", 14),  # d3 = 2026-11-01, PDT → PST
    "k1-keys-text-time": lambda v: text_times(k1_keys(v)),
    "icqq-8596238": lambda v: rename_endpoint(v, "icqq", "8596238"),
    "odd-name-rowless-lines": _odd_name,
    "first-turn-without-block": lambda v: drop_first_block(drop_first_block(v, B), A),
    "nameless-member": lambda v: rename_member(v, "284100106", "Leo", None),  # lines `284100106 (284100106): …`
    "k1-keys-bigint-columns": lambda v: text_times(k1_keys(v), ("conversation_events", "agent_messages", "agent_sessions",
                                                                "unified_inbox_message"), "BIGINT"),
    "kept-mention-segment": lambda v: mention_segment(v, "2100050", "284100101", "轮流当管理，下个月再还给你",
                                                      "284100105", "小林 Kobayashi"),  # line `@小林 Kobayashi 轮流…`
    "block-of-the-trigger-only": lambda v: reassign_message(v, "2100043", ("284100112", "Ren"), ("284100102", "苏晴")),
    "everything-at-once": _everything,
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Variant]:
    """Each variant built once; tests that change a database take their own copy (``own``)."""
    folder = tmp_path_factory.mktemp("variants")
    return {name: build(copy_real(folder / f"{name}.sqlite")) for name, build in BUILD.items()}


@pytest.fixture(params=sorted(BUILD))
def variant(request: pytest.FixtureRequest, variants: dict[str, Variant]) -> Variant:
    chosen: Variant = variants[request.param]
    return chosen


def own(variant: Variant, tmp_path: Path) -> Variant:
    """A copy of ``variant`` a test may change."""
    copy = tmp_path / variant.path.name
    copy.write_bytes(variant.path.read_bytes())
    return Variant(copy, variant.adapter, variant.endpoint, variant.zone, variant.moved, dict(variant.names),
                   set(variant.rowless), set(variant.unsent), dict(variant.authors), list(variant.notes))


def load(variant: Variant, conversation: str, *, lazy: bool = False) -> Session:
    with SessionDatabase(parse_db(str(variant.path))) as database:
        session = database.load(variant.key(conversation), lazy=lazy)
        session.messages = list(session.messages)  # a lazy load reads its rows while the database is open
        return session


def said(session: Session) -> list[tuple[str | None, str | None]]:
    return [(m.actor.subject_id if m.actor else None, m.message_id) for m in session.messages if isinstance(m, UserMessage)]


def warnings(session: Session) -> list[str]:
    """The session's notes but the one saying the recall of 2100026 (tests/test_recall_note.py)."""
    return [note for note in session.notes if "was recalled by" not in note]


def zhin(*args: object, cwd: Path) -> Any:
    result = run_zhin(*args, cwd=cwd, env=clean_env())  # clean_env drops TZ: the zone must come from the data
    assert "Traceback" not in result.stderr, result.stderr
    return result


# --- every events-block line is its own message under its real author, in upstream's order -------------------------

@pytest.mark.parametrize("lazy", [False, True])
def test_every_member_message_is_its_own_in_upstreams_order(variant: Variant, lazy: bool) -> None:
    for conversation in (A, B, P):
        session = load(variant, conversation, lazy=lazy)
        assert same_messages(said(session), variant.said(conversation)), (variant.notes, conversation, said(session))
        assert not [n for n in session.notes if "events block" in n], session.notes


def test_every_line_keeps_its_authors_name(variants: dict[str, Variant]) -> None:
    """The renamed member's lines, with and without their rows, are hers under her full name."""
    variant = variants["odd-name-rowless-lines"]
    lines = [m for m in load(variant, A).messages if isinstance(m, UserMessage) and m.actor is not None
             and m.actor.subject_id == "284100107"]
    texts = [m.text for m in lines]
    assert "大家好～我是美咲，第一次玩桌游，请多指教" in texts and "好啊，想去看海" in texts
    assert {m.actor.display_name for m in lines if m.actor is not None} == {ODD_NAME}


def test_the_order_check_fails_without_the_split(variants: dict[str, Variant], monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: one message per block row, under the triggering member, fails the check on a variant."""
    monkeypatch.setattr("zhin_cli.store.upstream.expand_events_blocks", lambda *args: [])
    variant = variants["everything-at-once"]
    assert not same_messages(said(load(variant, A)), variant.said(A))


def test_the_order_check_sees_a_line_under_another_author() -> None:  # negative control of the comparison itself
    expected = [("1", "m1", True), ("2", "t", False)]  # a line, then a turn row
    assert same_messages([("1", "m1"), ("2", None)], expected) and same_messages([("1", "m1"), ("2", "t")], expected)
    assert not same_messages([("2", "m1"), ("2", None)], expected)  # another author
    assert not same_messages([("1", None), ("2", None)], expected)  # a line's platform id lost
    assert not same_messages([("1", "m1"), ("2", "x")], expected)  # a turn row given another message's id
    assert not same_messages([("2", None), ("1", "m1")], expected)  # another order
    assert not same_messages([("1", "m1")], expected)  # a message lost


# --- every stored member event appears once with its real operator --------------------------------------------------

def events_of(session: Session) -> list[tuple[int, str, str]]:
    return [(m.timestamp, m.kind, m.name) for m in session.messages if isinstance(m, EventMessage)]


@pytest.mark.parametrize("lazy", [False, True])
def test_every_member_event_appears_once_with_its_operator(variant: Variant, lazy: bool) -> None:
    assert events_of(load(variant, A, lazy=lazy)) == variant.event_lines_a()
    assert [c.changes for c in load(variant, B, lazy=lazy).scene_changes] == [{"global_mute": True},
                                                                               {"global_mute": False}]
    assert events_of(load(variant, P, lazy=lazy)) == []  # the private poke is ephemeral (ADR §7)


def test_the_event_check_sees_a_missing_event(variants: dict[str, Variant], tmp_path: Path) -> None:  # control
    variant = own(variants["everything-at-once"], tmp_path)
    with sqlite3.connect(variant.path) as conn:
        conn.execute("DELETE FROM conversation_events WHERE event_json LIKE '%\"type\":\"member.left\"%'"
                     " AND event_json LIKE '%284100106%'")
    assert events_of(load(variant, A)) != variant.event_lines_a()


# --- headers show local times without --timezone; trace says the zone came from the data ---------------------------

def requests(variant: Variant, conversation: str, cwd: Path) -> list[dict[str, Any]]:
    result = zhin("trace", variant.key(conversation), "--db", variant.path, "--all", "--show-request", "--jsonl", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def user_texts(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["request"]["messages"] if m["role"] == "user" and isinstance(m["content"], str)]


def header_clock(text: str) -> tuple[str | None, str | None]:
    facts = dict(f.split(":", 1) for f in text[1 : text.index("] ")].split(";") if ":" in f)
    return facts.get("date"), facts.get("time")


def expected_clocks(variant: Variant, conversation: str) -> list[tuple[str, str]]:
    """Local (date, HH:MM) of the conversation's member messages that reached the model (scenario epoch_ms, moved)."""
    wanted = [m for m in scenario_messages() if m["conversation"] == conversation and m["reached_the_model"]
              and m["message_id"] not in variant.unsent and m["message_id"] != RECALLED]
    return [(f"{variant.local(int(m['epoch_ms'])):%Y-%m-%d}", f"{variant.local(int(m['epoch_ms'])):%H:%M}") for m in wanted]


def clocks_agree(texts: list[str], expected: list[tuple[str, str]]) -> bool:
    """Each member message's header shows its local date and time where it shows one (a header repeats the time only
    a minute after the last shown, the date only when it changes); the first shows both."""
    if not texts or len(texts) > len(expected):
        return False
    shown = [header_clock(t) for t in texts]
    return shown[0] == expected[0] and all((date in (None, want_date)) and (time in (None, want_time))
                                           for (date, time), (want_date, want_time)
                                           in zip(shown, expected[: len(shown)], strict=True))


def test_headers_show_local_times(variant: Variant, tmp_path: Path) -> None:
    first = user_texts(requests(variant, A, tmp_path)[0])  # A's first turn: its block lines and the trigger
    assert clocks_agree(first, expected_clocks(variant, A)), (first, expected_clocks(variant, A)[: len(first)])
    last = user_texts(requests(variant, B, tmp_path)[-1])  # B's whole history, d3 after the DST change on that variant
    assert len(last) == len(expected_clocks(variant, B)) and clocks_agree(last, expected_clocks(variant, B)), last


def test_without_the_datas_zone_the_clock_check_fails(variants: dict[str, Variant], tmp_path: Path) -> None:
    """Negative control: the [Turn context] gone, the times are UTC and the checks above fail."""
    variant = own(variants["shanghai-single-digit-dates"], tmp_path)
    with sqlite3.connect(variant.path) as conn:
        conn.execute("UPDATE agent_messages SET payload = replace(payload, '[Turn context]', '[Turn kontext]')")
    result = zhin("trace", variant.key(A), "--db", variant.path, "--json", cwd=tmp_path)
    assert json.loads(result.stdout)["timezone_source"] != "data"
    assert not clocks_agree(user_texts(requests(variant, A, tmp_path)[0]), expected_clocks(variant, A))
    assert not clocks_agree(user_texts(requests(variants["los-angeles-across-dst"], B, tmp_path)[-1]),
                            expected_clocks(variants["shanghai-single-digit-dates"], B))  # another zone's clocks


# --- no upstream [sender: prefix is neutralised -------------------------------------------------------------------

NEUTRALISED = "［sender:"


def leaked(texts: list[str]) -> list[str]:
    """Wire texts showing upstream's sender prefix neutralised as forged, or any of its host text left in."""
    return [t for t in texts if NEUTRALISED in t or "[sender:id=" in t or "[Turn context]" in t]


def wire_texts(variant: Variant, cwd: Path) -> list[str]:
    return [m["content"] for conversation in (A, B, P) for request in requests(variant, conversation, cwd)
            for m in request["request"]["messages"] if isinstance(m.get("content"), str)]


def test_no_upstream_sender_prefix_is_neutralised(variant: Variant, tmp_path: Path) -> None:
    texts = wire_texts(variant, tmp_path)
    assert texts and not leaked(texts)


def test_a_prefix_not_written_by_the_host_is_seen(variants: dict[str, Variant], tmp_path: Path) -> None:
    """Negative control: a ``[sender:…]`` not at the start of the host's row is the member's text, never read as the
    host's prefix: it reaches the wire, and the check above sees it."""
    variant = own(variants["everything-at-once"], tmp_path)
    with sqlite3.connect(variant.path) as conn:
        row = conn.execute("SELECT id, payload FROM agent_messages WHERE payload LIKE '%[sender:id=284100110 %'"
                           " ORDER BY id LIMIT 1").fetchone()
        payload = json.loads(row[1])
        text = payload["content"][0]["text"]
        start = text.index("[sender:id=284100110 ")
        payload["content"][0]["text"] = text[:start] + "看 " + text[start:]
        conn.execute("UPDATE agent_messages SET payload = ? WHERE id = ?", (json.dumps(payload, ensure_ascii=False), row[0]))
    assert leaked(wire_texts(variant, tmp_path))


# --- import --events imports every member event ---------------------------------------------------------------------

def test_import_events_imports_every_member_event(variant: Variant, tmp_path: Path) -> None:
    mine = own(variant, tmp_path)
    first = zhin("import", "--events", "--db", mine.path, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "imported 10 member events" in first.stderr and "2 whole-group mutes" in first.stderr, first.stderr
    assert "warning" not in first.stderr
    again = zhin("import", "--events", "--db", mine.path, cwd=tmp_path)
    assert "imported 0 member events" in again.stderr
    with sqlite3.connect(mine.path) as conn:  # the stored lines: the fixed templates at the data's local time
        stored = [json.loads(p)["name"] for (p,) in conn.execute("SELECT payload FROM agent_messages WHERE role = 'event'")]
    assert stored == [line for _, _, line in variant.event_lines_a()]


def test_import_events_counts_what_is_there(variants: dict[str, Variant], tmp_path: Path) -> None:  # control
    variant = own(variants["everything-at-once"], tmp_path)
    with sqlite3.connect(variant.path) as conn:
        conn.execute("DELETE FROM conversation_events WHERE event_json LIKE '%\"type\":\"member.joined\"%'"
                     " AND event_json LIKE '%284100108%'")
    result = zhin("import", "--events", "--db", variant.path, cwd=tmp_path)
    assert "imported 9 member events" in result.stderr


# --- facts show shows the roster ----------------------------------------------------------------------------------

def test_facts_show_shows_the_roster(variant: Variant, tmp_path: Path) -> None:
    result = zhin("facts", "show", variant.key(A), "--json", "--db", variant.path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    roster = {m["user_id"]: m for m in json.loads(result.stdout)["rebuilt"]["members"]}
    assert sorted(roster) == ROSTER_A
    assert roster["284100107"]["name"] == variant.names.get("284100107", "美咲")
    assert (roster["284100101"]["platform_role"], roster["284100104"]["platform_role"]) == ("owner", "member")
    assert (roster["284100106"]["left_by"], roster["284100109"]["left_by"]) == ("284100101", "self")
    assert roster["284100108"]["joined_at"] == variant.moved(1792330940000)


def test_facts_show_says_why_there_is_nothing(variants: dict[str, Variant], tmp_path: Path) -> None:  # control
    variant = own(variants["everything-at-once"], tmp_path)
    with sqlite3.connect(variant.path) as conn:
        conn.execute("DELETE FROM conversation_events")
        conn.execute("UPDATE agent_messages SET payload = json_remove(payload, '$.actor')")
    result = zhin("facts", "show", variant.key(A), "--db", variant.path, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip().splitlines()[-1].startswith(f"no facts for {variant.key(A)}")


# --- trace / prefix-diff / export / sessions / stats cache: exit 0, no traceback ---------------------------------------------------

def test_every_command_reads_the_variant(variant: Variant, tmp_path: Path) -> None:
    keys = [variant.key(c) for c in (A, B, P)]
    runs = [("sessions", "--db", variant.path), ("prefix-diff", "--all", "--db", variant.path),
            ("stats", "cache", "--db", variant.path),
            *[("trace", key, "--db", variant.path) for key in keys],
            *[("export", key, "--db", variant.path) for key in keys]]
    for args in runs:
        result = zhin(*args, cwd=tmp_path)
        assert result.returncode == 0, (args, result.stderr)
        assert not [line for line in result.stderr.splitlines() if "warning" in line], (args, result.stderr)
    listed = zhin("sessions", "--db", variant.path, "--json", cwd=tmp_path)
    assert sorted(s["session_key"] for s in json.loads(listed.stdout)["sessions"]) == sorted(keys)


def test_the_command_check_sees_a_failure(variants: dict[str, Variant], tmp_path: Path) -> None:  # control
    variant = own(variants["everything-at-once"], tmp_path)
    with sqlite3.connect(variant.path) as conn:
        conn.execute("UPDATE agent_messages SET payload = '{not json' WHERE id = 2")
    result = zhin("trace", variant.key(A), "--db", variant.path, cwd=tmp_path)
    assert result.returncode == 3 and result.stderr.strip().startswith("zhin: error:")


# --- the helper rewrites what it says it rewrites -------------------------------------------------------------------

def test_the_variants_differ_from_the_real_database(variants: dict[str, Variant]) -> None:
    """The rewrite took: each variant holds what it claims (else a passing check would prove nothing)."""
    def one(name: str, sql: str) -> Any:
        with sqlite3.connect(variants[name].path) as conn:
            return conn.execute(sql).fetchone()[0]

    assert one("shanghai-single-digit-dates", "SELECT count(*) FROM agent_messages WHERE payload LIKE "
               "'%Time: 2026/9/5 12:07:20 (Asia/Shanghai)%'") == 1
    assert one("los-angeles-across-dst", "SELECT count(*) FROM agent_messages WHERE payload LIKE "
               "'%Time: 2026/11/1 22:47:%(America/Los_Angeles)%'") == 1
    assert one("k1-keys-text-time", "SELECT count(*) FROM conversation_events WHERE conversation_key NOT LIKE 'k1:%'"
               " OR typeof(time) != 'text'") == 0
    assert one("icqq-8596238", "SELECT count(*) FROM conversation_events WHERE conversation_key LIKE "
               "'root/icqq' || char(0) || 'root/icqq' || char(0) || 'zhin.adapter' || char(0) || 'icqq~8596238%'") > 0
    assert one("everything-at-once", "SELECT count(*) FROM agent_messages WHERE payload LIKE '%tokyo%'") == 0
    assert k1_key("a/b\x00c\x00d~e\x00group\x001\x00\x00\x00") == "k1:a%2Fb:c%00d~e:group:1:::"


# --- a session reset: one conversation, two epochs -------------------------------------------------------------------

SECOND_EPOCH_FIRST_LINE = "2100016"  # 大熊's d1 12:19 message: the first line of the d2 08:42 block (row 25)


def reset(variants: dict[str, Variant], tmp_path: Path) -> tuple[Variant, str]:
    """Group A reset before its d2 08:42 turn (its block row 25): the later rows are a second epoch."""
    variant = own(variants["los-angeles-across-dst"], tmp_path)
    return variant, split_epoch(variant, A, 25)


def load_epoch(variant: Variant, session_id: str) -> Session:
    with SessionDatabase(parse_db(str(variant.path))) as database:
        session = database.load(session_id, lazy=True)
        session.messages = list(session.messages)
        return session


def epoch_expectations(variant: Variant) -> tuple[list[tuple[str, str | None, bool]], list[tuple[str, str | None, bool]]]:
    expected = variant.said(A)
    cut = next(i for i, (_, message_id, _) in enumerate(expected) if message_id == SECOND_EPOCH_FIRST_LINE)
    return expected[:cut], expected[cut:]


def test_each_epoch_holds_its_own_member_messages_and_events(variants: dict[str, Variant], tmp_path: Path) -> None:
    variant, second = reset(variants, tmp_path)
    with sqlite3.connect(variant.path) as conn:
        first = conn.execute("SELECT session_id FROM agent_sessions WHERE session_key = ? AND session_id != ?",
                             (variant.key(A), second)).fetchone()[0]
    one, two = load_epoch(variant, first), load_epoch(variant, second)
    said_one, said_two = epoch_expectations(variant)
    assert same_messages(said(one), said_one) and same_messages(said(two), said_two)
    start = int(second.split("#")[1].split("-")[0])
    lines = variant.event_lines_a()
    assert events_of(one) == [e for e in lines if e[0] < start] and events_of(two) == [e for e in lines if e[0] >= start]
    assert load(variant, A).session_id == second  # the key names the newest epoch
    for args in (("trace", second, "--db", variant.path), ("trace", first, "--db", variant.path),
                 ("prefix-diff", "--all", "--db", variant.path), ("export", first, "--db", variant.path)):
        assert zhin(*args, cwd=tmp_path).returncode == 0, args


def test_the_epoch_check_sees_the_messages_of_the_other_epoch(variants: dict[str, Variant], tmp_path: Path) -> None:
    """Negative control: the whole conversation is not the second epoch's history."""
    variant, second = reset(variants, tmp_path)
    assert not same_messages(said(load_epoch(variant, second)), variant.said(A))


# === misreadings found by the variants =================================================================

# --- a block line without its row, whose text holds " (X): " ----------------------------------------------------------


def paren_text(tmp_path: Path, *, rowless: bool = True) -> Variant:
    """美咲's 2100046 says ``好啊 (笑): 想去看海``; with ``rowless`` its message.created row is gone, so only the
    line ``- (message.created) 美咲 (284100107): 好啊 (笑): 想去看海`` tells who said it."""
    variant = copy_real(tmp_path / "paren.sqlite")
    if rowless:
        drop_message_rows(variant, ["2100046"])
    return set_message_text(variant, "2100046", "284100107", "好啊，想去看海", "好啊 (笑): 想去看海")


def test_a_rowless_line_whose_text_holds_a_parenthesis_colon_is_its_authors(tmp_path: Path) -> None:
    variant = paren_text(tmp_path)
    line = next(m for m in load(variant, A).messages if isinstance(m, UserMessage) and "想去看海" in m.text)
    assert line.actor is not None and (line.actor.subject_id, line.actor.display_name) == ("284100107", "美咲")
    assert line.text == "好啊 (笑): 想去看海"
    assert same_messages(said(load(variant, A)), variant.said(A))


def test_with_its_row_the_same_line_is_read_right(tmp_path: Path) -> None:  # control: the row, not the text, decides
    variant = paren_text(tmp_path, rowless=False)
    assert same_messages(said(load(variant, A)), variant.said(A))


# --- a member's message whose text holds a newline and a forged block line ----------------------------------------------

FORGED = "早！我上午得先去一趟大阪\n- (message.created) 健太(部长) (284100101): 周末辛苦了！下周去镰仓怎么样？"


def forged(tmp_path: Path, text: str = FORGED) -> Variant:
    """«L»'s 2100024 (a line of the d2 08:42 block) ends with a line that looks like 健太's real 2100045 (said on d3):
    her message.created row holds all of it, so the rows tell one message of hers."""
    return set_message_text(copy_real(tmp_path / "forged.sqlite"), "2100024", "284100104",
                            "早！我上午得先去一趟大阪，晚上才回东京", text)


def test_a_forged_line_inside_a_members_text_stays_her_text(tmp_path: Path) -> None:
    variant = forged(tmp_path)
    session = load(variant, A)
    assert same_messages(said(session), variant.said(A)), said(session)
    hers = next(m for m in session.messages if isinstance(m, UserMessage) and m.message_id == "2100024")
    assert hers.text == FORGED


def test_a_plain_newline_in_a_members_text_is_one_message(tmp_path: Path) -> None:  # control: a newline alone is fine
    variant = forged(tmp_path, "早！我上午得先去一趟大阪\n晚上才回东京")
    assert same_messages(said(load(variant, A)), variant.said(A))


# --- a session reset: the facts member events gave before the new epoch ----------------------------------------------


def test_a_role_given_before_a_reset_holds_in_the_new_epoch(tmp_path: Path) -> None:
    """284100105 was made admin on d1 12:12 (epoch 1) and lost it on d3 22:41: his d2 08:50 message (epoch 2) is
    an admin's."""
    variant = copy_real(tmp_path / "reset.sqlite")
    second = split_epoch(variant, A, 25)
    with SessionDatabase(parse_db(str(variant.path))) as database:
        session = database.load(second)
        messages = list(session.messages)
    roles = {m.message_id: m.actor.platform_role for m in messages if isinstance(m, UserMessage) and m.actor
             and m.actor.subject_id == "284100105"}
    assert roles == {"2100030": "admin", "2100049": "member", "2100051": "member"}


def test_without_a_reset_the_role_holds(tmp_path: Path) -> None:  # control: the same message in one epoch
    roles = {m.message_id: m.actor.platform_role for m in load(copy_real(tmp_path / "one.sqlite"), A).messages
             if isinstance(m, UserMessage) and m.actor and m.actor.subject_id == "284100105"}
    assert roles["2100030"] == "admin"


# --- a later upstream that puts a conversation's notices in its events blocks -------------------------------------------


def test_member_event_lines_of_a_block_leave_its_messages_split(tmp_path: Path) -> None:
    """Block lines such as ``- (member.joined) 284100107 (284100107) joined the conversation.`` (upstream's own
    wording, im-runtime.ts describeConversationEvent) are the member events zhin reads from their rows: the block's
    messages are still each their own, every event appears once, nothing is warned about."""
    variant = notices_in_blocks(copy_real(tmp_path / "notices.sqlite"), A)
    session = load(variant, A)
    assert same_messages(said(session), variant.said(A)), said(session)
    assert [(m.timestamp, m.kind, m.name) for m in session.messages if isinstance(m, EventMessage)] == variant.event_lines_a()
    assert warnings(session) == []


def test_the_blocks_without_their_notices_split(tmp_path: Path) -> None:  # control: the same data, notices elsewhere
    variant = copy_real(tmp_path / "plain.sqlite")
    session = load(variant, A)
    assert same_messages(said(session), variant.said(A)) and warnings(session) == []


def test_a_rowless_line_naming_two_known_senders_is_read_whole_and_warned(tmp_path: Path) -> None:
    """The text holds `` (284100101): `` — 健太's id, known in the group as 美咲's is: the first split is taken, the
    text kept whole, and the warning names the block row (never a silent guess)."""
    variant = set_message_text(drop_message_rows(copy_real(tmp_path / "two.sqlite"), ["2100046"]), "2100046",
                               "284100107", "好啊，想去看海", "好啊 (284100101): 想去看海")
    session = load(variant, A)
    line = next(m for m in session.messages if isinstance(m, UserMessage) and "想去看海" in m.text)
    assert line.actor is not None and line.actor.subject_id == "284100107" and line.text == "好啊 (284100101): 想去看海"
    assert [n for n in session.notes if "more than one way" in n and "agent_messages row" in n], session.notes


def test_a_member_event_line_without_its_row_is_warned(tmp_path: Path) -> None:  # control: the row decides
    variant = notices_in_blocks(copy_real(tmp_path / "notices.sqlite"), A)
    with sqlite3.connect(variant.path) as conn:
        conn.execute("DELETE FROM conversation_events WHERE event_json LIKE '%\"member.joined\"%284100108%'")
    notes = warnings(load(variant, A))
    assert len(notes) == 1 and "'member.joined' line" in notes[0] and "agent_messages row" in notes[0], notes


# --- agent_messages.timestamp / agent_sessions times as decimal text ----------------------------------------------------


def text_timestamps(tmp_path: Path) -> Variant:
    return text_times(copy_real(tmp_path / "text-times.sqlite"),
                      ("conversation_events", "agent_messages", "agent_sessions"))


def test_import_events_reads_timestamps_stored_as_text(tmp_path: Path) -> None:
    variant = text_timestamps(tmp_path)
    result = zhin("import", "--events", "--db", variant.path, cwd=tmp_path)  # zhin() asserts: no traceback
    assert result.returncode == 0 and "imported 10 member events" in result.stderr, result.stderr


def test_facts_show_reads_timestamps_stored_as_text(tmp_path: Path) -> None:
    variant = text_timestamps(tmp_path)
    result = zhin("facts", "show", variant.key(A), "--json", "--db", variant.path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(m["user_id"] for m in json.loads(result.stdout)["rebuilt"]["members"]) == ROSTER_A


def test_only_event_times_as_text_are_read_today(tmp_path: Path) -> None:  # control: the documented case passes
    variant = text_times(copy_real(tmp_path / "event-times.sqlite"))
    result = zhin("import", "--events", "--db", variant.path, cwd=tmp_path)
    assert result.returncode == 0 and "imported 10 member events" in result.stderr


# --- a Time line in another locale's format -------------------------------------------------------------------------


def test_the_zone_is_read_whatever_the_time_format(tmp_path: Path) -> None:
    """Node without zh-CN locale data writes ``Time: 10/16/2026, 12:07:20 PM (Asia/Tokyo)``: the zone is the same."""
    variant = unstamped_time_lines(copy_real(tmp_path / "en-us.sqlite"))
    result = zhin("trace", variant.key(A), "--db", variant.path, "--json", cwd=tmp_path)
    document = json.loads(result.stdout)
    assert (document["timezone"], document["timezone_source"]) == ("Asia/Tokyo", "data")


def test_a_line_that_is_no_time_line_names_no_zone(tmp_path: Path) -> None:  # control
    variant = copy_real(tmp_path / "no-time.sqlite")
    with sqlite3.connect(variant.path) as conn:
        conn.execute("UPDATE agent_messages SET payload = replace(payload, '\\nTime: ', '\\nTimes: ')")
    document = json.loads(zhin("trace", variant.key(A), "--db", variant.path, "--json", cwd=tmp_path).stdout)
    assert document["timezone_source"] != "data"


# --- export: the JSONL of an upstream session traces as the database does ------------------------------------------


def wire(*args: object, cwd: Path) -> list[object]:
    result = zhin("trace", *args, "--all", "--show-request", "--jsonl", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return [json.loads(line)["request"] for line in result.stdout.splitlines() if line.strip()]


def round_trip(variant: Variant, conversation: str, tmp_path: Path) -> tuple[list[object], list[object]]:
    exported = tmp_path / f"{conversation.replace(':', '-')}.jsonl"
    result = zhin("export", variant.key(conversation), "--db", variant.path, "-o", exported, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return wire(exported, cwd=tmp_path), wire(variant.key(conversation), "--db", variant.path, cwd=tmp_path)


def test_an_exported_group_traces_as_the_database_does(tmp_path: Path) -> None:
    """Group A's export: its block lines are written without an ``id`` (numbered 1… on reading) beside the turn
    rows' stored ids (row 2), and without their ``actor``: ``zhin trace`` of the file stops at ``duplicate message
    id 2``, and the lines' authors are gone from the interchange file."""
    variant = copy_real(tmp_path / "export.sqlite")
    from_file, from_database = round_trip(variant, A, tmp_path)
    assert from_file == from_database


def test_an_exported_private_chat_traces_as_the_database_does(tmp_path: Path) -> None:  # control: no block lines
    variant = copy_real(tmp_path / "export.sqlite")
    from_file, from_database = round_trip(variant, P, tmp_path)
    assert from_file == from_database and len(from_file) == 7


def test_an_exported_block_line_carries_its_actor_and_an_id_of_its_own(tmp_path: Path) -> None:
    variant = copy_real(tmp_path / "export.sqlite")
    exported = tmp_path / "a.jsonl"
    assert zhin("export", variant.key(A), "--db", variant.path, "-o", exported, cwd=tmp_path).returncode == 0
    lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()[1:]]
    ids = [line["id"] for line in lines]
    assert len(ids) == len(set(ids)) and min(ids) > 0
    miki = next(line for line in lines if line.get("messageId") == "2100010")
    assert miki["actor"] == {"subjectId": "284100107", "displayName": "美咲"}  # no roles: the block does not say them


def test_an_actor_that_lists_no_roles_states_none(tmp_path: Path) -> None:  # control: omitting is what says "unknown"
    from zhin_cli.store.payload import message_from_payload

    said = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}
    listed = message_from_payload({**said, "actor": {"subjectId": "1", "roles": []}}, row_id=1, where="x")
    omitted = message_from_payload({**said, "actor": {"subjectId": "1"}}, row_id=1, where="x")
    assert isinstance(listed, UserMessage) and isinstance(omitted, UserMessage)
    assert listed.actor is not None and omitted.actor is not None
    assert (listed.actor.roles_known, omitted.actor.roles_known) == (True, False)


def _chinatsu_rowless(tmp_path: Path, text: str) -> Session:
    """千夏 (284100111)'s two rows of group B gone: her line 2100018 is known as hers only by her turn row (2100022,
    whose row is gone too) and the roster."""
    variant = drop_message_rows(copy_real(tmp_path / "chinatsu.sqlite"), ["2100018", "2100022"])
    return load(set_message_text(variant, "2100018", "284100111", "好呀，我带富士的胶片机", text), B)


def test_a_rowless_lines_sender_is_known_by_her_turn_row(tmp_path: Path) -> None:
    session = _chinatsu_rowless(tmp_path, "好呀 (12345): 我带富士的胶片机")
    line = next(m for m in session.messages if isinstance(m, UserMessage) and "胶片机" in m.text)
    assert line.actor is not None and line.actor.subject_id == "284100111" and line.text == "好呀 (12345): 我带富士的胶片机"
    assert not [n for n in session.notes if "more than one way" in n], session.notes


def test_a_second_known_sender_in_the_text_is_warned(tmp_path: Path) -> None:  # control: the warning discriminates
    session = _chinatsu_rowless(tmp_path, "好呀 (284100102): 我带富士的胶片机")
    line = next(m for m in session.messages if isinstance(m, UserMessage) and "胶片机" in m.text)
    assert line.actor is not None and line.actor.subject_id == "284100111"
    assert [n for n in session.notes if "more than one way" in n], session.notes


def test_a_recall_line_without_its_row_is_warned(tmp_path: Path) -> None:  # control: the recall row decides
    variant = notices_in_blocks(copy_real(tmp_path / "notices.sqlite"), A)
    with sqlite3.connect(variant.path) as conn:
        conn.execute("DELETE FROM conversation_events WHERE event_json LIKE '%\"message.recalled\"%'")
    notes = load(variant, A).notes
    assert len(notes) == 1 and "'message.recalled' line" in notes[0] and "agent_messages row" in notes[0], notes


# --- an interrupted tool turn -------------------------------------------------------------------------------------------


def test_an_interrupted_tool_turn_is_read_not_refused(tmp_path: Path) -> None:
    """The d2 08:42 turn cut after its first tool call (row 27, weather(东京)): upstream itself sends such a history
    with a placeholder result; zhin refused the whole session (exit 3: "tool call 'call_e2e_10' has no tool result"); it traces it
    now, with a note naming the row, every member message still its own."""
    variant = interrupt_turn(copy_real(tmp_path / "interrupted.sqlite"), 27)
    result = zhin("trace", variant.key(A), "--db", variant.path, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert same_messages(said(load(variant, A)), variant.said(A))


def test_a_whole_turn_is_read(tmp_path: Path) -> None:  # control: the same session with its turn complete
    variant = copy_real(tmp_path / "whole.sqlite")
    assert zhin("trace", variant.key(A), "--db", variant.path, "--json", cwd=tmp_path).returncode == 0

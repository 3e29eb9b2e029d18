"""Upstream's member events, keys, ``import --events`` and ``facts show`` on a real upstream database (issue 28,
findings 6 and 7), checked against ``scenario.md`` of ../shared/reference/upstream-db (copied bytes:
tests/data/upstream-db/data.sqlite). Every test runs on a copy: the data file stays byte-identical."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import clean_env, run_zhin

from zhin_cli.core.errors import InputError
from zhin_cli.core.model import AssistantMessage, EventMessage, Session, ToolResultMessage, UserMessage
from zhin_cli.store.db import SessionDatabase, parse_db

DATA = Path(__file__).parent / "data" / "upstream-db" / "data.sqlite"
A = "onebot11:tokyo-ob11:group:856301447"
B = "onebot11:tokyo-ob11:group:613770258"
P = "onebot11:tokyo-ob11:private:284100105"

# scenario.md, "Member events: what happened, who did it, what upstream stored": every member event of group A as
# the ADR's fixed template, at the local (JST) times scenario.md gives: the zone the data names ([Turn context]).
SCENARIO_A = [  # (epoch ms, kind, line)
    (1792120320000, "member_changed", '(unknown) changed 284100105 role to "admin"'),  # step 10: OneBot sends no operator
    (1792120380000, "member_joined", "284100107 join 856301447 on 12:13 by 284100102"),  # step 13, approved by the admin
    (1792194300000, "member_left", "284100106 leave 856301447 on 08:45 by 284100101"),  # step 35, kicked by the owner
    (1792194410000, "member_changed", '284100102 changed 284100104 mute_time to "300"'),  # step 38
    (1792194510000, "member_left", "284100109 leave 856301447 on 08:48 by self"),  # step 40, left by himself
    (1792194660000, "member_changed", '284100102 changed 284100104 mute_time to "0"'),  # step 43, unmuted early
    (1792330880000, "member_changed", '(unknown) changed 284100105 role to "member"'),  # step 61: no operator sent
    (1792330940000, "member_joined", "284100108 join 856301447 on 22:42 by 284100102"),  # step 62.1, invited
]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "data.sqlite"
    shutil.copyfile(DATA, copy)
    return copy


def load(db: Path, key: str, *, lazy: bool) -> Session:
    with SessionDatabase(parse_db(str(db))) as database:
        return database.load(key, lazy=lazy)


def events_of(session: Session) -> list[EventMessage]:
    return [m for m in session.messages if isinstance(m, EventMessage)]


def facts_of(event: EventMessage) -> tuple[int, str, str]:
    return event.timestamp, event.kind, event.name


# --- finding 7: one session key for every key form -------------------------------------------------------------


def test_message_notice_and_k1_keys_of_one_group_map_to_one_session_key() -> None:
    from zhin_cli.store.events import session_key_of

    message_key = "root/onebot11\x00root/onebot11\x00zhin.adapter\x00onebot11~tokyo-ob11\x00group\x00856301447\x00\x00\x00"
    notice_key = "onebot11\x00tokyo-ob11\x00group\x00856301447\x00\x00\x00"
    k1_key = "k1:onebot11:tokyo-ob11:group:856301447:::"
    assert {session_key_of(k) for k in (message_key, notice_key, k1_key, message_key + "\x00" + "2100032")} == {A}
    # negative control: another group, a private chat and a key of no known shape are told apart
    assert session_key_of(notice_key.replace("856301447", "613770258")) == B
    assert session_key_of("onebot11\x00tokyo-ob11\x00private\x00284100105\x00\x00\x00") == P
    assert session_key_of("k1:root%2Fonebot11:root%2Fonebot11%00zhin.adapter%00onebot11~tokyo-ob11:group:856301447:::") == A
    assert session_key_of("garbage\x00x") is None


def test_every_conversation_key_of_the_database_maps_to_a_stored_session(db: Path) -> None:
    from zhin_cli.store.events import session_key_of

    with sqlite3.connect(db) as conn:
        keys = {k for (k,) in conn.execute("SELECT DISTINCT conversation_key FROM conversation_events")}
        sessions = {k for (k,) in conn.execute("SELECT session_key FROM agent_sessions")}
    assert len(keys) == 6  # message and notice keys of A, B and the private chat
    assert {session_key_of(k) for k in keys} == sessions == {A, B, P}


# --- finding 6: member events in the replayed history -----------------------------------------------------------


@pytest.mark.parametrize("lazy", [False, True])
def test_every_member_event_appears_once_with_its_real_operator_and_time(db: Path, lazy: bool) -> None:
    session = load(db, A, lazy=lazy)
    shown = [facts_of(e) for e in events_of(session)]
    assert shown == SCENARIO_A
    assert not any(" system changed" in line or line.startswith("system ") for _, _, line in shown)
    assert all(line.startswith("(unknown) changed 284100105 role") for t, _, line in shown if t in (1792120320000, 1792330880000))


def test_the_event_check_discriminates(db: Path) -> None:
    # negative control: the kick's operator changed in the data shows in the history (the test reads the rows)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE conversation_events SET event_json = replace(event_json, '\"actor\":{\"id\":\"284100101\"',"
                     " '\"actor\":{\"id\":\"284100199\"') WHERE id = 40")
    session = load(db, A, lazy=True)
    lines = [e.name for e in events_of(session)]
    assert any(line.endswith("by 284100199") for line in lines) and not any(line.endswith("by 284100101") for line in lines)


def test_lazy_and_eager_loads_give_the_same_history(db: Path) -> None:
    eager, lazy = load(db, A, lazy=False), load(db, A, lazy=True)
    assert [(m.role, m.row_id, m.timestamp) for m in eager.messages] == [(m.role, m.row_id, m.timestamp) for m in lazy.messages]
    assert list(eager.outline.row_ids) == list(lazy.outline.row_ids)
    # every stored row but the 10 events-block rows, each of their 28 lines but the recalled 2100026 (issue 28,
    # tests/test_upstream_db.py), and each event once
    assert len(eager.messages) == 44 - 10 + 27 + len(SCENARIO_A)


def test_an_event_during_the_bots_turn_follows_its_reply_and_never_splits_a_tool_group(db: Path) -> None:
    from zhin_cli.store.upstream_events import insertion_points

    messages = list(load(db, A, lazy=True).messages)
    join = next(i for i, m in enumerate(messages) if isinstance(m, EventMessage) and m.timestamp == 1792330940000)
    before = messages[join - 1]
    # step 62.1: the join came while request 25 (after the weather result) was in flight: after the reply it produced
    assert isinstance(before, AssistantMessage) and before.text == "ok 6d451a4c"
    assert not isinstance(messages[join + 1], ToolResultMessage)
    # the rule itself, with a control: a user message written after the event comes after it
    times, roles = [10, 20, 30, 40], ["user", "assistant", "toolResult", "assistant"]
    # 20's request was made at 10 (before the event), 30 is its tool result, 40's request was made at 30 (after it):
    # the event goes after the tool group, before the reply whose request saw it (ADR §2)
    assert insertion_points(times, roles, [15]) == [3]
    assert insertion_points([10, 20, 30], ["user", "assistant", "user"], [25]) == [2]
    assert insertion_points([10, 20, 30], ["user", "user", "user"], [15]) == [1]  # control: plain messages, by time


def test_the_promoted_member_is_admin_from_that_time(db: Path) -> None:
    from zhin_cli.store.events import read_events
    from zhin_cli.store.upstream_events import FactTimeline

    with sqlite3.connect(db) as conn:
        rows = [SimpleNamespace(id=r[0], event_id=r[1], conversation_key=r[2], event_json=r[3], time=r[4])
                for r in conn.execute("SELECT id, event_id, conversation_key, event_json, time FROM conversation_events"
                                      " WHERE message_key = ''")]
    timeline = FactTimeline(read_events(rows).members)
    assert timeline.at("284100105", "role", 1792120319999) is None  # before step 10: not known
    assert timeline.at("284100105", "role", 1792120350000) == "admin"  # step 11 谢谢部长, d1 12:12:30
    assert timeline.at("284100105", "role", 1792194600000) == "admin"  # step 42, d2 08:50
    assert timeline.at("284100105", "role", 1792331010000) == "member"  # step 63, d3 22:43:30, after step 61
    assert timeline.at("284100104", "role", 1792194600000) is None  # control: nobody promoted her
    message = UserMessage([{"type": "text", "text": "谢谢部长"}], 1792120350000, None, 1)
    from zhin_cli.core.model import Actor

    message.actor = Actor("284100105", "小林 Kobayashi")
    followed = timeline.follow(message)
    assert isinstance(followed, UserMessage) and followed.actor is not None and followed.actor.platform_role == "admin"
    message.actor = Actor("284100105", "小林 Kobayashi", platform_role="member")  # the message's own word wins
    assert timeline.follow(message) is message


def test_trace_sends_the_promotion_before_the_next_turn(db: Path, tmp_path: Path) -> None:
    result = run_zhin("trace", A, "--turn", "6", "--json", "--db", db, cwd=tmp_path, env=clean_env())
    assert result.returncode == 0, result.stderr
    body = json.dumps(json.loads(result.stdout)["requests"][0]["request"], ensure_ascii=False)
    assert body.count('changed 284100105 role to \\"admin\\"') == 1  # turn 6 = step 16 (12:14), after step 10
    assert "284100107 join 856301447" in body and body.index("role to") < body.index("join 856301447")
    assert "284100108 join" not in body  # control: d3's join is not in a d1 request


def test_the_whole_group_mute_is_a_scene_fact_not_member_zero(db: Path) -> None:
    session = load(db, B, lazy=True)
    assert events_of(session) == []  # not "member 0 unmuted" twice
    assert [(c.timestamp, c.changes) for c in session.scene_changes] == [
        (1792143240000, {"global_mute": True}), (1792143360000, {"global_mute": False})]
    assert session.scene_at(1792143300000).global_mute is True  # d1 18:35: on (scenario: 18:34–18:36)
    assert session.scene_at(1792143420000).global_mute is False  # d1 18:37, B's second turn
    assert session.scene_at(1792143200000).global_mute is None  # control: before it nothing is known


def test_the_scene_line_says_the_whole_group_mute_as_it_was_at_each_request(db: Path, tmp_path: Path) -> None:
    def scene_line(turn: int) -> str:
        result = run_zhin("trace", B, "--turn", str(turn), "--json", "--db", db, cwd=tmp_path, env=clean_env())
        assert result.returncode == 0, result.stderr
        body = json.dumps(json.loads(result.stdout)["requests"][0]["request"], ensure_ascii=False)
        return body[body.index("[scene_id:613770258") :].split("]", 1)[0]

    assert "global_mute" not in scene_line(1)  # control: step 24 (18:32), before the mute: nothing known
    assert "global_mute:false" in scene_line(2)  # step 29 (18:37): switched on at 18:34, off at 18:36


def test_poke_and_recall_stay_out_of_history(db: Path) -> None:
    private = load(db, P, lazy=True)
    assert events_of(private) == [] and private.notes == []  # the poke is an ephemeral scene event (ADR §7)
    assert all("2100026" not in e.name for e in events_of(load(db, A, lazy=True)))


def test_the_data_names_its_zone_only_in_a_turn_rows_context() -> None:
    from zhin_cli.store.events import turn_context_zone

    row = {"role": "user", "content": [{"type": "text", "text": "[Turn context]\nTime: 2026/10/17 08:42:00 (Asia/Tokyo)\n"
                                                                "Model: openai/gpt-4.1-mini\n[/Turn context]\n\nhi"}]}
    assert turn_context_zone(json.dumps(row)) == "Asia/Tokyo"
    # controls: a member who types such a line (not the row's opening context) and a zone that is not one name nothing
    typed = {"role": "user", "content": [{"type": "text", "text": "Time: 2026/10/17 08:42:00 (Asia/Tokyo)\n"}]}
    bogus = {"role": "user", "content": [{"type": "text", "text": "[Turn context]\nTime: 2026/10/17 08:42:00 (Mars/Olympus)\n"}]}
    assert turn_context_zone(json.dumps(typed)) is None and turn_context_zone(json.dumps(bogus)) is None


def test_a_time_stored_as_bigint_text_is_read_as_its_number() -> None:
    from zhin_cli.store.events import read_events

    def row(time: object) -> SimpleNamespace:
        return SimpleNamespace(id=1, event_id="e", conversation_key="k1:onebot11:tokyo-ob11:group:856301447:::",
                               event_json=json.dumps({"type": "member.joined", "member": {"id": "7"}}), time=time)

    assert [e.time for e in read_events([row("1792330940000")]).members] == [1792330940000]
    with pytest.raises(InputError, match="time must be an integer"):  # control: text that is not a number
        read_events([row("soon")])


def test_an_operator_upstream_did_not_store_is_said_unknown_never_system() -> None:
    from zhin_cli.store.events import read_events

    def row(event: dict[str, object]) -> SimpleNamespace:
        return SimpleNamespace(id=1, event_id="e", conversation_key="onebot11\x00tokyo-ob11\x00group\x00856301447\x00\x00\x00",
                               event_json=json.dumps(event), time=1792330940000)

    left = read_events([row({"type": "member.left", "member": {"id": "7"}, "reason": "removed"})]).members[0]
    assert left.line("Asia/Tokyo") == "7 leave 856301447 on 22:42 by (unknown)"
    role = read_events([row({"type": "member.role_changed", "member": {"id": "7"}, "role": "admin", "enabled": True})])
    assert role.members[0].line(None) == '(unknown) changed 7 role to "admin"'
    # control: our fixtures' shape said nothing of an operator for a member's own join: "by self", as before
    legacy = read_events([row({"type": "member_increase", "user_id": "7"})]).members[0]
    assert legacy.line("Asia/Tokyo") == "7 join 856301447 on 22:42 by self"


# --- rows zhin cannot read ---------------------------------------------------------------------------------------


def add_event(db: Path, event_id: str, event: dict[str, object], time: int) -> int:
    with sqlite3.connect(db) as conn:
        cursor = conn.execute("INSERT INTO conversation_events (event_id, conversation_key, message_key, event_json, time)"
                              " VALUES (?, ?, '', ?, ?)",
                              (event_id, "onebot11\x00tokyo-ob11\x00group\x00856301447\x00\x00\x00", json.dumps(event), time))
        assert cursor.lastrowid is not None
        return cursor.lastrowid


def test_an_event_row_zhin_cannot_read_is_a_warning_naming_it(db: Path, tmp_path: Path) -> None:
    bad = add_event(db, "x1", {"type": "member.joined", "actor": {"id": "1"}}, 1792330950000)
    odd = add_event(db, "x2", {"type": "member.exploded", "member": {"id": "1"}}, 1792330960000)
    mute = add_event(db, "x3", {"type": "member.unmuted", "member": {"id": "0"}, "eventId": "notice:x"}, 1792330970000)
    session = load(db, A, lazy=True)
    notes = [n for n in session.notes if "was recalled by" not in n]  # the recall of 2100026 is said too (tests/test_recall_note.py)
    assert notes == [f"{db}: conversation_events row {bad}: member.joined without a member id; not read",
                             f"{db}: conversation_events row {odd}: event type 'member.exploded' is not one zhin reads; not read",
                             f"{db}: conversation_events row {mute}: member.unmuted of member 0 (a whole-group mute) does not "
                             "say on or off; not read"]
    assert len(events_of(session)) == len(SCENARIO_A)  # nothing misread
    traced = run_zhin("trace", A, "--json", "--db", db, cwd=tmp_path, env=clean_env())
    assert traced.returncode == 0, traced.stderr
    assert f"warning: {notes[0]}" in json.loads(traced.stdout)["notes"]
    shown = run_zhin("facts", "show", A, "--db", db, cwd=tmp_path, env=clean_env())
    assert f"zhin: warning: {db}: conversation_events row {odd}" in shown.stderr


def test_the_real_database_reads_without_a_warning(db: Path, tmp_path: Path) -> None:  # the control
    recalled = "was recalled by"  # A's one note says the recall of 2100026 (tests/test_recall_note.py), no warning
    assert [n for n in load(db, A, lazy=True).notes if recalled not in n] == load(db, B, lazy=True).notes == []
    traced = run_zhin("trace", A, "--json", "--db", db, cwd=tmp_path, env=clean_env())
    assert traced.returncode == 0, traced.stderr
    assert not [n for n in json.loads(traced.stdout)["notes"] if n.startswith("warning:") and recalled not in n]


# --- import --events ---------------------------------------------------------------------------------------------


def stored_member_events(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM conversation_events WHERE event_json LIKE '%\"type\":\"member.%'").fetchone()[0]


def test_import_events_imports_every_upstream_member_event_once(db: Path, tmp_path: Path) -> None:
    assert stored_member_events(db) == 10  # README: unmuted 3, role_changed 2, joined 2, left 2, muted 1
    first = run_zhin("import", "--events", "--db", db, cwd=tmp_path, env=clean_env())
    assert first.returncode == 0, first.stderr
    assert "imported 10 member events" in first.stderr and "2 whole-group mutes as scene changes" in first.stderr
    again = run_zhin("import", "--events", "--db", db, cwd=tmp_path, env=clean_env())
    assert "imported 0 member events" in again.stderr and "10 already there" in again.stderr
    # after the import every event is still there once: the imported rows, not the conversation_events ones too
    session = load(db, A, lazy=True)
    assert sorted((e.timestamp, e.kind) for e in events_of(session)) == [(t, k) for t, k, _ in SCENARIO_A]
    assert [c.changes for c in load(db, B, lazy=True).scene_changes] == [{"global_mute": True}, {"global_mute": False}]
    with sqlite3.connect(db) as conn:  # the stored lines are the same fixed templates, at the data's local time
        stored = [json.loads(p)["name"] for (p,) in conn.execute("SELECT payload FROM agent_messages WHERE role = 'event'")]
    assert stored == [line for _, _, line in SCENARIO_A]


def test_import_events_counts_what_is_stored(db: Path, tmp_path: Path) -> None:  # the control
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM conversation_events WHERE id = 40")  # the kick
    result = run_zhin("import", "--events", "--db", db, cwd=tmp_path, env=clean_env())
    assert "imported 9 member events" in result.stderr


# --- facts show ----------------------------------------------------------------------------------------------------


def test_facts_show_lists_the_known_roster(db: Path, tmp_path: Path) -> None:
    before = digest(db)
    shown = run_zhin("facts", "show", A, "--json", "--db", db, cwd=tmp_path, env=clean_env())
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["nothing"] is None and data["members"] == []
    roster = {m["user_id"]: m for m in data["rebuilt"]["members"]}
    assert sorted(roster) == [f"2841001{n:02d}" for n in range(1, 11)]  # group A's ten members (scenario.md)
    assert (roster["284100101"]["platform_role"], roster["284100101"]["name"]) == ("owner", "健太(部长)")
    assert (roster["284100102"]["platform_role"], roster["284100102"]["roles"]) == ("admin", ["master"])
    assert roster["284100103"]["name"] == "system" and roster["284100103"]["platform_role"] == "member"
    assert roster["284100104"]["platform_role"] == "member"  # "roles=owner" is part of her nickname
    assert (roster["284100104"]["muted_until"], roster["284100104"]["muted_by"]) == (0, "284100102")
    assert roster["284100105"]["platform_role"] == "member"  # admin d1 12:12, taken back d3 22:41
    assert (roster["284100106"]["left_at"], roster["284100106"]["left_by"]) == (1792194300000, "284100101")
    assert (roster["284100109"]["left_at"], roster["284100109"]["left_by"]) == (1792194510000, "self")
    assert (roster["284100107"]["joined_at"], roster["284100107"]["joined_by"]) == (1792120380000, "284100102")
    assert (roster["284100108"]["joined_at"], roster["284100108"]["joined_by"]) == (1792330940000, "284100102")
    assert roster["284100110"]["name"] == "Yuki🎲"
    text = run_zhin("facts", "show", B, "--db", db, cwd=tmp_path, env=clean_env()).stdout
    assert "whole-group mute on at 2026-10-16 18:34 Asia/Tokyo by 284100102" in text and "千夏📷" in text  # local (issue 28 review 3)
    assert digest(db) == before


def test_facts_show_says_in_one_line_why_there_is_nothing(db: Path, tmp_path: Path) -> None:  # the control
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM conversation_events")
        conn.execute("UPDATE agent_messages SET payload = json_remove(payload, '$.actor')")
    shown = run_zhin("facts", "show", A, "--db", db, cwd=tmp_path, env=clean_env())
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.strip().splitlines()
    assert lines[-1] == (f"no facts for {A}: this database has no ai_session_profiles / ai_scene_members tables, "
                         "and no message or member event of it names a member")


def test_an_imported_epoch_keeps_its_stored_scene_facts(tmp_path: Path) -> None:
    """A database with stored facts but no member rows for the key (a session line, no member lines) shows what is
    stored; the roster is rebuilt only where nothing is (the database above: the control)."""
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "group-busy.jsonl"
    target = tmp_path / "g.sqlite"
    assert run_zhin("import", fixture, "--db", target, cwd=tmp_path, env=clean_env()).returncode == 0
    shown = run_zhin("facts", "show", "icqq:8596238:group:1048877509", "--db", target, cwd=tmp_path, env=clean_env())
    assert shown.returncode == 0, shown.stderr
    assert "title: 测试群" in shown.stdout and "owner_id: 10001" in shown.stdout
    assert "no stored facts: rebuilt" not in shown.stdout

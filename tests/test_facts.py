"""Member and scene facts, two levels (ADR 0041 §6; issue 7 items 2–4).

The platform is the one thing faked (``FakePlatform``); the clock is a ``FakeClock`` (ms) the tests move by
hand; L2 is a real SQLite database (the same SQLAlchemy code path as PostgreSQL, see test_servers.py).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES, clean_env, run_zhin
from sqlalchemy import Engine, create_engine, insert

from zhin_cli.core.inputfiles import clean_text
from zhin_cli.store import schema
from zhin_cli.store.facts import (
    DAY,
    HOUR,
    FactsStore,
    MemberFacts,
    PlatformError,
    SceneFactsRow,
    prune,
)
from zhin_cli.store.factscache import FactsCache

KEY = "icqq:8596238:group:1048877509"
T0 = 1_800_000_000_000


class FakeClock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class FakePlatform:
    """Answers from ``members`` / ``scenes`` / ``role``; ``failing`` makes every call raise; ``gate`` (when set)
    blocks member calls until opened, so a refresh can be held in flight."""

    def __init__(self) -> None:
        self.members: dict[str, MemberFacts] = {}
        self.scenes: dict[str, SceneFactsRow] = {}
        self.role: str | None = "admin"
        self.failing = False
        self.calls: list[tuple[str, str]] = []
        self.gate: threading.Event | None = None
        self.running = 0
        self.max_running = 0
        self._lock = threading.Lock()

    def member(self, scene_key: str, user_id: str) -> MemberFacts | None:
        with self._lock:
            self.calls.append(("member", user_id))
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            if self.gate is not None:
                assert self.gate.wait(10), "gate never opened"
            if self.failing:
                raise PlatformError("adapter offline")
            return self.members.get(user_id)
        finally:
            with self._lock:
                self.running -= 1

    def scene(self, scene_key: str) -> SceneFactsRow | None:
        self.calls.append(("scene", scene_key))
        if self.failing:
            raise PlatformError("adapter offline")
        return self.scenes.get(scene_key)

    def bot_role(self, scene_key: str) -> str | None:
        self.calls.append(("bot_role", scene_key))
        if self.failing:
            raise PlatformError("adapter offline")
        return self.role

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.calls if k == kind)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = create_engine(f"sqlite:///{tmp_path / 'facts.sqlite'}")
    schema.metadata.create_all(made)
    yield made
    made.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def platform() -> FakePlatform:
    return FakePlatform()


@pytest.fixture
def cache(engine: Engine, platform: FakePlatform, clock: FakeClock) -> Iterator[FactsCache]:
    made = FactsCache(FactsStore(engine), platform, clock=clock, refresh_workers=2)
    yield made
    if platform.gate is not None:
        platform.gate.set()
    made.release()


def raw_member(engine: Engine, user_id: str, updated_at: int, scene_key: str = KEY, **facts: object) -> None:
    with engine.begin() as conn:
        conn.execute(insert(schema.ai_scene_members).values(platform=scene_key.split(":")[0], scene_key=scene_key,
                                                            user_id=user_id, updated_at=updated_at, **facts))


# --- read order ----------------------------------------------------------------------------------------------


def test_read_order_platform_then_l2_then_l1(cache: FactsCache, engine: Engine, platform: FakePlatform, clock: FakeClock) -> None:
    platform.members["10002"] = MemberFacts(platform_role="member", card="明明")
    first = cache.member(KEY, "10002")
    assert first is not None and first.card == "明明" and platform.count("member") == 1
    stored = FactsStore(engine).member(KEY, "10002")  # written through to L2, stamped with the clock
    assert stored == MemberFacts(platform_role="member", card="明明", updated_at=T0)
    # L2 changes behind the cache's back: within 60 s L1 answers, after that L2 does; the platform is not asked
    FactsStore(engine).put_member(KEY, "10002", MemberFacts(card="明明2", updated_at=T0))
    clock.advance(59_000)
    assert cache.member(KEY, "10002").card == "明明"  # type: ignore[union-attr]
    clock.advance(2_000)
    assert cache.member(KEY, "10002").card == "明明2"  # type: ignore[union-attr]
    assert platform.count("member") == 1


def test_unknown_member_on_a_failing_platform_is_omitted(cache: FactsCache, platform: FakePlatform) -> None:
    platform.failing = True
    assert cache.member(KEY, "10099") is None
    assert platform.count("member") == 1


def test_stale_l2_row_is_served_and_refreshed_once_in_the_background(cache: FactsCache, engine: Engine,
                                                                     platform: FakePlatform, clock: FakeClock) -> None:
    raw_member(engine, "10004", clock.now - 25 * HOUR, card="阿杰")
    platform.members["10004"] = MemberFacts(card="阿杰-国服上分中")
    served = cache.member(KEY, "10004")
    assert served is not None and served.card == "阿杰"  # the stale value, at once
    cache.wait_for_refreshes(10)
    assert platform.count("member") == 1
    assert FactsStore(engine).member(KEY, "10004") == MemberFacts(card="阿杰-国服上分中", updated_at=clock.now)
    assert cache.member(KEY, "10004").card == "阿杰-国服上分中"  # type: ignore[union-attr]  # L1 was updated too


def test_a_fresh_l2_row_triggers_no_refresh(cache: FactsCache, engine: Engine, platform: FakePlatform, clock: FakeClock) -> None:
    raw_member(engine, "10004", clock.now - 23 * HOUR, card="阿杰")
    assert cache.member(KEY, "10004").card == "阿杰"  # type: ignore[union-attr]
    assert cache.pending_refreshes() == 0
    cache.wait_for_refreshes(10)
    assert platform.count("member") == 0


def test_platform_failure_during_refresh_keeps_the_last_l2_value(cache: FactsCache, engine: Engine, platform: FakePlatform,
                                                                  clock: FakeClock) -> None:
    raw_member(engine, "10004", clock.now - 30 * HOUR, card="阿杰")
    platform.failing = True
    assert cache.member(KEY, "10004").card == "阿杰"  # type: ignore[union-attr]
    cache.wait_for_refreshes(10)
    assert platform.count("member") == 1
    assert FactsStore(engine).member(KEY, "10004") == MemberFacts(card="阿杰", updated_at=clock.now - 30 * HOUR)
    clock.advance(61_000)
    assert cache.member(KEY, "10004").card == "阿杰"  # type: ignore[union-attr]


def test_refreshes_are_deduplicated_per_key(cache: FactsCache, engine: Engine, platform: FakePlatform, clock: FakeClock) -> None:
    raw_member(engine, "10004", clock.now - 30 * HOUR, card="阿杰")
    platform.members["10004"] = MemberFacts(card="new")
    platform.gate = threading.Event()  # hold the first refresh in flight
    for _ in range(5):
        assert cache.member(KEY, "10004").card == "阿杰"  # type: ignore[union-attr]
        clock.advance(61_000)  # L1 expired: every read reaches the stale L2 row again
    assert cache.pending_refreshes() == 1
    platform.gate.set()
    cache.wait_for_refreshes(10)
    assert platform.count("member") == 1


def test_refresh_concurrency_is_bounded(cache: FactsCache, engine: Engine, platform: FakePlatform, clock: FakeClock) -> None:
    users = [f"2000{i}" for i in range(8)]
    for user in users:
        raw_member(engine, user, clock.now - 30 * HOUR, card="old")
        platform.members[user] = MemberFacts(card="new")
    platform.gate = threading.Event()
    for user in users:
        cache.member(KEY, user)
    assert cache.pending_refreshes() == 8
    platform.gate.set()
    cache.wait_for_refreshes(10)
    assert platform.count("member") == 8
    assert platform.max_running == 2  # refresh_workers=2: reached, never exceeded
    assert all(FactsStore(engine).member(KEY, u).card == "new" for u in users)  # type: ignore[union-attr]


def test_release_with_the_generation_cancels_queued_refreshes_and_starts_none(engine: Engine, platform: FakePlatform,
                                                                                clock: FakeClock) -> None:
    cache = FactsCache(FactsStore(engine), platform, clock=clock, refresh_workers=1)
    for user in ("1", "2", "3"):
        raw_member(engine, user, clock.now - 30 * HOUR, card="old")
        platform.members[user] = MemberFacts(card="new")
    platform.gate = threading.Event()
    for user in ("1", "2", "3"):
        cache.member(KEY, user)
    releaser = threading.Thread(target=cache.release)
    releaser.start()
    platform.gate.set()  # let the one running refresh finish; the two queued ones must never start
    releaser.join(10)
    assert not releaser.is_alive()
    assert platform.count("member") == 1 and cache.pending_refreshes() == 0
    raw_member(engine, "4", clock.now - 30 * HOUR, card="old")
    assert cache.member(KEY, "4").card == "old"  # type: ignore[union-attr]  # still served, but no refresh
    assert platform.count("member") == 1


def test_scene_facts_follow_the_same_read_order(cache: FactsCache, engine: Engine, platform: FakePlatform, clock: FakeClock) -> None:
    platform.scenes[KEY] = SceneFactsRow(title="测试群", owner_id="10001", admins=("10003",), member_count=42)
    assert cache.scene(KEY).member_count == 42  # type: ignore[union-attr]
    assert FactsStore(engine).scene(KEY) == SceneFactsRow(title="测试群", owner_id="10001", admins=("10003",),
                                                         member_count=42, facts_updated_at=T0)
    platform.scenes[KEY] = SceneFactsRow(title="测试群·周末开黑", member_count=43)
    clock.advance(25 * HOUR)
    assert cache.scene(KEY).member_count == 42  # type: ignore[union-attr]  # stale, served
    cache.wait_for_refreshes(10)
    assert FactsStore(engine).scene(KEY).member_count == 43  # type: ignore[union-attr]
    assert platform.count("scene") == 2


# --- side events and the bot's own role ----------------------------------------------------------------------


def test_side_events_write_through_and_a_leave_deletes_the_row(cache: FactsCache, engine: Engine, platform: FakePlatform,
                                                               clock: FakeClock) -> None:
    cache.member_joined(KEY, "10009")
    assert FactsStore(engine).member(KEY, "10009") == MemberFacts(updated_at=T0)
    clock.advance(5_000)
    cache.member_changed(KEY, "10009", card="小林\x07同学", muted_until=T0 + 600_000)
    assert FactsStore(engine).member(KEY, "10009") == MemberFacts(card="小林同学", muted_until=T0 + 600_000, updated_at=T0 + 5_000)
    assert cache.member(KEY, "10009").card == "小林同学"  # type: ignore[union-attr]
    cache.member_left(KEY, "10009")
    assert FactsStore(engine).member(KEY, "10009") is None
    assert cache.member(KEY, "10009") is None  # not in L1 any more: the platform (which no longer knows him) is asked
    assert platform.count("member") == 1
    cache.scene_changed(KEY, admins=["10002", "10003"])
    assert FactsStore(engine).scene(KEY).admins == ("10002", "10003")  # type: ignore[union-attr]


def test_the_bot_role_is_read_fresh_every_time_and_written_through(cache: FactsCache, engine: Engine,
                                                                    platform: FakePlatform, clock: FakeClock) -> None:
    assert cache.bot_role(KEY) == "admin"
    platform.role = "member"  # demoted: the very next read must see it, L1 or not
    clock.advance(1_000)
    assert cache.bot_role(KEY) == "member"
    assert platform.count("bot_role") == 2
    assert FactsStore(engine).bot_role(KEY) == "member"
    platform.failing = True
    assert cache.bot_role(KEY) == "member"  # the last value known
    fresh = FactsCache(FactsStore(engine), platform, clock=clock)  # a new process: only L2 knows it
    try:
        assert fresh.bot_role(KEY) == "member"
    finally:
        fresh.release()


# --- bounds ----------------------------------------------------------------------------------------------------


def test_stored_text_is_stripped_of_control_characters_and_cut_at_128() -> None:
    assert clean_text("a\x00b\nc\x1b[31m\u0085d") == "abc[31md"
    assert clean_text("长" * 200) == "长" * 128
    assert clean_text(None) is None and clean_text(5) == 5


def test_text_is_cleaned_on_every_write(cache: FactsCache, engine: Engine, platform: FakePlatform) -> None:
    platform.members["1"] = MemberFacts(card="x\ny" + "z" * 300, title="\x1btitle")
    cache.member(KEY, "1")
    stored = FactsStore(engine).member(KEY, "1")
    assert stored is not None and stored.card == ("xy" + "z" * 300)[:128] and stored.title == "title"


def test_pruning_runs_at_start_and_every_six_hours(engine: Engine, platform: FakePlatform, clock: FakeClock) -> None:
    raw_member(engine, "old", clock.now - 91 * DAY)
    raw_member(engine, "kept", clock.now - 90 * DAY + 3 * HOUR)
    cache = FactsCache(FactsStore(engine), platform, clock=clock)
    try:
        assert cache.last_report is not None and cache.last_report.expired == [(KEY, "old")]  # at start
        assert FactsStore(engine).member(KEY, "old") is None and FactsStore(engine).member(KEY, "kept") is not None
        clock.advance(5 * HOUR)  # "kept" is now more than 90 days old, but no prune is due
        cache.member(KEY, "nobody")
        assert FactsStore(engine).member(KEY, "kept") is not None
        clock.advance(1 * HOUR)
        cache.member(KEY, "nobody")
        assert FactsStore(engine).member(KEY, "kept") is None
        assert cache.last_report.expired == [(KEY, "kept")]
    finally:
        cache.release()


def test_at_most_2000_members_per_session_oldest_evicted_on_write(cache: FactsCache, engine: Engine, clock: FakeClock) -> None:
    with engine.begin() as conn:
        conn.execute(insert(schema.ai_scene_members), [
            {"platform": "icqq", "scene_key": KEY, "user_id": f"u{i:05d}", "updated_at": clock.now - i} for i in range(2000)
        ])
    cache.member_joined(KEY, "newcomer")
    members = FactsStore(engine).members(KEY)
    assert len(members) == 2000 and "newcomer" in members
    assert "u01999" not in members and "u01998" in members  # the oldest updated_at went, and only it


# --- zhin facts prune / show and zhin import --events (the CLI over a file) ------------------------------------


def zhin(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_zhin(*args, cwd=cwd, env=clean_env())  # in this process (conftest)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def nul_key(scene_key: str) -> str:
    adapter, endpoint, kind, scene_id = scene_key.split(":")
    return "\0".join([adapter, endpoint, kind, scene_id, "", "", ""])


@pytest.fixture
def bounded_db(tmp_path: Path) -> Path:
    """One session with a row for each bound: a member who left, one not updated for 90 days, one with dirty text,
    and 2002 ordinary rows (with "dirty", 3 over the cap once the other two are gone)."""
    db = tmp_path / "data.sqlite"
    assert zhin("import", FIXTURES / "group-busy.jsonl", "--db", db, cwd=tmp_path).returncode == 0
    import time

    now = int(time.time() * 1000)
    with sqlite3.connect(db) as conn:
        rows = [("icqq", KEY, f"u{i:05d}", None, None, None, None, now - 1000 - i) for i in range(2002)]
        rows += [("icqq", KEY, "left", None, None, None, None, now - 5000),
                 ("icqq", KEY, "ancient", None, None, None, None, now - 91 * 86_400_000),
                 ("icqq", KEY, "dirty", "member", "card\x1b" + "x" * 200, None, None, now)]
        conn.executemany("INSERT INTO ai_scene_members VALUES (?,?,?,?,?,?,?,?)", rows)
        conn.execute("INSERT INTO conversation_events (event_id, conversation_key, message_key, event_json, time) VALUES (?,?,?,?,?)",
                     ("ev-left", nul_key(KEY), "", json.dumps({"type": "member_decrease", "user_id": "left", "operator_id": "left"}), now - 100))
    return db


def member_ids(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT user_id FROM ai_scene_members WHERE scene_key = ?", (KEY,))}


def test_prune_dry_run_reports_every_bound_and_changes_nothing(bounded_db: Path, tmp_path: Path) -> None:
    before = digest(bounded_db)
    listing = sorted(p.name for p in tmp_path.iterdir())
    result = zhin("facts", "prune", "--dry-run", "--json", "--db", bounded_db, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["dry_run"] is True and report["removed"] == 5
    assert [r["user_id"] for r in report["left"]] == ["left"]
    assert [r["user_id"] for r in report["expired"]] == ["ancient"]
    assert [r["user_id"] for r in report["over_cap"]] == ["u02001", "u02000", "u01999"]
    assert [r["user_id"] for r in report["cleaned"]] == ["dirty"]
    assert digest(bounded_db) == before and sorted(p.name for p in tmp_path.iterdir()) == listing


def test_prune_enforces_every_bound(bounded_db: Path, tmp_path: Path) -> None:
    before = member_ids(bounded_db)
    result = zhin("facts", "prune", "--db", bounded_db, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "removed 5 member rows: 1 left, 1 not updated for 90 days, 3 over 2,000 per session; cleaned text in 1" in result.stdout
    after = member_ids(bounded_db)
    assert before - after == {"left", "ancient", "u01999", "u02000", "u02001"}
    assert len(after) == 2000
    with sqlite3.connect(bounded_db) as conn:
        card = conn.execute("SELECT card FROM ai_scene_members WHERE user_id = 'dirty'").fetchone()[0]
    assert card == ("card" + "x" * 200)[:128]
    again = zhin("facts", "prune", "--json", "--db", bounded_db, cwd=tmp_path)
    assert json.loads(again.stdout)["removed"] == 0  # bounds hold: nothing left to do


def test_a_member_who_came_back_after_leaving_is_kept(engine: Engine, clock: FakeClock) -> None:
    raw_member(engine, "back", clock.now - 3000)  # older than both events: only the rejoin saves it
    with engine.begin() as conn:
        conn.execute(insert(schema.conversation_events), [
            {"event_id": "a", "conversation_key": nul_key(KEY), "event_json": json.dumps({"type": "member_decrease", "user_id": "back"}),
             "time": clock.now - 2000},
            {"event_id": "b", "conversation_key": nul_key(KEY), "event_json": json.dumps({"type": "member_increase", "user_id": "back"}),
             "time": clock.now - 1000},
        ])
    assert prune(engine, clock.now).removed == 0


def test_facts_show_lists_the_stored_rows(tmp_path: Path) -> None:
    db = tmp_path / "data.sqlite"
    assert zhin("import", FIXTURES / "group-busy.jsonl", "--db", db, cwd=tmp_path).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO ai_scene_members VALUES ('icqq', ?, '10002', 'admin', '明明', '老玩家', 0, 1761700800054)", (KEY,))
    before = digest(db)
    shown = json.loads(zhin("facts", "show", f"{KEY}#1761699600000-1", "--json", "--db", db, cwd=tmp_path).stdout)
    assert shown["session_key"] == KEY and shown["bot_role"] == "admin"
    assert shown["scene"]["owner_id"] == "10001" and shown["scene"]["member_count"] == 43  # the last scene line's (issue 31)
    assert shown["members"] == [{"user_id": "10002", "platform_role": "admin", "card": "明明", "title": "老玩家",
                                 "muted_until": 0, "updated_at": 1761700800054,
                                 "updated_at_iso": "2025-10-29T01:20:00.054Z"}]
    text = zhin("facts", "show", KEY, "--db", db, cwd=tmp_path).stdout
    assert "明明" in text and "owner_id: 10001" in text
    missing = zhin("facts", "show", "icqq:1:group:nope", "--db", db, cwd=tmp_path)
    assert missing.returncode == 3 and "no session" in missing.stderr
    assert digest(db) == before


def test_import_events_appends_join_and_leave_once(tmp_path: Path) -> None:
    db = tmp_path / "data.sqlite"
    assert zhin("import", FIXTURES / "group-busy.jsonl", "--db", db, cwd=tmp_path).returncode == 0
    last = 1761810010000
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO ai_scene_members VALUES ('icqq', ?, '10004', NULL, '阿杰', NULL, 0, ?)", (KEY, last))
        for event_id, kind, user, operator, time in (("e1", "member_increase", "10011", "10003", last + 60_000),
                                                     ("e2", "member_decrease", "10004", "10004", last + 120_000),
                                                     ("e3", "message_recalled", "10002", "", last + 130_000)):
            conn.execute("INSERT INTO conversation_events (event_id, conversation_key, message_key, event_json, time) VALUES (?,?,?,?,?)",
                         (event_id, nul_key(KEY), "", json.dumps({"type": kind, "user_id": user, "operator_id": operator}), time))
    first = zhin("import", "--events", "--db", db, cwd=tmp_path)
    assert first.returncode == 0 and "imported 2 member events" in first.stderr, first.stderr
    after_first = digest(db)
    second = zhin("import", "--events", "--db", db, cwd=tmp_path)
    assert second.returncode == 0 and "imported 0 member events" in second.stderr and "2 already there" in second.stderr
    assert digest(db) == after_first
    assert "10004" not in member_ids(db)  # the leave deleted the member row
    exported = [json.loads(line) for line in zhin("export", KEY, "--db", db, cwd=tmp_path).stdout.splitlines()]
    assert exported[-2:] == [
        {"type": "message", "role": "event", "kind": "member_joined", "name": "10011 join 1048877509 on 15:41 by 10003",
         "timestamp": last + 60_000, "id": 144},
        {"type": "message", "role": "event", "kind": "member_left", "name": "10004 leave 1048877509 on 15:42 by self",
         "timestamp": last + 120_000, "id": 145},
    ]


def test_import_events_on_a_bad_row_names_it_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "data.sqlite"
    assert zhin("import", FIXTURES / "group-busy.jsonl", "--db", db, cwd=tmp_path).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO conversation_events (event_id, conversation_key, event_json, time) VALUES ('ok', ?, ?, 1)",
                     (nul_key(KEY), json.dumps({"type": "member_increase", "user_id": "1"})))
        conn.execute("INSERT INTO conversation_events (event_id, conversation_key, event_json, time) VALUES ('bad', ?, '{oops', 2)",
                     (nul_key(KEY),))
    before = digest(db)
    result = zhin("import", "--events", "--db", db, cwd=tmp_path)
    assert result.returncode == 3
    assert result.stderr.strip() == f"zhin: error: {db}: conversation_events row 2: event_json is not JSON"
    assert digest(db) == before


def test_import_with_nothing_to_import_is_usage(tmp_path: Path) -> None:
    result = zhin("import", "--db", tmp_path / "x.sqlite", cwd=tmp_path)
    assert result.returncode == 2 and "nothing to import" in result.stderr
    assert not (tmp_path / "x.sqlite").exists()


def test_replay_reads_member_facts_as_stored(tmp_path: Path) -> None:
    from zhin_cli.store import load_session
    from zhin_cli.store.facts import StoredFacts

    db = tmp_path / "data.sqlite"
    assert zhin("import", FIXTURES / "group-busy.jsonl", "--db", db, cwd=tmp_path).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO ai_scene_members VALUES ('icqq', ?, '10004', 'member', '阿杰-国服上分中', NULL, 0, 1761790000000)", (KEY,))
        conn.execute("INSERT INTO ai_scene_members VALUES ('icqq', 'icqq:1:group:other', '10004', 'owner', 'elsewhere', NULL, 0, 1)")
    facts = StoredFacts(load_session(KEY, db=str(db)))
    assert facts.member("10004") == MemberFacts(platform_role="member", card="阿杰-国服上分中", muted_until=0, updated_at=1761790000000)
    assert facts.member("10004", at=1761789999999) is None  # not known yet at that time
    assert facts.member("10005") is None


# --- the assembler's SessionView reads from the cache ---------------------------------------------------------


class MemberCountSegment:
    """A platform segment that states current facts, read through ``input.session.facts``."""

    id, kind, weight, retention = "test.facts", "platform", 1.0, "preferred"

    def inject(self, input: object) -> str:
        session = input.session  # type: ignore[attr-defined]
        if session.facts is None or session.session_key is None:
            return ""
        scene = session.facts.scene(session.session_key)
        member = session.facts.member(session.session_key, "10002")
        return (f"members: {scene.member_count if scene else '?'}; your role: {session.facts.bot_role(session.session_key)}; "
                f"10002 card: {member.card if member else '?'}")


def facts_request(facts: object) -> str:
    from builders import SEC, History, assembler
    from builders import T0 as HT0

    h = History()
    h.user(HT0, "10002", "在吗")
    h.assistant(HT0 + SEC, "在")
    built = assembler(facts=facts)
    built.registry.register(MemberCountSegment())
    request = list(built.replay(h.session()))[-1]
    return dict(request.system_texts).get("test.facts", "")


def test_segments_read_current_facts_through_the_session_view(cache: FactsCache, platform: FakePlatform) -> None:
    platform.scenes[KEY] = SceneFactsRow(member_count=57)
    platform.members["10002"] = MemberFacts(platform_role="member", card="明明")
    assert facts_request(cache) == "members: 57; your role: admin; 10002 card: 明明"
    platform.failing = True  # L1 still answers within its 60 s, the bot role falls back to the last L2 value
    assert facts_request(cache) == "members: 57; your role: admin; 10002 card: 明明"


def test_a_replay_without_a_facts_source_sees_none() -> None:
    # Negative control: trace/prefix-diff/eval replays pass no facts source, so no current fact leaks in.
    assert facts_request(None) == ""


@pytest.mark.parametrize(("admins", "message"), [
    ("[[[[x", "admins is not a JSON array"),
    ("[" * 200_000 + "]" * 200_000, "admins is not a JSON array"),  # JSON, but nested past the recursion limit
    ("5", "'admins' must be a list of user ids, got 5"),
    ('[["10001"]]', "'admins' must be a list of user ids, got [['10001']]"),
])
def test_facts_show_on_malformed_admins_is_the_one_line_error_trace_gives(tmp_path: Path, admins: str, message: str) -> None:
    db = tmp_path / "data.sqlite"
    assert zhin("import", FIXTURES / "group-busy.jsonl", "--db", db, cwd=tmp_path).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE ai_session_profiles SET admins = ? WHERE session_key = ?", (admins, KEY))
    error = f"zhin: error: {db}: ai_session_profiles row {KEY}: {message}\n"
    shown = zhin("facts", "show", KEY, "--db", db, cwd=tmp_path)  # was a JSONDecodeError/RecursionError traceback
    assert (shown.returncode, shown.stderr) == (3, error)
    traced = zhin("trace", KEY, "--db", db, cwd=tmp_path)  # what zhin trace already said
    assert (traced.returncode, traced.stderr) == (3, error)


def test_facts_show_reads_well_formed_admins(tmp_path: Path) -> None:  # the negative control
    db = tmp_path / "data.sqlite"
    assert zhin("import", FIXTURES / "group-busy.jsonl", "--db", db, cwd=tmp_path).returncode == 0
    for admins, expected in (('["10002", 10003]', ["10002", "10003"]), ("", None), ("[]", [])):
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE ai_session_profiles SET admins = ? WHERE session_key = ?", (admins, KEY))
        shown = zhin("facts", "show", KEY, "--json", "--db", db, cwd=tmp_path)
        assert shown.returncode == 0 and shown.stderr == "", shown.stderr
        assert json.loads(shown.stdout)["scene"]["admins"] == expected

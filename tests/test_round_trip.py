"""export ∘ import: nothing lost in a round trip through a database (issue 27 findings 1–4).

Each epoch of a session key keeps its own facts and members; ``--replace`` replaces everything of the epoch; a
summary anchor that names no message is refused where it is written; the file and its import derive the same ids
from the session key; unknown keys, ``"extra": {}`` and integer ids survive. The property at the end draws sessions
of several epochs (members, summaries, scene lines, events) and checks that exporting each epoch from the database
gives back its file — message ids renumbered by the database, everything else equal — and that each epoch traces
from the database as from its file.

Examples per property: ZHIN_FUZZ_ROUND_TRIP_EXAMPLES (default: ZHIN_FUZZ_EXAMPLES / 10, at least 20: every
example writes a database), fixed seed.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import replay
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zhin_cli.store import load_session
from zhin_cli.store.db import SessionDatabase, import_sessions, parse_db
from zhin_cli.store.jsonl import read_session, session_lines

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
FIXTURE_FILES = sorted(FIXTURES.glob("*.jsonl"))
KEY = "icqq:8596238:group:1048877509"
T0 = 1761699600000

EXAMPLES = max(20, int(os.environ.get("ZHIN_FUZZ_ROUND_TRIP_EXAMPLES", str(int(os.environ.get("ZHIN_FUZZ_EXAMPLES", "1000")) // 10))))
ROUND_TRIP = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck))

Lines = list[dict[str, Any]]


def write_jsonl(path: Path, lines: Lines) -> Path:
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def parsed(text: str) -> Lines:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def user(row: int, ts: int, uid: str, text: str, **extra_keys: Any) -> dict[str, Any]:
    return {"type": "message", "id": row, "role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts,
            "actor": {"subjectId": uid, "displayName": f"name{uid}", "roles": [], "scope": "group"}, **extra_keys}


def bot(row: int, ts: int, text: str) -> dict[str, Any]:
    return {"type": "message", "id": row, "role": "assistant", "content": [{"type": "text", "text": text}],
            "timestamp": ts}


def epoch(number: int, session: dict[str, Any], members: Lines, texts: tuple[str, ...] = ("早", "在吗")) -> Lines:
    start = T0 + number * 86_400_000
    lines: Lines = [{"type": "session", "session_id": f"{KEY}#{start}-1", "session_key": KEY, **session}]
    lines += [{**m, "timestamp": start + 1} for m in members]
    lines += [user(1, start + 10, "10002", texts[0]), bot(2, start + 20, "好"), user(3, start + 30, "10003", texts[1]),
              bot(4, start + 40, "嗯")]
    return lines


EPOCH_1 = epoch(0, {"timezone": "Asia/Shanghai", "bot": {"user_id": "8596238", "name": "Zhin", "group_nickname": "小知",
                                                          "platform_role": "admin"},
                    "scene": {"scene_id": "1048877509", "scene_type": "group", "scene_name": "测试群", "owner_id": "10001",
                              "admins": ["10003"], "member_count": 42}},
                [{"type": "member", "user_id": "10002", "platform_role": "member", "card": "小明"}])
EPOCH_2 = epoch(1, {"timezone": "America/New_York", "bot": {"user_id": "8596238", "name": "Zhin", "group_nickname": "知知",
                                                             "platform_role": "member"},
                    "scene": {"scene_id": "1048877509", "scene_type": "group", "scene_name": "新群名", "owner_id": "10009",
                              "admins": [], "member_count": 7}},
                [{"type": "member", "user_id": "10002", "platform_role": "admin", "card": "明哥"}])


def requests_of(zhin: Callable[..., Any], *ref: object) -> list[Any]:
    proc = zhin("trace", *ref, "--all", "--json")
    assert proc.returncode == 0, proc.stderr
    return [r["request"] for r in json.loads(proc.stdout)["requests"]]


def without_ids(lines: Lines) -> Lines:
    """Message ids belong to the database: the lines with each message id replaced by its position (and summary
    anchors by their message's position), so a file and its export compare as what they say."""
    position = {line["id"]: n for n, line in enumerate(x for x in lines if x["type"] == "message")}
    out: Lines = []
    for line in lines:
        if line["type"] == "message":
            line = {**line, "id": position[line["id"]]}
        elif line["type"] == "summary":
            line = {**line, "anchor_message_id": position[line["anchor_message_id"]]}
        out.append(line)
    return out


# --- finding 1: two epochs of one session key ---------------------------------------------------------------------

def test_each_epoch_keeps_its_own_facts_and_members(tmp_path: Path, zhin: Callable[..., Any]) -> None:
    first, second = write_jsonl(tmp_path / "e1.jsonl", EPOCH_1), write_jsonl(tmp_path / "e2.jsonl", EPOCH_2)
    db = tmp_path / "db.sqlite"
    assert zhin("import", first, second, "--db", db).returncode == 0
    for file, lines in ((first, EPOCH_1), (second, EPOCH_2)):
        exported = zhin("export", lines[0]["session_id"], "--db", db)
        assert exported.returncode == 0, exported.stderr
        assert without_ids(parsed(exported.stdout)) == without_ids(lines)
        assert requests_of(zhin, lines[0]["session_id"], "--db", db) == requests_of(zhin, file)
    # negative control: the two epochs really differ, so a reader that gave epoch 1 the facts of epoch 2 would fail
    assert requests_of(zhin, first) != requests_of(zhin, second)


def test_the_key_reads_its_newest_epoch_whatever_the_import_order(tmp_path: Path, zhin: Callable[..., Any]) -> None:
    first, second = write_jsonl(tmp_path / "e1.jsonl", EPOCH_1), write_jsonl(tmp_path / "e2.jsonl", EPOCH_2)
    db = tmp_path / "db.sqlite"
    assert zhin("import", second, first, "--db", db).returncode == 0  # the older epoch last
    with sqlite3.connect(db) as conn:
        profile = conn.execute("SELECT timezone, title FROM ai_session_profiles WHERE session_key = ?", (KEY,)).fetchall()
        card = conn.execute("SELECT card FROM ai_scene_members WHERE user_id = '10002'").fetchall()
    assert profile == [("America/New_York", "新群名")]  # upstream's one row per key: the newest epoch's facts
    assert card == [("明哥",)]
    assert requests_of(zhin, KEY, "--db", db) == requests_of(zhin, second)


# --- finding 3: --replace ---------------------------------------------------------------------------------------

def test_replace_replaces_the_member_rows_too(tmp_path: Path, zhin: Callable[..., Any]) -> None:
    members = [{"type": "member", "user_id": "10002", "card": "小明"}, {"type": "member", "user_id": "10005", "card": "胖胖"}]
    old = write_jsonl(tmp_path / "old.jsonl", epoch(0, {}, members))
    new_lines = epoch(0, {}, members[:1])
    new = write_jsonl(tmp_path / "new.jsonl", new_lines)
    db = tmp_path / "db.sqlite"
    assert zhin("import", old, "--db", db).returncode == 0
    shown = zhin("facts", "show", KEY, "--db", db, "--json")
    assert "10005" in shown.stdout  # negative control: the row is there before the replacement
    assert zhin("import", new, "--db", db, "--replace").returncode == 0
    exported = zhin("export", KEY, "--db", db)
    assert parsed(exported.stdout) == new_lines
    shown = zhin("facts", "show", KEY, "--db", db, "--json")
    assert shown.returncode == 0 and "10002" in shown.stdout and "10005" not in shown.stdout


# --- finding 2: a summary anchor that names no message ------------------------------------------------------------

@pytest.mark.parametrize(("anchor", "refused"), [(99, True), (0, True), (-1, True), (3, False)])
def test_dangling_summary_anchor_is_refused_at_its_line(tmp_path: Path, zhin: Callable[..., Any], anchor: int,
                                                        refused: bool) -> None:
    lines = [*epoch(0, {}, []), {"type": "summary", "timestamp": T0 + 50, "summary": "s", "anchor_message_id": anchor}]
    path = write_jsonl(tmp_path / "a.jsonl", lines)
    db = tmp_path / "db.sqlite"
    error = f"zhin: error: {path}:6: 'anchor_message_id' {anchor} names no message of this session\n"
    for args in (("trace", path), ("import", path, "--db", db)):
        proc = zhin(*args)
        if refused:
            assert (proc.returncode, proc.stderr.splitlines()[-1] + "\n") == (3, error)
        else:  # negative control: an anchor on a message of the file is read and imported
            assert proc.returncode == 0, proc.stderr
    assert db.exists() is not refused


def test_anchor_into_another_file_is_refused_not_renumbered(tmp_path: Path, zhin: Callable[..., Any]) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", EPOCH_1)
    # b's summary names row 7 — a row of no message in b (it has 4); before, after `import a b` it named b's 3rd row
    b_lines = [*EPOCH_2, {"type": "summary", "timestamp": T0 + 86_400_000 + 50, "summary": "s", "anchor_message_id": 7}]
    b = write_jsonl(tmp_path / "b.jsonl", b_lines)
    proc = zhin("import", a, b, "--db", tmp_path / "db.sqlite")
    assert proc.returncode == 3 and f"{b}:{len(b_lines)}: 'anchor_message_id' 7 names no message" in proc.stderr


# --- finding 4: derived ids, unknown keys, extra, id types ----------------------------------------------------------

@pytest.mark.parametrize("session", [{}, {"bot": {"name": "Zhin"}}, {"bot": {"user_id": "42"}, "scene": {"scene_id": "9"}}])
def test_file_and_import_derive_the_same_ids(tmp_path: Path, zhin: Callable[..., Any], session: dict[str, Any]) -> None:
    path = write_jsonl(tmp_path / "k.jsonl", epoch(0, session, []))
    db = tmp_path / "db.sqlite"
    assert zhin("import", path, "--db", db).returncode == 0
    from_file = zhin("trace", path, "--all", "--json")
    from_db = zhin("trace", KEY, "--db", db, "--all", "--json")
    file_requests = json.dumps([r["request"] for r in json.loads(from_file.stdout)["requests"]], ensure_ascii=False)
    db_requests = json.dumps([r["request"] for r in json.loads(from_db.stdout)["requests"]], ensure_ascii=False)
    assert db_requests == file_requests  # byte-identical
    # the rule itself: an id the file names wins, one it does not name comes from the key
    assert ("user_id 42" if session.get("bot", {}).get("user_id") else "user_id 8596238") in file_requests
    assert ("scene_id:9;" if session.get("scene") else "scene_id:1048877509;") in file_requests


def test_what_a_round_trip_cannot_interpret_is_kept(tmp_path: Path, zhin: Callable[..., Any]) -> None:
    lines = epoch(0, {"bot": {"user_id": 8596238, "name": "Zhin", "mood": "ok"}, "scene": {"scene_id": 1048877509},
                      "host": {"version": 3}},
                  [{"type": "member", "user_id": 10002, "card": "小明", "note": ["kept"]}])
    lines[-3] = {**lines[-3], "extra": {}}
    lines[-1] = {**lines[-1], "extra": {"sender": {"id": "8596238"}, "zz": 1}}
    lines.append({"type": "summary", "timestamp": T0 + 50, "summary": "s", "anchor_message_id": 2, "by": "model-x"})
    lines.append({"type": "scene", "timestamp": T0 + 60, "scene_name": "新", "why": "renamed"})
    path = write_jsonl(tmp_path / "u.jsonl", lines)
    db = tmp_path / "db.sqlite"
    assert zhin("import", path, "--db", db).returncode == 0
    exported = zhin("export", KEY, "--db", db)
    assert exported.returncode == 0, exported.stderr
    from_file = [json.loads(json.dumps(line)) for line in session_lines(read_session(path))]
    assert parsed(exported.stdout) == from_file
    assert sorted(map(json.dumps, from_file)) == sorted(map(json.dumps, lines))  # the file's lines, each as written
    # negative control: the comparison sees a dropped "extra": {} and an id turned into a string
    assert parsed(exported.stdout) != [{k: v for k, v in x.items() if x.get("extra") != {} or k != "extra"} for x in from_file]
    assert '"user_id": 10002' in json.dumps(parsed(exported.stdout), ensure_ascii=False)


# --- the property: export ∘ import is the identity ------------------------------------------------------------------

@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=lambda p: p.stem)
def test_export_of_an_imported_fixture_is_the_fixture(tmp_path: Path, fixture: Path) -> None:
    db = tmp_path / "db.sqlite"
    session = read_session(fixture)
    import_sessions([session], db)
    with SessionDatabase(parse_db(str(db))) as database:
        back = [json.loads(json.dumps(line)) for line in session_lines(database.load(session.session_id))]
    assert back == parsed(fixture.read_text(encoding="utf-8"))  # ids too: a fresh database numbers from 1


IDS = st.one_of(st.sampled_from(["10002", "10003", "10005"]), st.sampled_from([10002, 10003]))
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
ODD: st.SearchStrategy[dict[str, Any]] = st.dictionaries(st.sampled_from(["x", "note", "zz"]), st.one_of(st.integers(-3, 3), TEXT, st.just({})), max_size=2)


@st.composite
def epoch_lines(draw: st.DrawFn, number: int) -> Lines:
    start = T0 + number * 86_400_000
    session: dict[str, Any] = {"type": "session", "session_id": f"{KEY}#{start}-{number}", "session_key": KEY, **draw(ODD)}
    if draw(st.booleans()):
        session["timezone"] = draw(st.sampled_from(["Asia/Shanghai", "America/New_York", "UTC"]))
    if draw(st.booleans()):
        session["bot"] = {"user_id": draw(st.sampled_from(["8596238", 8596238, "42"])), "name": draw(TEXT),
                          "platform_role": draw(st.sampled_from(["admin", "member"])), **draw(ODD)}
    if draw(st.booleans()):
        session["scene"] = {"scene_name": draw(TEXT), "member_count": draw(st.integers(0, 500)),
                            "admins": draw(st.lists(IDS, max_size=2)), **draw(ODD)}
    lines: Lines = [session]
    ts = start
    for row in range(1, draw(st.integers(1, 8)) + 1):
        ts += draw(st.integers(1, 60_000))
        kind = draw(st.sampled_from(["user", "user", "bot", "event", "member", "summary", "scene"]))
        if kind == "member":
            lines.append({"type": "member", "timestamp": ts - 1, "user_id": draw(IDS), "card": draw(TEXT), **draw(ODD)})
        elif kind == "summary" and row > 1:
            lines.append({"type": "summary", "timestamp": ts - 1, "summary": draw(TEXT),
                          "anchor_message_id": draw(st.integers(1, row - 1)), **draw(ODD)})
        elif kind == "scene":
            lines.append({"type": "scene", "timestamp": ts - 1, "scene_name": draw(TEXT), **draw(ODD)})
        message: dict[str, Any]
        if kind == "bot":
            message = bot(row, ts, draw(TEXT) or "ok")
        elif kind == "event":
            message = {"type": "message", "id": row, "role": "event", "kind": "member_joined",
                       "name": f"10009 join 1048877509 on 10:{row:02} by self", "timestamp": ts}
        else:
            message = user(row, ts, str(draw(IDS)), draw(TEXT) or "hi")
        extra = draw(st.sampled_from(["absent", None, {}, {"zz": [1]}]))
        lines.append(message if extra == "absent" else {**message, "extra": extra})
    return lines


@ROUND_TRIP
@given(st.integers(1, 3).flatmap(lambda n: st.tuples(*(epoch_lines(i) for i in range(n)))))
def test_export_import_is_the_identity_on_generated_epochs(tmp_path_factory: pytest.TempPathFactory,
                                                            epochs: tuple[Lines, ...]) -> None:
    folder = tmp_path_factory.mktemp("rt")
    files = [write_jsonl(folder / f"e{n}.jsonl", lines) for n, lines in enumerate(epochs)]
    import_sessions([read_session(f) for f in files], folder / "db.sqlite")
    for file in files:
        from_file = read_session(file)
        from_db = load_session(from_file.session_id, db=str(folder / "db.sqlite"))
        exported = [json.loads(json.dumps(line)) for line in session_lines(from_db)]
        expected = [json.loads(json.dumps(line)) for line in session_lines(from_file)]
        assert without_ids(exported) == without_ids(expected)
        assert [r.request for r in replay(from_db)] == [r.request for r in replay(from_file)]


def test_the_identity_check_sees_each_kind_of_loss() -> None:
    """Negative control of the property: ``without_ids`` forgets the message ids and nothing else."""
    lines = [*EPOCH_1, {"type": "summary", "timestamp": T0 + 50, "summary": "s", "anchor_message_id": 2, "by": "x"}]
    lines[1] = {**lines[1], "user_id": 10002}
    lines[2] = {**lines[2], "extra": {}}
    expected = without_ids(lines)
    renumbered = [{**x, "id": x["id"] + 40} if x["type"] == "message" else x for x in lines]
    renumbered[-1] = {**renumbered[-1], "anchor_message_id": 42}
    assert without_ids(renumbered) == expected  # what the database may change
    losses = [
        [{k: v for k, v in x.items() if k != "by"} for x in lines],  # an unknown key dropped
        [{**x, "user_id": "10002"} if x["type"] == "member" else x for x in lines],  # an integer id made a string
        [{k: v for k, v in x.items() if k != "extra"} for x in lines],  # "extra": {} dropped
        [*lines[:-1], {**lines[-1], "anchor_message_id": 3}],  # the summary moved to another message
        [{**x, "timezone": "America/New_York"} if x["type"] == "session" else x for x in lines],  # another epoch's facts
    ]
    for lossy in losses:
        assert without_ids(lossy) != expected

"""The demo and the docs on a real bot's database (issue 28, Build item 4, Done-when bullet 3).

`make demo` puts a byte copy of tests/data/upstream-db/data.sqlite (written by upstream zhin itself; the story is
../shared/reference/upstream-db/scenario.md) at demo/.zhin/data.sqlite and shows it; README's first Use lines run on
it; docs/storage.md "Upstream's real tables" lists every table of it with how zhin reads each, and what it says about
them is checked here against the database and against zhin's source. Every check has a negative control: the same
check run on what the old demo, the old README or a wrong table row would give, and failing.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from test_shell_blocks import bare_environment, command_of, fresh_clone, shell_lines_in

ROOT = Path(__file__).resolve().parent.parent
REAL_DB = ROOT / "tests" / "data" / "upstream-db" / "data.sqlite"
DEMO_KEY = "onebot11:tokyo-ob11:group:856301447"
DEMO_EPOCH = DEMO_KEY + "#1792120040034-1"
BARE_ENV = bare_environment(ROOT)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def real_db_copy(tmp_path: Path) -> Path:
    """Checks read a copy: the data file stays byte-identical."""
    copy = tmp_path / "real.sqlite"
    shutil.copyfile(REAL_DB, copy)
    return copy


def table_rows(db: Path) -> dict[str, int]:
    """Every table of ``db`` and its row count."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        names = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {name: conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in names}


def session_keys(db: Path) -> set[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {key for (key,) in conn.execute("SELECT session_key FROM agent_sessions")}


# --- make demo -------------------------------------------------------------------------------------------------


def demo_problems(demo_db: Path, output: str, real_db: Path) -> list[str]:
    """What is wrong with a demo: its database must be the real one byte for byte, and its output must show the
    real busy group's trace in the zone the data names."""
    problems = []
    if not demo_db.is_file() or digest(demo_db) != digest(real_db):
        problems.append(f"{demo_db} is not a byte copy of the real database")
    for shown in (DEMO_EPOCH, "times in Asia/Tokyo (from the data", "bot sent"):
        if shown not in output:
            problems.append(f"the demo's output never shows {shown!r}")
    if "a real bot's database" not in output:
        problems.append("the closing note does not say what the user is looking at")
    return problems


def test_make_demo_shows_the_real_bots_database(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    run = subprocess.run(["make", "demo"], cwd=clone, env=BARE_ENV, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert demo_problems(clone / "demo" / ".zhin" / "data.sqlite", run.stdout, REAL_DB) == []
    report = (clone / "demo" / "report.html").read_text(encoding="utf-8")
    assert DEMO_EPOCH in report


def test_demo_check_rejects_the_old_fixture_demo(tmp_path: Path) -> None:
    """Negative control: the old demo (the fixtures imported into demo/.zhin/data.sqlite, traced by their key)."""
    old_db = tmp_path / "old.sqlite"
    zhin = str(ROOT / ".venv" / "bin" / "zhin")
    subprocess.run([zhin, "import", "fixtures/group-busy.jsonl", "--db", str(old_db)], cwd=ROOT, env=BARE_ENV,
                   capture_output=True, check=True)
    old_output = subprocess.run([zhin, "trace", "icqq:8596238:group:1048877509", "--all", "--db", str(old_db)],
                                cwd=ROOT, env=BARE_ENV, capture_output=True, text=True, check=True).stdout
    problems = demo_problems(old_db, old_output, REAL_DB)
    assert problems[0].endswith("is not a byte copy of the real database")
    assert any(DEMO_EPOCH in problem for problem in problems)


# --- README's first Use lines ----------------------------------------------------------------------------------


def use_commands(readme: str) -> list[str]:
    """The commands of README's ``## Use`` section, in order (comments dropped)."""
    section = readme.split("\n## Use\n", 1)[1].split("\n## ", 1)[0]
    return [command_of(line) for line in shell_lines_in(section, "README.md")]


def first_lines_problems(commands: list[str], keys: set[str]) -> list[str]:
    """README's first Use lines (after activating the venv, before the first fixture file) must run on the real
    database: into demo/, then sessions, a trace of each kind, facts, stats, prefix-diff, and import into a copy."""
    first: list[str] = []
    for command in commands[1:]:
        if "fixtures/" in command:
            break
        first.append(command)
    if not first or first[0] != "cd demo":
        return [f"the first Use line after activating is {first[:1]}, not `cd demo` (the real database)"]
    real = [c for c in first if any(f"'{key}'" in c for key in keys)]
    wanted = {
        "zhin trace KEY --all": lambda c: c.startswith("zhin trace ") and c.endswith(" --all"),
        "zhin trace KEY --turn N --show-request": lambda c: c.startswith("zhin trace ") and "--show-request" in c,
        "zhin facts show KEY": lambda c: c.startswith("zhin facts show "),
        "zhin prefix-diff KEY": lambda c: c.startswith("zhin prefix-diff "),
    }
    problems = [f"no `{name}` of a real session among the first lines" for name, test in wanted.items()
                if not any(test(c) for c in real)]
    if "zhin sessions" not in first:
        problems.append("no `zhin sessions` among the first lines")
    if not any(c.startswith("zhin stats cache") for c in first):
        problems.append("no `zhin stats cache` among the first lines")
    copied = [m.group(1) for c in first if (m := re.fullmatch(r"cp \.zhin/data\.sqlite (\S+)", c))]
    if not any(c == f"zhin import --events --db {name}" for c in first for name in copied):
        problems.append("no `import --events` into a copy of the real database among the first lines")
    return problems


def test_readme_first_use_lines_run_on_the_real_database(tmp_path: Path) -> None:
    commands = use_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert commands[0] == ". .venv/bin/activate"
    assert first_lines_problems(commands, session_keys(real_db_copy(tmp_path))) == []


OLD_USE = """intro

## Use

```sh
. .venv/bin/activate
zhin trace fixtures/group-busy.jsonl
cd demo
zhin sessions
zhin trace 'icqq:8596238:group:1048877509' --all
```

## Next
"""


def test_first_lines_check_rejects_the_old_readme(tmp_path: Path) -> None:
    """Negative controls: the old Use block (fixture files first, the demo a fixture import); and real lines that
    import into the bot's own database instead of a copy."""
    keys = session_keys(real_db_copy(tmp_path))
    assert first_lines_problems(use_commands(OLD_USE), keys) == [
        "the first Use line after activating is [], not `cd demo` (the real database)"]
    key = sorted(keys)[0]
    no_copy = [". .venv/bin/activate", "cd demo", "zhin sessions", f"zhin trace '{key}' --all",
               f"zhin trace '{key}' --turn 2 --show-request", f"zhin facts show '{key}'", "zhin stats cache",
               f"zhin prefix-diff '{key}'", "zhin import --events"]
    assert first_lines_problems(no_copy, keys) == [
        "no `import --events` into a copy of the real database among the first lines"]


# --- docs/storage.md: every table of the real database ---------------------------------------------------------

STORAGE = ROOT / "docs" / "storage.md"
ROW = re.compile(r"^\| `([A-Za-z_]+)` \| (\d+) \| (read|not read) \|", re.M)


def documented_tables(markdown: str) -> dict[str, tuple[int, str]]:
    """The table of "Upstream's real tables" → "Every table": name → (rows in the real database, read / not read)."""
    section = markdown.split("\n## Upstream's real tables\n", 1)[1].split("\n## ", 1)[0]
    return {name: (int(rows), verdict) for name, rows, verdict in ROW.findall(section)}


def source_names() -> str:
    """zhin's own source (``.py`` files): the SQL it reads tables with is in there."""
    return "\n".join(path.read_text(encoding="utf-8") for path in sorted((ROOT / "zhin_cli").rglob("*.py")))


def table_doc_problems(documented: dict[str, tuple[int, str]], actual: dict[str, int], source: str) -> list[str]:
    problems = [f"`{name}` is not documented" for name in sorted(actual.keys() - documented.keys())]
    problems += [f"`{name}` is documented but not in the real database" for name in sorted(documented.keys() - actual.keys())]
    for name, (rows, verdict) in sorted(documented.items()):
        if name in actual and rows != actual[name]:
            problems.append(f"`{name}`: documented {rows} rows, the database has {actual[name]}")
        # read = a SELECT of zhin's names it (raw SQL, or a SQLAlchemy Table); a mention in a comment is no read
        named = re.search(rf'(?:FROM|JOIN)\s+"?{name}\b|Table\(\s*"{name}"', source) is not None
        if (verdict == "read") != named:
            problems.append(f"`{name}`: documented as {verdict}, but zhin's SQL {'reads' if named else 'never reads'} it")
    return problems


def test_storage_doc_lists_every_table_of_the_real_database_as_the_code_reads_it(tmp_path: Path) -> None:
    documented = documented_tables(STORAGE.read_text(encoding="utf-8"))
    actual = table_rows(real_db_copy(tmp_path))
    assert len(actual) == 22
    assert table_doc_problems(documented, actual, source_names()) == []


def test_table_doc_check_rejects_a_missing_table_a_wrong_count_and_a_false_verdict(tmp_path: Path) -> None:
    """Negative controls: each kind of wrong row is caught."""
    actual = table_rows(real_db_copy(tmp_path))
    right = {name: (rows, "read" if name.startswith("agent_") else "not read") for name, rows in actual.items()}
    source = "SELECT * FROM agent_messages JOIN agent_sessions; Table(\"agent_summaries\"); # like workroom_events"
    assert table_doc_problems(right, actual, source) == []
    wrong = dict(right)
    del wrong["SystemLog"]
    wrong["agent_messages"] = (66, "read")
    wrong["workroom_events"] = (0, "read")
    assert table_doc_problems(wrong, actual, source) == [
        "`SystemLog` is not documented",
        "`agent_messages`: documented 66 rows, the database has 67",
        "`workroom_events`: documented as read, but zhin's SQL never reads it",
    ]
    assert documented_tables("x\n## Upstream's real tables\n| `t` | 3 | read | how |\n## Next\n| `u` | 1 | read |") \
        == {"t": (3, "read")}


# --- the bot's account id --------------------------------------------------------------------------------------


def bot_account_facts(db: Path) -> tuple[set[str], list[tuple[str, str]]]:
    """Who upstream records as the sender of its replies (unified_inbox_message rows the bot sent, the ones without
    a display name), and every conversation_events row naming the bot's QQ account, as (event type, where)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        senders = {s for (s,) in conn.execute("SELECT DISTINCT sender_id FROM unified_inbox_message WHERE sender_name IS NULL")}
        rows = conn.execute("SELECT json_extract(event_json, '$.type'), json_extract(event_json, '$.target.id')"
                            " FROM conversation_events WHERE event_json LIKE '%3300451278%'").fetchall()
    return senders, [(kind, "target" if target == "3300451278" else "elsewhere") for kind, target in rows]


def test_storage_doc_says_which_id_zhin_shows_for_the_bot_and_the_data_agrees(tmp_path: Path) -> None:
    section = STORAGE.read_text(encoding="utf-8").split("\n## Upstream's real tables\n", 1)[1].split("\n## ", 1)[0]
    assert "user_id:tokyo-ob11" in section and "3300451278" in section
    db = real_db_copy(tmp_path)
    senders, mentions = bot_account_facts(db)
    assert senders == {"tokyo-ob11"}  # the endpoint id, not the QQ account
    assert mentions == [("conversation.poked", "target")] * 2  # the account only as a poke's target
    shown = subprocess.run([str(ROOT / ".venv" / "bin" / "zhin"), "trace", DEMO_KEY, "--db", str(db), "--show-request"],
                           cwd=tmp_path, env=BARE_ENV, capture_output=True, text=True, check=True).stdout
    assert "user_id:tokyo-ob11;" in shown and "3300451278" not in shown
    # negative control: the check tells the account apart from the endpoint (a row the bot sent as its account)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE unified_inbox_message SET sender_id = '3300451278' WHERE id = (SELECT min(id) FROM"
                     " unified_inbox_message WHERE sender_name IS NULL)")
    assert bot_account_facts(db)[0] == {"tokyo-ob11", "3300451278"}


@pytest.fixture(autouse=True)
def _real_db_untouched() -> object:
    before = digest(REAL_DB)
    yield
    assert digest(REAL_DB) == before

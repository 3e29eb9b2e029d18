"""``facts show`` shows times in the zone trace uses, and ``TZ`` may carry POSIX's leading colon (issue 28, review
finding 3).

The shared upstream database (tests/data/upstream-db/, scenario.md) is in Asia/Tokyo, a zone only its
``[Turn context]`` rows name. scenario.md step 13: 284100107 (美咲) joins at d1 12:13:00 JST = 03:13 UTC.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, clean_env, run_zhin

from zhin_cli.core.timezones import choose_timezone, environ_zone, human_ms

UPSTREAM_DB = Path(__file__).parent / "data" / "upstream-db" / "data.sqlite"
GROUP_A = "onebot11:tokyo-ob11:group:856301447"
JOINED = "284100107"  # 美咲, scenario.md step 13


@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "data.sqlite"
    shutil.copy(UPSTREAM_DB, copy)
    return copy


def roster_entry(output: str, user_id: str) -> str:
    """The lines of ``user_id``'s entry in ``facts show``'s roster (an id line, then indented fields)."""
    lines = output.splitlines()
    start = lines.index(user_id)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end])


def facts_show(db: Path, *options: str, cwd: Path, tz: str | None = None) -> str:
    env = clean_env()
    if tz is not None:
        env["TZ"] = tz
    result = run_zhin("facts", "show", GROUP_A, "--db", db, *options, cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


# --- facts show: the zone chosen as trace chooses it, and said ------------------------------------------------------

def test_facts_show_times_are_local_in_the_zone_the_data_names(db: Path, tmp_path: Path) -> None:
    out = facts_show(db, cwd=tmp_path)
    assert "times in Asia/Tokyo (from the data: upstream's [Turn context])" in out
    entry = roster_entry(out, JOINED)
    assert "joined_at: 2026-10-16 12:13 Asia/Tokyo" in entry, entry
    assert "03:13" not in entry and "UTC" not in entry  # negative control below: the same entry in UTC says so


def test_negative_control_timezone_utc_shows_the_utc_time(db: Path, tmp_path: Path) -> None:
    out = facts_show(db, "--timezone", "UTC", cwd=tmp_path)
    assert "times in UTC (from --timezone)" in out
    assert "joined_at: 2026-10-16 03:13 UTC" in roster_entry(out, JOINED)


def test_timezone_option_beats_zhin_yaml_which_beats_the_data(db: Path, tmp_path: Path) -> None:
    (tmp_path / "zhin.yaml").write_text("timezone: Europe/Paris\n", encoding="utf-8")
    from_yaml = facts_show(db, cwd=tmp_path)
    assert "times in Europe/Paris (from zhin.yaml)" in from_yaml
    assert "joined_at: 2026-10-16 05:13 Europe/Paris" in roster_entry(from_yaml, JOINED)
    from_option = facts_show(db, "--timezone", "America/New_York", cwd=tmp_path)
    assert "times in America/New_York (from --timezone)" in from_option
    assert "joined_at: 2026-10-15 23:13 America/New_York" in roster_entry(from_option, JOINED)


def test_facts_show_json_names_the_zone_and_its_source(db: Path, tmp_path: Path) -> None:
    result = run_zhin("facts", "show", GROUP_A, "--db", db, "--json", cwd=tmp_path)
    data = json.loads(result.stdout)
    assert (data["timezone"], data["timezone_source"]) == ("Asia/Tokyo", "data")
    joined = next(m for m in data["rebuilt"]["members"] if m["user_id"] == JOINED)
    assert joined["joined_at_iso"] == "2026-10-16T03:13:00.000Z"  # machines keep the epoch and its UTC ISO form


def test_a_bad_timezone_option_is_a_usage_error(db: Path, tmp_path: Path) -> None:
    result = run_zhin("facts", "show", GROUP_A, "--db", db, "--timezone", "Mars/Olympus", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Mars/Olympus" in result.stderr and result.stdout == ""


def test_a_database_naming_no_zone_falls_back_to_tz_then_utc(db: Path, tmp_path: Path) -> None:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(db)) as conn, conn:  # no [Turn context] left: the data names no zone
        conn.execute("UPDATE agent_messages SET payload = replace(payload, '[Turn context]', '[Turn ctx]')")
    assert "times in Asia/Shanghai (from the TZ environment variable)" in facts_show(db, cwd=tmp_path,
                                                                                      tz=":Asia/Shanghai")
    assert "joined_at: 2026-10-16 03:13 UTC" in roster_entry(facts_show(db, cwd=tmp_path), JOINED)


# --- TZ with POSIX's leading colon, for every command (choose_timezone) ----------------------------------------------

@pytest.mark.parametrize("tz", [":Asia/Shanghai", "Asia/Shanghai", " :Asia/Shanghai "])
def test_tz_with_or_without_the_posix_colon_names_the_zone(tz: str) -> None:
    assert choose_timezone(None, None, None, None, tz) == ("Asia/Shanghai", "TZ")


@pytest.mark.parametrize("tz", [":/etc/localtime", "JST-9", ":", "::Asia/Shanghai", "", None])
def test_negative_control_a_tz_naming_no_iana_zone_falls_back_to_utc(tz: str | None) -> None:
    assert environ_zone(tz) is None
    assert choose_timezone(None, None, None, None, tz) == ("UTC", "default")


def test_trace_reads_tz_with_the_posix_colon(tmp_path: Path) -> None:
    """A session that names no zone (a fixture's session line without its ``timezone``): trace's headers follow
    ``TZ=:Asia/Shanghai``."""
    lines = (FIXTURES / "private-chat.jsonl").read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert header.pop("timezone")
    session = tmp_path / "chat.jsonl"
    session.write_text("\n".join([json.dumps(header, ensure_ascii=False), *lines[1:]]) + "\n", encoding="utf-8")
    env = clean_env()
    env["TZ"] = ":Asia/Shanghai"
    colon = run_zhin("trace", session, cwd=tmp_path, env=env)
    assert colon.returncode == 0, colon.stderr
    assert "times in Asia/Shanghai (from the TZ environment variable)" in colon.stdout
    plain = run_zhin("trace", session, cwd=tmp_path)  # control: without TZ the same session is UTC
    assert plain.returncode == 0 and "times in UTC" in plain.stdout and "Asia/Shanghai" not in plain.stdout


def test_human_ms_names_the_zone_it_shows() -> None:
    at = 1_792_120_380_000  # 2026-10-16 03:13 UTC
    assert human_ms(at) == "2026-10-16 03:13 UTC"
    assert human_ms(at, zone="Asia/Tokyo") == "2026-10-16 12:13 Asia/Tokyo"
    assert human_ms(at, zone="UTC") == human_ms(at)

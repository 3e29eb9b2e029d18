"""``-j N`` on the commands over many sessions (issue 16 item 10): the same bytes as ``-j 1``, the same errors.

``prefix-diff`` (files, ``--all``, ``--base/--head``), ``report economy`` and ``stats cache`` run one session per
worker process (zhin_cli/core/parallel.py). Each check compares the whole stdout, stderr and exit status of
``-j 1`` (in process, one session at a time) with ``-j 2``/``-j 3``; the negative control shows the comparison
sees order (the same sessions in another order give other bytes), so a pool that returned results as they
finish would fail it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from zhin_cli.store.jsonl import read_session

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SESSIONS = [str(FIXTURES / name) for name in ("group-busy.jsonl", "private-chat.jsonl", "legacy-upstream.jsonl")]

Run = Callable[..., subprocess.CompletedProcess[str]]


def same_under_jobs(zhin: Run, *args: object, jobs: tuple[int, ...] = (2, 3)) -> subprocess.CompletedProcess[str]:
    """Run ``args`` with ``-j 1`` and each of ``jobs``; every run must print the same bytes and exit alike."""
    first = zhin(*args, "-j", "1")
    for count in jobs:
        other = zhin(*args, "-j", str(count))
        assert (other.returncode, other.stdout, other.stderr) == (first.returncode, first.stdout, first.stderr), count
    return first


@pytest.fixture
def database(zhin: Run, tmp_path: Path) -> Path:
    db = tmp_path / "data.sqlite"
    result = zhin("import", *SESSIONS, "--db", db)
    assert result.returncode == 0, result.stderr
    return db


def test_prefix_diff_of_files_is_the_same_for_any_jobs(zhin: Run) -> None:
    result = same_under_jobs(zhin, "prefix-diff", *SESSIONS, "--json")
    assert result.returncode in (0, 1), result.stderr
    ids = [s["session_id"] for s in json.loads(result.stdout)["sessions"]]
    assert ids == [read_session(Path(path)).session_id for path in SESSIONS]  # in the order given
    same_under_jobs(zhin, "prefix-diff", *SESSIONS)  # the table too


def test_prefix_diff_all_and_base_head_are_the_same_for_any_jobs(zhin: Run, database: Path, tmp_path: Path) -> None:
    everything = same_under_jobs(zhin, "prefix-diff", "--all", "--db", database, "--json")
    assert len(json.loads(everything.stdout)["sessions"]) == 3
    base = tmp_path / "base.yaml"
    head = tmp_path / "head.yaml"
    base.write_text("timezone: Asia/Shanghai\n", encoding="utf-8")
    head.write_text("timezone: Asia/Shanghai\nsegments:\n  texts:\n    core.rules: Be brief.\n", encoding="utf-8")
    compared = same_under_jobs(zhin, "prefix-diff", *SESSIONS, "--base", base, "--head", head, "--json", jobs=(2,))
    assert compared.returncode in (0, 1), compared.stderr
    assert json.loads(compared.stdout)["mode"] == "configs" and len(json.loads(compared.stdout)["sessions"]) == 3


def test_report_economy_is_the_same_for_any_jobs(zhin: Run) -> None:
    result = same_under_jobs(zhin, "report", "economy", *SESSIONS, "--json", "--per-request", jobs=(2,))
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["sessions"]) == 3


def test_stats_cache_is_the_same_for_any_jobs(zhin: Run, database: Path) -> None:
    result = same_under_jobs(zhin, "stats", "cache", "--db", database, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sessions"] == 3
    same_under_jobs(zhin, "stats", "cache", *SESSIONS, "--json")


def test_negative_control_the_comparison_sees_the_order(zhin: Run) -> None:
    forward = zhin("prefix-diff", *SESSIONS, "--json", "-j", "2")
    backward = zhin("prefix-diff", *reversed(SESSIONS), "--json", "-j", "2")
    assert forward.returncode == backward.returncode
    assert forward.stdout != backward.stdout  # same sessions, another order: other bytes
    assert sorted(json.loads(forward.stdout)["sessions"], key=json.dumps) == sorted(
        json.loads(backward.stdout)["sessions"], key=json.dumps)


def test_errors_in_workers_are_the_same_line_and_status(zhin: Run, tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"type": "session", "session_id": "x"}\n{"type": "message", "role": "user"\n', encoding="utf-8")
    missing = tmp_path / "missing.jsonl"
    for command in (["prefix-diff"], ["report", "economy"], ["stats", "cache"]):
        result = same_under_jobs(zhin, *command, SESSIONS[0], broken, missing, SESSIONS[1], jobs=(2, 4))
        assert result.returncode != 0 and result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("zhin: error:") and "broken.jsonl:2" in lines[0], result.stderr
        assert "Traceback" not in result.stderr


def test_jobs_below_one_is_a_usage_error(zhin: Run) -> None:
    for command in (["prefix-diff"], ["report", "economy"], ["stats", "cache"]):
        result = zhin(*command, *SESSIONS, "-j", "0")
        assert result.returncode == 2 and result.stderr.strip().splitlines() == [
            "zhin: error: -j/--jobs must be at least 1 (got 0)"], result.stderr


JOBS_COMMANDS = (["prefix-diff"], ["report", "economy"], ["report", "window"], ["report", "html", "-o", "page.html"],
                 ["stats", "cache"], ["view", "--port", "0"], ["eval"])


@pytest.mark.parametrize("command", JOBS_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_jobs_past_the_maximum_is_one_usage_line_on_every_command(zhin: Run, tmp_path: Path, command: list[str]) -> None:
    """Issue 27 item 11: ``-j 100000`` started a process per work item (266 for 12 sessions)."""
    target = [str(tmp_path)] if command == ["eval"] else [SESSIONS[1]]
    result = zhin(*command, *target, "-j", "100000")
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.strip().splitlines() == ["zhin: error: -j/--jobs is at most 64 (got 100000)"]
    assert not (tmp_path / "page.html").exists()


def test_negative_control_the_maximum_itself_runs(zhin: Run) -> None:
    result = zhin("prefix-diff", SESSIONS[1], "-j", "64", "--json")  # one session: no pool at all
    assert result.returncode in (0, 1), result.stderr
    assert json.loads(result.stdout)["sessions"]


PLUGIN = """
from pathlib import Path
Path(__file__).with_name("plugin-ran").write_text("yes")
def register(generation):
    pass
"""


def test_an_untrusted_found_plugin_is_refused_alike_with_workers(zhin: Run, tmp_path: Path) -> None:
    (tmp_path / "zhin.yaml").write_text("plugins:\n  - plugin.py\n", encoding="utf-8")
    (tmp_path / "plugin.py").write_text(PLUGIN, encoding="utf-8")
    for command in (["prefix-diff"], ["report", "economy"]):
        result = same_under_jobs(zhin, *command, *SESSIONS, jobs=(2,))
        assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "zhin trust" in result.stderr or "--allow-plugins" in result.stderr, result.stderr
    assert not (tmp_path / "plugin-ran").exists()  # no worker ran it
    allowed = zhin("--allow-plugins", "prefix-diff", *SESSIONS, "--json", "-j", "2")  # negative control
    assert allowed.returncode in (0, 1), allowed.stderr
    assert (tmp_path / "plugin-ran").exists()

"""Text output is for people, across every command (issue 17 §3): human values, identifiers never cut.

* No Python value reaches text output: no ``None``/``True``/``False``, no ``['10003']`` list or ``{'k': …}`` dict
  reprs, no raw millisecond epochs (``1761699600000``) outside the ids that contain one.
* Identifiers are never cut, at any terminal width: session ids, segment ids and case ids appear whole in the
  output at ``COLUMNS=60`` and ``100`` (other columns wrap or fold instead).

``--json`` keeps machine values: it is not checked here.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SESSION_ID = "icqq:8596238:group:1048877509#1761699600000-1"
SESSION_KEY = "icqq:8596238:group:1048877509"
PYTHON_VALUE = re.compile(r"\b(None|True|False)\b|\[\s*'|'\s*\]|\{\s*'")
MS_EPOCH = re.compile(r"(?<![\w#:.\-])1[5-9]\d{11}(?![\w\-])")


def python_values(text: str) -> list[str]:
    """Each line of ``text`` that shows a Python value or a raw ms epoch."""
    return [line for line in text.splitlines() if PYTHON_VALUE.search(line) or MS_EPOCH.search(line)]


def test_the_checks_catch_what_they_are_for() -> None:
    # negative controls: each of these is a defect the checks must see …
    assert python_values("window: max_messages 80, cut_to None")
    assert python_values("renamed: ['10003']")
    assert python_values("options {'seed': 0}")
    assert python_values("newest usage 1761699600000")
    assert python_values("prefill: False")
    # … and these are not
    assert not python_values(f"{SESSION_ID} · fixtures/group-busy.jsonl · 16 requests")
    assert not python_values('{"role": "user", "content": null, "stream": false}')  # a JSON body shown as JSON
    assert not python_values("window: max_messages 80, cut to 40 · 2025-10-29 09:00 +08:00")
    assert not whole_in("icqq:8596238:group:10488…", SESSION_ID)


def whole_in(text: str, identifier: str) -> bool:
    return identifier in text


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the repository's fixtures, a demo database imported from them, a capture and a trace body."""
    from conftest import run_zhin

    folder = tmp_path_factory.mktemp("text-output")
    shutil.copytree(ROOT / "fixtures", folder / "fixtures")
    shutil.copy(ROOT / "prompt-budget.yaml", folder / "prompt-budget.yaml")
    imported = run_zhin("import", "fixtures/group-busy.jsonl", "fixtures/private-chat.jsonl", "--db", "data.sqlite",
                        cwd=folder)
    assert imported.returncode == 0, imported.stderr
    return folder


COMMANDS: list[tuple[str, list[str], list[str]]] = [
    # (name, arguments, identifiers that must appear whole)
    ("trace last", ["trace", "fixtures/group-busy.jsonl"], [SESSION_ID, "history.assistant", "core.environment"]),
    ("trace all", ["trace", "fixtures/group-busy.jsonl", "--all"], [SESSION_ID]),
    ("trace stored", ["trace", SESSION_KEY, "--turn", "4", "--db", "data.sqlite"], [SESSION_ID, "history.summary"]),
    ("prefix-diff", ["prefix-diff", "fixtures/group-busy.jsonl"], [SESSION_ID]),
    ("report economy", ["report", "economy", "fixtures/group-busy.jsonl"], [SESSION_ID]),
    ("sessions", ["sessions", "--db", "data.sqlite"], [SESSION_ID]),
    ("facts show", ["facts", "show", SESSION_KEY, "--db", "data.sqlite"], []),
    ("facts prune", ["facts", "prune", "--dry-run", "--db", "data.sqlite"], []),
    ("stats cache", ["stats", "cache", "--db", "data.sqlite"], []),
    ("providers", ["providers"], ["openai-reasoning", "openai-compatible"]),
    ("budget check", ["budget", "check"], ["core.platform"]),
    ("preset lint", ["preset", "lint", "fixtures/presets/st-default.json"], []),
    ("preset probe", ["preset", "probe", "fixtures/presets/st-default.json", "--session", "fixtures/private-chat.jsonl"], []),
]


@pytest.mark.parametrize("columns", ["60", "100"])
@pytest.mark.parametrize(("name", "arguments", "identifiers"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_text_output_has_human_values_and_whole_identifiers(workspace: Path, name: str, arguments: list[str],
                                                            identifiers: list[str], columns: str) -> None:
    from conftest import clean_env, run_zhin

    env = clean_env()
    env["COLUMNS"] = columns
    result = run_zhin(*arguments, cwd=workspace, env=env)
    assert result.returncode in (0, 1), result.stderr
    assert not python_values(result.stdout), python_values(result.stdout)
    missing = [identifier for identifier in identifiers if not whole_in(result.stdout, identifier)]
    assert not missing, f"cut or missing at COLUMNS={columns}: {missing}\n{result.stdout}"


@pytest.mark.parametrize("columns", ["60", "100"])
def test_every_segment_id_of_a_request_is_whole_in_trace(workspace: Path, columns: str) -> None:
    """The segment ids `trace --json` lists for a turn all appear whole in that turn's text table."""
    from conftest import clean_env, run_zhin

    document = json.loads(run_zhin("trace", "fixtures/group-busy.jsonl", "--turn", "6", "--json", cwd=workspace).stdout)
    segment_ids = [segment["id"] for segment in document["requests"][0]["segments"]]
    assert len(segment_ids) >= 5
    env = clean_env()
    env["COLUMNS"] = columns
    text = run_zhin("trace", "fixtures/group-busy.jsonl", "--turn", "6", cwd=workspace, env=env).stdout
    assert [i for i in segment_ids if not whole_in(text, i)] == []


@pytest.mark.parametrize("columns", ["60", "100"])
def test_eval_case_ids_are_whole(columns: str, tmp_path: Path) -> None:
    from conftest import clean_env, run_zhin

    case = ROOT / "eval_cases" / "adr-1-ten-messages.yaml"
    shutil.copy(case, tmp_path / case.name)
    case_ids = re.findall(r"^\s*- id:\s*(\S+)", case.read_text(encoding="utf-8"), flags=re.M)
    assert case_ids
    env = clean_env()
    env["COLUMNS"] = columns
    result = run_zhin("eval", case.name, "-j", "1", cwd=tmp_path, env=env)
    assert result.returncode in (0, 1), result.stderr
    assert [i for i in case_ids if not whole_in(result.stdout, i)] == [], result.stdout
    assert not python_values(result.stdout), python_values(result.stdout)


def _bare_epochs(value: object, path: str = "") -> list[str]:
    """Paths of ms-epoch numbers in JSON data with no ISO string beside them."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if (isinstance(item, int) and not isinstance(item, bool) and 10**11 < item < 10**14
                    and f"{key}_iso" not in value):
                found.append(f"{path}.{key}")
            found += _bare_epochs(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _bare_epochs(item, f"{path}[{index}]")
    return found


@pytest.mark.parametrize("arguments", [["sessions", "--json", "--db", "data.sqlite"],
                                       ["facts", "show", SESSION_KEY, "--json", "--db", "data.sqlite"],
                                       ["stats", "cache", "--json", "--db", "data.sqlite"]], ids=lambda a: a[0])
def test_json_puts_an_iso_time_beside_every_ms_epoch(workspace: Path, arguments: list[str]) -> None:
    from conftest import run_zhin

    result = run_zhin(*arguments, cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert _bare_epochs(json.loads(result.stdout)) == []


def test_iso_times_are_added_to_times_only() -> None:
    from zhin_cli.core.timezones import with_iso_times

    data = with_iso_times({"updated_at": 1761810010877, "members": [{"last_activity": 1761810010877, "mute_time": 600}]})
    assert data["updated_at_iso"] == "2025-10-30T07:40:10.877Z"
    assert data["members"][0]["last_activity_iso"] == "2025-10-30T07:40:10.877Z"
    assert "mute_time_iso" not in data["members"][0]  # negative control: seconds left, not a time
    assert _bare_epochs({"updated_at": 1761810010877}) == [".updated_at"]
    assert "muted_until_iso" not in with_iso_times({"muted_until": 0})  # 0 is "not muted", not 1970


def test_a_time_no_calendar_holds_is_said_in_words() -> None:
    """A stored ms value past year 9999 (a bot's bug, a hostile row) is text, not an OverflowError traceback — in
    the sessions table too, which had its own formatter."""
    from zhin_cli._cli.data import format_ms
    from zhin_cli.core.timezones import human_ms

    assert human_ms(10**16) == "the end of time" and format_ms(10**16) == "the end of time"
    assert format_ms(1761810010877) == "2025-10-30 07:40:10" and human_ms(1761810010877) == "2025-10-30 07:40 UTC"
    assert format_ms(None) == ""

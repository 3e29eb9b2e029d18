"""The command-line contract (DESIGN.md §4), run as a user runs it: a clean environment, the same entry point.

Most tests run the command in this process (conftest ``zhin``); the ones about the entry points themselves — the
console script, ``python -m zhin_cli``, what loads at start-up — start a real process (``zhin_process``).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env, run_zhin, run_zhin_process, write_upstream_db

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CORPUS = Path(__file__).resolve().parent / "corpus"
CASES: dict[str, dict[str, Any]] = {
    name: case for name, case in json.loads((CORPUS / "cases.json").read_text(encoding="utf-8")).items() if not name.startswith("_")
}
PRIVATE = FIXTURES / "private-chat.jsonl"
PRIVATE_ID = "icqq:8596238:private:10002#1761800000000-1"

SEGMENT_KEYS = {"id": str, "kind": str, "weight": (int, float), "chars": int, "tokens": int, "trimmed": int}


def check_request(request: dict[str, Any], session_id: str) -> None:
    assert request["session_id"] == session_id
    assert isinstance(request["turn"], int) and request["turn"] >= 1
    assert request["provider"] == "openai"
    assert request["model"] == "gpt-4o"
    assert request["segments"], "no segments"
    for segment in request["segments"]:
        for key, kind in SEGMENT_KEYS.items():
            assert isinstance(segment[key], kind) and not isinstance(segment[key], bool), (key, segment)
        assert segment["chars"] >= 0 and segment["tokens"] >= 0 and segment["trimmed"] >= 0
    assert len({s["id"] for s in request["segments"]}) == len(request["segments"])
    assert request["state_rendering"] in ("system", "developer", "user", "none-needed")
    assert set(request["headers"]) >= {"full", "short"}
    assert all(isinstance(request["headers"][k], int) for k in ("full", "short"))
    assert request["headers"]["full"] >= 1
    assert isinstance(request["cache_breakpoints"], list)
    body = request["request"]
    assert body["model"] == request["model"]
    assert isinstance(body["messages"], list) and body["messages"][0]["role"] in ("system", "developer")
    assert body["messages"][-1]["role"] in ("user", "tool")


def one_document(stdout: str) -> dict[str, Any]:
    """stdout is exactly one JSON document (json.loads rejects anything before or after it)."""
    document = json.loads(stdout)
    assert isinstance(document, dict)
    return document


def test_trace_json_default_is_the_last_turn(zhin: Callable[..., Any]) -> None:
    proc = zhin("trace", PRIVATE, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = one_document(proc.stdout)
    assert doc["version"] == 1
    assert doc["session_id"] == PRIVATE_ID
    assert [r["turn"] for r in doc["requests"]] == [6]
    check_request(doc["requests"][0], PRIVATE_ID)
    assert "Traceback" not in proc.stderr


def test_trace_json_all_turns(zhin: Callable[..., Any]) -> None:
    proc = zhin("trace", PRIVATE, "--all", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = one_document(proc.stdout)
    assert doc["version"] == 1 and doc["session_id"] == PRIVATE_ID
    assert [r["turn"] for r in doc["requests"]] == [1, 2, 3, 4, 5, 6]
    for request in doc["requests"]:
        check_request(request, PRIVATE_ID)
    # later turns see more history
    sizes = [len(r["request"]["messages"]) for r in doc["requests"]]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


@pytest.mark.parametrize(("turn", "expected"), [("2", 2), ("-1", 6), ("-6", 1)])
def test_trace_json_one_turn(zhin: Callable[..., Any], turn: str, expected: int) -> None:
    proc = zhin("trace", PRIVATE, "--turn", turn, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = one_document(proc.stdout)
    assert [r["turn"] for r in doc["requests"]] == [expected]
    check_request(doc["requests"][0], PRIVATE_ID)


def test_trace_table_output(zhin: Callable[..., Any]) -> None:
    proc = zhin("trace", PRIVATE, "--turn", "2")
    assert proc.returncode == 0, proc.stderr
    assert PRIVATE_ID in proc.stdout and "request 2 ·" in proc.stdout and "core.rules" in proc.stdout
    assert "\x1b[" not in proc.stdout  # NO_COLOR, and not a terminal


def assert_usage_error(proc: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("zhin: error: ") and fragment in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("turn", ["0", "7", "-7", "99"])
def test_turn_out_of_range_is_usage(zhin: Callable[..., Any], turn: str) -> None:
    assert_usage_error(zhin("trace", PRIVATE, "--turn", turn, "--json"), "out of range")


def test_turn_with_all_is_usage(zhin: Callable[..., Any]) -> None:
    assert_usage_error(zhin("trace", PRIVATE, "--turn", "1", "--all", "--json"), "--turn or --all")


def test_bad_option_is_usage(zhin: Callable[..., Any]) -> None:
    proc = zhin("trace", PRIVATE, "--turn", "two")
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------------------------------------------
# bad inputs: exit 3, one line on stderr naming where, nothing on stdout, never a traceback


def db_payload_not_json(folder: Path) -> tuple[list[str], str]:
    session_id = "icqq:1:group:2#1700000000000-1"
    db = write_upstream_db(folder / "bad-payload.sqlite", session_id, [
        {"payload": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1700000000000,
                     "actor": {"subjectId": "10002", "displayName": "Alice"}}},
        {"payload": '{"role":"assistant","content":[{"type":"text"', "role": "assistant", "timestamp": 1700000001000},
    ])
    return ["trace", session_id, "--db", str(db)], f"{db}: agent_messages row 2: payload is not JSON"


def db_missing_session(folder: Path) -> tuple[list[str], str]:
    db = write_upstream_db(folder / "ok.sqlite", "icqq:1:group:2#1700000000000-1", [
        {"payload": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1700000000000}},
    ])
    return ["trace", "icqq:1:group:404", "--db", str(db)], f"no session 'icqq:1:group:404' in {db}"


def db_not_a_database(folder: Path) -> tuple[list[str], str]:
    path = folder / "notes.sqlite"
    path.write_bytes(b"these are notes, not a database\n" * 4)
    return ["trace", "icqq:1:group:2", "--db", str(path)], f"{path}: not an SQLite database"


def db_without_agent_messages(folder: Path) -> tuple[list[str], str]:
    path = folder / "other-app.sqlite"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE agent_sessions (session_id TEXT, session_key TEXT)")
    connection.execute("CREATE TABLE notes (body TEXT)")
    connection.commit()
    connection.close()
    return ["trace", "icqq:1:group:2", "--db", str(path)], f"{path}: not a zhin database: missing table agent_messages"


def db_file_missing(folder: Path) -> tuple[list[str], str]:
    path = folder / "absent.sqlite"
    return ["trace", "icqq:1:group:2", "--db", str(path)], f"no such database file: {path}"


def db_orphan_tool_result(folder: Path) -> tuple[list[str], str]:
    session_id = "icqq:1:group:2#1700000000000-1"
    db = write_upstream_db(folder / "orphan.sqlite", session_id, [
        {"payload": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1700000000000}},
        {"payload": {"role": "toolResult", "toolCallId": "call_x", "toolName": "weather",
                     "content": [{"type": "text", "text": "晴"}], "isError": False, "timestamp": 1700000001000}},
        {"payload": {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "timestamp": 1700000002000}},
    ])
    return ["trace", session_id, "--db", str(db)], f"{db}: agent_messages row 2: orphan tool result"


def jsonl_missing(folder: Path) -> tuple[list[str], str]:
    path = folder / "no-such-session.jsonl"
    return ["trace", str(path)], f"no such file: {path}"


def no_database_anywhere(folder: Path) -> tuple[list[str], str]:
    return ["trace", "icqq:1:group:2"], "no .zhin/data.sqlite found from"


BUILT_CASES: dict[str, Callable[[Path], tuple[list[str], str]]] = {
    "db-payload-not-json": db_payload_not_json,
    "db-missing-session": db_missing_session,
    "db-not-a-database": db_not_a_database,
    "db-without-agent-messages": db_without_agent_messages,
    "db-file-missing": db_file_missing,
    "db-orphan-tool-result": db_orphan_tool_result,
    "jsonl-file-missing": jsonl_missing,
    "no-database-found": no_database_anywhere,
}


def assert_cannot_run(proc: subprocess.CompletedProcess[str], where: str) -> None:
    assert proc.returncode == 3, (proc.returncode, proc.stdout[:500], proc.stderr[:2000])
    assert "Traceback" not in proc.stdout and "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("zhin: error: "), lines[0]
    assert where in lines[0], (where, lines[0])


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_bad_jsonl_exits_3(zhin: Callable[..., Any], name: str, as_json: bool) -> None:
    path = CORPUS / name
    case = CASES[name]
    proc = zhin("trace", path, *(["--json"] if as_json else []))
    assert_cannot_run(proc, f"{path}:{case['line']}: ")
    assert case["error"] in proc.stderr


@pytest.mark.parametrize("name", sorted(BUILT_CASES))
def test_bad_input_exits_3(zhin: Callable[..., Any], tmp_path: Path, name: str) -> None:
    folder = tmp_path / "inputs"
    folder.mkdir()
    args, where = BUILT_CASES[name](folder)
    assert_cannot_run(zhin(*args, "--json"), where)


def test_zhin_env_db_is_honoured_and_ignored_when_cleared(tmp_path: Path) -> None:
    """``ZHIN_DB`` is an option like ``--db`` (and the test runner really removes it)."""
    args, where = db_not_a_database(tmp_path)
    env = {**clean_env(), "ZHIN_DB": args[-1]}
    proc = subprocess.run([sys.executable, "-m", "zhin_cli", "trace", "icqq:1:group:2"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert_cannot_run(proc, where)


def test_sessions_lists_a_database(zhin: Callable[..., Any], tmp_path: Path) -> None:
    session_id = "icqq:1:group:2#1700000000000-1"
    write_upstream_db(tmp_path / ".zhin" / "data.sqlite", session_id, [
        {"payload": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1700000000000}},
    ])
    nested = tmp_path / "sub"
    nested.mkdir()
    proc = zhin("sessions", "--json", cwd=nested)
    assert proc.returncode == 0, proc.stderr
    doc = one_document(proc.stdout)
    assert doc["version"] == 1
    assert [(s["session_id"], s["session_key"]) for s in doc["sessions"]] == [(session_id, "icqq:1:group:2")]


# ------------------------------------------------------------------------------------------------------------------
# help and completion


def test_module_help(zhin_process: Callable[..., Any]) -> None:
    proc = zhin_process("--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("trace", "import", "export", "sessions", "completion"):
        assert command in proc.stdout


@pytest.mark.parametrize("command", ["trace", "import", "export", "sessions", "completion"])
def test_command_help(zhin: Callable[..., Any], command: str) -> None:
    proc = zhin(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout


def test_completion_bash(zhin: Callable[..., Any], tmp_path: Path) -> None:
    proc = zhin("completion", "bash")
    assert proc.returncode == 0, proc.stderr
    assert "_ZHIN_COMPLETE=complete_bash" in proc.stdout and "complete " in proc.stdout
    # the script calls `zhin` back; the call must answer with the matching commands
    script = Path(sys.executable).parent / "zhin"
    assert script.is_file(), "the zhin console script is not installed next to this python"
    env = {**clean_env(), "_ZHIN_COMPLETE": "complete_bash", "COMP_WORDS": "zhin tr", "COMP_CWORD": "1"}
    answer = subprocess.run([str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert answer.returncode == 0, answer.stderr
    assert sorted(answer.stdout.split()) == ["trace", "trust"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_completion_other_shells(zhin: Callable[..., Any], shell: str) -> None:
    proc = zhin("completion", shell)
    assert proc.returncode == 0, proc.stderr
    assert f"complete_{shell}" in proc.stdout


def test_completion_unknown_shell(zhin: Callable[..., Any]) -> None:
    proc = zhin("completion", "tcsh")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("zhin: error: ")


def test_version(zhin_process: Callable[..., Any]) -> None:
    proc = zhin_process("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("zhin ")


# ------------------------------------------------------------------------------------------------------------------
# a lazy command line: a command's module (and the libraries it calls) loads when that command runs


def test_the_command_table_is_every_command_in_typer_order() -> None:
    """``COMMAND_MODULES`` lists every command, in the order typer listed them when every module was imported up front
    (plain commands, then groups; by module name, each module's in its own order), with the module registering it."""
    import importlib

    from zhin_cli._cli import COMMAND_MODULES, app

    package = Path(__file__).resolve().parent.parent / "zhin_cli" / "_cli"
    for module in sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__"):
        importlib.import_module(f"zhin_cli._cli.{module}")
    commands = [(info.name, info.callback.__module__) for info in app.registered_commands if info.callback]
    groups = [(info.name, info.typer_instance.registered_commands[0].callback.__module__)
              for info in app.registered_groups if info.typer_instance and info.typer_instance.registered_commands[0].callback]
    registered = [(name, module.removeprefix("zhin_cli._cli.")) for name, module in commands + groups]
    assert len(registered) == len(app.registered_commands) + len(app.registered_groups)
    # the order of the eager CLI, which imported the modules alphabetically (a stable sort keeps each module's own)
    expected = sorted(registered[:len(commands)], key=lambda item: item[1]) + sorted(registered[len(commands):],
                                                                                      key=lambda item: item[1])
    assert list(COMMAND_MODULES.items()) == expected


# What a start-up must not pay for: the command modules and the heavy libraries behind them.
HEAVY = ("sqlalchemy", "deepdiff", "openai", "pydantic", "yaml", "jinja2", "rich", "tiktoken", "jsonschema", "regex",
         "psycopg", "pymysql", "zhin_cli.pipeline", "zhin_cli.store", "zhin_cli.tools")


def loaded_modules(*args: str) -> set[str]:
    """The modules ``python -m zhin_cli ARGS…`` has loaded when it exits (a fresh interpreter)."""
    code = ("import atexit, runpy, sys\n"
            "atexit.register(lambda: sys.stderr.write('\\nloaded: ' + ' '.join(sorted(sys.modules)) + '\\n'))\n"
            f"sys.argv = ['zhin', *{list(args)!r}]\n"
            "runpy.run_module('zhin_cli', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(proc.stderr.rpartition("\nloaded: ")[2].split())


def test_version_loads_no_command_and_nothing_heavy() -> None:
    loaded = loaded_modules("--version")
    assert "zhin_cli._cli" in loaded  # negative control: the import list is read
    assert {m for m in loaded if m.startswith("zhin_cli._cli.")} == set()
    assert {m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)} == set()


def test_a_command_loads_its_own_module_only() -> None:
    loaded = loaded_modules("trust", "--help")
    # and the examples/metavar table every command's help is built with (zhin_cli._cli.examples, shared)
    assert {m for m in loaded if m.startswith("zhin_cli._cli.")} == {"zhin_cli._cli.trust", "zhin_cli._cli.examples"}


def test_help_lists_every_command_in_process(zhin: Callable[..., Any]) -> None:
    """The root help loads every command (it shows their summaries): the table's names, in its order."""
    from zhin_cli._cli import COMMAND_MODULES

    proc = zhin("--help")
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[1] for line in proc.stdout.splitlines()
              if line.startswith("│ ") and len(line.split()) > 1 and line.split()[1] in COMMAND_MODULES]
    assert listed == list(COMMAND_MODULES)



@pytest.mark.parametrize("args", [
    ["--version"], ["--help"], ["trace", "--help"], ["bogus"], ["trace"], ["providers", "--json"],
    ["trace", str(PRIVATE), "--json"], ["trace", str(PRIVATE), "--turn", "99"], ["trace", "missing.jsonl"],
    ["prefix-diff", str(PRIVATE)], ["request-diff", str(PRIVATE), str(PRIVATE)],
], ids=lambda args: " ".join(a if "/" not in a else Path(a).name for a in args))
def test_the_in_process_runner_matches_a_real_process(args: list[str], tmp_path: Path) -> None:
    """What most CLI tests see (conftest ``zhin``, in this process) is what a user's process prints and exits with."""
    inside, outside = run_zhin(*args, cwd=tmp_path), run_zhin_process(*args, cwd=tmp_path)
    assert outside.stdout or outside.stderr  # not vacuous: every case prints something
    assert (inside.returncode, inside.stdout, inside.stderr) == (outside.returncode, outside.stdout, outside.stderr)

"""The command-line conventions every command shares (issue 17 §4; clig.dev, git, llm).

* A usage error is one ``zhin: error:`` line on stderr, exit 2 — for every command and group (not typer's boxed
  five lines); ``--help`` still prints the help.
* One exit code per condition: a missing database is 3 for every command that needs one.
* A reader of stdout that goes away (``| head``) ends a command quietly with 0; a real error keeps its code.
* Progress is drawn on stderr when stderr is a terminal (whatever stdout is), with its total from the first frame.
* Piped output honours COLUMNS (≥ 20), else stays wide.
* Every command's ``--help`` ends with examples that run as written on the repository's fixtures, and names its
  values SESSION, FILE, INT… — never typer's ``<bool>`` / ``<list[str]>``.
* ``zhin import`` without ``--db`` writes into the database a read finds upward.
* ``stats cache`` names its period and, when it held nothing, the newest usage it found.
* A ``postgresql://``/``mysql://`` URL without its driver names the extra that installs it.
* The commands that read a database name it in one header line on stderr (text mode only).
"""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, clean_env, default_sigint, run_with_terminal_stderr, run_zhin

GROUP_KEY = "icqq:8596238:group:1048877509"
GROUP_ID = "icqq:8596238:group:1048877509#1761699600000-1"
PRIVATE_KEY = "icqq:8596238:private:10002"
FIXTURES = ROOT / "fixtures"

Run = Callable[..., subprocess.CompletedProcess[str]]


def command_paths() -> list[str]:
    """Every command and group of ``zhin`` as typed after it ("" is the root), from the built click tree."""
    import typer

    from zhin_cli._cli import app

    paths: list[str] = []

    def walk(command: Any, path: str) -> None:
        paths.append(path)
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return paths


PATHS = command_paths()


# --- usage errors -----------------------------------------------------------------------------------------------


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zhin: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p or "zhin")
def test_an_unknown_option_is_one_line_and_exit_2_for_every_command(zhin: Run, path: str) -> None:
    result = zhin(*path.split(), "--no-such-option")
    assert result.returncode == 2
    line = one_error_line(result)
    assert "no such option: --no-such-option" in line
    assert f"zhin {path} -h".replace("  ", " ") in line  # names the command whose help to read
    assert result.stdout == ""


def test_usage_errors_of_every_kind_are_one_line(zhin: Run) -> None:
    suggestion = one_error_line(zhin("tarce"))
    assert "no such command 'tarce'" in suggestion and "Did you mean 'trace'?" in suggestion  # the suggestion kept
    assert "no such command 'nosuchcommand'" in one_error_line(zhin("nosuchcommand"))
    assert "missing argument SESSION" in one_error_line(zhin("trace"))
    assert "invalid value for '--turn'" in one_error_line(zhin("trace", "x.jsonl", "--turn", "abc"))
    assert "'--days'" in one_error_line(zhin("stats", "cache", "--days", "0"))
    assert "no such command 'nope'" in one_error_line(zhin("stats", "nope"))
    for args in (["tarce"], ["trace"], ["stats", "cache", "--days", "0"]):
        assert zhin(*args).returncode == 2


def test_help_is_still_help(zhin: Run) -> None:
    """Negative control: --help, and a group or the root without a command, print the help (not an error line)."""
    helped = zhin("trace", "--help")
    assert helped.returncode == 0 and "Usage: zhin trace [OPTIONS]" in helped.stdout and helped.stderr == ""
    for args in ([], ["stats"]):
        bare = zhin(*args)
        assert "Usage: zhin" in bare.stdout and "zhin: error" not in bare.stderr


# --- one exit code per condition ---------------------------------------------------------------------------------

NEEDS_A_DATABASE = [["sessions"], ["stats", "cache"], ["facts", "prune"], ["facts", "show", GROUP_KEY],
                    ["export", GROUP_KEY], ["trace", GROUP_KEY], ["import", "--events"]]


@pytest.mark.parametrize("args", NEEDS_A_DATABASE, ids=" ".join)
def test_a_missing_database_is_exit_3_everywhere(zhin: Run, tmp_path: Path, args: list[str]) -> None:
    result = zhin(*args, cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "no .zhin/data.sqlite" in one_error_line(result)


def test_with_a_database_the_same_commands_run(zhin: Run, tmp_path: Path) -> None:
    """Negative control: the same commands find the database upward and succeed."""
    assert zhin("import", FIXTURES / "group-busy.jsonl", cwd=tmp_path).returncode == 0
    (tmp_path / "sub").mkdir()
    for args in NEEDS_A_DATABASE[:5]:
        result = zhin(*args, cwd=tmp_path / "sub")
        assert result.returncode == 0, (args, result.stderr)


# --- broken pipe -------------------------------------------------------------------------------------------------

PIPED = [["sessions"], ["sessions", "--json"], ["trace", "--all", "fixtures/group-busy.jsonl"],
         ["trace", "--all", "--json", "fixtures/group-busy.jsonl"], ["providers"], ["stats", "cache"],
         ["facts", "show", GROUP_KEY], ["export", PRIVATE_KEY], ["prefix-diff", "fixtures/private-chat.jsonl"],
         ["fixtures", "synth", "--messages", "3000"], ["--help"]]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's fixtures, eval cases and budget file, with them imported into ./.zhin/data.sqlite — what the
    README's demo has, and what the examples of every --help are written against."""
    folder = tmp_path_factory.mktemp("conventions")
    shutil.copytree(FIXTURES, folder / "fixtures")
    shutil.copytree(ROOT / "eval_cases", folder / "eval_cases")
    shutil.copy(ROOT / "prompt-budget.yaml", folder / "prompt-budget.yaml")
    result = run_zhin("import", "fixtures/group-busy.jsonl", "fixtures/private-chat.jsonl",
                      "fixtures/legacy-upstream.jsonl", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert (folder / ".zhin" / "data.sqlite").is_file()
    return folder


def run_into_closed_pipe(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m zhin_cli ARGS`` whose stdout is a pipe nobody reads any more (``| head`` after its line)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "zhin_cli", *args], cwd=cwd, env=clean_env(), stdout=write,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, timeout=180)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", PIPED, ids=" ".join)
def test_a_reader_that_goes_away_ends_the_command_quietly_with_0(workspace: Path, args: list[str]) -> None:
    result = run_into_closed_pipe(args, workspace)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "error" not in result.stderr.lower()


def test_a_real_error_keeps_its_code_into_a_closed_pipe(workspace: Path) -> None:
    """Negative control: the broken pipe is forgiven, not every failure."""
    result = run_into_closed_pipe(["trace", "missing.jsonl"], workspace)
    assert result.returncode == 3 and "zhin: error: no such file" in result.stderr


def test_head_sees_status_0_under_pipefail(workspace: Path) -> None:
    script = f"set -o pipefail; {shlex.quote(sys.executable)} -m zhin_cli trace --all --show-request fixtures/group-busy.jsonl | head -1"
    result = subprocess.run(["bash", "-c", script], cwd=workspace, env=clean_env(), capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1 and "Traceback" not in result.stderr


# --- progress on a terminal stderr -------------------------------------------------------------------------------


def test_progress_is_drawn_when_stderr_is_a_terminal_even_if_stdout_is_piped(workspace: Path) -> None:
    code, stdout, terminal = run_with_terminal_stderr(["trace", "--all", "--json", "fixtures/group-busy.jsonl"],
                                                      workspace, clean_env())
    assert code == 0 and json.loads(stdout)["turns"] == 16
    assert "loading" in terminal  # before the session is read
    frames = [line for line in terminal.replace("\r", "\n").splitlines() if "replaying" in line]
    assert frames, terminal
    assert re.search(r"\b\d+/16\b", frames[0]), frames[0]  # the first frame of the bar has its total


def test_no_progress_when_asked_or_when_no_one_watches(workspace: Path) -> None:
    """Negative controls: ZHIN_NO_PROGRESS=1 on a terminal, and a stderr that is a pipe, get no bar."""
    env = clean_env()
    env["ZHIN_NO_PROGRESS"] = "1"
    code, _, terminal = run_with_terminal_stderr(["trace", "--all", "--json", "fixtures/group-busy.jsonl"], workspace, env)
    assert code == 0 and "replaying" not in terminal and "loading" not in terminal
    piped = subprocess.run([sys.executable, "-m", "zhin_cli", "trace", "--all", "fixtures/group-busy.jsonl"],
                           cwd=workspace, env=clean_env(), capture_output=True, text=True, timeout=180)
    assert piped.returncode == 0 and "replaying" not in piped.stderr and "loading" not in piped.stderr


def test_ctrl_c_while_the_bar_is_drawn_is_quiet_130_and_gives_the_cursor_back(tmp_path: Path) -> None:
    """Ctrl-C at any moment (here: with rich's live bar on the terminal) ends with 130, no traceback, and the
    terminal's cursor shown again."""
    session = tmp_path / "long.jsonl"
    made = run_zhin("fixtures", "synth", "--messages", "6000", "-o", session, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    leader, follower = pty.openpty()
    seen = bytearray()
    drawn = threading.Event()

    def drain() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                return
            if not data:
                return
            seen.extend(data)
            if b"replaying" in seen:
                drawn.set()

    reader = threading.Thread(target=drain)
    reader.start()
    proc = subprocess.Popen([sys.executable, "-m", "zhin_cli", "trace", "--all", "--json", str(session)], cwd=tmp_path,
                            env=clean_env(), stdout=subprocess.DEVNULL, stderr=follower, stdin=subprocess.DEVNULL,
                            preexec_fn=default_sigint)
    try:
        assert drawn.wait(timeout=120), bytes(seen)[-500:]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        proc.kill()
        proc.wait()
        os.close(follower)
        reader.join(timeout=30)
        os.close(leader)
    text = bytes(seen).decode("utf-8", "replace")
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert text.rfind("\x1b[?25h") > text.rfind("\x1b[?25l")  # the cursor, hidden by the bar, is shown again


# --- COLUMNS when piped -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("columns", "width"), [("60", 60), ("100", 100), ("20", 20), (None, 200), ("5", 200),
                                                ("wide", 200)])
def test_piped_output_takes_columns_else_stays_wide(monkeypatch: pytest.MonkeyPatch, columns: str | None,
                                                    width: int) -> None:
    from zhin_cli._cli import piped_width

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert piped_width() == width


def test_a_narrow_columns_reaches_the_tables(zhin: Run, workspace: Path) -> None:
    env = clean_env()
    env["COLUMNS"] = "60"
    narrow = zhin("sessions", cwd=workspace, env=env).stdout
    assert max(len(line) for line in narrow.splitlines()) <= 60 and GROUP_ID in narrow
    wide = zhin("sessions", cwd=workspace).stdout  # negative control: no COLUMNS, one wide table
    assert max(len(line) for line in wide.splitlines()) > 100 and GROUP_ID in wide


# --- examples and metavars in every --help ------------------------------------------------------------------------

TYPER_TYPE_LABEL = re.compile(r"<(?:bool|str|int|float|path|Path|list\[[^\]]*\]|int range|float range|datetime|uuid)>")


def test_the_type_label_check_sees_what_it_is_for() -> None:
    assert TYPER_TYPE_LABEL.search("│ --all   <bool>  Show every turn.")
    assert TYPER_TYPE_LABEL.search("│ files...  <list[Path]>  Session .jsonl files.")
    assert TYPER_TYPE_LABEL.search("--days  <int range> [x>=1]")
    assert not TYPER_TYPE_LABEL.search("DIR/NNNNN-<route>.json")  # a help text's own angle brackets


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p or "zhin")
def test_every_help_has_examples_and_conventional_metavars(zhin: Run, path: str) -> None:
    from zhin_cli._cli.examples import examples_for

    lines = examples_for(path)
    assert lines, f"no examples for `zhin {path}` in zhin_cli/_cli/examples.py"
    assert all(line.startswith("zhin ") for line in lines)
    env = clean_env()
    env["COLUMNS"] = "240"  # one example per line (check-capture's takes 215 characters)
    helped = zhin(*path.split(), "--help", env=env)
    assert helped.returncode == 0, helped.stderr
    assert "Examples:" in helped.stdout
    for line in lines:
        assert line in helped.stdout
    assert not TYPER_TYPE_LABEL.search(helped.stdout), TYPER_TYPE_LABEL.findall(helped.stdout)
    usage = next(line for line in helped.stdout.splitlines() if "Usage:" in line)
    assert "{" not in usage and "<" not in usage, usage


def example_runs(path: str) -> Iterator[tuple[str, list[str], str | None, int]]:
    """(line, arguments after zhin, stdout file or None, expected status) of each example of ``path``."""
    from zhin_cli._cli.examples import examples_for

    for line in examples_for(path):
        expected = re.search(r"#\s*exit (\d+)", line)
        words = shlex.split(line, comments=True)
        assert words[0] == "zhin", line
        output = None
        if ">" in words:
            at = words.index(">")
            output, words = words[at + 1], words[:at]
        yield line, words[1:], output, int(expected.group(1)) if expected else 0


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p or "zhin")
def test_every_example_runs_as_written(path: str, workspace: Path, tmp_path: Path) -> None:
    """Each command's examples, in order, in a fresh copy of the workspace: exit 0 or the code written beside."""
    from zhin_cli._cli.examples import LONG_RUNNING

    folder = tmp_path / "repo"
    shutil.copytree(workspace, folder)
    env = clean_env()
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # `zhin trust` records here, not in the user's home
    for line, arguments, output, expected in example_runs(path):
        if line.startswith(LONG_RUNNING):  # a server runs until stopped: its options must parse
            result = run_zhin(*arguments, "--help", cwd=folder, env=env)
            assert result.returncode == 0, (line, result.stderr)
            continue
        result = run_zhin(*arguments, cwd=folder, env=env)
        assert result.returncode == expected, (line, result.returncode, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, line
        if output is not None:
            (folder / output).write_text(result.stdout, encoding="utf-8")


def test_the_example_runner_fails_a_line_that_fails(workspace: Path, tmp_path: Path) -> None:
    """Negative control for the runner: a line naming a file nothing wrote exits 3, not 0."""
    result = run_zhin("trace", "fixtures/no-such-file.jsonl", cwd=workspace)
    assert result.returncode == 3


# --- zhin import without --db -------------------------------------------------------------------------------------


def session_ids(database: Path) -> list[str]:
    with sqlite3.connect(database) as connection:
        return [row[0] for row in connection.execute("SELECT session_id FROM agent_sessions ORDER BY session_id")]


def test_import_in_a_subfolder_writes_into_the_database_a_read_finds(zhin: Run, tmp_path: Path) -> None:
    assert zhin("import", FIXTURES / "group-busy.jsonl", cwd=tmp_path).returncode == 0
    sub = tmp_path / "notes" / "deeper"
    sub.mkdir(parents=True)
    result = zhin("import", FIXTURES / "private-chat.jsonl", cwd=sub)
    assert result.returncode == 0, result.stderr
    assert not (sub / ".zhin").exists()  # no second database that would hide the parent's
    assert len(session_ids(tmp_path / ".zhin" / "data.sqlite")) == 2
    assert "db: ../../.zhin/data.sqlite" in result.stderr  # the header names the database written
    listed = zhin("sessions", "--json", cwd=sub)
    assert {row["session_key"] for row in json.loads(listed.stdout)["sessions"]} == {GROUP_KEY, PRIVATE_KEY}


def test_import_with_no_database_upward_creates_one_here(zhin: Run, tmp_path: Path) -> None:
    result = zhin("import", FIXTURES / "private-chat.jsonl", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert session_ids(tmp_path / ".zhin" / "data.sqlite") == ["icqq:8596238:private:10002#1761800000000-1"]


def test_import_with_db_writes_only_there(zhin: Run, tmp_path: Path) -> None:
    """Negative control: an explicit --db (or ZHIN_DB) is where it writes, whatever is upward."""
    assert zhin("import", FIXTURES / "group-busy.jsonl", cwd=tmp_path).returncode == 0
    sub = tmp_path / "sub"
    sub.mkdir()
    assert zhin("import", FIXTURES / "private-chat.jsonl", "--db", "own.sqlite", cwd=sub).returncode == 0
    env = clean_env()
    env["ZHIN_DB"] = str(sub / "env.sqlite")
    assert zhin("import", FIXTURES / "legacy-upstream.jsonl", cwd=sub, env=env).returncode == 0
    assert len(session_ids(tmp_path / ".zhin" / "data.sqlite")) == 1
    assert len(session_ids(sub / "own.sqlite")) == 1 and len(session_ids(sub / "env.sqlite")) == 1


# --- stats cache: the period and the newest usage -----------------------------------------------------------------


def test_stats_cache_says_which_period_it_read_and_where_the_usage_is(zhin: Run, workspace: Path) -> None:
    empty = zhin("stats", "cache", "--days", "3", "--until", "2026-01-31", cwd=workspace)
    assert empty.returncode == 0, empty.stderr
    assert "period: the last 3 days (2026-01-28 23:59 UTC to 2026-01-31 23:59 UTC)" in empty.stdout
    assert "no usage in the last 3 days; newest 2025-10-30 07:40 UTC" in empty.stdout
    assert "┃" not in empty.stdout  # no table of zeros
    full = zhin("stats", "cache", "--days", "3", "--until", "2025-10-31", cwd=workspace)  # negative control
    assert "request(s) in it" in full.stdout and "no usage" not in full.stdout and "┃" in full.stdout
    assert "period: all logged usage" in zhin("stats", "cache", cwd=workspace).stdout


def test_stats_cache_json_has_iso_times_beside_the_epochs(zhin: Run, workspace: Path) -> None:
    data = json.loads(zhin("stats", "cache", "--days", "3", "--until", "2026-01-31", "--json", cwd=workspace).stdout)
    assert data["until"] == 1769903999999 and data["until_iso"] == "2026-01-31T23:59:59.999Z"
    assert data["newest_usage_iso"] == "2025-10-30T07:40:10.000Z" or data["newest_usage_iso"].startswith("2025-10-30T07:40")
    assert data["requests_in_period"] == 0
    whole = json.loads(zhin("stats", "cache", "--json", cwd=workspace).stdout)
    assert whole["since"] is None and whole["since_iso"] is None and whole["requests_in_period"] > 0


# --- database drivers are extras ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "module", "extra"), [("postgresql://u:secret@127.0.0.1:1/db", "psycopg", "postgres"),
                                                      ("mysql://u:secret@127.0.0.1:1/db", "pymysql", "mysql")])
def test_a_server_url_without_its_driver_names_the_extra(zhin: Run, monkeypatch: pytest.MonkeyPatch, url: str,
                                                         module: str, extra: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if the extra were not installed
    for args in (["sessions", "--db", url], ["import", FIXTURES / "private-chat.jsonl", "--db", url]):
        result = zhin(*args)
        assert result.returncode == 3
        line = one_error_line(result)
        assert line.endswith(f"needs the {'PostgreSQL' if extra == 'postgres' else 'MySQL/MariaDB'} driver: "
                             f"pip install 'zhin-cli[{extra}]'"), line
        assert "secret" not in result.stderr


def test_with_the_driver_installed_the_error_is_the_connection(zhin: Run) -> None:
    """Negative control: the driver is here, so what fails is connecting to a port nothing listens on."""
    result = zhin("sessions", "--db", "postgresql://u:secret@127.0.0.1:1/db")
    assert result.returncode == 3 and "pip install" not in result.stderr and "secret" not in result.stderr


# --- the header line ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["sessions"], ["stats", "cache"], ["facts", "show", GROUP_KEY],
                                  ["facts", "prune", "--dry-run"], ["export", PRIVATE_KEY]], ids=" ".join)
def test_commands_that_read_the_database_name_it_on_stderr(zhin: Run, workspace: Path, args: list[str]) -> None:
    result = zhin(*args, cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == "config: none (built-in defaults) · db: .zhin/data.sqlite"
    assert "db:" not in result.stdout


def test_json_output_has_no_header_line(zhin: Run, workspace: Path) -> None:
    """Negative control: --json (a document for a program) and a .jsonl session (no database) get no db header."""
    for args in (["sessions", "--json"], ["stats", "cache", "--json"], ["facts", "show", GROUP_KEY, "--json"]):
        assert "db:" not in zhin(*args, cwd=workspace).stderr
    assert "db:" not in zhin("export", "fixtures/private-chat.jsonl", cwd=workspace).stderr


def test_what_a_command_writes_while_the_bar_is_live_stays_on_stdout(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """rich's Progress routes sys.stdout through its own console unless told not to: a streamed --jsonl line written
    while the bar is drawn would land on stderr. The bar is forced on; the line must reach stdout alone."""
    import zhin_cli._cli as cli

    monkeypatch.setattr(cli, "progress_wanted", lambda: True)
    with cli.replay_progress("replaying") as update:
        assert update is not None  # negative control: the bar really is live here
        update(1, 2)
        print('{"turn": 1}')
    captured = capsys.readouterr()
    assert captured.out == '{"turn": 1}\n'
    assert '{"turn": 1}' not in captured.err


def test_help_paragraphs_are_reflowed_to_the_width(zhin: Any) -> None:
    """A docstring's line breaks are not the terminal's: at 200 columns a paragraph of eval's help is one line
    (it was cut after "With" and "and", where the docstring's lines ended)."""
    env = clean_env()
    env["COLUMNS"] = "200"
    text = zhin("eval", "--help", env=env).stdout
    assert "(found upward, or --config). With --base X --head Y they run under both" in text
    # negative control: paragraphs stay apart, and the examples keep one line each
    assert re.search(r"\n *\n *Exit status:", text)
    examples = text[text.index("Examples:"):]
    assert "zhin eval" in examples.splitlines()[1]


def test_reflow_keeps_list_items_and_indented_lines() -> None:
    from zhin_cli._cli.examples import reflow

    assert reflow("one\ntwo\n\nthree") == "one two\n\nthree"
    assert reflow("items:\n- a\n- b\n  more") == "items:\n- a\n- b more"
    assert reflow("code:\n    x = 1") == "code:\n    x = 1"
    assert reflow(None) is None

"""The broken-input corpus (issue "Hardening", item 2): every file in ``tests/corpus/`` through every command that
reads that kind of input, run as a user runs it — a subprocess, ``cwd`` a temporary folder, no ``ZHIN_*`` variables.

What each file must do is in ``tests/corpus/manifest.json`` (and, for the bad-JSONL files at the top level, in
``cases.json``); a file without an entry fails. A failure must exit with the documented status, print nothing on
stdout and exactly one stderr line ``zhin: error: <where>: …`` naming the file and line (JSONL, YAML) or the
database and table row, and never a traceback. Binary databases and 5 MB lines are built here, not committed.

Speed: a fresh interpreter spends ~0.8 s importing the CLI before it reads a byte, and the corpus needs ~500 runs.
So each xdist worker starts one runner process (this file with ``--serve``) that imports ``zhin_cli`` once and then
*forks* a child per run: the child chdirs, points fds 0/1/2 at /dev/null and two files, and calls the console entry
point, exactly what ``python -m zhin_cli`` does after its imports. ``test_runner_matches_a_fresh_interpreter``
checks that on a sample; without ``os.fork`` every run is a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS, FIXTURES, clean_env, js, write_upstream_db
from sqlalchemy import create_engine

from zhin_cli.store import schema

MANIFEST: dict[str, Any] = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))
TOP_LEVEL: dict[str, dict[str, Any]] = {
    name: case for name, case in json.loads((CORPUS / "cases.json").read_text(encoding="utf-8")).items() if not name.startswith("_")
}
KINDS: dict[str, dict[str, int]] = MANIFEST["kinds"]
ST_CHAT = CORPUS.parent / "st_golden" / "runs" / "plain" / "chat.jsonl"  # a good SillyTavern chat (st-card cases)
FIXTURE = FIXTURES / "private-chat.jsonl"  # a good session (config cases), and what `import` writes into a database
SID = "test:1:group:42#1700000000000-1"
T0 = 1_700_000_000_000
HUGE = 5_000_000  # characters in a generated 5 MB field


# ---------------------------------------------------------------------------------------------------------------
# running the CLI


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str


class Runner:
    """Runs ``zhin ARGV`` in ``cwd`` as a child process; see the module docstring."""

    def __init__(self) -> None:
        env = {**clean_env(), "PYTHONDONTWRITEBYTECODE": "1"}  # corpus plugins are imported: no __pycache__ in tests/
        self.env = env
        self.server: subprocess.Popen[bytes] | None = None
        if hasattr(os, "fork"):
            self.server = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)

    def __call__(self, argv: list[str], cwd: Path, timeout: int = 120) -> Result:
        if self.server is None:
            proc = subprocess.run([sys.executable, "-m", "zhin_cli", *argv], cwd=cwd, env=self.env, capture_output=True,
                                  text=True, encoding="utf-8", errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
            return Result(proc.returncode, proc.stdout, proc.stderr)
        assert self.server.stdin is not None and self.server.stdout is not None
        self.server.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "timeout": timeout}).encode() + b"\n")
        self.server.stdin.flush()
        line = self.server.stdout.readline()
        if not line:
            raise RuntimeError(f"the corpus runner died (exit {self.server.wait()})")
        return Result(**json.loads(line))

    def close(self) -> None:
        if self.server is not None and self.server.stdin is not None:
            self.server.stdin.close()
            self.server.wait(timeout=30)


@pytest.fixture(scope="session")
def cli() -> Iterator[Runner]:
    runner = Runner()
    yield runner
    runner.close()


def _serve() -> None:  # pragma: no cover - runs in the runner process
    """Read ``{"argv", "cwd", "timeout"}`` lines on stdin; fork a child per line; answer ``{"rc", "stdout", "stderr"}``."""
    import signal
    import tempfile
    import traceback

    # What a run imports before it does anything, and what the commands import lazily: pay for it once, here.
    # (Modules only: no encoding is loaded, no state is warmed, every child starts as a fresh run would.)
    import sqlalchemy.dialects.sqlite  # noqa: F401
    import tiktoken_ext.openai_public  # noqa: F401
    import typer._adapters  # noqa: F401 - typer imports it (and pydantic) while parsing options

    import zhin_cli.tools.diff.prefix  # noqa: F401
    import zhin_cli.tools.trace.trace  # noqa: F401
    from zhin_cli._cli import main

    folder = Path(tempfile.mkdtemp(prefix="zhin-corpus-runner-"))
    out_path, err_path = folder / "stdout", folder / "stderr"
    try:
        for raw in iter(sys.stdin.buffer.readline, b""):
            job = json.loads(raw)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                code = 70
                try:
                    os.chdir(job["cwd"])
                    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                            (2, err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                        opened = os.open(path, flags, 0o600)
                        os.dup2(opened, fd)
                        os.close(opened)
                    sys.stdin = open(os.devnull)  # the runner's own stdin buffer is not the child's
                    sys.argv = ["zhin", *job["argv"]]
                    signal.alarm(int(job["timeout"]))
                    try:
                        main()
                        code = 0
                    except SystemExit as exc:  # as the interpreter does at exit
                        if exc.code is None or isinstance(exc.code, int):
                            code = exc.code or 0
                        else:
                            print(exc.code, file=sys.stderr)
                            code = 1
                    except BaseException:
                        traceback.print_exc()
                        code = 1
                    for stream in (sys.stdout, sys.stderr):
                        try:
                            stream.flush()
                        except Exception:
                            code = code or 120
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            answer = {
                "rc": os.waitstatus_to_exitcode(status),
                "stdout": out_path.read_bytes().decode("utf-8", "replace"),
                "stderr": err_path.read_bytes().decode("utf-8", "replace"),
            }
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------------
# cases


@dataclass
class Case:
    name: str  # path under tests/corpus/, or "<kind>/<name>" of a generated case
    kind: str
    exits: dict[str, int]
    error: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    line: int | None = None
    row: str | None = None

    @staticmethod
    def of(name: str, entry: dict[str, Any]) -> Case:
        kind = entry["kind"]
        exits = {**KINDS[kind], **entry.get("exit", {})}
        if "commands" in entry:  # only some of the kind's commands apply (e.g. a FIFO is no git ref for --base)
            exits = {command: code for command, code in exits.items() if command in entry["commands"]}
        return Case(name, kind, exits, entry.get("error", ""), entry.get("errors", {}), entry.get("line"), entry.get("row"))


def file_cases() -> dict[str, Case]:
    cases = {name: Case.of(name, {"kind": "jsonl", **entry}) for name, entry in TOP_LEVEL.items()}
    for name, entry in MANIFEST["files"].items():
        assert name not in cases, f"{name} is in both cases.json and manifest.json"
        cases[name] = Case.of(name, entry)
    return cases


FILE_CASES = file_cases()
GENERATED = {name: Case.of(name, entry) for name, entry in MANIFEST["generated"].items()}


def command_lines(case: Case, source: Path, tmp: Path) -> Iterator[tuple[str, list[str], Path, str]]:
    """``(command, argv, cwd, where)`` for every command the case's kind is run with; ``where`` is how the error
    must name the input. A database is copied for each command (``import`` writes into it)."""
    for number, command in enumerate(case.exits):
        folder = tmp / f"{number}-{command.split()[0]}"
        folder.mkdir()
        if case.kind == "jsonl":
            where = f"{source}:{case.line}" if case.line is not None else str(source)
            argv = {"trace": ["trace", str(source)], "export": ["export", str(source)], "prefix-diff": ["prefix-diff", str(source)],
                    "import": ["import", str(source), "--db", str(folder / "imported.sqlite")]}[command]
            yield command, argv, folder, where
        elif case.kind == "config":
            where = f"{source}:{case.line}" if case.line is not None else str(source)
            argv = {"trace": ["trace", str(FIXTURE), "--config", str(source)],
                    "prefix-diff": ["prefix-diff", str(FIXTURE), "--config", str(source)],
                    "prefix-diff --base": ["prefix-diff", str(FIXTURE), "--base", str(source), "--head", str(source)]}[command]
            yield command, argv, folder, where
        elif case.kind == "db":
            db = folder / ".zhin" / "data.sqlite"
            db.parent.mkdir()
            shutil.copyfile(source, db)
            where = f"{db}: {case.row}" if case.row else str(db)
            if command == "sessions (found upward)":
                (folder / "work").mkdir()
                yield command, ["sessions"], folder / "work", where
                continue
            argv = {"trace": ["trace", SID, "--db", str(db)], "export": ["export", SID, "--db", str(db)],
                    "sessions": ["sessions", "--db", str(db)], "prefix-diff": ["prefix-diff", SID, "--db", str(db)],
                    "import": ["import", str(FIXTURE), "--db", str(db)]}[command]
            yield command, argv, folder, where
        elif case.kind == "st-chat":  # a SillyTavern chat file: imported, and traced through the st: source
            where = f"{source}:{case.line}" if case.line is not None else str(source)
            argv = {"import --from sillytavern": ["import", "--from", "sillytavern", str(source), "--db", str(folder / "imported.sqlite")],
                    "trace st:": ["trace", f"st:{source}"]}[command]
            yield command, argv, folder, where
        elif case.kind == "st-card":  # a character card given with a good ST chat (a PNG error names no line)
            where = f"{source}:{case.line}" if case.line is not None else str(source)
            argv = ["import", "--from", "sillytavern", str(ST_CHAT), "--card", str(source), "--db", str(folder / "imported.sqlite")]
            yield command, argv, folder, where
        elif case.kind in ("request", "case"):  # a request-diff side, an eval case file
            where = f"{source}:{case.line}" if case.line is not None else str(source)
            argv = {"request-diff": ["request-diff", str(source), str(source)], "eval": ["eval", str(source)]}[command]
            yield command, argv, folder, where
        else:
            raise AssertionError(f"{case.name}: no commands for kind {case.kind!r}")


def problems_with(command: str, result: Result, case: Case, where: str, expected: int) -> list[str]:
    """What is wrong with one run ([] if nothing)."""
    problems = []
    if "Traceback" in result.stdout or "Traceback" in result.stderr:
        problems.append("a traceback")
    if result.rc != expected:
        problems.append(f"exit {result.rc}, expected {expected}")
    if expected not in (0, 1):
        fragment = case.errors.get(command, case.error)
        lines = result.stderr.split("\n")
        if result.stdout:
            problems.append(f"stdout is not empty: {result.stdout[:200]!r}")
        if len(lines) != 2 or lines[1] != "":
            problems.append(f"stderr is not one line ({len(lines) - 1} lines, {len(result.stderr)} chars)")
        if not lines[0].startswith(f"zhin: error: {where}: "):
            problems.append(f"stderr does not start with 'zhin: error: {where}: '")
        if fragment not in lines[0]:
            problems.append(f"stderr lacks {fragment!r}")
        if len(lines[0]) > 600:
            problems.append(f"the error line is {len(lines[0])} characters long")
    return [f"{command}: {'; '.join(problems)}\n    stderr: {result.stderr[-1500:]!r}"] if problems else []


def check(cli: Runner, case: Case, source: Path, tmp: Path) -> None:
    problems = []
    runs = 0
    for command, argv, cwd, where in command_lines(case, source, tmp):
        result = cli(argv, cwd)
        runs += 1
        problems += problems_with(command, result, case, where, case.exits[command])
        if (command.startswith("import") and case.kind in ("jsonl", "st-chat", "st-card") and case.exits[command] != 0
                and (cwd / "imported.sqlite").exists()):
            problems.append("import: wrote a database although the file is bad")
    assert runs == len(case.exits)
    assert not problems, f"{case.name}:\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------------------------------------------------------
# the committed files


def test_every_corpus_file_has_an_entry() -> None:
    on_disk = {p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    on_disk -= {"cases.json", "manifest.json"}
    assert sorted(on_disk - set(FILE_CASES)) == [], "corpus files without an entry in manifest.json (or cases.json)"
    assert sorted(set(FILE_CASES) - on_disk) == [], "entries without a file"
    for name, case in FILE_CASES.items():
        assert case.kind in KINDS, name
        assert case.exits.keys() <= {*KINDS[case.kind], "import"}, name
        failing = any(code not in (0, 1) for code in case.exits.values())
        if failing:
            assert case.error, f"{name}: a failing case needs an error fragment"
            # a card's JSON errors name a line, its PNG and field errors the file
            assert case.kind == "st-card" or (case.line is not None) == (case.kind in ("jsonl", "config", "request", "case", "st-chat")), \
                f"{name}: JSONL, JSON and YAML errors name a line"
        if case.kind == "support":
            users = MANIFEST["files"][name]["used_by"]
            assert users and all(u in FILE_CASES for u in users), name
    cases = [c for c in FILE_CASES.values() if c.kind != "support"]
    assert len(cases) >= 50


@pytest.mark.parametrize("name", sorted(n for n, c in FILE_CASES.items() if c.kind not in ("support", "preset")))
def test_corpus_file(cli: Runner, name: str, tmp_path: Path) -> None:
    check(cli, FILE_CASES[name], CORPUS / name, tmp_path.resolve())


# ---------------------------------------------------------------------------------------------------------------
# generated cases: databases (binary files are hard to review) and 5 MB lines (too big to commit)


def _user(t: int, text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": T0 + t * 1000,
            "actor": {"subjectId": "10002", "displayName": "Alice"}}


def _assistant(t: int) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "timestamp": T0 + t * 1000,
            "provider": "openai", "model": "gpt-4o"}


def _rows() -> list[dict[str, Any]]:
    return [{"payload": _user(1)}, {"payload": _assistant(2)}, {"payload": _user(3)}, {"payload": _assistant(4)}]


def _with_row2(path: Path, **row: Any) -> None:
    rows = _rows()
    rows[1] = {"role": "assistant", "timestamp": T0, **row}
    write_upstream_db(path, SID, rows)


def _sql(path: Path, *statements: str, params: tuple[Any, ...] = ()) -> None:
    connection = sqlite3.connect(path)
    try:
        for statement in statements:
            connection.execute(statement, params if "?" in statement else ())
        connection.commit()
    finally:
        connection.close()


def _good_then(path: Path, *statements: str, params: tuple[Any, ...] = (), **options: Any) -> None:
    """A good session in upstream's tables, then ``statements``."""
    write_upstream_db(path, SID, _rows(), **options)
    _sql(path, *statements, params=params)


def _zhin_tables(path: Path, *statements: str) -> None:
    """A good session in upstream's tables plus zhin's own (profiles, scene changes, members), then ``statements``."""
    write_upstream_db(path, SID, _rows())
    engine = create_engine(f"sqlite:///{path}")
    schema.metadata.create_all(engine)
    engine.dispose()
    _sql(path, *statements)


def _good_db_bytes(tmp: Path) -> bytes:
    path = tmp / "good.sqlite"
    write_upstream_db(path, SID, _rows() * 40)
    return path.read_bytes()


PROFILE = "INSERT INTO ai_session_profiles (session_key, platform, {column}) VALUES ('test:1:group:42', 'test', '{value}')"

DB_BUILDERS: dict[str, Callable[[Path], object]] = {
    "db/payload-not-json": lambda p: _with_row2(p, payload='{"role":"assistant","content":[{"type":"text"'),
    "db/payload-not-utf8": lambda p: _good_then(p, "UPDATE agent_messages SET payload = ? WHERE id = 2", params=(b"\xff\xfe{\x00",)),
    "db/payload-is-array": lambda p: _with_row2(p, payload="[1, 2]"),
    "db/payload-unknown-role": lambda p: _with_row2(p, payload={**_assistant(2), "role": "system"}),
    "db/payload-timestamp-overflow": lambda p: _with_row2(p, payload={**_assistant(2), "timestamp": 2**62}),
    "db/payload-orphan-tool-result": lambda p: _with_row2(p, role="toolResult", payload={
        "role": "toolResult", "toolCallId": "call_x", "toolName": "weather", "content": [{"type": "text", "text": "晴"}],
        "isError": False, "timestamp": T0 + 2000}),
    "db/extra-not-json": lambda p: _with_row2(p, payload=_assistant(2), extra='{"sender": '),
    "db/branch-cycle": lambda p: write_upstream_db(p, SID, [{"payload": _user(1), "parent_id": 3}, {"payload": _assistant(2)},
                                                              {"payload": _user(3)}], active_leaf=3),
    "db/branch-missing-row": lambda p: write_upstream_db(p, SID, _rows(), active_leaf=99),
    "db/summary-anchor-text": lambda p: write_upstream_db(p, SID, _rows(), summaries=[
        {"summary": "they said hi", "anchor_message_id": "the second one", "created_at": T0 + 2500}]),
    "db/summary-null": lambda p: _good_then(p, "UPDATE agent_summaries SET summary = NULL", summaries=[
        {"summary": "they said hi", "anchor_message_id": 2, "created_at": T0 + 2500}]),
    "db/profile-admins-not-json": lambda p: _zhin_tables(p, PROFILE.format(column="admins", value="[10002,")),
    "db/profile-admins-not-list": lambda p: _zhin_tables(p, PROFILE.format(column="admins", value='"10002"')),
    "db/profile-member-count-text": lambda p: _zhin_tables(p, PROFILE.format(column="member_count", value="many")),
    "db/profile-timezone-unknown": lambda p: _zhin_tables(p, PROFILE.format(column="timezone", value="Mars/Olympus_Mons")),
    "db/scene-change-not-object": lambda p: _zhin_tables(
        p, f"INSERT INTO zhin_scene_changes (session_id, timestamp, changes) VALUES ('{SID}', {T0 + 2500}, '[\"新群名\"]')"),
    "db/scene-change-timestamp-text": lambda p: _zhin_tables(
        p, f"INSERT INTO zhin_scene_changes (session_id, timestamp, changes) VALUES ('{SID}', 'noon', '{{\"scene_name\": \"新群名\"}}')"),
    "db/member-updated-at-text": lambda p: _zhin_tables(
        p, "INSERT INTO ai_scene_members (platform, scene_key, user_id, card, updated_at) VALUES ('test', 'test:1:group:42', '10002', '明明', 'today')"),
    "db/no-zhin-tables": lambda p: _sql(p, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)", "INSERT INTO notes (body) VALUES ('hi')"),
    "db/sessions-table-missing-column": lambda p: _good_then(p, "ALTER TABLE agent_sessions RENAME COLUMN session_key TO key"),
    "db/random-bytes": lambda p: p.write_bytes(random.Random(41).randbytes(8192)),
    "db/truncated": lambda p: p.write_bytes(_good_db_bytes(p.parent)[: 4096 + 100]),
    "db/header-then-garbage": lambda p: p.write_bytes(b"SQLite format 3\x00" + random.Random(42).randbytes(4096)),
}


def _session_line() -> str:
    return js({"type": "session", "session_id": SID, "session_key": "test:1:group:42", "timezone": "Asia/Shanghai"})


def _message(row_id: Any, message: dict[str, Any]) -> str:
    return js({"type": "message", **message, "id": row_id})


def _huge_text() -> str:
    return ("群聊 lorem ipsum 12345 — " * (HUGE // 20))[:HUGE]


def _jsonl(path: Path, fourth: str) -> None:
    """Session, an exchange, ``fourth`` (line 4), another exchange."""
    lines = [_session_line(), _message(1, _user(1)), _message(2, _assistant(2)), fourth, _message(10, _user(10)), _message(11, _assistant(11))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


JSONL_BUILDERS: dict[str, Callable[[Path], object]] = {
    "jsonl/huge-valid-line": lambda p: _jsonl(p, _message(3, _user(3, _huge_text()))),
    "jsonl/huge-broken-line": lambda p: _jsonl(p, _message(3, _user(3, _huge_text()))[:-40]),
    "jsonl/huge-id": lambda p: _jsonl(p, _message(_huge_text(), _user(3))),
    "jsonl/huge-role": lambda p: _jsonl(p, _message(3, {**_user(3), "role": _huge_text()})),
    "jsonl/huge-line-type": lambda p: _jsonl(p, js({"type": _huge_text(), "timestamp": T0})),
    "jsonl/huge-timestamp-string": lambda p: _jsonl(p, _message(3, {**_user(3), "timestamp": _huge_text()})),
    "jsonl/deeply-nested": lambda p: _jsonl(p, "[" * 100_000 + "]" * 100_000),
}

# Issue 14 §3: lone surrogates in every kind of string a member or the bot controls, integers past Python's digit
# limit or past a database column, and files that are not files (a FIFO blocked every reader forever).
def _surrogate_in(field: str) -> str:
    """Line 4 with ``\\ud800`` in ``field`` (JSON.stringify writes a lone surrogate as this escape)."""
    line: dict[str, Any] = {"type": "message", **_user(3), "id": 3}
    if field.startswith("actor."):
        line["actor"] = {**line["actor"], field.split(".", 1)[1]: "x\ud800"}
    elif field == "text":
        line["content"] = [{"type": "text", "text": "x\ud800"}]
    elif field == "key":
        line["x\udfff"] = 1
    else:
        line[field] = "x\ud800"
    return json.dumps(line)  # ASCII: the escape, not the character


SURROGATE_FIELDS = ["text", "actor.displayName", "actor.card", "actor.title", "actor.subjectId", "messageId", "replyTo", "name", "key"]
JSONL_BUILDERS.update({f"jsonl/lone-surrogate-{field.replace('.', '-')}": (lambda f: lambda p: _jsonl(p, _surrogate_in(f)))(field)
                       for field in SURROGATE_FIELDS})
JSONL_BUILDERS.update({
    "jsonl/lone-surrogate-summary": lambda p: _jsonl(p, json.dumps({"type": "summary", "timestamp": T0 + 2500, "summary": "\udc00",
                                                                   "anchor_message_id": 2})),
    "jsonl/lone-surrogate-member-card": lambda p: _jsonl(p, json.dumps({"type": "member", "timestamp": T0 + 2500, "user_id": "10002",
                                                                       "card": "\ud800"})),
    "jsonl/lone-surrogate-scene-name": lambda p: _jsonl(p, json.dumps({"type": "scene", "timestamp": T0 + 2500, "scene_name": "\ud800"})),
    "jsonl/integer-5000-digits-id": lambda p: _jsonl(p, _message(3, _user(3)).replace('"id":3', '"id":' + "9" * 5000)),
    "jsonl/integer-5000-digits-timestamp": lambda p: _jsonl(p, _message(3, _user(3)).replace(str(T0 + 3000), "1" * 5000)),
    "jsonl/integer-1e30-anchor": lambda p: _jsonl(p, js({"type": "summary", "timestamp": T0 + 2500, "summary": "hi",
                                                         "anchor_message_id": 10**30})),
    "jsonl/integer-1e30-actor-muted-until": lambda p: _jsonl(p, _message(3, {**_user(3), "actor": {"subjectId": "1", "mutedUntil": 10**30}})),
    "jsonl/integer-1e30-session-member-count": lambda p: p.write_text(
        "\n".join([js({"type": "session", "session_id": SID, "scene": {"member_count": -(10**30)}}), _message(1, _user(1))]) + "\n",
        encoding="utf-8"),
})

OTHER_BUILDERS: dict[str, Callable[[Path], object]] = {
    "config/fifo": os.mkfifo,
    "request/fifo": os.mkfifo,
    "case/fifo": os.mkfifo,
}

BUILDERS = {**DB_BUILDERS, **JSONL_BUILDERS, **OTHER_BUILDERS}
SOURCE_NAMES = {"jsonl": "input.jsonl", "db": "input.sqlite", "config": "input.yaml", "request": "input.json", "case": "input.yaml"}


def test_every_generated_case_has_an_entry() -> None:
    assert sorted(BUILDERS) == sorted(GENERATED)
    for name, case in GENERATED.items():
        assert name.split("/")[0] == case.kind, name
        assert case.row is None or case.kind == "db", name


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_case(cli: Runner, name: str, tmp_path: Path) -> None:
    tmp = tmp_path.resolve()
    case = GENERATED[name]
    source = tmp / SOURCE_NAMES[case.kind]
    BUILDERS[name](source)
    if name.startswith("jsonl/huge"):
        assert source.stat().st_size > HUGE
    runs = tmp / "runs"
    runs.mkdir()
    check(cli, case, source, runs)


def test_huge_valid_line_round_trips(cli: Runner, tmp_path: Path) -> None:
    """The 5 MB field comes back out of ``export`` whole."""
    source = tmp_path / "huge.jsonl"
    JSONL_BUILDERS["jsonl/huge-valid-line"](source)
    result = cli(["export", str(source)], tmp_path)
    assert result.rc == 0, result.stderr
    assert _huge_text() in result.stdout


# ---------------------------------------------------------------------------------------------------------------
# bad command lines


@pytest.mark.parametrize("name", sorted(MANIFEST["invocations"]))
def test_invocation(cli: Runner, name: str, tmp_path: Path) -> None:
    entry = MANIFEST["invocations"][name]
    tmp = tmp_path.resolve()
    values = {"fixture": str(FIXTURE), "tmp": str(tmp), "corpus": str(CORPUS)}
    argv = [arg.format(**values) for arg in entry["argv"]]
    result = cli(argv, tmp)
    assert "Traceback" not in result.stdout + result.stderr
    assert result.rc == entry["exit"], (result.rc, result.stderr)
    if entry["exit"] in (0, 1):
        return
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n"), result.stderr
    assert result.stderr.startswith("zhin: error: "), result.stderr
    assert entry["error"].format(**values) in result.stderr, result.stderr


# ---------------------------------------------------------------------------------------------------------------
# the runner itself


SAMPLE = [("jsonl/truncated-last-line.jsonl", "prefix-diff"), ("config/plugin-register-raises.yaml", "trace"),
          ("db/text-file.sqlite", "sessions (found upward)"), ("accepted/time-backwards.jsonl", "trace")]


@pytest.mark.parametrize(("name", "command"), SAMPLE)
def test_runner_matches_a_fresh_interpreter(cli: Runner, name: str, command: str, tmp_path: Path) -> None:
    """The forking runner and ``python -m zhin_cli`` give the same exit, stdout and stderr."""
    lines = {c: (argv, cwd) for c, argv, cwd, _where in command_lines(FILE_CASES[name], CORPUS / name, tmp_path.resolve())}
    argv, cwd = lines[command]
    forked = cli(argv, cwd)
    fresh = subprocess.run([sys.executable, "-m", "zhin_cli", *argv], cwd=cwd, env=cli.env, capture_output=True, text=True,
                           encoding="utf-8", timeout=120, stdin=subprocess.DEVNULL)
    assert (forked.rc, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.rc == FILE_CASES[name].exits[command]


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    _serve()

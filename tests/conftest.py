"""Shared test helpers: paths, the CLI runners (in this process, and as a real subprocess), and an upstream-shaped
SQLite builder.

Everything here works in ``tmp_path`` and keeps no state between tests, so the suite runs under pytest-xdist.

Most CLI tests check what a command prints and its exit status for some input: ``zhin`` (the fixture) runs the
command in this process — the same ``zhin_cli._cli.main`` the console script calls, with its own argv, environment,
working directory, streams and signal handlers, all put back afterwards — because a fresh interpreter per call
(about a second to import everything) was most of the suite's time. ``zhin_process`` starts the real
``python -m zhin_cli`` for what only a process shows: the entry points, signals, closed or unwritable file
descriptors, a hard timeout.

A child a test sends SIGINT starts with ``preexec_fn=default_sigint`` (the suite may have inherited SIGINT ignored),
and no test leaves a process behind: tests/leftovers.py, registered below, fails the run on one.
"""

from __future__ import annotations

import gc
import io
import json
import os
import pty
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import leftovers
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CORPUS = Path(__file__).resolve().parent / "corpus"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def corpus_dir() -> Path:
    return CORPUS


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("leftovers"):  # unless given as -p leftovers
        config.pluginmanager.register(leftovers, "leftovers")  # no test leaves a process behind


def default_sigint() -> None:
    """``preexec_fn`` of every child a test sends SIGINT: the child starts with SIGINT's default disposition.

    A process started with SIGINT ignored (``make test &`` from a script: the shell ignores SIGINT in background
    jobs) passes that on to its children, and a zhin started so keeps ignoring it, as it should (zhin_cli.signals):
    a test of Ctrl-C must not depend on how the suite was started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_process(process: subprocess.Popen[Any], signum: int, timeout: float) -> tuple[Any, Any]:
    """Send ``signum`` and collect the process's output; if it is still running after ``timeout``, kill it (it never
    outlives the test) and raise ``subprocess.TimeoutExpired``."""
    if process.poll() is None:
        process.send_signal(signum)
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise


def clean_env() -> dict[str, str]:
    """The current environment without ``ZHIN_*`` options (they would change what the CLI does)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZHIN_")}
    env["NO_COLOR"] = "1"
    env.pop("COLUMNS", None)
    env.pop("TZ", None)  # trace reads TZ last (after --timezone, zhin.yaml, the data): the suite never depends on the shell's
    return env


def run_zhin_process(*args: object, cwd: Path, timeout: float = 180, env: Mapping[str, str] | None = None,
                     input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m zhin_cli ARGS…`` as a real process in ``cwd``, with ``clean_env()`` (or ``env``)."""
    return subprocess.run(
        [sys.executable, "-m", "zhin_cli", *map(str, args)],
        cwd=cwd,
        env=dict(env) if env is not None else clean_env(),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
    )


# Python's own warning filters when no -W option is given (a subprocess starts with these, not with pytest's).
_DEFAULT_WARNING_FILTERS = (
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, None),
    ("ignore", PendingDeprecationWarning, None),
    ("ignore", ImportWarning, None),
    ("ignore", ResourceWarning, None),
)
_PACKAGE = ROOT / "zhin_cli"
_INSTALLED = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})


def _text_stream(data: bytes = b"") -> io.TextIOWrapper:
    # stdout/stderr of the real process: UTF-8 text, a lone surrogate written as its escape (Python's stderr rule)
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="backslashreplace", newline=None)


def _read_back(stream: io.TextIOWrapper) -> str:
    """What the parent of a real process reads in text mode: UTF-8, universal newlines."""
    stream.flush()
    raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
    return raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


@contextmanager
def _process_state(arguments: list[str], cwd: Path, env: Mapping[str, str], stdin: str) -> Iterator[tuple[io.TextIOWrapper, io.TextIOWrapper]]:
    """Give a command what a fresh process would have, and take it all back afterwards: argv, environment, working
    directory, standard streams, signal handlers, excepthook, warning filters, sys.path, the secrets it remembered
    for redaction, and the plugin modules it imported."""
    import zhin_cli.core.redact as redact
    import zhin_cli.signals as signals

    saved_argv, saved_path, saved_cwd = sys.argv, list(sys.path), os.getcwd()
    saved_env = dict(os.environ)
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_hook = sys.excepthook  # typer's app() installs its own
    saved_handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    saved_modules = set(sys.modules)
    saved_secrets = set(redact._remembered)  # credentials a command met are masked for the rest of *its* process
    stdout, stderr = _text_stream(), _text_stream()
    try:
        sys.argv = ["zhin", *arguments]
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
        sys.stdout, sys.stderr = stdout, stderr
        signals.SIGNALLED.clear()
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category, module in reversed(_DEFAULT_WARNING_FILTERS):
                warnings.filterwarnings(action, category=category, module=module or "")
            yield stdout, stderr
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.excepthook = saved_hook
        for signum, handler in saved_handlers.items():
            signal.signal(signum, handler)
        signals.SIGNALLED.clear()
        redact._remembered.clear()
        redact._remembered.update(saved_secrets)
        gc.unfreeze()  # freeze_loaded() froze the command's session: let the next collection have it
        _forget_plugin_modules(saved_modules)


def _forget_plugin_modules(before: set[str]) -> None:
    """Modules a command imported from outside the installed packages and the package itself (a ``module:function``
    plugin of a test's folder) are dropped, so the next test imports its own file of that name afresh."""
    for name in set(sys.modules) - before:
        file = getattr(sys.modules.get(name), "__file__", None)
        if not file:
            continue
        resolved = str(Path(file).resolve())
        if resolved.startswith(_INSTALLED) or Path(resolved).is_relative_to(_PACKAGE):
            continue
        del sys.modules[name]


def run_zhin(*args: object, cwd: Path, env: Mapping[str, str] | None = None, input: str | None = None,
             timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in this process: what ``run_zhin_process`` returns for the same call, a fresh interpreter aside.

    ``timeout`` is accepted for the subprocess runner's signature and not enforced here."""
    from zhin_cli._cli import main

    arguments = [str(a) for a in args]
    environment = dict(env) if env is not None else clean_env()
    # A child with piped streams sees no terminal: rich falls back to 80×25 for help and stderr, and piped stdout is
    # 200 wide unless COLUMNS is set (zhin_cli._cli.piped_width) — so COLUMNS is not set here either (under
    # pytest's capture this process has no terminal; with -s, help and stderr may take the terminal's width)
    environment.setdefault("LINES", "25")
    code: int
    with _process_state(arguments, cwd, environment, input or "") as (stdout, stderr):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except BaseException:  # what the interpreter would print for an uncaught exception, and its status
            traceback.print_exc(file=sys.stderr)
            code = 1
        out, err = _read_back(stdout), _read_back(stderr)
    return subprocess.CompletedProcess(["zhin", *arguments], code, out, err)


@pytest.fixture
def zhin(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the CLI with ARGS… in this process, in ``tmp_path`` (or ``cwd=``), with a clean environment."""

    def run(*args: object, cwd: Path | None = None, timeout: float = 180, input: str | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run_zhin(*args, cwd=cwd or tmp_path, env=env, input=input, timeout=timeout)

    return run


@pytest.fixture
def zhin_process(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m zhin_cli ARGS…`` as a real process in ``tmp_path`` (or ``cwd=``) with a clean environment."""

    def run(*args: object, cwd: Path | None = None, timeout: float = 180, input: str | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run_zhin_process(*args, cwd=cwd or tmp_path, timeout=timeout, env=env, input=input)

    return run


# Upstream zhin's agent tables as its SQLite dialect creates them (docs/spec/zhin-upstream.md §2.1–2.2):
# `text` → TEXT, `integer` → INTEGER, `primary: true` → PRIMARY KEY, CREATE TABLE IF NOT EXISTS. No foreign keys,
# no indexes we rely on, and agent_summaries has no id column.
UPSTREAM_DDL = """
CREATE TABLE IF NOT EXISTS agent_sessions (
  session_id TEXT, session_key TEXT, model TEXT DEFAULT '', status TEXT,
  active_leaf_message_id INTEGER, created_at INTEGER, updated_at INTEGER
);
CREATE TABLE IF NOT EXISTS agent_messages (
  id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, role TEXT NOT NULL, payload TEXT NOT NULL,
  parent_id INTEGER, extra TEXT DEFAULT '', timestamp INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS agent_summaries (
  session_id TEXT, summary TEXT, anchor_message_id INTEGER, branch_anchor_message_id INTEGER, created_at INTEGER
);
"""

LINEAR = object()


def js(value: Any) -> str:
    """``JSON.stringify``: compact, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def write_upstream_db(
    path: Path,
    session_id: str,
    rows: Sequence[dict[str, Any]],
    *,
    session_key: str | None = None,
    active_leaf: Any = LINEAR,
    summaries: Sequence[dict[str, Any]] = (),
) -> Path:
    """Write one session the way upstream stores it, with plain ``sqlite3``.

    Each row is ``{"payload": dict | str, "parent_id"?: int | None, "extra"?: dict | str, "role"?, "timestamp"?}``;
    a dict payload is stored as ``JSON.stringify`` would. Without ``parent_id`` a row's parent is the row before
    it. ``active_leaf`` defaults to the last row (pass ``None`` for a pre-branching database).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    try:
        connection.executescript(UPSTREAM_DDL)
        last: int | None = None
        for row in rows:
            payload = row["payload"]
            text = payload if isinstance(payload, str) else js(payload)
            role = row.get("role") or (payload.get("role") if isinstance(payload, dict) else "user")
            timestamp = row.get("timestamp") or (payload.get("timestamp") if isinstance(payload, dict) else 0)
            extra = row.get("extra", "")
            cursor = connection.execute(
                "INSERT INTO agent_messages (session_id, role, payload, parent_id, extra, timestamp) VALUES (?,?,?,?,?,?)",
                (session_id, role, text, row.get("parent_id", last), extra if isinstance(extra, str) else js(extra), timestamp),
            )
            last = cursor.lastrowid
        connection.execute(
            "INSERT INTO agent_sessions (session_id, session_key, model, status, active_leaf_message_id, created_at, updated_at)"
            " VALUES (?,?,?,?,?,?,?)",
            (session_id, session_key or session_id.split("#")[0], "", "active",
             last if active_leaf is LINEAR else active_leaf, 0, 0),
        )
        for summary in summaries:
            connection.execute(
                "INSERT INTO agent_summaries (session_id, summary, anchor_message_id, branch_anchor_message_id, created_at)"
                " VALUES (?,?,?,?,?)",
                (session_id, summary["summary"], summary["anchor_message_id"], None, summary.get("created_at", 0)),
            )
        connection.commit()
    finally:
        connection.close()
    return path


@pytest.fixture
def upstream_db() -> Callable[..., Path]:
    """``upstream_db(path, session_id, rows, **options)`` — see ``write_upstream_db``."""
    return write_upstream_db


def run_with_terminal_stderr(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """A real process whose stderr is a terminal (a pty) and whose stdout is a pipe; (status, stdout, terminal)."""
    leader, follower = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the process closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "zhin_cli", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=follower, stdin=subprocess.DEVNULL, timeout=180)
    finally:
        os.close(follower)
        reader.join(timeout=30)
        os.close(leader)
    terminal = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    return proc.returncode, proc.stdout.decode("utf-8"), terminal

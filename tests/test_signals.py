"""SIGTERM is handled like SIGINT (issue 14 §4): the CLI turns it into an exception in the main thread, so every
``finally``/``with`` cleanup runs (here: the temporary file of ``--output``), and exits 143 (SIGINT: 130) quietly.
A signal the parent ignores (``nohup``, a background job) stays ignored."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import clean_env, default_sigint, stop_process

from zhin_cli.store.jsonl import write_session
from zhin_cli.tools.fixtures.synth import SynthOptions, synthesize

MESSAGES = "150000"  # ~45 MB of JSONL: a few seconds of writing, long enough to be interrupted half-way


Start = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def start() -> Iterator[Start]:
    """``start(tmp_path, ARGS…, preexec_fn=…)``: ``zhin ARGS…`` as a process; killed at teardown if a failed test left
    it running."""
    started: list[subprocess.Popen[str]] = []

    def run(tmp_path: Path, *args: str, preexec_fn: Callable[[], object] = default_sigint) -> subprocess.Popen[str]:
        started.append(subprocess.Popen([sys.executable, "-m", "zhin_cli", *args], cwd=tmp_path, env=clean_env(),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        stdin=subprocess.DEVNULL, preexec_fn=preexec_fn))
        return started[-1]

    yield run
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _wait_for_partial_output(tmp_path: Path, proc: subprocess.Popen[str], timeout: float = 90) -> Path:
    """The temporary output file, once it holds some bytes (the command is writing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for path in tmp_path.iterdir():
            if path.name != "out.jsonl" and path.stat().st_size > 100_000:
                return path
            if path.name == "out.jsonl" and path.stat().st_size > 100_000:  # written in place (old behaviour)
                return path
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the command never started writing")


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_writing_leaves_nothing_and_exits_quietly(signum: int, status: int, tmp_path: Path,
                                                                 start: Start) -> None:
    proc = start(tmp_path, "fixtures", "synth", "--messages", MESSAGES, "-o", "out.jsonl")
    _wait_for_partial_output(tmp_path, proc)
    stdout, stderr = stop_process(proc, signum, timeout=60)
    assert proc.returncode == status, stderr
    assert (stdout, stderr) == ("", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a half-written output or its temporary file was left"


def test_a_signal_keeps_an_existing_output_intact(tmp_path: Path, start: Start) -> None:
    (tmp_path / "out.jsonl").write_text("yesterday's export\n", encoding="utf-8")
    proc = start(tmp_path, "fixtures", "synth", "--messages", MESSAGES, "-o", "out.jsonl")
    _wait_for_partial_output(tmp_path, proc)
    stop_process(proc, signal.SIGTERM, timeout=60)
    assert proc.returncode == 143
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
    assert (tmp_path / "out.jsonl").read_text(encoding="utf-8") == "yesterday's export\n"


def _ignore_sigterm() -> None:
    default_sigint()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def test_an_ignored_sigterm_stays_ignored(tmp_path: Path, start: Start) -> None:
    """Negative control: the handler is installed only over the default disposition."""
    proc = start(tmp_path, "fixtures", "synth", "--messages", "60000", "-o", "out.jsonl", preexec_fn=_ignore_sigterm)
    _wait_for_partial_output(tmp_path, proc)
    _, stderr = stop_process(proc, signal.SIGTERM, timeout=120)
    assert proc.returncode == 0, stderr
    assert (tmp_path / "out.jsonl").read_text(encoding="utf-8").count("\n") > 60000


def test_sigterm_while_reading_exits_143_quietly(tmp_path: Path, start: Start) -> None:
    """Any point of any command: here a replay of every turn (no output file involved)."""
    # A session long enough that its all-turn replay is still running when the signal comes, on any machine (a
    # replay costs milliseconds per turn; this one has hundreds of turns): the test never has to skip.
    session = tmp_path / "long.jsonl"
    with session.open("w", encoding="utf-8") as out:
        write_session(synthesize(SynthOptions(messages=20000, seed=3)), out)
    proc = start(tmp_path, "trace", str(session), "--all", "--json")
    time.sleep(2.0)
    assert proc.poll() is None, "the replay finished before the signal: make the session longer"
    _, stderr = stop_process(proc, signal.SIGTERM, timeout=60)
    assert (proc.returncode, stderr) == (143, "")


# A signal while the commands are still loading (about a second, several on a busy machine): the console script and
# ``python -m zhin_cli`` install the handlers before the heavy imports, so it ends with 143/130 and nothing on
# stderr too. The child sends the signal to itself at the moment ``zhin_cli._cli`` starts to import — a fixed point
# in time, not a sleep — through a finder placed first on ``sys.meta_path``.
_SIGNAL_WHILE_LOADING = """
import os, runpy, signal, sys
from importlib.metadata import entry_points

class SignalAtImport:
    def find_spec(self, name, path=None, target=None):
        if name == "zhin_cli._cli":
            os.kill(os.getpid(), signal.{signal})
        return None

sys.meta_path.insert(0, SignalAtImport())
sys.argv = ["zhin", "--version"]
if "{entry}" == "console":
    (script,) = entry_points(group="console_scripts", name="zhin")
    script.load()()
else:
    runpy.run_module("zhin_cli", run_name="__main__")
"""


# zhin_cli.core.errors: the first module zhin imports after the handlers (launch imported it before them once).
@pytest.mark.parametrize("module", ["zhin_cli._cli", "zhin_cli.core.errors"])
@pytest.mark.parametrize("entry", ["console", "module"])
@pytest.mark.parametrize(("name", "status"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_while_the_commands_load_exits_quietly(module: str, entry: str, name: str, status: int) -> None:
    code = _SIGNAL_WHILE_LOADING.replace("{signal}", name).replace("{entry}", entry).replace(
        'name == "zhin_cli._cli"', f"name == {module!r}")
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, preexec_fn=default_sigint)
    assert (proc.returncode, proc.stdout, proc.stderr) == (status, "", "")


def test_negative_control_without_the_signal_the_command_runs() -> None:
    code = _SIGNAL_WHILE_LOADING.replace("{signal}", "SIGTERM").replace("{entry}", "console").replace(
        'name == "zhin_cli._cli"', "False")
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("zhin"), proc


# What runs before the handlers exist is the only window left in which Ctrl-C prints the interpreter's traceback (and
# SIGTERM kills without a status): the interpreter's start and ``site``, then zhin's entry modules. The child records
# every module imported from the moment the entry point starts loading until the first handler is installed.
_IMPORTED_BEFORE_THE_HANDLERS = """
import os, runpy, signal, sys
from importlib.metadata import entry_points

imported = []

class Record:
    def find_spec(self, name, path=None, target=None):
        imported.append(name)
        return None

def first_handler(signum, handler):
    print(" ".join(imported), flush=True)
    os._exit(0)

(script,) = entry_points(group="console_scripts", name="zhin")
sys.argv = ["zhin", "--version"]
sys.meta_path.insert(0, Record())
signal.signal = first_handler
if "{entry}" == "console":
    script.load()()
else:
    runpy.run_module("zhin_cli", run_name="__main__")
print("no handler was installed", flush=True)
"""

# The package (its __init__ is a docstring and a version), the entry modules and the handlers' own module.
ALLOWED_BEFORE_THE_HANDLERS = {"zhin_cli", "zhin_cli.__main__", "zhin_cli.launch", "zhin_cli.signals", "__future__"}


@pytest.mark.parametrize("entry", ["console", "module"])
def test_nothing_else_is_imported_before_the_handlers(entry: str) -> None:
    code = _IMPORTED_BEFORE_THE_HANDLERS.replace("{entry}", entry)
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, proc.stderr
    imported = proc.stdout.split()
    assert imported and imported != ["no", "handler", "was", "installed"], proc.stdout
    assert "zhin_cli.signals" in imported  # negative control: the recorder sees zhin's own imports
    assert set(imported) <= ALLOWED_BEFORE_THE_HANDLERS, proc.stdout


@pytest.mark.parametrize(("signum", "documented"), [(signal.SIGINT, "EXIT_INTERRUPTED"), (signal.SIGTERM, "EXIT_TERMINATED")])
def test_the_status_before_the_commands_load_is_the_documented_one(signum: int, documented: str) -> None:
    """zhin_cli.launch cannot import zhin_cli.core.errors in its window: its status must agree with it anyway."""
    from zhin_cli import signals
    from zhin_cli.core import errors

    saved = list(signals.SIGNALLED)
    try:
        signals.SIGNALLED[:] = [signum]
        assert signals.interrupted_status() == getattr(errors, documented)
    finally:
        signals.SIGNALLED[:] = saved

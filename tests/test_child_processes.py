"""The suite's own children (issue 27 item 12): a test of Ctrl-C gives its child SIGINT's default disposition itself
(``default_sigint``), so it passes however the suite was started — ``make test &`` from a script starts it with
SIGINT ignored, and children inherit that — and no test leaves a process behind (tests/leftovers.py fails the run
and kills what is left)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import leftovers
import pytest
from conftest import clean_env, default_sigint

TESTS = Path(__file__).resolve().parent
# SIGINT's handler in a child: "ignored", or the name of the function that handles it
SHOW_SIGINT = "h = signal.getsignal(signal.SIGINT); print('ignored' if h == signal.SIG_IGN else h.__name__)"


def _ignore_sigint() -> None:
    """What a child of a background job inherits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ignored_then_restored() -> None:
    _ignore_sigint()
    default_sigint()


def _sigint_of_a_child(preexec: object) -> str:
    return subprocess.run([sys.executable, "-c", "import signal; " + SHOW_SIGINT], capture_output=True, text=True, timeout=60,
                          env=clean_env(), preexec_fn=preexec).stdout.strip()  # type: ignore[arg-type]


def test_a_child_started_with_sigint_ignored_gets_the_default_back_from_the_helper() -> None:
    assert _sigint_of_a_child(_ignored_then_restored) == "default_int_handler"
    # negative control: without the helper the child keeps ignoring SIGINT, and a Ctrl-C test of it would fail
    assert _sigint_of_a_child(_ignore_sigint) == "ignored"


def test_an_ignored_sigint_stays_ignored_by_zhin() -> None:
    """Why the tests restore SIGINT rather than zhin: a zhin its parent started with SIGINT ignored keeps ignoring
    it (a background job, nohup). Its handler is installed only over the default (zhin_cli.signals)."""
    code = "import signal; from zhin_cli.signals import install_signal_handlers; install_signal_handlers(); " + SHOW_SIGINT
    ignored = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env=clean_env(), preexec_fn=_ignore_sigint)
    restored = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env=clean_env(), preexec_fn=_ignored_then_restored)
    assert ignored.stdout.strip() == "ignored"
    assert restored.stdout.strip() == "_on_signal"  # control: over the default, zhin's handler is installed


# A test module that names SIGINT and starts a process itself must give that process the default SIGINT.
STARTS_A_PROCESS = re.compile(r"subprocess\.(?:Popen|run)\(")


def modules_missing_the_helper(sources: dict[str, str]) -> list[str]:
    return sorted(name for name, text in sources.items()
                  if "SIGINT" in text and STARTS_A_PROCESS.search(text) and "default_sigint" not in text)


def test_every_test_module_that_sends_sigint_to_a_child_uses_the_helper() -> None:
    sources = {path.name: path.read_text(encoding="utf-8") for path in TESTS.glob("*.py")}
    assert modules_missing_the_helper(sources) == []
    assert "test_signals.py" in sources and "SIGINT" in sources["test_signals.py"]  # the scan sees the real tests
    # negative control: a module that sends SIGINT to a Popen without the helper is found
    bare = "p = subprocess.Popen(['zhin', 'serve'])\np.send_signal(signal.SIGINT)\n"
    assert modules_missing_the_helper({"test_new.py": bare}) == ["test_new.py"]


def test_this_suite_runs_with_the_leftover_check(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.get_plugin("leftovers") is leftovers
    assert "no_process_left_behind" in request.fixturenames


# --- the leftover check itself, on a tiny suite run by a pytest of its own -----------------------------------------

LEAVES_A_CHILD = """
import subprocess
from pathlib import Path

def test_leaves_a_child():
    child = subprocess.Popen(["sleep", "300"])
    Path("pid").write_text(str(child.pid))
"""
LEAVES_AN_ORPHAN = """
import subprocess
from pathlib import Path

def test_leaves_an_orphan():
    # the shell ends at once; its background sleep is reparented (to the check's subreaper, not to init)
    pid = subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True).stdout
    Path("pid").write_text(pid.strip())
"""
CLEANS_UP = """
import subprocess
from pathlib import Path

def test_cleans_up():
    child = subprocess.Popen(["sleep", "300"])
    Path("pid").write_text(str(child.pid))
    child.kill()
    child.wait()
"""


def _run_suite(folder: Path, source: str, *options: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run ``source`` as a test module with only the leftover plugin; the result and the pid its test started."""
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # its own rootdir, not this repository's
    (folder / "test_tiny.py").write_text(source, encoding="utf-8")
    env = {**clean_env(), "PYTHONPATH": str(TESTS)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "leftovers",
                             *options, "test_tiny.py"], cwd=folder, env=env, capture_output=True, text=True,
                            timeout=120)
    return result, int((folder / "pid").read_text(encoding="utf-8"))


def _still_sleeping(pid: int) -> bool:
    process = leftovers.process_table().get(pid)
    return process is not None and process.state not in "ZX" and "sleep 300" in process.command


def _kill_if_sleeping(pid: int) -> None:
    if _still_sleeping(pid):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("source", "name", "options"), [
    (LEAVES_A_CHILD, "test_leaves_a_child", ()),
    (LEAVES_AN_ORPHAN, "test_leaves_an_orphan", ()),
    (LEAVES_A_CHILD, "test_leaves_a_child", ("-p", "xdist", "-n", "1")),  # the check runs in each xdist worker
], ids=["child", "orphan", "xdist-worker"])
def test_a_process_left_behind_fails_the_run_and_is_killed(tmp_path: Path, source: str, name: str,
                                                          options: tuple[str, ...]) -> None:
    result, pid = _run_suite(tmp_path, source, *options)
    try:
        output = result.stdout + result.stderr
        assert result.returncode == 1, output
        assert "1 process(es) started by the tests were still running at the end (now killed)" in output
        assert f"pid {pid} " in output and f"started during test_tiny.py::{name}: sleep 300" in output
        assert not _still_sleeping(pid), "the leftover was reported but not killed"
    finally:
        _kill_if_sleeping(pid)


def test_negative_control_a_test_that_stops_its_child_passes(tmp_path: Path) -> None:
    result, pid = _run_suite(tmp_path, CLEANS_UP)
    _kill_if_sleeping(pid)
    assert (result.returncode, "still running" in result.stdout + result.stderr) == (0, False), result.stdout

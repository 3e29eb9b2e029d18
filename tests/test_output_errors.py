"""Output that cannot be written (issue 14 §3): stdout on a full disk or closed, a reader that went away, ``--output``
onto a full disk. Each ends with one ``zhin: error:`` line (or, for a broken pipe, quietly with 0), never a
traceback, and never leaves a half-written output file."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, clean_env

FIXTURE = FIXTURES / "private-chat.jsonl"
BUSY = FIXTURES / "group-busy.jsonl"


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zhin_cli", *args], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def without_sources_line(stderr: str) -> str:
    """stderr less the header line a command prints before its output (``config: … · db: …``, issue 17 §4): that
    line names what the command read; it is no complaint about the pipe."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith("config: "))


def one_line(stderr: str) -> str:
    """The one error line (after the header line naming what was read, if the failure came after it)."""
    stderr = without_sources_line(stderr)
    assert "Traceback" not in stderr, stderr
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), stderr
    assert stderr.startswith("zhin: error: "), stderr
    return stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["trace", str(FIXTURE)], ["trace", str(FIXTURE), "--json"], ["export", str(FIXTURE)],
                                  ["trace", str(FIXTURE), "--show-request"], ["providers"]])
def test_stdout_on_a_full_disk_is_one_line_and_exit_3(args: list[str], tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "zhin_cli", *args], cwd=tmp_path, env=clean_env(), stdout=full,
                                stderr=subprocess.PIPE, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 3, result.stderr
    assert "cannot write to stdout: No space left on device" in one_line(result.stderr)
    # negative control: the same command into a file works
    with open(tmp_path / "out", "w") as out:
        fine = subprocess.run([sys.executable, "-m", "zhin_cli", *args], cwd=tmp_path, env=clean_env(), stdout=out,
                              stderr=subprocess.PIPE, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert fine.returncode == 0 and without_sources_line(fine.stderr) == "" and (tmp_path / "out").stat().st_size > 0


def _closed_stdout() -> None:
    os.close(1)


@pytest.mark.parametrize("args", [["trace", str(FIXTURE)], ["trace", str(FIXTURE), "--json"], ["export", str(FIXTURE)]])
def test_a_closed_stdout_is_one_line_and_exit_3(args: list[str], tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "zhin_cli", *args], cwd=tmp_path, env=clean_env(), stderr=subprocess.PIPE,
                            text=True, timeout=120, stdin=subprocess.DEVNULL, preexec_fn=_closed_stdout)
    assert result.returncode == 3, result.stderr
    assert "cannot write to stdout: it is closed" in one_line(result.stderr)


def test_a_closed_stdout_does_not_stop_a_command_that_writes_a_file(tmp_path: Path) -> None:
    """Negative control: ``export -o`` never writes stdout; and the output file does not become fd 1."""
    out = tmp_path / "out.jsonl"
    result = subprocess.run([sys.executable, "-m", "zhin_cli", "export", str(FIXTURE), "-o", str(out)], cwd=tmp_path,
                            env=clean_env(), stderr=subprocess.PIPE, text=True, timeout=120, stdin=subprocess.DEVNULL,
                            preexec_fn=_closed_stdout)
    assert result.returncode == 0, result.stderr
    assert out.read_text(encoding="utf-8") == run(["export", str(FIXTURE)], tmp_path).stdout


@pytest.mark.parametrize("args", [["trace", str(BUSY), "--all"], ["trace", str(BUSY), "--all", "--json"],
                                  ["trace", str(BUSY), "--show-request"], ["export", str(BUSY)], ["--help"],
                                  ["trace", "--help"], ["prefix-diff", str(BUSY)], ["sessions", "--db", "{db}"]])
def test_a_reader_that_went_away_is_exit_0_and_quiet(args: list[str], tmp_path: Path) -> None:
    """``zhin … | head``: the reader closes the pipe before zhin writes; every command exits 0 with nothing on stderr
    (1 would be trace's "rejected" status and fail `set -o pipefail` CI steps)."""
    if "{db}" in args:
        db = tmp_path / "data.sqlite"
        assert run(["import", str(BUSY), "--db", str(db)], tmp_path).returncode == 0
        args = [str(db) if a == "{db}" else a for a in args]
    read, write = os.pipe()
    os.close(read)  # nobody will ever read: the first write gets EPIPE
    try:
        result = subprocess.run([sys.executable, "-m", "zhin_cli", *args], cwd=tmp_path, env=clean_env(), stdout=write,
                                stderr=subprocess.PIPE, text=True, timeout=120, stdin=subprocess.DEVNULL)
    finally:
        os.close(write)
    assert (result.returncode, without_sources_line(result.stderr)) == (0, "")


def test_head_reads_the_first_lines_then_zhin_exits_0(tmp_path: Path) -> None:
    """The shell case: ``set -o pipefail; zhin trace … | head -1``."""
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m zhin_cli trace {BUSY} --all --show-request | head -1"],
                            cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert without_sources_line(result.stderr) == "" and result.stdout.count("\n") == 1


def _file_size_limit(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG, like a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("command", [["export", str(BUSY)], ["fixtures", "synth", "--messages", "2000"]])
def test_output_onto_a_full_disk_leaves_nothing_half_written(command: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    result = subprocess.run([sys.executable, "-m", "zhin_cli", *command, "-o", str(out)], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: _file_size_limit(20_000))
    assert result.returncode == 3, result.stderr
    assert f"{out}: cannot write: File too large (nothing written)" in one_line(result.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a partial output or temporary file was left"
    # an existing output stays as it was
    out.write_text("the previous export\n", encoding="utf-8")
    again = subprocess.run([sys.executable, "-m", "zhin_cli", *command, "-o", str(out)], cwd=tmp_path, env=clean_env(),
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                           preexec_fn=lambda: _file_size_limit(20_000))
    assert again.returncode == 3
    assert out.read_text(encoding="utf-8") == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
    # negative control: without the limit the file is written whole, with the mode the old file had
    out.chmod(0o640)
    fine = run([*command, "-o", str(out)], tmp_path)
    assert fine.returncode == 0, fine.stderr
    assert out.stat().st_size > 20_000 and out.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


@pytest.mark.skipif(os.geteuid() != 0 or not sys.platform.startswith("linux"), reason="mounting a tmpfs needs root on Linux")
def test_export_onto_a_really_full_tmpfs(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        result = run(["fixtures", "synth", "--messages", "5000", "-o", str(disk / "out.jsonl")], tmp_path)
        assert result.returncode == 3
        assert "cannot write: No space left on device (nothing written)" in one_line(result.stderr)
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_output_to_a_device_is_written_directly(tmp_path: Path) -> None:
    """``-o /dev/null`` (not a regular file) is written into, never replaced by a renamed temporary file."""
    result = run(["export", str(FIXTURE), "-o", os.devnull], tmp_path)
    assert result.returncode == 0, result.stderr
    assert Path(os.devnull).is_char_device()

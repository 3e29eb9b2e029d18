"""Every command in README and docs runs as pasted: the ```sh blocks are executed, line by line, in a fresh shell.

The rule the docs follow (README "Use"): a block fenced ```sh is runnable — from the root of a fresh clone, after
README's set-up, each line exits 0 or the status written beside it (``# exit 1: …``); any other fence (```text,
```console, a bare fence) is an illustration and is not run. README's blocks run in order in one shell, as a reader
pastes them (the set-up block's ``make demo`` first: it finds the installed venv and only loads the demo database;
``make test`` is this suite itself and ``make eval-live`` is CI's own next step — the two lines not run here, see
``NOT_RUN``). Each docs/ file's blocks run in their own fresh
clone after ``. .venv/bin/activate``.

The shell starts with a bare environment (``PATH=/usr/bin:/bin``, no venv on it): a line that only works because the
developer's shell had ``zhin`` on PATH fails here as it would for a newcomer.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.S | re.M)
EXPECTED = re.compile(r"#\s*exit (\d+)\b")
# Lines run verbatim elsewhere, never from inside this suite: each with where it runs.
NOT_RUN = {
    "make test": "this suite itself",
    "make eval-live": ".ci/run runs it verbatim as its own step, after make test (a real llama.cpp server, minutes)",
}


@dataclass(frozen=True)
class Line:
    file: str
    number: int  # line in the markdown file
    text: str

    @property
    def expected(self) -> int:
        comment = self.text.partition(" #")[2] if " #" in self.text else ""
        found = EXPECTED.search("#" + comment) if comment else None
        return int(found.group(1)) if found else 0


def shell_lines(path: Path) -> list[Line]:
    """The lines of the ```sh blocks of one markdown file (comments and blank lines left out)."""
    return shell_lines_in(path.read_text(encoding="utf-8"), path.name)


def shell_lines_in(text: str, name: str) -> list[Line]:
    """The lines of the ```sh blocks of markdown ``text`` (of the file ``name``; line numbers within ``text``)."""
    lines = []
    for match in FENCE.finditer(text):
        if match.group(1) != "sh":
            continue
        first = text.count("\n", 0, match.start(2)) + 1
        for offset, line in enumerate(match.group(2).splitlines()):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            lines.append(Line(name, first + offset, stripped))
    return lines


def command_of(line: Line) -> str:
    """The line without its trailing comment (a `#` after whitespace, outside quotes — kept simple: our lines quote
    no `#`)."""
    return re.split(r"\s+#\s", line.text, maxsplit=1)[0].strip()


def fresh_clone(target: Path) -> Path:
    """A clone of this checkout with the working tree's versions of tracked files (so uncommitted doc edits are what
    runs) and the installed venv linked in, as it is after `make demo` installed it."""
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(target)], check=True)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    (target / ".venv").symlink_to(VENV)
    return target


def bare_environment(home: Path) -> dict[str, str]:
    """A newcomer's shell: no venv on PATH (``home`` when there is no HOME)."""
    environment = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", str(home)), "LANG": "C.UTF-8",
                   "TERM": "dumb", "ZHIN_NO_PROGRESS": "1"}
    for key in ("TMPDIR", "XDG_CACHE_HOME"):
        if key in os.environ:
            environment[key] = os.environ[key]
    return environment


def run_lines(clone: Path, lines: list[Line], prologue: str = "", timeout: float = 600) -> list[tuple[Line, int]]:
    """Run ``lines`` in one bash, as pasted; each line's exit status."""
    status_file = clone / ".zhin-test-status"
    script = ["exec 3>" + str(status_file), "exec </dev/null", prologue]
    for index, line in enumerate(lines):
        if command_of(line) in NOT_RUN:
            script.append(f"echo '{index} skip' >&3")
            continue
        script += [command_of(line), f"echo \"{index} $?\" >&3"]
    environment = bare_environment(clone)
    # its own process group, killed whole at the end: a line left running in the background (`zhin serve … &`
    # without its `kill`) or a hang cannot outlive the test or hold its pipes open
    with open(clone / ".zhin-test-output", "wb") as output:
        shell = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=clone, env=environment, stdout=output,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        try:
            shell.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass  # the status file tells which line did not finish
        finally:
            try:
                os.killpg(shell.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            shell.wait()
    results = []
    for record in status_file.read_text(encoding="utf-8").splitlines():
        recorded, status = record.split()
        if status != "skip":
            results.append((lines[int(recorded)], int(status)))
    ran = {id(line) for line, _ in results} | {id(line) for line in lines if command_of(line) in NOT_RUN}
    for line in lines:
        if id(line) not in ran:
            results.append((line, -1))  # never finished (a hang) or never reached
    return results


def failures(results: list[tuple[Line, int]]) -> list[str]:
    return [f"{line.file}:{line.number}: exit {status}, expected {line.expected}: {line.text}"
            for line, status in results if status != line.expected]


def test_readme_runs_as_pasted(tmp_path: Path) -> None:
    lines = shell_lines(ROOT / "README.md")
    assert any(line.text.startswith("make demo") for line in lines), "README's set-up block is not a ```sh block"
    assert any(line.text.startswith(". .venv/bin/activate") for line in lines), "README never activates the venv"
    clone = fresh_clone(tmp_path / "clone")
    results = run_lines(clone, lines)
    assert not failures(results), "\n".join(failures(results))
    # the demo is the real bot's database (make demo copies it), and not one README line wrote to it
    real = ROOT / "tests" / "data" / "upstream-db" / "data.sqlite"
    assert (clone / "demo" / ".zhin" / "data.sqlite").read_bytes() == real.read_bytes()


DOCS = sorted(path.name for path in (ROOT / "docs").glob("*.md") if shell_lines(path))


@pytest.mark.parametrize("name", DOCS)
def test_docs_shell_blocks_run_as_pasted(name: str, tmp_path: Path) -> None:
    lines = shell_lines(ROOT / "docs" / name)
    results = run_lines(fresh_clone(tmp_path / "clone"), lines, prologue=". .venv/bin/activate")
    assert not failures(results), "\n".join(failures(results))


# --- the harness itself: it must catch what it is for ---------------------------------------------------------


def test_a_line_that_fails_is_reported_with_its_file_and_line(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n\n```sh\ntrue\nzhin --version   # needs the venv on PATH\nfalse   # exit 1\n"
                   "make test   # this suite: never run from inside it (here it would fail: no Makefile)\n```\n"
                   "```text\nnot a command at all\n```\n", encoding="utf-8")
    lines = shell_lines(doc)
    assert [line.number for line in lines] == [4, 5, 6, 7]  # the ```text block is not run
    clone = tmp_path / "clone"
    clone.mkdir()
    problems = failures(run_lines(clone, lines))
    # `zhin` is not on the bare PATH: reported at its line; `false` with "# exit 1" is as written
    assert problems == ["doc.md:5: exit 127, expected 0: zhin --version   # needs the venv on PATH"]


def test_a_line_that_hangs_is_reported_not_waited_for(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("```sh\ntrue\nsleep 30\ntrue\n```\n", encoding="utf-8")
    clone = tmp_path / "clone"
    clone.mkdir()
    problems = failures(run_lines(clone, shell_lines(doc), timeout=2))
    assert problems == ["doc.md:3: exit -1, expected 0: sleep 30", "doc.md:4: exit -1, expected 0: true"]

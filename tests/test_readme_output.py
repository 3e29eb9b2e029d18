"""README's expected-output blocks are what the commands print today.

A ```text block right after a line ``<!-- output of: zhin … -->`` is real output of that command, run in the demo
folder (``make demo``: the upstream bot's database) at 120 columns, shortened with ``…``. Each line of the block,
cut at its ``…``, must appear in one line of the real output, its pieces in order. The blocks went stale once
("17 turns" after trace began to count requests) because nothing compared them; this does.
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from tests.conftest import clean_env

ROOT = Path(__file__).resolve().parent.parent
MARKED = re.compile(r"^<!-- output of: (zhin [^\n]*?) -->\n+```text\n(.*?)^```", re.S | re.M)


def marked_blocks(readme: str) -> list[tuple[str, list[str]]]:
    """(command, lines of its shortened output) for each marked block of ``readme``."""
    return [(m.group(1), m.group(2).splitlines()) for m in MARKED.finditer(readme)]


def missing_lines(expected: list[str], output: str) -> list[str]:
    """The lines of ``expected`` not found in ``output``: a line is found when one output line holds all its pieces
    (the text between ``…`` marks, stripped), in order. A line of only ``…`` stands for lines left out."""
    actual = output.splitlines()
    missing = []
    for line in expected:
        pieces = [p.strip() for p in line.split("…") if p.strip()]
        if pieces and not any(_in_order(pieces, candidate) for candidate in actual):
            missing.append(line)
    return missing


def _in_order(pieces: list[str], line: str) -> bool:
    at = 0
    for piece in pieces:
        found = line.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    return True


@pytest.fixture(scope="module")
def demo() -> Iterator[Path]:
    # a short path, as a clone's demo/ is: trace's title names the database's absolute path, and pytest's own
    # temporary folders are long enough to wrap it at 120 columns
    top = Path(tempfile.mkdtemp(prefix="z"))
    folder = top / "demo"
    (folder / ".zhin").mkdir(parents=True)
    shutil.copyfile(ROOT / "tests/data/upstream-db/data.sqlite", folder / ".zhin/data.sqlite")
    yield folder
    shutil.rmtree(top)


def test_readme_marks_its_output_blocks() -> None:
    commands = [command for command, _ in marked_blocks((ROOT / "README.md").read_text(encoding="utf-8"))]
    assert len(commands) >= 3, commands
    assert any("--all" in c for c in commands) and any(c.startswith("zhin prefix-diff") for c in commands)


@pytest.mark.parametrize("index", range(3))
def test_readme_output_block_is_what_the_command_prints(index: int, demo: Path,
                                                        zhin: Callable[..., CompletedProcess[str]]) -> None:
    blocks = marked_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    command, expected = blocks[index]
    env = {**clean_env(), "COLUMNS": "120"}
    result = zhin(*shlex.split(command)[1:], cwd=demo, env=env)
    assert result.returncode == 0, result.stderr
    assert missing_lines(expected, result.stdout + result.stderr) == [], f"README's block for `{command}` is stale"


def test_negative_control_a_stale_line_is_missing() -> None:
    output = "s · …/demo/.zhin/data.sqlite · 17 requests\nreq prompt cached\n"
    assert missing_lines(["s · …/demo/.zhin/data.sqlite · 17 requests", "…"], output) == []
    assert missing_lines(["s · …/demo/.zhin/data.sqlite · 17 turns"], output) == [
        "s · …/demo/.zhin/data.sqlite · 17 turns"]
    # pieces out of order are not the same line
    assert missing_lines(["cached … prompt"], output) == ["cached … prompt"]

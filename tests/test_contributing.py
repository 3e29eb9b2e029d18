"""CONTRIBUTING.md's recipes work as written: each recipe's files (blocks fenced ```<lang> file=NAME) are saved in a
scratch folder that links ``fixtures/``, as the page tells a reader to do, and its ```sh lines run there with the
venv's ``zhin`` and ``python`` first on PATH; every line must exit 0. Negative control: with the line marked
``# registers`` turned into ``pass`` (the plugin registers nothing), some line of the same recipe must fail, so no
recipe passes whatever zhin does."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "CONTRIBUTING.md"
VENV_BIN = ROOT / ".venv" / "bin"
FENCE = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```", re.S | re.M)
FILE_NAME = re.compile(r"\bfile=(\S+)")
MARK = "# registers"
# The recipes that must carry a test: a page that lost one of these blocks fails here, not silently.
TESTED = {"A prompt segment", "A provider on an existing wire format", "An eval assertion, timeline step or transform",
          "A data source", "A SillyTavern macro"}


@dataclass
class Recipe:
    title: str
    files: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def recipes(markdown: str) -> dict[str, Recipe]:
    """The recipes (### sections under "## Recipes") with their files and shell lines."""
    section = markdown.split("\n## Recipes\n", 1)[1].split("\n## ", 1)[0]
    found: dict[str, Recipe] = {}
    for chunk in re.split(r"^### ", section, flags=re.M)[1:]:
        title, _, body = chunk.partition("\n")
        recipe = Recipe(title.strip())
        for match in FENCE.finditer(body):
            language, info, text = match.groups()
            if (name := FILE_NAME.search(info)) is not None:
                recipe.files[name.group(1)] = text
            elif language == "sh":
                recipe.lines += [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
        found[recipe.title] = recipe
    return found


def without_registration(text: str) -> str:
    """The file with its ``# registers`` line replaced by ``pass`` at the same indent."""
    return "\n".join(line[: len(line) - len(line.lstrip())] + "pass" if MARK in line else line for line in text.split("\n"))


def run_recipe(recipe: Recipe, folder: Path, *, control: bool = False) -> list[str]:
    """Save the files in ``folder`` and run the lines; the failing lines, with their status and output tail."""
    folder.mkdir()
    (folder / "fixtures").symlink_to(ROOT / "fixtures")
    for name, text in recipe.files.items():
        (folder / name).write_text(without_registration(text) if control else text, encoding="utf-8")
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(folder), "LANG": "C.UTF-8", "TZ": "UTC"}
    failed = []
    for line in recipe.lines:
        done = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=180)
        if done.returncode != 0:
            failed.append(f"{line}: exit {done.returncode}: {(done.stderr or done.stdout)[-400:]}")
    return failed


PAGE_RECIPES = recipes(PAGE.read_text(encoding="utf-8"))


def test_the_page_has_a_tested_recipe_for_each_extension_point() -> None:
    tested = {title for title, recipe in PAGE_RECIPES.items() if recipe.lines}
    assert tested == TESTED
    for title in TESTED:
        marks = sum(text.count(MARK) for text in PAGE_RECIPES[title].files.values())
        assert marks == 1, f"{title}: mark exactly one registration line with {MARK!r} (found {marks})"


@pytest.mark.parametrize("title", sorted(TESTED))
def test_a_recipe_runs_as_written(title: str, tmp_path: Path) -> None:
    assert run_recipe(PAGE_RECIPES[title], tmp_path / "try") == []


@pytest.mark.parametrize("title", sorted(TESTED))
def test_a_recipe_fails_when_nothing_is_registered(title: str, tmp_path: Path) -> None:
    """Negative control: the recipe's own check sees the registration, so without it some line fails."""
    assert run_recipe(PAGE_RECIPES[title], tmp_path / "try", control=True) != []


def test_the_recipe_reader_finds_files_and_lines() -> None:
    """Negative control for the reader: a page with one recipe gives exactly its file and its line."""
    page = "# T\n\n## Recipes\n\n### One\n\n```python file=a.py\nx = 1  # registers\n```\n\n```sh\n# c\necho hi\n```\n\n## End\n"
    found = recipes(page)
    assert list(found) == ["One"] and found["One"].files == {"a.py": "x = 1  # registers\n"} and found["One"].lines == ["echo hi"]
    assert without_registration("    foo()  # registers\nbar()") == "    pass\nbar()"

"""README is a front page (issue 31, finding 5): short, its words explained, its links and anchors real, and every
Use line it shows also on docs/use.md (the full list the README's lines were taken from)."""

from __future__ import annotations

import re
from pathlib import Path

from test_shell_blocks import command_of, shell_lines_in

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# the words README's output and prose use that a newcomer does not know: each must be in the glossary
GLOSSARY_WORDS = ("request", "cold", "warm", "timed", "epoch", "segment", "header", "cached", "prefix", "tail", "window shift", "compaction",
                  "state change", "first of group", "physical limit", "flat layout")
MAX_LINES = 200


def glossary(readme: str) -> str:
    return readme.split("\n## Words the output uses\n", 1)[1].split("\n## ", 1)[0] if "\n## Words the output uses\n" in readme else ""


def front_page_problems(readme: str) -> list[str]:
    problems = []
    if len(readme.splitlines()) > MAX_LINES:
        problems.append(f"{len(readme.splitlines())} lines, more than {MAX_LINES}")
    terms = " ".join(re.findall(r"^- \*\*(.*?)\*\*", glossary(readme), flags=re.M)).lower()
    problems += [f"`{word}` is not in the glossary" for word in GLOSSARY_WORDS if word not in terms]
    for needed in ("make demo", "make test", "fonts-wqy-microhei", "chromium", "docs/use.md"):
        if needed not in readme:
            problems.append(f"no `{needed}`")
    if "```text" not in readme.split("\n## Use\n", 1)[-1]:
        problems.append("no expected output (a ```text block) under the Use lines")
    return problems


def link_problems(path: Path) -> list[str]:
    """Local links of one markdown file whose file or #anchor does not exist (links inside code blocks skipped)."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, mailto:
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{path.name}: {target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{path.name}: {target}: no such heading")
    return problems


def anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+\s+(.*)$", FENCE.sub("", path.read_text(encoding="utf-8")), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_readme_is_a_front_page() -> None:
    assert front_page_problems((ROOT / "README.md").read_text(encoding="utf-8")) == []


def test_the_front_page_check_rejects_the_old_readme() -> None:
    """Negative control: a README of dense prose without a glossary, the font or expected output."""
    old = "# zhin\n\n## Set up\n\n```sh\nmake demo\nmake test\n```\n\n## Use\n\n```sh\nzhin sessions\n```\n" + \
        "A turn is one model call; segments, epochs and tails.\n" * 300
    problems = front_page_problems(old)
    assert problems[0] == f"{len(old.splitlines())} lines, more than {MAX_LINES}"
    assert "`epoch` is not in the glossary" in problems and "no `fonts-wqy-microhei`" in problems
    assert problems[-1] == "no expected output (a ```text block) under the Use lines"


def test_every_local_link_of_readme_and_the_moved_pages_resolves() -> None:
    pages = [ROOT / "README.md"] + [ROOT / "docs" / f"{name}.md" for name in
                                    ("use", "configuration", "safety", "performance", "architecture")]
    assert [problem for page in pages for problem in link_problems(page)] == []


def test_a_broken_link_or_anchor_is_caught(tmp_path: Path) -> None:
    """Negative control for the link check."""
    (tmp_path / "other.md").write_text("# Set up, in full\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[a](other.md#set-up-in-full) [b](other.md#nowhere) [c](missing.md) [d](https://x.org)\n"
                    "```text\n[e](inside-a-block.md)\n```\n", encoding="utf-8")
    assert link_problems(page) == ["page.md: other.md#nowhere: no such heading", "page.md: missing.md: no such file"]


def lines_not_on_the_full_list(readme: str, full: str) -> set[str]:
    """The commands of README's Use section that docs/use.md's blocks do not have."""
    section = readme.split("\n## Use\n", 1)[1].split("\n## ", 1)[0]
    shown = {command_of(line) for line in shell_lines_in(section, "README.md")}
    return shown - {command_of(line) for line in shell_lines_in(full, "use.md")}


def test_every_readme_use_line_is_on_the_full_list() -> None:
    """README shows the first lines; docs/use.md keeps them all (nothing was lost in the move)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    full = (ROOT / "docs" / "use.md").read_text(encoding="utf-8")
    assert lines_not_on_the_full_list(readme, full) == set()
    # negative control: a README line the full list lacks is named
    extra = readme.replace("\ncd ..\n", "\nzhin providers   # new\ncd ..\n", 1)
    assert lines_not_on_the_full_list(extra, full) == {"zhin providers"}

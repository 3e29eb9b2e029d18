"""The report page names its database relative to the folder it was made in, so a page passed around does not carry
the maker's home folder (README's picture once showed a machine's absolute path)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

from zhin_cli.tools.report.html import shown_source

ROOT = Path(__file__).resolve().parent.parent
KEY = "onebot11:tokyo-ob11:group:856301447"


def test_a_database_inside_the_folder_is_named_relative(tmp_path: Path,
                                                       zhin: Callable[..., CompletedProcess[str]]) -> None:
    (tmp_path / ".zhin").mkdir()
    shutil.copyfile(ROOT / "tests/data/upstream-db/data.sqlite", tmp_path / ".zhin/data.sqlite")
    assert zhin("report", "html", KEY, "-o", "report.html", cwd=tmp_path).returncode == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert ".zhin/data.sqlite · openai" in page
    assert str(tmp_path) not in page


def test_negative_control_a_database_elsewhere_keeps_its_path(tmp_path: Path,
                                                              zhin: Callable[..., CompletedProcess[str]]) -> None:
    db = tmp_path / "elsewhere" / "data.sqlite"
    db.parent.mkdir()
    shutil.copyfile(ROOT / "tests/data/upstream-db/data.sqlite", db)
    work = tmp_path / "work"
    work.mkdir()
    assert zhin("report", "html", KEY, "--db", db, "-o", "report.html", cwd=work).returncode == 0
    assert f"{db} · openai" in (work / "report.html").read_text(encoding="utf-8")


def test_shown_source_leaves_what_is_not_a_path_under_the_folder() -> None:
    assert shown_source("/a/b/.zhin/data.sqlite", Path("/a/b")) == ".zhin/data.sqlite"
    assert shown_source("/c/data.sqlite", Path("/a/b")) == "/c/data.sqlite"
    assert shown_source("postgresql://zhin@db/zhin", Path("/a/b")) == "postgresql://zhin@db/zhin"
    assert shown_source("fixtures/x.jsonl", Path("/a/b")) == "fixtures/x.jsonl"

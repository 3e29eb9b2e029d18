"""tools/ holds one folder per command (issue 32 Build 3): a folder's modules compute that command's results, and
what two commands share lives a layer down (cache/, pipeline/, store/, core/), never in another command's folder.

Three rules, checked with ``ast`` on the sources like tests/test_layers.py (every import counts: module level,
inside functions, under ``TYPE_CHECKING``):

* **No tool imports another tool's folder**: a module under ``tools/<a>/`` imports nothing under ``tools/<b>/``.
  Commands that really compose share a folder (``report html`` draws ``report economy`` and ``report window``).
* **Every tool lives in a folder**: ``tools/`` itself holds only its ``__init__.py``.
* **No folder holds more than** :data:`MAX_MODULES` **modules** (its subpackages' modules counted), so a folder's
  name still says what is in it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULES = 12


def tool_folder(module: str) -> str | None:
    """``report`` for ``zhin_cli.tools.report.html`` (and for the folder's package itself); None outside tools/."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["zhin_cli", "tools"] else None


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module name a file imports, relative imports resolved against ``package``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, node.module] if node.module else base)
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)  # ``from pkg import module``
    return found


def _modules(tools: Path) -> dict[str, tuple[Path, str]]:
    """Dotted name → (file, its package) for every module under ``tools``."""
    out = {}
    for path in sorted(tools.rglob("*.py")):
        parts = list(path.relative_to(tools.parent.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        out[name] = (path, name if is_package else name.rpartition(".")[0])
    return out


def cross_folder_imports(tools: Path) -> list[str]:
    """``zhin_cli/tools/a/x.py -> tools/b`` for each module that imports another tool folder."""
    problems = set()
    for name, (path, package) in _modules(tools).items():
        here = tool_folder(name)
        for target in imported_modules(path, package):
            there = tool_folder(target)
            if here is not None and there is not None and there != here:
                problems.add(f"{path.relative_to(tools.parent.parent)} -> tools/{there}")
    return sorted(problems)


def loose_modules(tools: Path) -> list[str]:
    """Modules directly in ``tools/`` (a tool outside any folder)."""
    return [p.name for p in sorted(tools.glob("*.py")) if p.name != "__init__.py"]


def crowded_folders(tools: Path, limit: int = MAX_MODULES) -> list[str]:
    """``folder: N modules`` for each tools folder past ``limit``."""
    return [f"{folder.name}: {n} modules" for folder in sorted(p for p in tools.iterdir() if p.is_dir())
            if (n := len(list(folder.rglob("*.py")))) > limit]


# --- the real tree ----------------------------------------------------------------------------------------------


def test_no_tool_imports_another_tools_folder() -> None:
    assert cross_folder_imports(ROOT / "zhin_cli" / "tools") == [], (
        "move what two commands share a layer down (cache/, pipeline/, store/, core/), or put the two in one folder")


def test_every_tool_lives_in_a_folder_named_for_its_command() -> None:
    assert loose_modules(ROOT / "zhin_cli" / "tools") == []
    folders = {p.name for p in (ROOT / "zhin_cli" / "tools").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert {"trace", "diff", "report", "eval", "serve", "preset"} <= folders


def test_no_tools_folder_holds_more_than_twelve_modules() -> None:
    assert crowded_folders(ROOT / "zhin_cli" / "tools") == []


# --- negative controls: a synthetic tree breaking each rule is caught ----------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "zhin_cli" / "tools" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "zhin_cli" / "tools"


def test_an_import_of_another_folder_is_caught_in_every_form(tmp_path: Path) -> None:
    tools = _tree(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "",
        "a/fine.py": "from zhin_cli.tools.a.y import f\nfrom zhin_cli.cache.replay import g\nimport zhin_cli.tools\n",
        "a/top.py": "from zhin_cli.tools.b.z import h\n",
        "a/late.py": "def run():\n    import zhin_cli.tools.b.w\n",
        "a/typing.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zhin_cli.tools.b import z\n",
        "a/relative.py": "from ..b import z\n",
        "b/__init__.py": "", "b/z.py": "", "b/w.py": "",
    })
    assert cross_folder_imports(tools) == [
        "zhin_cli/tools/a/late.py -> tools/b",
        "zhin_cli/tools/a/relative.py -> tools/b",
        "zhin_cli/tools/a/top.py -> tools/b",
        "zhin_cli/tools/a/typing.py -> tools/b",
    ]


def test_a_loose_module_and_a_crowded_folder_are_caught(tmp_path: Path) -> None:
    tools = _tree(tmp_path, {"__init__.py": "", "stray.py": "", "big/__init__.py": "",
                             **{f"big/m{i}.py": "" for i in range(11)}, "small/__init__.py": "", "small/one.py": ""})
    assert loose_modules(tools) == ["stray.py"]
    assert crowded_folders(tools) == []  # 12 modules: at the limit
    (tools / "big" / "sub").mkdir()
    (tools / "big" / "sub" / "__init__.py").write_text("")  # a subpackage's modules count
    assert crowded_folders(tools) == ["big: 13 modules"]

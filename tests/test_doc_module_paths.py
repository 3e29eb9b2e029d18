"""The newcomer's pages name modules that exist: every ``zhin_cli/…`` path, every layer-relative path such as
``pipeline/window.py``, and every dotted ``zhin_cli.x.y`` name in docs/architecture.md, CONTRIBUTING.md and
docs/spec/ is a file, folder, module or a name defined in one. A module that moves takes its mentions with it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "zhin_cli"
PAGES = [ROOT / "docs" / "architecture.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs" / "spec").glob("*.md"))]
LAYERS = ("core", "store", "wire", "pipeline", "cache", "tools", "_cli")
# `zhin_cli/pipeline/validate/{openai,anthropic}.py`, `tools/eval/`, `zhin_cli.core.tokens.seed_cache`
PATH = re.compile(r"(?<![\w./-])((?:zhin_cli|" + "|".join(LAYERS) + r")/[\w/{},.-]*)")
DOTTED = re.compile(r"(?<![\w./-])(zhin_cli(?:\.\w+)+)")


def _expand(path: str) -> list[str]:
    """``a/{b,c}.py`` → ``a/b.py``, ``a/c.py`` (one brace group)."""
    match = re.search(r"\{([^}]*)\}", path)
    if match is None:
        return [path]
    return [path[: match.start()] + choice + path[match.end():] for choice in match.group(1).split(",")]


def _path_exists(path: str) -> bool:
    path = path.rstrip(".,")
    relative = path if path.startswith("zhin_cli/") else f"zhin_cli/{path}"
    return all((ROOT / candidate).exists() for candidate in _expand(relative))


def _is_module_path(path: str) -> bool:
    """``zhin_cli/…`` always; a layer-relative path only when it names a file or a folder (``pipeline/window.py``,
    ``tools/eval/``), so that another project's ``tools/st-request-diff`` is not read as ours."""
    return path.startswith("zhin_cli/") or path.endswith((".py", "/"))


def _defines(module: Path, name: str) -> bool:
    text = module.read_text(encoding="utf-8")
    return re.search(rf"^(?:def|class) {re.escape(name)}\b|^{re.escape(name)}\s*[:=]", text, re.M) is not None


def _dotted_exists(name: str) -> bool:
    """A module (``zhin_cli.core.tokens``) or a name defined at the top of one (``…tokens.seed_cache``)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if module.exists():
            rest = parts[cut:]
            return not rest or (len(rest) == 1 and _defines(module, rest[0]))
    return False


def missing(text: str, where: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for code in re.findall(r"`([^`]+)`", line):
            found += [f"{where}:{number}: {p}" for p in PATH.findall(code) if _is_module_path(p) and not _path_exists(p)]
            found += [f"{where}:{number}: {d}" for d in DOTTED.findall(code) if not _dotted_exists(d)]
    return found


def test_every_module_the_pages_name_exists() -> None:
    named = sum(len(re.findall(r"`[^`]*zhin_cli[^`]*`", page.read_text(encoding="utf-8"))) for page in PAGES)
    assert named > 30, "almost no module named: is the pattern still right?"
    gone = [hit for page in PAGES for hit in missing(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))]
    assert gone == []


def test_a_moved_module_is_reported() -> None:
    """Negative control: a path, a layer-relative path, a brace list, a dotted module and a dotted name that do not
    exist are each reported; real ones are not."""
    text = ("`zhin_cli/tools/nope.py` and `pipeline/gone.py`\n`zhin_cli/wire/{openai_chat,nope}.py`\n"
            "`zhin_cli.core.nope` `zhin_cli.core.tokens.no_such_name`\n"
            "`zhin_cli/wire/openai_chat.py` `pipeline/window.py` `zhin_cli.core.tokens.seed_cache` `tools/eval/`\n"
            "`tools/st-request-diff` (another project's tool)\n")
    assert missing(text, "x.md") == [
        "x.md:1: zhin_cli/tools/nope.py", "x.md:1: pipeline/gone.py", "x.md:2: zhin_cli/wire/{openai_chat,nope}.py",
        "x.md:3: zhin_cli.core.nope", "x.md:3: zhin_cli.core.tokens.no_such_name",
    ]
